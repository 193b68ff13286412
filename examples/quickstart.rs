//! From nothing to an attested agent sending a signed heartbeat, the way an agent runtime
//! would do it with its own Ed25519 key.
//!
//! ```sh
//! cargo run --release -- serve            # prints the default workspace's API key
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... cargo run --example quickstart
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Answers the JSON body, or fails with the service's error envelope.
async fn json_of(res: reqwest::Response, what: &str) -> Result<Value> {
    let status = res.status();
    let body: Value = res
        .json()
        .await
        .with_context(|| format!("{what}: not JSON"))?;
    if !status.is_success() {
        bail!("{what}: HTTP {status}: {body}");
    }
    Ok(body)
}

fn now_ms() -> Result<i64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64)
}

/// `METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body))`, signed, base64.
fn sign_request(
    key: &SigningKey,
    method: &str,
    path: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
) -> String {
    let canonical = format!(
        "{method}\n{path}\n{timestamp}\n{nonce}\n{}",
        hex::encode(Sha256::digest(body))
    );
    B64.encode(key.sign(canonical.as_bytes()).to_bytes())
}

#[tokio::main]
async fn main() -> Result<()> {
    let base = std::env::var("ACP_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let api_key =
        std::env::var("ACP_API_KEY").context("set ACP_API_KEY to the key `acp serve` printed")?;
    let http = reqwest::Client::new();

    // 1. The agent's own key pair; only the public half leaves the agent.
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let key = SigningKey::from_bytes(&seed);
    let public_key = B64.encode(key.verifying_key().as_bytes());

    // 2. Register into the workspace of the API key; the answer carries a challenge.
    let reg = json_of(
        http.post(format!("{base}/v1/agents/register"))
            .header("X-Service-Api-Key", &api_key)
            .json(
                &json!({"name": "quickstart-agent", "public_key": public_key, "key_type": "ed25519",
                          "metadata": {"runtime": "example"}}),
            )
            .send()
            .await?,
        "register",
    )
    .await?;
    let agent_id = reg["agent_id"].as_str().context("agent_id")?.to_owned();
    println!("registered {agent_id} (status {})", reg["status"]);

    // 3. Attest: sign the decoded challenge bytes (not the base64 text).
    let challenge = B64.decode(reg["challenge"].as_str().context("challenge")?)?;
    let att = json_of(
        http.post(format!("{base}/v1/agents/attest"))
            .json(
                &json!({"agent_id": agent_id, "challenge_id": reg["challenge_id"],
                          "signature": B64.encode(key.sign(&challenge).to_bytes())}),
            )
            .send()
            .await?,
        "attest",
    )
    .await?;
    println!("attested: status {}", att["status"]);

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
                          "nonce": nonce, "body_sha256": hex::encode(Sha256::digest(order)), "signature_b64": signature}))
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
