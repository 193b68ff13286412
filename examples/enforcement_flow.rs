//! The enforcement flow of a payments backend, end to end against a running server:
//!
//! 1. an agent (metadata `team: payments`) signs a refund request; the backend verifies it;
//! 2. the backend checks `refund` and acts only on allow;
//! 3. for the follow-on call it mints a short-lived, one-time credential that the payments API
//!    introspects (a second use is refused), and trades the agent's signed proof for a JWT
//!    (`/v1/token/exchange`) that anyone can verify with `/.well-known/jwks.json`;
//! 4. the receipt goes out through `/v1/email/send`, which enforces the policy itself;
//! 5. the incident runbook: pause minting, revoke everything, check, resume.
//!
//! It needs the policy `policies/payments-enforcement.yaml` applied to the workspace:
//!
//! ```sh
//! acp sync policies/payments-enforcement.yaml --server $ACP_URL --token svc_pat_... --apply
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... cargo run --example enforcement_flow
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;
use common::{answer_of, json_of, now_ms, register_and_attest, sha256_hex, sign_request};

struct Backend {
    http: reqwest::Client,
    base: String,
    api_key: String,
}

impl Backend {
    async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        answer_of(
            self.http
                .post(format!("{}{path}", self.base))
                .header("X-Service-Api-Key", &self.api_key)
                .json(body)
                .send()
                .await?,
        )
        .await
    }

    async fn ok(&self, path: &str, body: &Value) -> Result<Value> {
        let (status, answer) = self.post(path, body).await?;
        if status != 200 {
            bail!("{path}: HTTP {status}: {answer}");
        }
        Ok(answer)
    }
}

/// Verifies an EdDSA JWT with the published keys, as a resource server would.
async fn verify_jwt(http: &reqwest::Client, base: &str, token: &str) -> Result<Value> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        bail!("not a JWT");
    };
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header)?)?;
    let jwks = json_of(
        http.get(format!("{base}/.well-known/jwks.json"))
            .send()
            .await?,
        "jwks",
    )
    .await?;
    let jwk = jwks["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["kid"] == header["kid"]))
        .context("the token's key is not published")?;
    let x: [u8; 32] = URL_SAFE_NO_PAD
        .decode(jwk["x"].as_str().context("x")?)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("bad key"))?;
    let signature: [u8; 64] = URL_SAFE_NO_PAD
        .decode(signature)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("bad signature"))?;
    VerifyingKey::from_bytes(&x)?.verify(
        format!("{}.{claims}", parts[0]).as_bytes(),
        &Signature::from_bytes(&signature),
    )?;
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims)?)?;
    if claims["exp"].as_i64().unwrap_or(0) * 1000 < now_ms()? {
        bail!("the token has expired");
    }
    Ok(claims)
}

