//! Signed heartbeats with every error code, ingestion, recent heartbeats and the inventory.

use crate::both_engines;
use crate::helpers::*;
use serde_json::json;

const HB: &str = "/v1/telemetry/heartbeat";

async fn recent_count(app: &TestApp) -> usize {
    let (_, body) = status_json(app.get("/v1/telemetry/heartbeat/recent?limit=200").await).await;
    body["count"].as_u64().unwrap() as usize
}

both_engines! {
    async fn a_signed_heartbeat_is_recorded(app) {
        let agent = app.active_agent("hb").await;
        let (s, body) = status_json(agent.signed_post(&app, HB, &json!({"agent_id": agent.id, "status": "degraded", "latency_ms": 41.5})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["ok"], true);
        assert_eq!(body["agent_id"], agent.id.as_str());
        assert_eq!(body["status"], "degraded");
        assert!(body["recorded_at"].as_str().unwrap().ends_with('Z'));
        let (_, recent) = status_json(app.get(&format!("/v1/telemetry/heartbeat/recent?agent_id={}", agent.id)).await).await;
        assert_eq!(recent["count"], 1);
        let item = &recent["items"][0];
        assert_eq!((item["status"].as_str(), item["latency_ms"].as_f64(), item["source"].as_str()), (Some("degraded"), Some(41.5), Some("signed")));
        let (_, a) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert!(a["agent"]["last_seen_at"].is_string());
    }
}

both_engines! {
    async fn every_signed_request_error_has_its_code_and_changes_nothing(app) {
        let agent = app.active_agent("hb").await;
        let body = serde_json::to_vec(&json!({"agent_id": agent.id, "status": "ok", "latency_ms": 1})).unwrap();
        let now = now_ms().to_string();

        // Missing headers.
        let res = app.client.post(app.url(HB)).json(&json!({"agent_id": agent.id})).send().await.unwrap();
        assert_error(res, 401, "missing_signature_headers").await;
        let s = agent.sign("POST", HB, &now, &random_nonce(), &body);
        let res = app.client.post(app.url(HB)).header("Content-Type", "application/json")
            .header("X-Service-Agent-Id", &agent.id).header("X-Service-Timestamp", &s.timestamp)
            .header("X-Service-Signature", &s.signature).body(body.clone()).send().await.unwrap();
        assert_error(res, 401, "missing_signature_headers").await;

        // Timestamps: seconds, too old, in the future, not a number.
        for ts in [(now_ms() / 1000).to_string(), (now_ms() - 301_000).to_string(), (now_ms() + 301_000).to_string(), "soon".to_string()] {
            let s = agent.sign("POST", HB, &ts, &random_nonce(), &body);
            assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "timestamp_out_of_range").await;
        }

        // A signature over other bytes, another path, another method, another key.
        let s = agent.sign("POST", HB, &now, &random_nonce(), b"{}");
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "bad_signature").await;
        let s = agent.sign("POST", "/v1/telemetry/heartbeat/", &now, &random_nonce(), &body);
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "bad_signature").await;
        let s = agent.sign("PUT", HB, &now, &random_nonce(), &body);
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "bad_signature").await;
        let s = TestAgent::new().sign("POST", HB, &now, &random_nonce(), &body);
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "bad_signature").await;

        // Unknown agent; header and body disagreeing; a body without agent_id.
        let s = agent.sign("POST", HB, &now, &random_nonce(), &body);
        assert_error(agent.send_signed(&app, HB, "agt_0123456789abcdef0123456789abcdef", &s, body.clone()).await, 404, "unknown_agent").await;
        let other = app.active_agent("other").await;
        let res = agent.signed_post(&app, HB, &json!({"agent_id": other.id, "status": "ok", "latency_ms": 1})).await;
        assert_error(res, 401, "agent_header_mismatch").await;
        let res = agent.signed_post(&app, HB, &json!({"status": "ok", "latency_ms": 1})).await;
        assert_error(res, 400, "missing_agent_id").await;
        let res = agent.signed_post(&app, HB, &json!({"agent_id": agent.id, "status": "", "latency_ms": 1})).await;
        assert_error(res, 400, "missing_status").await;
        let res = agent.signed_post(&app, HB, &json!({"agent_id": agent.id, "status": "ok", "latency_ms": -1})).await;
        assert_error(res, 400, "invalid_latency_ms").await;

        // A pending agent may not sign.
        let pending = TestAgent::new();
        let pending_id = pending.register(&app, Some(&app.key), "pending").await;
        let pbody = serde_json::to_vec(&json!({"agent_id": pending_id, "status": "ok", "latency_ms": 1})).unwrap();
        let s = pending.sign("POST", HB, &now, &random_nonce(), &pbody);
        assert_error(pending.send_signed(&app, HB, &pending_id, &s, pbody).await, 403, "agent_not_active").await;
        assert_eq!(recent_count(&app).await, 0, "no failed request recorded anything");

        // Replay: the same signed request twice.
        let s = agent.sign("POST", HB, &now_ms().to_string(), &random_nonce(), &body);
        assert_eq!(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await.status(), 200);
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "replay_detected").await;
        assert_eq!(recent_count(&app).await, 1);
    }
}

