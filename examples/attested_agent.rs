//! Registers and attests one agent with a fresh Ed25519 key, and prints its id: the first step
//! of the runnable examples in docs/ (`scripts/docs-examples.sh`).
//!
//! ```sh
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... cargo run --example attested_agent -- NAME
//! ```
#![forbid(unsafe_code)]

use anyhow::Result;
use serde_json::json;

#[path = "common/mod.rs"]
mod common;

#[tokio::main]
async fn main() -> Result<()> {
    let (base, api_key) = common::server_from_env()?;
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "docs-agent".to_owned());
    let http = reqwest::Client::new();
    let (agent_id, _key) =
        common::register_and_attest(&http, &base, &api_key, &name, json!({"runtime": "docs"}))
            .await?;
    println!("{agent_id}");
    Ok(())
}
