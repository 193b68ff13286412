//! JWT credentials and token exchange: EdDSA tokens verified from the published JWKS by an
//! independent library (`jsonwebtoken`), key rotation with the real CLI, discovery, and the
//! agent's signed proof (bad signature, replay, window, policy outcomes).

use crate::both_engines;
use crate::helpers::*;
use ed25519_dalek::Signer;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

/// An agent allowed to mint and to exchange (exchange with `admin` scopes is denied, and
/// above 1000 s needs approval); answers it.
async fn setup(app: &TestApp) -> TestAgent {
    let agent = app.active_agent("jwt").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"tokens": {
            "actions": {"allow": ["mint_credential", "token_exchange"]},
            "cedar": [
                {"name": "no-admin", "outcome": "deny", "reason_code": "admin_scope", "reason": "admin scopes are not exchanged",
                 "when": "context.action == \"token_exchange\" && context.fields.contains(\"scopes=admin\")"},
                {"name": "long", "outcome": "challenge", "reason_code": "long_ttl", "reason": "long tokens need approval",
                 "when": "context.action == \"token_exchange\" && resource.hasTag(\"ttl_seconds\") && resource.getTag(\"ttl_seconds\") > 10000000"}
            ]
        }},
        "agent_groups": [{"name": "jwt", "members": [agent.id]}],
        "bindings": [{"group": "jwt", "blocks": ["tokens"]}]
    }))
    .await;
    agent
}