both_engines! {
    async fn a_request_rejected_after_the_signature_check_does_not_burn_its_nonce(app) {
        let agent = app.active_agent("hb").await;
        let nonce = random_nonce();
        let bad = serde_json::to_vec(&json!({"agent_id": agent.id, "status": "ok", "latency_ms": "fast"})).unwrap();
        let s = agent.sign("POST", HB, &now_ms().to_string(), &nonce, &bad);
        assert_error(agent.send_signed(&app, HB, &agent.id, &s, bad).await, 400, "invalid_latency_ms").await;
        let good = serde_json::to_vec(&json!({"agent_id": agent.id, "status": "ok", "latency_ms": 2})).unwrap();
        let s = agent.sign("POST", HB, &now_ms().to_string(), &nonce, &good);
        assert_eq!(agent.send_signed(&app, HB, &agent.id, &s, good).await.status(), 200);
    }
}

both_engines! {
    async fn ingest_accepts_batches_with_per_item_rejections(app) {
        let a = app.active_agent("a").await;
        let items = json!([
            {"agent_id": a.id, "status": "ok", "latency_ms": 10},
            {"agent_id": a.id, "status": "error", "latency_ms": 99.5, "observed_at": "2026-01-01T00:00:00.000Z"},
            {"agent_id": a.id, "status": "ok", "latency_ms": 5, "observed_at": 1767225600000i64},
            {"status": "ok", "latency_ms": 1},
            {"agent_id": "agt_0123456789abcdef0123456789abcdef", "status": "ok", "latency_ms": 1},
            {"agent_id": a.id, "latency_ms": 1},
            {"agent_id": a.id, "status": "ok", "latency_ms": "slow"},
            {"agent_id": a.id, "status": "ok", "latency_ms": 1, "observed_at": "yesterday"},
            "not an object"
        ]);
        let (s, body) = status_json(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": items})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["accepted"], 3);
        let rejected: Vec<(u64, &str)> = body["rejected"].as_array().unwrap().iter()
            .map(|r| (r["index"].as_u64().unwrap(), r["error"].as_str().unwrap())).collect();
        assert_eq!(rejected, [(3, "missing_agent_id"), (4, "unknown_agent"), (5, "missing_status"),
            (6, "invalid_latency_ms"), (7, "invalid_observed_at"), (8, "invalid_item")]);
        assert_eq!(recent_count(&app).await, 3);

        let many: Vec<_> = (0..1001).map(|_| json!({"agent_id": a.id, "status": "ok", "latency_ms": 1})).collect();
        assert_error(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": many})).await, 400, "too_many_items").await;
        let full: Vec<_> = (0..1000).map(|_| json!({"agent_id": a.id, "status": "ok", "latency_ms": 1})).collect();
        let (_, body) = status_json(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": full})).await).await;
        assert_eq!(body["accepted"], 1000);
        let (_, recent) = status_json(app.get("/v1/telemetry/heartbeat/recent").await).await;
        assert_eq!(recent["count"], 20, "default limit");
        assert_error(app.get("/v1/telemetry/heartbeat/recent?limit=201").await, 400, "invalid_limit").await;
    }
}

both_engines! {
    async fn inventory_upsert_is_idempotent_and_refuses_remapping(app) {
        let a = app.active_agent("a").await;
        let b = app.active_agent("b").await;
        let item = json!({"external_agent_key": "crm-7", "agent_id": a.id, "display_name": "CRM bot",
            "labels": {"team": "sales", "tier": "1"}, "environment": "prod", "source": "crm"});
        let (s, first) = status_json(app.post("/v1/workspace/agents/upsert", &item).await).await;
        assert_eq!(s, 200, "{first}");
        assert_eq!((first["created"].as_bool(), first["changed"].as_bool()), (Some(true), Some(true)));
        assert_eq!(first["item"]["status"], "active");
        let (_, again) = status_json(app.post("/v1/workspace/agents/upsert", &item).await).await;
        assert_eq!((again["created"].as_bool(), again["changed"].as_bool()), (Some(false), Some(false)));
        assert_eq!(again["item"], first["item"]);
        let mut moved = item.clone();
        moved["environment"] = json!("staging");
        let (_, changed) = status_json(app.post("/v1/workspace/agents/upsert", &moved).await).await;
        assert_eq!((changed["created"].as_bool(), changed["changed"].as_bool()), (Some(false), Some(true)));
        let mut other = item.clone();
        other["agent_id"] = json!(b.id);
        assert_error(app.post("/v1/workspace/agents/upsert", &other).await, 409, "conflict").await;
        app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "ci-1", "agent_id": b.id,
            "environment": "prod", "status": "retired", "labels": {"team": "infra"}})).await;

        let list = |q: &str| { let q = q.to_owned(); let app = app.clone(); async move {
            let (_, body) = status_json(app.get(&format!("/v1/workspace/agents?{q}")).await).await;
            body["items"].as_array().unwrap().iter().map(|i| i["external_agent_key"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }};
        assert_eq!(list("").await, ["ci-1", "crm-7"]);
        assert_eq!(list("environment=prod").await, ["ci-1"]);
        assert_eq!(list("status=retired").await, ["ci-1"]);
        assert_eq!(list("label=team=sales").await, ["crm-7"]);
        assert_eq!(list("label=tier").await, ["crm-7"]);
        let upserts = audit_events(&app, "event_type=inventory.upserted").await;
        assert_eq!(upserts.len(), 3, "created, changed, created; the no-op is not an event");
        assert_error(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "", "agent_id": a.id})).await, 400, "missing_external_agent_key").await;
        assert_error(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "x", "agent_id": a.id, "labels": {"n": 1}})).await, 400, "invalid_labels").await;
    }
}

