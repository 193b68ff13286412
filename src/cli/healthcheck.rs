//! `acp healthcheck [--url URL]`: exit 0 when the server's `/readyz` answers 200.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::config::Settings;

use super::output::{line, OutputArg};

#[derive(Debug, clap::Args)]
pub struct HealthcheckArgs {
    /// Base URL of the server [default: http://ADDR/PATH_PREFIX, as `acp serve` resolves them]
    #[arg(long)]
    pub url: Option<String>,
    /// The address the server listens on [default: 127.0.0.1:8080]
    #[arg(long, env = "ACP_ADDR")]
    pub addr: Option<String>,
    /// The server's path prefix, e.g. `/api`
    #[arg(long, env = "ACP_PATH_PREFIX")]
    pub path_prefix: Option<String>,
    /// The server's TOML settings file (for its `addr` and `path_prefix`)
    #[arg(long, env = "ACP_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub output: OutputArg,
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

pub async fn run(args: &HealthcheckArgs) -> anyhow::Result<i32> {
    let base = match &args.url {
        Some(url) => url.clone(),
        None => {
            let file = match &args.config {
                Some(path) => Settings::from_file(path).map_err(anyhow::Error::msg)?,
                None => Settings::default(),
            };
            let config = Settings {
                addr: args.addr.clone(),
                path_prefix: args.path_prefix.clone(),
                ..Settings::default()
            }
            .over(file)
            .resolve()
            .map_err(anyhow::Error::msg)?;
            format!(
                "http://{}{}",
                config.addr,
                config.path_prefix.as_deref().unwrap_or("")
            )
        }
    };
    let Some(rest) = base.strip_prefix("http://") else {
        anyhow::bail!("healthcheck speaks plain http://; got `{base}`");
    };
    let (host_port, prefix) = rest
        .split_once('/')
        .map_or((rest, String::new()), |(h, p)| (h, format!("/{p}")));
    let path = format!("{}/readyz", prefix.trim_end_matches('/'));
    let host_port = host_port.to_owned();
    let status = tokio::task::spawn_blocking(move || get_status(&host_port, &path)).await?;
    let (code, detail) = match status {
        Ok(200) => (0, None),
        Ok(code) => (1, Some(format!("HTTP {code}"))),
        Err(err) => (1, Some(err.to_string())),
    };
    if args.output.json() {
        line(
            serde_json::json!({"ok": code == 0, "url": base, "ready": code == 0, "detail": detail}),
        )?;
    } else {
        match detail {
            None => line("ready")?,
            Some(detail) => line(format!("not ready: {detail}"))?,
        }
    }
    Ok(code)
}
