//! `POST /v1/verify`: valid requests, every failure reason, nonce consumption.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

/// A verify body for a request the agent signed.
fn verify_body(agent: &TestAgent, agent_id: &str, ts: i64, nonce: &str, body: &[u8]) -> Value {
    let s = agent.sign("POST", "/orders/refund", &ts.to_string(), nonce, body);
    json!({"agent_id": agent_id, "method": "POST", "path": "/orders/refund", "timestamp_ms": ts,
           "nonce": nonce, "body_sha256": s.body_sha256, "signature_b64": s.signature})
}

async fn verify(app: &TestApp, body: &Value) -> Value {
    let (s, out) = status_json(app.post("/v1/verify", body).await).await;
    assert_eq!(s, 200, "{out}");
    out
}

both_engines! {
    async fn a_valid_request_verifies_once(app) {
        let agent = app.active_agent("v").await;
        let req = verify_body(&agent, &agent.id, now_ms(), &random_nonce(), b"{\"amount\":5}");
        let out = verify(&app, &req).await;
        assert_eq!(out["valid"], true, "{out}");
        assert_eq!(out["agent_id"], agent.id.as_str());
        assert!(out["verified_at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(out["verification_tier"], "attested");
        assert_eq!(out["risk_tier"], "low");
        assert_eq!(out["revoked"], false);
        assert!(out.get("reason").is_none());
        let again = verify(&app, &req).await;
        assert_eq!((again["valid"].as_bool(), again["reason"].as_str()), (Some(false), Some("replay_detected")));
    }
}

both_engines! {
    async fn every_failure_is_an_answer_with_a_reason(app) {
        let agent = app.active_agent("v").await;
        let body = b"{}";
        let reason = |out: Value| (out["valid"].as_bool(), out["reason"].as_str().map(str::to_owned));
        let expect = |code: &str| (Some(false), Some(code.to_owned()));

        let out = verify(&app, &verify_body(&agent, &agent.id, now_ms() / 1000, &random_nonce(), body)).await;
        assert_eq!(reason(out), expect("timestamp_out_of_range"));
        let out = verify(&app, &verify_body(&agent, &agent.id, now_ms() - 400_000, &random_nonce(), body)).await;
        assert_eq!(reason(out), expect("timestamp_out_of_range"));
        let out = verify(&app, &verify_body(&TestAgent::new(), &agent.id, now_ms(), &random_nonce(), body)).await;
        assert_eq!(reason(out), expect("bad_signature"));
        let mut tampered = verify_body(&agent, &agent.id, now_ms(), &random_nonce(), body);
        tampered["path"] = json!("/orders/refund-all");
        assert_eq!(reason(verify(&app, &tampered).await), expect("bad_signature"));
        let mut garbage = verify_body(&agent, &agent.id, now_ms(), &random_nonce(), body);
        garbage["signature_b64"] = json!("%%%");
        assert_eq!(reason(verify(&app, &garbage).await), expect("bad_signature"));
        let out = verify(&app, &verify_body(&agent, "agt_0123456789abcdef0123456789abcdef", now_ms(), &random_nonce(), body)).await;
        assert_eq!(out["risk_tier"], "high");
        assert_eq!(reason(out), expect("unknown_agent"));
        let out = verify(&app, &verify_body(&agent, &agent.id, now_ms(), "has spaces", body)).await;
        assert_eq!(reason(out), expect("invalid_nonce"));

        app.post(&format!("/v1/agents/{}/revoke", agent.id), &json!({})).await;
        let out = verify(&app, &verify_body(&agent, &agent.id, now_ms(), &random_nonce(), body)).await;
        assert_eq!(out["revoked"], true);
        assert_eq!(reason(out), expect("agent_not_active"));
    }
}

both_engines! {
    async fn only_valid_requests_consume_nonces_and_signed_endpoints_share_them(app) {
        let agent = app.active_agent("v").await;
        let nonce = random_nonce();
        let bad = verify_body(&TestAgent::new(), &agent.id, now_ms(), &nonce, b"{}");
        assert_eq!(verify(&app, &bad).await["reason"], "bad_signature");
        let good = verify_body(&agent, &agent.id, now_ms(), &nonce, b"{}");
        assert_eq!(verify(&app, &good).await["valid"], true);
        // The same nonce on a signed endpoint of this agent is a replay.
        let (body, s) = agent.signed_heartbeat(&agent.id, &nonce);
        assert_error(agent.send_signed(&app, "/v1/telemetry/heartbeat", &agent.id, &s, body).await, 401, "replay_detected").await;
    }
}

both_engines! {
    async fn malformed_verify_requests_are_400(app) {
        let agent = app.active_agent("v").await;
        let good = verify_body(&agent, &agent.id, now_ms(), &random_nonce(), b"{}");
        for (field, value, code) in [
            ("method", json!("post"), "invalid_method"),
            ("path", json!("orders"), "invalid_path"),
            ("body_sha256", json!("ABC"), "invalid_body_sha256"),
            ("timestamp_ms", json!("1700000000000"), "invalid_timestamp_ms"),
            ("nonce", json!(""), "missing_nonce"),
        ] {
            let mut req = good.clone();
            req[field] = value;
            assert_error(app.post("/v1/verify", &req).await, 400, code).await;
        }
        let mut req = good.clone();
        req.as_object_mut().unwrap().remove("signature_b64");
        assert_error(app.post("/v1/verify", &req).await, 400, "missing_signature_b64").await;
        assert_error(app.client.post(app.url("/v1/verify")).json(&good).send().await.unwrap(), 401, "missing_api_key").await;
        // None of these used the nonce.
        assert_eq!(verify(&app, &good).await["valid"], true);
    }
}

both_engines! {
    async fn one_signed_request_verifies_once_even_for_agents_sharing_a_key(app) {
        let agent = app.active_agent("shared").await;
        let (_, b_key) = app.other_workspace().await;
        // The same key registered and attested in workspace B.
        let twin = TestAgent { id: String::new(), ..agent.clone() };
        let twin_id = twin.register(&app, Some(&b_key), "shared").await;
        assert_eq!(twin.attest_latest(&app).await.status(), 200);
        let nonce = random_nonce();
        let ts = now_ms();
        let in_a = verify_body(&agent, &agent.id, ts, &nonce, b"{}");
        assert_eq!(verify(&app, &in_a).await["valid"], true);
        let in_b = verify_body(&agent, &twin_id, ts, &nonce, b"{}");
        let (_, out) = status_json(app.post_as(&b_key, "/v1/verify", &in_b).await).await;
        assert_eq!((out["valid"].as_bool(), out["reason"].as_str()), (Some(false), Some("replay_detected")));
    }
}
