//! A real MCP server for the MCP gateway's example (`scripts/mcp-example.sh`): built with the
//! official Rust SDK (`rmcp`), Streamable HTTP at `/mcp`, over TLS with a CA of its own made at
//! start and a certificate for `localhost` it issued (the test suite's upstream,
//! `tests/api/mcp_upstream.rs`). With `MCP_UPSTREAM_TOKEN` set, it answers only requests that
//! carry `Authorization: Bearer <that token>`.
//!
//! Tools: `list_issues {repo}`, `delete_repo {repo}`, `transfer {amount, to}`, `whoami`,
//! `fail`, `slow {ms}`; resources `repo://...`; the prompt `triage`.
//!
//! ```sh
//! MCP_UPSTREAM_TOKEN=ghp_example cargo run --example mcp_upstream -- /tmp/mcp-ca.pem
//! # mcp_upstream listening on https://localhost:PORT/mcp
//! ```
//!
//! It writes the CA's PEM to the file named by its first argument (give it to acp as
//! `ACP_VAULT_PROXY_CA_FILE`), prints where it listens, and serves until killed.
#![forbid(unsafe_code)]

use anyhow::{Context, Result};

#[path = "../tests/api/upstream.rs"]
mod upstream;

#[path = "../tests/api/mcp_upstream.rs"]
mod mcp_upstream;

#[tokio::main]
async fn main() -> Result<()> {
    let ca_file = std::env::args()
        .nth(1)
        .context("usage: mcp_upstream CA_PEM_FILE")?;
    let token = std::env::var("MCP_UPSTREAM_TOKEN").ok();
    let server = mcp_upstream::start(token.as_deref()).await;
    std::fs::write(&ca_file, &server.ca_pem)
        .with_context(|| format!("cannot write the CA to `{ca_file}`"))?;
    println!("mcp_upstream listening on {}", server.url("/mcp"));
    tokio::signal::ctrl_c().await?;
    Ok(())
}
