//! What the examples share: the service's error envelope, the canonical request signature and
//! an agent that registers and proves its key, all with the client's own code.
#![allow(dead_code, reason = "shared by the examples, each using a part")]

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The server (`ACP_URL`, default `http://127.0.0.1:8080`) and the API key (`ACP_API_KEY`).
pub fn server_from_env() -> Result<(String, String)> {
    let base = std::env::var("ACP_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let api_key =
        std::env::var("ACP_API_KEY").context("set ACP_API_KEY to the key `acp serve` printed")?;
    Ok((base, api_key))
}

/// Answers the JSON body, or fails with the service's error envelope.
pub async fn json_of(res: reqwest::Response, what: &str) -> Result<Value> {
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

/// The status and JSON body, whatever the status.
pub async fn answer_of(res: reqwest::Response) -> Result<(u16, Value)> {
    let status = res.status().as_u16();
    Ok((status, res.json().await.context("not JSON")?))
}

pub fn now_ms() -> Result<i64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body))`, signed, base64.
pub fn sign_request(
    key: &SigningKey,
    method: &str,
    path: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
) -> String {
    let canonical = format!(
        "{method}\n{path}\n{timestamp}\n{nonce}\n{}",
        sha256_hex(body)
    );
    B64.encode(key.sign(canonical.as_bytes()).to_bytes())
}

/// An agent with its own key pair, registered with `metadata` and attested; answers its id
/// and key. Only the public half of the key leaves the agent.
pub async fn register_and_attest(
    http: &reqwest::Client,
    base: &str,
    api_key: &str,
    name: &str,
    metadata: Value,
) -> Result<(String, SigningKey)> {
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let key = SigningKey::from_bytes(&seed);
    let public_key = B64.encode(key.verifying_key().as_bytes());
    // Register into the workspace of the API key; the answer carries a challenge.
    let reg = json_of(
        http.post(format!("{base}/v1/agents/register"))
            .header("X-Service-Api-Key", api_key)
            .json(&json!({"name": name, "public_key": public_key, "key_type": "ed25519", "metadata": metadata}))
            .send()
            .await?,
        "register",
    )
    .await?;
    let agent_id = reg["agent_id"].as_str().context("agent_id")?.to_owned();
    println!("registered {agent_id} (status {})", reg["status"]);
    // Attest: sign the decoded challenge bytes (not the base64 text).
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
    Ok((agent_id, key))
}
