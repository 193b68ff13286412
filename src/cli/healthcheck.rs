//! `acp healthcheck [--url URL]`: exit 0 when the server's `/readyz` answers 200 (over http or
//! https).

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

/// The status of `GET url`: no proxy and no redirect followed, since the check asks about
/// this server and nothing in front of or behind it.
async fn get_status(url: &str) -> reqwest::Result<u16> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()?;
    Ok(client.get(url).send().await?.status().as_u16())
}

/// An error with its causes, which say what reqwest's own message leaves out (a refused
/// connection, a certificate not trusted).
fn with_causes(err: &dyn std::error::Error) -> String {
    std::iter::successors(Some(err), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

pub async fn run(args: &HealthcheckArgs) -> anyhow::Result<i32> {
    let base = match &args.url {
        Some(url) => url.clone(),
        None => {
            let config = Settings {
                addr: args.addr.clone(),
                path_prefix: args.path_prefix.clone(),
                ..Settings::default()
            }
            .over_file(args.config.as_deref())?
            .resolve()?;
            format!(
                "http://{}{}",
                config.addr,
                config.path_prefix.as_deref().unwrap_or("")
            )
        }
    };
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        anyhow::bail!("healthcheck needs an http:// or https:// URL; got `{base}`");
    }
    let status = get_status(&format!("{}/readyz", base.trim_end_matches('/'))).await;
    let (code, detail) = match status {
        Ok(200) => (0, None),
        Ok(code) => (1, Some(format!("HTTP {code}"))),
        Err(err) => (1, Some(with_causes(&err))),
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
