//! From nothing to an attested agent sending a signed heartbeat, the way an agent runtime
//! would do it with its own Ed25519 key.
//!
//! ```sh
//! cargo run --release -- serve            # prints the default workspace's API key
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... cargo run --example quickstart
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Result};
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::{json_of, now_ms, register_and_attest, sha256_hex, sign_request};

#[tokio::main]
async fn main() -> Result<()> {
    let (base, api_key) = common::server_from_env()?;
    let http = reqwest::Client::new();

    // 1-3. The agent's own key pair, registration into the API key's workspace, and the
    // attestation that proves it holds the private key.
    let (agent_id, key) = register_and_attest(
        &http,
        &base,
        &api_key,
        "quickstart-agent",
        json!({"runtime": "example"}),
    )
    .await?;

    // 4. A signed heartbeat: the headers carry the agent id, timestamp, nonce and signature.
    let path = "/v1/telemetry/heartbeat";
    let body =
        serde_json::to_vec(&json!({"agent_id": agent_id, "status": "ok", "latency_ms": 12.5}))?;
    let timestamp = now_ms()?.to_string();
    let nonce = uuid::Uuid::new_v4().to_string();
    let hb = json_of(
        http.post(format!("{base}{path}"))
            .header("Content-Type", "application/json")
            .header("X-Service-Agent-Id", &agent_id)
            .header("X-Service-Timestamp", &timestamp)
            .header("X-Service-Nonce", &nonce)
            .header(
                "X-Service-Signature",
                sign_request(&key, "POST", path, &timestamp, &nonce, &body),
            )
            .body(body)
            .send()
            .await?,
        "heartbeat",
    )
    .await?;
    println!("heartbeat recorded at {}", hb["recorded_at"]);

    // 5. What a backend does with a request it received from the agent: ask /v1/verify.
    let order = br#"{"order":"A-1001","amount":40}"#;
    let (ts, nonce) = (now_ms()?, uuid::Uuid::new_v4().to_string());
    let signature = sign_request(
        &key,
        "POST",
        "/orders/refund",
        &ts.to_string(),
        &nonce,
        order,
    );
    let verdict = json_of(
        http.post(format!("{base}/v1/verify"))
            .header("X-Service-Api-Key", &api_key)
            .json(&json!({"agent_id": agent_id, "method": "POST", "path": "/orders/refund", "timestamp_ms": ts,
                          "nonce": nonce, "body_sha256": sha256_hex(order), "signature_b64": signature}))
            .send()
            .await?,
        "verify",
    )
    .await?;
    println!(
        "verify: valid={} tier={} risk={}",
        verdict["valid"], verdict["verification_tier"], verdict["risk_tier"]
    );
    if verdict["valid"] != json!(true) {
        bail!("the backend must not act: {verdict}");
    }
    Ok(())
}
