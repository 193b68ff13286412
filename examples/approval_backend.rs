//! The backend side of an approval: ask `/v1/check` before acting; on `challenge`, hand the
//! approval link to a person (here: print it), poll the policy challenge until a human decides,
//! then check again and act only on `allow`.
//!
//! ```sh
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... AGENT_ID=agt_... \
//!   cargo run --example approval_backend -- refund '{"amount": 400, "currency": "USD"}'
//! ```
//! An approver opens the printed link in a browser, logged in, and clicks Approve (or Deny).
//! With `AUTO_DECIDE=approve` and `ACP_TOKEN=svc_pat_...` (an approver's personal access token)
//! the example decides through the link itself, as an approver's script may.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

async fn check(http: &reqwest::Client, base: &str, key: &str, body: &Value) -> Result<Value> {
    let res = http
        .post(format!("{base}/v1/check"))
        .header("X-Service-Api-Key", key)
        .json(body)
        .send()
        .await?;
    let status = res.status();
    let answer: Value = res.json().await?;
    if !status.is_success() {
        bail!("check failed: HTTP {status}: {answer}");
    }
    Ok(answer)
}

#[tokio::main]
async fn main() -> Result<()> {
    let base = std::env::var("ACP_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let key = std::env::var("ACP_API_KEY").context("set ACP_API_KEY")?;
    let agent_id = std::env::var("AGENT_ID").context("set AGENT_ID")?;
    let mut args = std::env::args().skip(1);
    let action = args.next().unwrap_or_else(|| "refund".into());
    let context: Value = serde_json::from_str(&args.next().unwrap_or_else(|| "{}".into()))
        .context("the context must be JSON")?;
    let http = reqwest::Client::new();
    let request = json!({"agent_id": agent_id, "action": action, "context": context});

    let first = check(&http, &base, &key, &request).await?;
    match first["decision"].as_str() {
        Some("allow") => {
            println!("allowed (trace {}): acting now", first["trace_id"]);
            return Ok(());
        }
        Some("deny") => bail!("denied: {}", first["reasons"]),
        _ => {}
    }
    let url = first["challenge"]["url"]
        .as_str()
        .context("a challenge carries a link")?;
    let id = first["challenge_id"]
        .as_str()
        .context("a challenge carries an id")?;
    println!("needs approval: {}", first["reasons"]);
    println!(
        "approval link (valid {} s): {url}",
        first["challenge"]["expires_in"]
    );
    if let Ok(decision) = std::env::var("AUTO_DECIDE") {
        let mut decide = http.post(url).json(&json!({"decision": decision}));
        if let Ok(token) = std::env::var("ACP_TOKEN") {
            decide = decide.bearer_auth(token);
        }
        decide.send().await?.error_for_status()?;
    }

    // Poll until a human decides (or the link expires).
    let status = loop {
        let polled: Value = http
            .get(format!("{base}/v1/policy-challenges/{id}"))
            .header("X-Service-Api-Key", &key)
            .send()
            .await?
            .json()
            .await?;
        match polled["challenge"]["status"].as_str() {
            Some("pending") => tokio::time::sleep(Duration::from_secs(2)).await,
            Some(other) => break other.to_owned(),
            None => bail!("unexpected answer: {polled}"),
        }
    };
    println!("the challenge is {status}; checking again");
    let again = check(&http, &base, &key, &request).await?;
    if again["decision"] == "allow" {
        println!(
            "allowed once after approval (trace {}): acting now",
            again["trace_id"]
        );
        Ok(())
    } else {
        bail!(
            "not allowed: {} {}",
            again["decision"],
            again["reason_codes"]
        )
    }
}