async fn jwks(app: &TestApp) -> JwkSet {
    let res = app
        .client
        .get(app.url("/.well-known/jwks.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// Verifies `token` with the published keys, the way a resource server would.
async fn verify(app: &TestApp, token: &str, audience: &str) -> Value {
    let header = decode_header(token).unwrap();
    assert_eq!(header.alg, Algorithm::EdDSA);
    let kid = header.kid.expect("kid");
    let set = jwks(app).await;
    let jwk = set.find(&kid).expect("the signing key is published");
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[app.base.as_str()]);
    decode::<Value>(token, &DecodingKey::from_jwk(jwk).unwrap(), &validation)
        .unwrap()
        .claims
}

/// The agent's proof for an exchange: its own signature over the canonical string.
fn proof(agent: &TestAgent, nonce: &str, timestamp: i64) -> Value {
    let body = br#"{"op":"pay"}"#;
    let body_sha256 = sha256_hex(body);
    let canonical = format!("POST\n/payments/v1/pay\n{timestamp}\n{nonce}\n{body_sha256}");
    json!({
        "method": "POST", "path": "/payments/v1/pay", "timestamp_ms": timestamp, "nonce": nonce,
        "body_sha256": body_sha256, "signature_b64": b64(&agent.key.sign(canonical.as_bytes()).to_bytes())
    })
}

both_engines! {
    async fn a_jwt_credential_verifies_from_the_jwks_and_survives_rotation(app) {
        let agent = setup(&app).await;
        let (s, minted) = status_json(app.post("/v1/identity/credentials/mint", &json!({
            "agent_id": agent.id, "token_type": "jwt", "audience": "payments-api", "scopes": ["refunds:write", "refunds:read"], "ttl_seconds": 120
        })).await).await;
        assert_eq!(s, 200, "{minted}");
        let c = &minted["credential"];
        assert_eq!(c["token_type"], "jwt");
        let token = c["token"].as_str().unwrap().to_owned();
        let claims = verify(&app, &token, "payments-api").await;
        assert_eq!(claims["sub"], agent.id.as_str());
        assert_eq!(claims["jti"], c["cred_id"]);
        assert_eq!(claims["ws"], app.workspace_id.as_str());
        assert_eq!(claims["scope"], "refunds:write refunds:read");
        let ttl = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        assert_eq!(ttl, 120);
        // Revocable and introspectable like an opaque one.
        let (_, seen) = status_json(app.post("/v1/identity/introspect", &json!({"token": token})).await).await;
        assert_eq!((seen["active"].as_bool(), seen["token_type"].as_str()), (Some(true), Some("jwt")));

        // Rotation with the real CLI: new tokens are signed by the new key, the old key stays
        // published so the old token still verifies.
        let old_kid = decode_header(&token).unwrap().kid.unwrap();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args(["admin", "keys", "rotate", "--database-url", &app.db_url])
            .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
            .output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listed = run_cli(&app.db_url, &["admin", "keys", "list", "--output", "json"]).await;
        // With another master key than the one that sealed the keys, rotating is refused:
        // the servers could not open the new key.
        let wrong = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args(["admin", "keys", "rotate", "--database-url", &app.db_url])
            .env("ACP_MASTER_KEY", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
            .output().await.unwrap();
        assert!(!wrong.status.success());
        assert!(String::from_utf8_lossy(&wrong.stderr).contains("master key"), "{}", String::from_utf8_lossy(&wrong.stderr));
        assert_eq!(listed["keys"].as_array().unwrap().len(), 2, "{listed}");
        let set = jwks(&app).await;
        assert_eq!(set.keys.len(), 2);
        let (_, minted) = status_json(app.post("/v1/identity/credentials/mint", &json!({
            "agent_id": agent.id, "token_type": "jwt", "audience": "payments-api"
        })).await).await;
        let new_token = minted["credential"]["token"].as_str().unwrap().to_owned();
        // Verifiers may cache the JWKS for a minute: the new key signs only after that, so a
        // token minted right after the rotation is still signed by the previous key.
        let kid_after = decode_header(&new_token).unwrap().kid.unwrap();
        assert_eq!(kid_after, old_kid);
        let new_kid = listed["keys"][0]["kid"].as_str().unwrap();
        assert_ne!(new_kid, old_kid);
        assert!(set.find(new_kid).is_some(), "the new key is published at once");
        verify(&app, &new_token, "payments-api").await;
        verify(&app, &token, "payments-api").await;

        // Discovery points at the same keys.
        let (s, config) = status_json(app.client.get(app.url("/.well-known/openid-configuration")).send().await.unwrap()).await;
        assert_eq!(s, 200);
        assert_eq!(config["issuer"], app.base.as_str());
        assert_eq!(config["jwks_uri"], format!("{}/.well-known/jwks.json", app.base).as_str());
        assert_eq!(config["id_token_signing_alg_values_supported"], json!(["EdDSA"]));
    }
}

both_engines! {
    async fn token_exchange_needs_the_agents_proof_and_the_policy(app) {
        let agent = setup(&app).await;
        let nonce = random_nonce();
        let signed = proof(&agent, &nonce, now_ms());
        // The backend verified the agent's request first; the same request is exchanged once.
        let mut verify_body = signed.clone();
        verify_body["agent_id"] = json!(agent.id);
        let (_, verdict) = status_json(app.post("/v1/verify", &verify_body).await).await;
        assert_eq!(verdict["valid"], true, "{verdict}");
        let body = json!({"agent_id": agent.id, "audience": "payments-api", "scopes": ["pay"],
                          "context": {"purpose": "checkout"}, "agent_request": signed});
        let (s, out) = status_json(app.post("/v1/token/exchange", &body).await).await;
        assert_eq!(s, 200, "{out}");
        assert_eq!((out["ok"].as_bool(), out["token_type"].as_str(), out["expires_in"].as_i64()), (Some(true), Some("Bearer"), Some(900)));
        let claims = verify(&app, out["token"].as_str().unwrap(), "payments-api").await;
        assert_eq!((claims["sub"].as_str(), claims["scope"].as_str()), (Some(agent.id.as_str()), Some("pay")));
        let decided = audit_events(&app, "action=token_exchange").await;
        assert!(decided.iter().any(|e| e["decision"] == "allow"), "audited");

        // The same proof again is a replay.
        assert_error(app.post("/v1/token/exchange", &body).await, 401, "replay_detected").await;
        // A proof by another key, a stale timestamp, a proof in seconds.
        let stranger = TestAgent::new();
        let forged = json!({"agent_id": agent.id, "agent_request": proof(&stranger, &random_nonce(), now_ms())});
        assert_error(app.post("/v1/token/exchange", &forged).await, 401, "bad_signature").await;
        let stale = json!({"agent_id": agent.id, "agent_request": proof(&agent, &random_nonce(), now_ms() - 3_600_000)});
        assert_error(app.post("/v1/token/exchange", &stale).await, 401, "timestamp_out_of_range").await;
        let seconds = json!({"agent_id": agent.id, "agent_request": proof(&agent, &random_nonce(), now_ms() / 1000)});
        assert_error(app.post("/v1/token/exchange", &seconds).await, 401, "timestamp_out_of_range").await;

        // Policy outcomes.
        let denied = json!({"agent_id": agent.id, "scopes": ["admin"], "agent_request": proof(&agent, &random_nonce(), now_ms())});
        let body = assert_error(app.post("/v1/token/exchange", &denied).await, 403, "policy_denied").await;
        assert_eq!(body["reason_codes"], json!(["admin_scope"]));
        let long = json!({"agent_id": agent.id, "ttl_seconds": 3000, "agent_request": proof(&agent, &random_nonce(), now_ms())});
        let body = assert_error(app.post("/v1/token/exchange", &long).await, 403, "policy_challenge").await;
        assert!(body["challenge"]["url"].as_str().unwrap().contains("/v1/approval-links/"), "{body}");

        // Input errors.
        for (body, status, code) in [
            (json!({"agent_request": proof(&agent, &random_nonce(), now_ms())}), 400, "missing_agent_id"),
            (json!({"agent_id": agent.id}), 400, "missing_agent_request"),
            (json!({"agent_id": agent.id, "ttl_seconds": 0, "agent_request": proof(&agent, &random_nonce(), now_ms())}), 400, "invalid_ttl"),
            (json!({"agent_id": agent.id, "scopes": ["bad scope"], "agent_request": proof(&agent, &random_nonce(), now_ms())}), 400, "invalid_scopes"),
            (json!({"agent_id": "agt_00000000000000000000000000000000", "agent_request": proof(&agent, &random_nonce(), now_ms())}), 404, "unknown_agent"),
        ] {
            assert_error(app.post("/v1/token/exchange", &body).await, status, code).await;
        }

        // Paused minting stops exchanges too.
        app.post("/v1/identity/kill-switch/minting", &json!({"paused": true, "reason": "incident"})).await;
        let paused = json!({"agent_id": agent.id, "agent_request": proof(&agent, &random_nonce(), now_ms())});
        assert_error(app.post("/v1/token/exchange", &paused).await, 403, "minting_paused").await;
    }
}

both_engines! {
    async fn another_workspace_cannot_exchange_or_introspect(app) {
        let agent = setup(&app).await;
        let (_, other_key) = app.other_workspace().await;
        let body = json!({"agent_id": agent.id, "agent_request": proof(&agent, &random_nonce(), now_ms())});
        assert_error(app.post_as(&other_key, "/v1/token/exchange", &body).await, 404, "unknown_agent").await;
        let (_, out) = status_json(app.post("/v1/token/exchange", &body).await).await;
        let token = out["token"].as_str().unwrap().to_owned();
        let (_, seen) = status_json(app.post_as(&other_key, "/v1/identity/introspect", &json!({"token": token})).await).await;
        assert_eq!(seen["active"], false);
    }
}
