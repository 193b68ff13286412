//! A tiny HTTPS echo server for the vault example (`scripts/vault-example.sh`): the test suite's
//! upstream (`tests/api/upstream.rs`), with a CA of its own made at start and a certificate for
//! `localhost` it issued. `/echo/*` answers JSON `{method, path, query, headers, body}` of what
//! it received.
//!
//! ```sh
//! cargo run --example https_echo -- /tmp/echo-ca.pem
//! # https_echo listening on https://localhost:PORT
//! ```
//!
//! It writes the CA's PEM to the file named by its first argument (give it to the server as
//! `ACP_VAULT_PROXY_CA_FILE`), prints where it listens, and serves until killed.
#![forbid(unsafe_code)]

use anyhow::{Context, Result};

#[path = "../tests/api/upstream.rs"]
mod upstream;

#[tokio::main]
async fn main() -> Result<()> {
    let ca_file = std::env::args()
        .nth(1)
        .context("usage: https_echo CA_PEM_FILE")?;
    let server = upstream::UpstreamServer::start().await;
    std::fs::write(&ca_file, &server.ca_pem)
        .with_context(|| format!("cannot write the CA to `{ca_file}`"))?;
    println!("https_echo listening on {}", server.url(""));
    tokio::signal::ctrl_c().await?;
    Ok(())
}
