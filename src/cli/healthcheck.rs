//! `acp healthcheck [--url URL]`: exit 0 when the server's `/readyz` answers 200.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::Cli;

#[derive(Debug, clap::Args)]
pub struct HealthcheckArgs {
    /// Base URL of the server [default: http://ADDR from the configuration]
    #[arg(long)]
    pub url: Option<String>,
}

/// A plain HTTP/1.1 GET over TCP, so the check needs no HTTP client library.
fn get_status(host_port: &str, path: &str) -> std::io::Result<u16> {
    let addr = host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))
}

pub async fn run(cli: &Cli, args: &HealthcheckArgs) -> anyhow::Result<i32> {
    let config = cli.resolve_config()?;
    let base = args.url.clone().unwrap_or_else(|| {
        format!(
            "http://{}{}",
            config.addr,
            config.path_prefix.as_deref().unwrap_or("")
        )
    });
    let Some(rest) = base.strip_prefix("http://") else {
        anyhow::bail!("healthcheck speaks plain http://; got `{base}`");
    };
    let (host_port, prefix) = rest
        .split_once('/')
        .map_or((rest, String::new()), |(h, p)| (h, format!("/{p}")));
    let path = format!("{}/readyz", prefix.trim_end_matches('/'));
    let host_port = host_port.to_owned();
    let status = tokio::task::spawn_blocking(move || get_status(&host_port, &path)).await?;
    match status {
        Ok(200) => {
            println!("ready");
            Ok(0)
        }
        Ok(code) => {
            println!("not ready: HTTP {code}");
            Ok(1)
        }
        Err(err) => {
            println!("not ready: {err}");
            Ok(1)
        }
    }
}
