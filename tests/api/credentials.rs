//! Credentials: mint under policy, introspection (revocation, expiry, kill switch, one-time use),
//! revoke, revoke-by-agent, the kill switch, rate limits and isolation.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

/// An agent allowed to mint (ttl over 600 s needs approval); answers it.
async fn setup(app: &TestApp) -> TestAgent {
    let agent = app.active_agent("minter").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"mint": {
            "actions": {"allow": ["mint_credential"]},
            "cedar": [{"name": "long-lived", "outcome": "challenge", "reason_code": "long_ttl", "reason": "long-lived credentials need approval",
                       "when": "context.action == \"mint_credential\" && resource.hasTag(\"ttl_seconds\") && resource.getTag(\"ttl_seconds\") > 6000000"}]
        }},
        "agent_groups": [{"name": "minters", "members": [agent.id]}],
        "bindings": [{"group": "minters", "blocks": ["mint"]}]
    }))
    .await;
    agent
}

async fn mint(app: &TestApp, body: Value) -> (u16, Value) {
    let (s, out) = status_json(app.post("/v1/identity/credentials/mint", &body).await).await;
    (s.as_u16(), out)
}

async fn introspect(app: &TestApp, token: &str) -> Value {
    let (s, out) = status_json(
        app.post("/v1/identity/introspect", &json!({"token": token}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
    out
}

both_engines! {
    async fn mint_introspect_and_revoke(app) {
        let agent = setup(&app).await;
        let (s, minted) = mint(&app, json!({"agent_id": agent.id, "audience": "payments-api", "scopes": ["refunds:write"], "ttl_seconds": 120})).await;
        assert_eq!(s, 200, "{minted}");
        let c = &minted["credential"];
        let token = c["token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("sct_") && c["cred_id"].as_str().unwrap().starts_with("crd_"));
        assert_eq!((c["token_type"].as_str(), c["one_time"].as_bool()), (Some("opaque"), Some(false)));
        let seen = introspect(&app, &token).await;
        assert_eq!((seen["active"].as_bool(), seen["agent_id"].as_str()), (Some(true), Some(agent.id.as_str())));
        assert_eq!((seen["audience"].as_str(), seen["scopes"].clone()), (Some("payments-api"), json!(["refunds:write"])));
        assert_eq!(introspect(&app, &token).await["active"], true, "not one-time: stays active");

        let (_, revoked) = status_json(app.post("/v1/identity/credentials/revoke", &json!({"token": token, "reason": "leaked"})).await).await;
        assert_eq!(revoked["revoked"], 1);
        let after = introspect(&app, &token).await;
        assert_eq!((after["active"].as_bool(), after["reason"].as_str()), (Some(false), Some("revoked")));
        assert_eq!(introspect(&app, "sct_unknown").await["reason"], "unknown");

        // By cred_id, and every credential of an agent.
        let (_, a) = mint(&app, json!({"agent_id": agent.id})).await;
        let (_, b) = mint(&app, json!({"agent_id": agent.id})).await;
        let (_, one) = status_json(app.post("/v1/identity/credentials/revoke", &json!({"cred_id": a["credential"]["cred_id"]})).await).await;
        assert_eq!(one["revoked"], 1);
        let (_, all) = status_json(app.post("/v1/identity/credentials/revoke-by-agent", &json!({"agent_id": agent.id, "reason": "incident"})).await).await;
        assert_eq!(all["revoked"], 1, "only b was still live");
        assert_eq!(introspect(&app, b["credential"]["token"].as_str().unwrap()).await["reason"], "revoked");
        assert_error(app.post("/v1/identity/credentials/revoke", &json!({})).await, 400, "missing_token").await;
        // A suspended agent's credentials are off while it is suspended.
        let (_, live) = mint(&app, json!({"agent_id": agent.id})).await;
        let live = live["credential"]["token"].as_str().unwrap().to_owned();
        app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await;
        assert_eq!(introspect(&app, &live).await["reason"], "agent_not_active");
        app.post(&format!("/v1/agents/{}/resume", agent.id), &json!({})).await;
        assert_eq!(introspect(&app, &live).await["active"], true);

        let events = app.post("/v1/workspace/audit/export", &json!({"limit": 1000})).await.text().await.unwrap();
        assert!(events.contains("credential.minted") && events.contains("credential.revoked"));
        assert!(!events.contains("sct_"), "no token in the audit trail");
    }
}

both_engines! {
    async fn one_time_and_expiry(app) {
        let agent = setup(&app).await;
        let (_, once) = mint(&app, json!({"agent_id": agent.id, "one_time": true})).await;
        let token = once["credential"]["token"].as_str().unwrap();
        assert_eq!(introspect(&app, token).await["active"], true);
        let second = introspect(&app, token).await;
        assert_eq!((second["active"].as_bool(), second["reason"].as_str()), (Some(false), Some("already_used")));
        let (_, short) = mint(&app, json!({"agent_id": agent.id, "ttl_seconds": 1})).await;
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_eq!(introspect(&app, short["credential"]["token"].as_str().unwrap()).await["reason"], "expired");
    }
}

both_engines! {
    async fn mint_errors_and_policy_outcomes(app) {
        let agent = setup(&app).await;
        for (body, status, code) in [
            (json!({}), 400, "missing_agent_id"),
            (json!({"agent_id": agent.id, "ttl_seconds": 0}), 400, "invalid_ttl"),
            (json!({"agent_id": agent.id, "ttl_seconds": 3601}), 400, "invalid_ttl"),
            (json!({"agent_id": agent.id, "scopes": ["has space"]}), 400, "invalid_scopes"),
            (json!({"agent_id": agent.id, "scopes": (0..33).map(|i| format!("s{i}")).collect::<Vec<_>>()}), 400, "invalid_scopes"),
            (json!({"agent_id": agent.id, "token_type": "saml"}), 400, "invalid_token_type"),
            (json!({"agent_id": "agt_0123456789abcdef0123456789abcdef"}), 404, "unknown_agent"),
            (json!({"agent_id": agent.id, "policy_id": "pol_nope"}), 404, "unknown_policy"),
        ] {
            assert_error(app.post("/v1/identity/credentials/mint", &body).await, status, code).await;
        }
        let challenged = assert_error(app.post("/v1/identity/credentials/mint", &json!({"agent_id": agent.id, "ttl_seconds": 1200})).await, 403, "policy_challenge").await;
        assert!(challenged["challenge"]["url"].as_str().unwrap().contains("/v1/approval-links/"));
        let outsider = app.active_agent("outsider").await;
        let denied = assert_error(app.post("/v1/identity/credentials/mint", &json!({"agent_id": outsider.id})).await, 403, "policy_denied").await;
        assert_eq!(denied["reason_codes"], json!(["no_matching_rule"]));
        assert_error(app.client.post(app.url("/v1/identity/credentials/mint")).json(&json!({"agent_id": agent.id})).send().await.unwrap(), 401, "missing_api_key").await;
    }
}

both_engines! {
    async fn the_kill_switch_pauses_minting_and_revokes_everything(app) {
        let agent = setup(&app).await;
        let (_, before) = mint(&app, json!({"agent_id": agent.id})).await;
        let (_, status) = status_json(app.get("/v1/identity/kill-switch/status").await).await;
        assert_eq!((status["minting_paused"].as_bool(), status["all_credentials_revoked_at"].is_null()), (Some(false), true));
        let (_, paused) = status_json(app.post("/v1/identity/kill-switch/minting", &json!({"paused": true, "reason": "incident 7"})).await).await;
        assert_eq!((paused["minting_paused"].as_bool(), paused["minting_paused_reason"].as_str()), (Some(true), Some("incident 7")));
        assert_error(app.post("/v1/identity/credentials/mint", &json!({"agent_id": agent.id})).await, 403, "minting_paused").await;
        let (_, cut) = status_json(app.post("/v1/identity/kill-switch/revoke-all", &json!({"reason": "incident 7"})).await).await;
        assert!(cut["all_credentials_revoked_at"].as_str().unwrap().ends_with('Z'));
        let old = introspect(&app, before["credential"]["token"].as_str().unwrap()).await;
        assert_eq!((old["active"].as_bool(), old["reason"].as_str()), (Some(false), Some("revoked_by_kill_switch")));
        app.post("/v1/identity/kill-switch/minting", &json!({"paused": false})).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let (s, fresh) = mint(&app, json!({"agent_id": agent.id})).await;
        assert_eq!(s, 200);
        assert_eq!(introspect(&app, fresh["credential"]["token"].as_str().unwrap()).await["active"], true, "minted after the cutoff");
        let switches = audit_events(&app, "action=kill_switch_minting").await;
        assert_eq!(switches.len(), 2);
        assert_eq!(audit_events(&app, "event_type=kill_switch.revoke_all").await[0]["details"]["reason"], "incident 7");
        // Another workspace's key sees none of it.
        let (_, b) = app.other_workspace().await;
        let (_, other) = status_json(app.post_as(&b, "/v1/identity/introspect", &json!({"token": fresh["credential"]["token"]})).await).await;
        assert_eq!(other["reason"], "unknown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minting_is_rate_limited_per_agent() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = setup(&app).await;
    // Fixed one-minute windows: the 61st mint of a window is refused (a run that straddles a
    // window boundary gets up to 60 more before it).
    let mut allowed = 0;
    let res = loop {
        let res = app
            .post(
                "/v1/identity/credentials/mint",
                &json!({"agent_id": agent.id}),
            )
            .await;
        if res.status() != 200 {
            break res;
        }
        allowed += 1;
        assert!(allowed <= 120, "never limited");
    };
    assert!(allowed >= 60, "limited after {allowed}");
    assert!(
        res.headers().get("retry-after").is_some(),
        "Retry-After header"
    );
    let body = assert_error(res, 429, "rate_limited").await;
    assert!(body["retry_after"].as_i64().unwrap() >= 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_all_on_one_sqlite_process_is_seen_by_introspection_on_another() {
    revoke_all_on_one_replica_is_seen_by_introspection_on_another(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_all_on_one_postgres_replica_is_seen_by_introspection_on_another() {
    revoke_all_on_one_replica_is_seen_by_introspection_on_another(Engine::Postgres).await;
}

async fn revoke_all_on_one_replica_is_seen_by_introspection_on_another(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = setup(&app).await;
    let (_, minted) = mint(&app, json!({"agent_id": agent.id})).await;
    let token = minted["credential"]["token"].as_str().unwrap().to_owned();
    let (mut other, base) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let client = reqwest::Client::new();
    let introspect_other = || {
        client
            .post(format!("{base}/v1/identity/introspect"))
            .header("X-Service-Api-Key", &app.key)
            .json(&json!({"token": token}))
            .send()
    };
    assert_eq!(
        status_json(introspect_other().await.unwrap()).await.1["active"],
        true
    );
    app.post(
        "/v1/identity/kill-switch/revoke-all",
        &json!({"reason": "drill"}),
    )
    .await;
    let (_, seen) = status_json(introspect_other().await.unwrap()).await;
    assert_eq!(
        (seen["active"].as_bool(), seen["reason"].as_str()),
        (Some(false), Some("revoked_by_kill_switch")),
        "at once, on the other replica"
    );
    other.kill().await.ok();
    app.stop().await;
}
