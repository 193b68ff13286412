//! The floor of `scripts/bench-peers.sh`: a bare axum JSON endpoint that parses the body a
//! `/v1/check` request carries and answers a small decision-shaped JSON object, nothing else
//! (no store, no policy, no log). `/v1/check` cannot be faster than this on the same machine.
//!
//! ```sh
//! cargo run --release --example bare_json -- 127.0.0.1:0
//! # bare_json listening on http://127.0.0.1:PORT
//! ```
//!
//! It listens on the address of its first argument (default `127.0.0.1:0`), prints where, and
//! serves `POST /v1/check` until killed, with tokio's default worker threads (one per core, as
//! `acp serve` has).
#![forbid(unsafe_code)]

use anyhow::Context;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    println!("bare_json listening on http://{}", listener.local_addr()?);
    let app = Router::new().route(
        "/v1/check",
        post(|Json(body): Json<Value>| async move {
            Json(json!({"ok": true, "decision": "allow", "agent_id": body.get("agent_id")}))
        }),
    );
    axum::serve(listener, app).await?;
    Ok(())
}