both_engines! {
    async fn inventory_labels_are_a_list_of_strings(app) {
        // The documented shape, as the public client libraries send it.
        let a = app.active_agent("a").await;
        let b = app.active_agent("b").await;
        let item = json!({"external_agent_key": "pay-1", "agent_id": a.id, "labels": ["payments", "eu", "payments"]});
        let (s, first) = status_json(app.post("/v1/workspace/agents/upsert", &item).await).await;
        assert_eq!(s, 200, "{first}");
        assert_eq!(first["item"]["labels"], json!(["payments", "eu"]), "duplicates dropped, order kept");
        let (_, again) = status_json(app.post("/v1/workspace/agents/upsert", &item).await).await;
        assert_eq!((again["created"].as_bool(), again["changed"].as_bool()), (Some(false), Some(false)));
        let (s, other) = status_json(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "ops-1", "agent_id": b.id, "labels": ["ops"]})).await).await;
        assert_eq!(s, 200, "{other}");
        let (_, none) = status_json(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "bare", "agent_id": b.id})).await).await;
        assert_eq!(none["item"]["labels"], json!([]), "no labels is an empty list");
        let (_, old) = status_json(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "obj", "agent_id": b.id, "labels": {"payments": "x"}})).await).await;
        assert_eq!(old["item"]["labels"], json!({"payments": "x"}), "the object form is kept as sent");

        let list = |q: &str| { let q = q.to_owned(); let app = app.clone(); async move {
            let (s, body) = status_json(app.get(&format!("/v1/workspace/agents?{q}")).await).await;
            assert_eq!(s, 200, "{body}");
            body["items"].as_array().unwrap().iter().map(|i| i["external_agent_key"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }};
        assert_eq!(list("label=payments").await, ["obj", "pay-1"]);
        assert_eq!(list("label=eu").await, ["pay-1"]);
        assert_eq!(list("label=ops").await, ["ops-1"]);
        assert_eq!(list("label=pay").await, Vec::<String>::new(), "whole labels only");
        let (_, body) = status_json(app.get("/v1/workspace/agents?label=payments").await).await;
        assert_eq!(body["count"], 2);

        // The key is mapped to agent a: mapping it to b is refused, and nothing changes.
        let mut remap = item.clone();
        remap["agent_id"] = json!(b.id);
        let err = assert_error(app.post("/v1/workspace/agents/upsert", &remap).await, 409, "conflict").await;
        assert!(err["message"].as_str().unwrap().contains("pay-1"), "{err}");
        let (_, body) = status_json(app.get("/v1/workspace/agents?label=eu").await).await;
        assert_eq!(body["items"][0]["agent_id"], a.id.as_str());

        for bad in [json!(["ok", 1]), json!([""]), json!(["x".repeat(201)]), json!("payments"), json!((0..65).map(|i| format!("l{i}")).collect::<Vec<_>>())] {
            assert_error(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "bad", "agent_id": a.id, "labels": bad})).await, 400, "invalid_labels").await;
        }
        assert_eq!(list("").await, ["bare", "obj", "ops-1", "pay-1"], "refused upserts wrote nothing");

        // Labels replaced by an upsert are no longer matched; pages follow the key's order.
        let (s, moved) = status_json(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": "obj", "agent_id": b.id, "labels": {"team": "ops"}})).await).await;
        assert_eq!(s, 200, "{moved}");
        assert_eq!(list("label=payments").await, ["pay-1"]);
        assert_eq!(list("label=team=ops").await, ["obj"]);
        let (_, first) = status_json(app.get("/v1/workspace/agents?limit=3").await).await;
        assert_eq!((first["count"].as_i64(), first["items"][2]["external_agent_key"].as_str()), (Some(3), Some("ops-1")));
        let cursor = first["next_cursor"].as_str().unwrap();
        let (_, second) = status_json(app.get(&format!("/v1/workspace/agents?limit=3&cursor={cursor}")).await).await;
        assert_eq!(second["items"].as_array().unwrap().len(), 1, "{second}");
        assert_eq!(second["items"][0]["external_agent_key"], "pay-1");
        assert!(second.get("next_cursor").is_none(), "the last page has no cursor");
        assert_error(app.get("/v1/workspace/agents?limit=501").await, 400, "invalid_limit").await;
        assert_error(app.get("/v1/workspace/agents?cursor=nope").await, 400, "invalid_cursor").await;

        // Policies read a list label as that key with the value "true".
        app.apply_policy(json!({
            "reusable_policy_blocks": {"pay": {"actions": {"allow": ["refund"]}}},
            "agent_groups": [{"name": "payments", "selectors": [{"labels": {"eu": "true"}}]}],
            "bindings": [{"name": "payments-pay", "group": "payments", "blocks": ["pay"]}],
        })).await;
        let decide = |agent_id: String| { let app = app.clone(); async move {
            let (s, d) = status_json(app.post("/v1/check", &json!({"agent_id": agent_id, "action": "refund"})).await).await;
            assert_eq!(s, 200, "{d}");
            d["decision"].as_str().unwrap().to_owned()
        }};
        assert_eq!(decide(a.id.clone()).await, "allow");
        assert_eq!(decide(b.id.clone()).await, "deny");
    }
}

both_engines! {
    async fn ingested_heartbeats_from_the_future_are_refused(app) {
        let a = app.active_agent("a").await;
        let (_, body) = status_json(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": [
            {"agent_id": a.id, "status": "ok", "latency_ms": 1, "observed_at": "9999-01-01T00:00:00Z"},
            {"agent_id": a.id, "status": "ok", "latency_ms": 1, "observed_at": now_ms() + 10 * 60_000},
        ]})).await).await;
        assert_eq!(body["accepted"], 0);
        assert_eq!(body["rejected"][0]["error"], "invalid_observed_at");
        assert_eq!(body["rejected"][1]["error"], "invalid_observed_at");
    }
}
