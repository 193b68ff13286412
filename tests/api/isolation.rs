//! Workspace isolation: a key of workspace B can neither see nor touch workspace A.

use crate::both_engines;
use crate::helpers::*;
use serde_json::json;

both_engines! {
    async fn a_key_of_another_workspace_sees_and_changes_nothing(app) {
        let agent = app.active_agent("a-only").await;
        app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "k1", "agent_id": agent.id})).await;
        app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": [{"agent_id": agent.id, "status": "ok", "latency_ms": 1}]})).await;
        let (_, b) = app.other_workspace().await;

        assert_error(app.get_as(&b, &format!("/v1/agents/{}", agent.id)).await, 404, "unknown_agent").await;
        let (_, list) = status_json(app.get_as(&b, "/v1/agents").await).await;
        assert_eq!(list["items"].as_array().unwrap().len(), 0);
        for verb in ["suspend", "resume", "revoke"] {
            let res = app.post_as(&b, &format!("/v1/agents/{}/{verb}", agent.id), &json!({})).await;
            assert_error(res, 404, "unknown_agent").await;
        }
        let body = b"{}";
        let s = agent.sign("POST", "/x", &now_ms().to_string(), &random_nonce(), body);
        let req = json!({"agent_id": agent.id, "method": "POST", "path": "/x", "timestamp_ms": s.timestamp.parse::<i64>().unwrap(),
            "nonce": s.nonce, "body_sha256": s.body_sha256, "signature_b64": s.signature});
        let (_, out) = status_json(app.post_as(&b, "/v1/verify", &req).await).await;
        assert_eq!((out["valid"].as_bool(), out["reason"].as_str()), (Some(false), Some("unknown_agent")));
        let res = app.post_as(&b, "/v1/workspace/agents/upsert", &json!({"external_agent_key": "k1", "agent_id": agent.id})).await;
        assert_error(res, 404, "unknown_agent").await;
        let (_, inv) = status_json(app.get_as(&b, "/v1/workspace/agents").await).await;
        assert_eq!(inv["count"], 0);
        let (_, ingest) = status_json(app.post_as(&b, "/v1/telemetry/heartbeat/ingest",
            &json!({"items": [{"agent_id": agent.id, "status": "ok", "latency_ms": 1}]})).await).await;
        assert_eq!(ingest["rejected"][0]["error"], "unknown_agent");
        let res = app.get_as(&b, &format!("/v1/telemetry/heartbeat/recent?agent_id={}", agent.id)).await;
        assert_error(res, 404, "unknown_agent").await;
        let (_, recent) = status_json(app.get_as(&b, "/v1/telemetry/heartbeat/recent").await).await;
        assert_eq!(recent["count"], 0);
        let (_, events) = status_json(app.get_as(&b, &format!("/v1/workspace/audit/events?agent_id={}", agent.id)).await).await;
        assert_eq!(events["items"].as_array().unwrap().len(), 0);
        let (_, exported) = status_json(app.post_as(&b, "/v1/workspace/audit/export", &json!({})).await).await;
        assert!(!exported.to_string().contains(&agent.id));

        // And workspace A's view is unchanged: the agent is still active and its nonce unused.
        let (_, a) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!(a["agent"]["status"], "active");
        let (_, out) = status_json(app.post("/v1/verify", &req).await).await;
        assert_eq!(out["valid"], true, "{out}");
    }
}

both_engines! {
    async fn the_same_public_key_registers_separately_per_workspace(app) {
        let agent = TestAgent::new();
        let in_a = agent.register(&app, Some(&app.key), "shared-key").await;
        let (_, b) = app.other_workspace().await;
        let in_b = agent.register(&app, Some(&b), "shared-key").await;
        assert_ne!(in_a, in_b, "workspace B must not be handed workspace A's agent");
        let unclaimed = agent.register(&app, None, "shared-key").await;
        assert!(unclaimed != in_a && unclaimed != in_b);
    }
}
