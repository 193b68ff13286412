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
