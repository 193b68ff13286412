//! Bad input of every kind answers 4xx in the envelope and changes nothing.

use crate::both_engines;
use crate::helpers::*;
use serde_json::json;

async fn state(app: &TestApp) -> (usize, usize) {
    let (_, agents) = status_json(app.get("/v1/agents?limit=200").await).await;
    let events = audit_events(app, "limit=200").await;
    (agents["items"].as_array().unwrap().len(), events.len())
}

both_engines! {
    async fn bad_input_is_refused_in_the_envelope_and_changes_nothing(app) {
        let before = state(&app).await;
        let raw = |body: &'static str| app.client.post(app.url("/v1/agents/register"))
            .header("Content-Type", "application/json").header("X-Service-Api-Key", &app.key).body(body).send();
        assert_error(raw("{\"name\": ").await.unwrap(), 400, "invalid_json").await;
        assert_error(raw("[1, 2]").await.unwrap(), 400, "invalid_json").await;
        assert_error(raw("{} trailing").await.unwrap(), 400, "invalid_json").await;
        let key = TestAgent::new().public_key_b64();
        let reg = |body: serde_json::Value| {
            let app = app.clone();
            async move { app.post("/v1/agents/register", &body).await }
        };
        assert_error(reg(json!({"name": 5, "public_key": key})).await, 400, "invalid_name").await;
        assert_error(reg(json!({"public_key": key})).await, 400, "missing_name").await;
        assert_error(reg(json!({"name": "  ", "public_key": key})).await, 400, "missing_name").await;
        assert_error(reg(json!({"name": "x"})).await, 400, "missing_public_key").await;
        assert_error(reg(json!({"name": "x", "public_key": "not base64!!"})).await, 400, "invalid_public_key").await;
        assert_error(reg(json!({"name": "x", "public_key": b64(&[7u8; 31])})).await, 400, "invalid_public_key").await;
        assert_error(reg(json!({"name": "x", "public_key": b64(&[7u8; 33])})).await, 400, "invalid_public_key").await;
        assert_error(reg(json!({"name": "x", "public_key": b64(&[0u8; 32])})).await, 400, "invalid_public_key").await;
        assert_error(reg(json!({"name": "x", "public_key": key, "key_type": "rsa"})).await, 400, "invalid_key_type").await;
        assert_error(reg(json!({"name": "x", "public_key": key, "metadata": [1]})).await, 400, "invalid_metadata").await;
        assert_error(reg(json!({"name": "x".repeat(201), "public_key": key})).await, 400, "invalid_name").await;

        let huge = format!("{{\"name\": \"{}\", \"public_key\": \"{key}\"}}", "x".repeat(1024 * 1024 + 10));
        let res = app.client.post(app.url("/v1/agents/register")).header("Content-Type", "application/json")
            .header("X-Service-Api-Key", &app.key).body(huge).send().await.unwrap();
        assert_error(res, 413, "payload_too_large").await;
        let res = app.client.post(app.url("/v1/agents/register")).header("Content-Type", "text/plain")
            .header("X-Service-Api-Key", &app.key).body("{}").send().await.unwrap();
        assert_error(res, 415, "unsupported_media_type").await;

        let attest = |body: serde_json::Value| app.client.post(app.url("/v1/agents/attest")).json(&body).send();
        assert_error(attest(json!({"agent_id": "x", "challenge_id": "y"})).await.unwrap(), 400, "missing_signature").await;
        assert_error(attest(json!({"agent_id": 1, "challenge_id": "y", "signature": "z"})).await.unwrap(), 400, "invalid_agent_id").await;
        assert_error(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": {}})).await, 400, "invalid_items").await;
        assert_error(app.post("/v1/workspace/agents/upsert", &json!({"agent_id": "agt_x"})).await, 400, "missing_external_agent_key").await;
        assert_error(app.get("/v1/agents/not-an-id").await, 404, "unknown_agent").await;

        assert_eq!(state(&app).await, before, "no bad request changed anything");
    }
}

both_engines! {
    async fn nul_characters_are_refused_on_every_engine(app) {
        let before = state(&app).await;
        let key = TestAgent::new().public_key_b64();
        let res = app.post("/v1/agents/register", &json!({"name": "a\u{0}b", "public_key": key})).await;
        assert_error(res, 400, "invalid_json").await;
        let agent = app.active_agent("inv").await;
        let res = app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "k\u{0}", "agent_id": agent.id})).await;
        assert_error(res, 400, "invalid_json").await;
        assert_error(app.get("/v1/agents?name=x%00y").await, 400, "invalid_query").await;
        let cursor = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, "1:evt\u{0}x");
        assert_error(app.get(&format!("/v1/workspace/audit/events?cursor={cursor}")).await, 400, "invalid_cursor").await;
        let (agents, events) = state(&app).await;
        assert_eq!((agents, events), (before.0 + 1, before.1 + 2), "only the valid agent was added");
    }
}

both_engines! {
    async fn a_null_required_field_is_missing(app) {
        let res = app.post("/v1/agents/register", &json!({"name": null, "public_key": TestAgent::new().public_key_b64()})).await;
        assert_error(res, 400, "missing_name").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_without_a_key_is_rate_limited_per_address() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| c.register_limit_per_ip = 2).await;
    for _ in 0..2 {
        TestAgent::new().register(&app, None, "anon").await;
    }
    let res = app
        .client
        .post(app.url("/v1/agents/register"))
        .json(&json!({"name": "anon", "public_key": TestAgent::new().public_key_b64()}))
        .send()
        .await
        .unwrap();
    let body = assert_error(res, 429, "rate_limited").await;
    assert!(body["retry_after"].as_i64().unwrap() > 0);
    // With a workspace key the limit does not apply.
    TestAgent::new()
        .register(&app, Some(&app.key), "keyed")
        .await;
    app.stop().await;
}