#[tokio::main]
async fn main() -> Result<()> {
    let (base, api_key) = common::server_from_env()?;
    let http = reqwest::Client::new();
    let backend = Backend {
        http: http.clone(),
        base: base.clone(),
        api_key,
    };
    let (agent_id, key) = register_and_attest(
        &http,
        &base,
        &backend.api_key,
        "payments-agent",
        json!({"team": "payments"}),
    )
    .await?;

    // 1. The agent's signed request reaches the backend, which verifies it first.
    let (path, body) = ("/payments/v1/refund", br#"{"order":"A-1001","amount":40}"#);
    let (ts, nonce) = (now_ms()?, uuid::Uuid::new_v4().to_string());
    let signature = sign_request(&key, "POST", path, &ts.to_string(), &nonce, body);
    let verdict = backend
        .ok("/v1/verify", &json!({"agent_id": agent_id, "method": "POST", "path": path, "timestamp_ms": ts,
                                  "nonce": nonce, "body_sha256": sha256_hex(body), "signature_b64": signature}))
        .await?;
    if verdict["valid"] != json!(true) {
        bail!("the backend must not act on an unverified request: {verdict}");
    }
    println!(
        "1. verified the agent's request (risk tier {})",
        verdict["risk_tier"]
    );

    // 2. Check right before acting; act only on allow.
    let decision = backend
        .ok("/v1/check", &json!({"agent_id": agent_id, "action": "refund", "context": {"amount": 40, "currency": "USD", "order": "A-1001"}}))
        .await?;
    if decision["decision"] != "allow" {
        bail!(
            "not refunding: {} {}",
            decision["decision"],
            decision["reasons"]
        );
    }
    println!(
        "2. check: allow (trace {}) -> refunding",
        decision["trace_id"]
    );
    let big = backend
        .ok("/v1/check", &json!({"agent_id": agent_id, "action": "refund", "context": {"amount": 400, "currency": "USD"}}))
        .await?;
    println!(
        "   a 400 USD refund would be `{}`: a human approves at {}",
        big["decision"], big["challenge"]["url"]
    );

    // 3a. A one-time credential for the call to the payments API; the API introspects it.
    let minted = backend
        .ok(
            "/v1/identity/credentials/mint",
            &json!({"agent_id": agent_id, "audience": "payments-api",
             "scopes": ["refunds:write"], "ttl_seconds": 60, "one_time": true}),
        )
        .await?;
    let token = minted["credential"]["token"].as_str().context("token")?;
    let first = backend
        .ok("/v1/identity/introspect", &json!({"token": token}))
        .await?;
    let second = backend
        .ok("/v1/identity/introspect", &json!({"token": token}))
        .await?;
    if first["active"] != true || second["active"] != false {
        bail!("one-time semantics broken: {first} / {second}");
    }
    println!(
        "3. one-time credential {}: first use active, second use {}",
        minted["credential"]["cred_id"], second["reason"]
    );

    // 3b. Token exchange: the agent's own signature proves it asks; the answer is a JWT.
    let (ts, nonce) = (now_ms()?, uuid::Uuid::new_v4().to_string());
    let proof = json!({"method": "POST", "path": path, "timestamp_ms": ts, "nonce": nonce,
                       "body_sha256": sha256_hex(body),
                       "signature_b64": sign_request(&key, "POST", path, &ts.to_string(), &nonce, body)});
    let exchanged = backend
        .ok(
            "/v1/token/exchange",
            &json!({"agent_id": agent_id, "audience": "payments-api",
             "scopes": ["refunds:write"], "ttl_seconds": 300, "agent_request": proof}),
        )
        .await?;
    let jwt = exchanged["token"].as_str().context("token")?.to_owned();
    let claims = verify_jwt(&http, &base, &jwt).await?;
    println!(
        "   exchanged for a {} JWT, verified with the JWKS: sub={} aud={} scope={}",
        exchanged["token_type"], claims["sub"], claims["aud"], claims["scope"]
    );

    // 4. The receipt: the service decides and sends; blocked mail is never sent.
    let (status, sent) = backend
        .post(
            "/v1/email/send",
            &json!({"agent_id": agent_id, "email": {"to": ["customer@example.com"],
              "subject": "Your refund for A-1001", "text": "We refunded 40 USD."}}),
        )
        .await?;
    if status != 200 {
        bail!("receipt: HTTP {status}: {sent}");
    }
    println!(
        "4. receipt sent via {} ({})",
        sent["provider"], sent["provider_message_id"]
    );
    let (status, blocked) = backend
        .post(
            "/v1/email/send",
            &json!({"agent_id": agent_id, "email": {"to": ["someone@elsewhere.test"],
              "subject": "hi", "text": "not allowed"}}),
        )
        .await?;
    println!(
        "   to elsewhere.test: HTTP {status} {} ({})",
        blocked["error"], blocked["decision"]
    );
    if status != 403 {
        bail!("the policy should have blocked that email");
    }

    // 5. Incident runbook: pause minting, revoke everything minted so far, check, resume.
    let paused = backend
        .ok(
            "/v1/identity/kill-switch/minting",
            &json!({"paused": true, "reason": "INC-1: drill"}),
        )
        .await?;
    let (status, refused) = backend
        .post(
            "/v1/identity/credentials/mint",
            &json!({"agent_id": agent_id}),
        )
        .await?;
    println!(
        "5. minting paused={} -> mint answers HTTP {status} {}",
        paused["minting_paused"], refused["error"]
    );
    let cutoff = backend
        .ok(
            "/v1/identity/kill-switch/revoke-all",
            &json!({"reason": "INC-1: drill"}),
        )
        .await?;
    let after = backend
        .ok("/v1/identity/introspect", &json!({"token": jwt}))
        .await?;
    println!(
        "   revoke-all at {}: the JWT now introspects active={} ({})",
        cutoff["all_credentials_revoked_at"], after["active"], after["reason"]
    );
    if after["active"] != false {
        bail!("revoke-all did not take");
    }
    let resumed = backend
        .ok(
            "/v1/identity/kill-switch/minting",
            &json!({"paused": false, "reason": "INC-1 closed"}),
        )
        .await?;
    println!("   resumed: minting_paused={}", resumed["minting_paused"]);
    Ok(())
}
