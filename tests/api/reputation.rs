//! Signed provider feedback (HMAC with the API key's SHA-256 digest) and the reputation it moves.

use crate::both_engines;
use crate::helpers::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Sends feedback signed the way a client library signs it.
async fn send(
    app: &TestApp,
    body: &Value,
    ts: &str,
    nonce: &str,
    key_for_hmac: &str,
) -> reqwest::Response {
    let bytes = serde_json::to_vec(body).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&Sha256::digest(key_for_hmac.as_bytes())).unwrap();
    mac.update(format!("{ts}\n{nonce}\n{}", hex::encode(Sha256::digest(&bytes))).as_bytes());
    let signature = b64(&mac.finalize().into_bytes());
    app.client
        .post(app.url("/v1/reputation/feedback"))
        .header("Content-Type", "application/json")
        .header("X-Service-Api-Key", &app.key)
        .header("X-Service-Feedback-Timestamp", ts)
        .header("X-Service-Feedback-Nonce", nonce)
        .header("X-Service-Feedback-Signature", signature)
        .body(bytes)
        .send()
        .await
        .unwrap()
}

async fn feedback(app: &TestApp, agent: &str, verdict: &str) -> (u16, Value) {
    let res = send(
        app,
        &json!({"agent_id": agent, "verdict": verdict, "evidence": {"reason": "test"}}),
        &now_ms().to_string(),
        &random_nonce(),
        &app.key,
    )
    .await;
    let (s, body) = status_json(res).await;
    (s.as_u16(), body)
}

both_engines! {
    async fn feedback_moves_the_risk_tier_that_verify_and_policies_see(app) {
        let agent = app.active_agent("rated").await;
        let (s, first) = feedback(&app, &agent.id, "bad").await;
        assert_eq!(s, 200, "{first}");
        assert_eq!((first["accepted"].as_bool(), first["risk_tier"].as_str()), (Some(true), Some("medium")));
        assert!(first["received_at"].as_str().unwrap().ends_with('Z'));
        feedback(&app, &agent.id, "bad").await;
        let (_, third) = feedback(&app, &agent.id, "bad").await;
        assert_eq!(third["risk_tier"], "high");
        let (_, a) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!(a["agent"]["risk_tier"], "high");
        // Verify reports it; a policy can deny on it.
        let s = agent.sign("GET", "/x", &now_ms().to_string(), &random_nonce(), b"");
        let (_, v) = status_json(app.post("/v1/verify", &json!({"agent_id": agent.id, "method": "GET", "path": "/x",
            "timestamp_ms": s.timestamp.parse::<i64>().unwrap(), "nonce": s.nonce, "body_sha256": s.body_sha256, "signature_b64": s.signature})).await).await;
        assert_eq!(v["risk_tier"], "high");
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        owner.post("/v1/policies/sync", &json!({"spec": {"global_guardrails": {"actions": {"allow": ["*"]}, "reputation": {"deny_at": "high"}}}})).await;
        let (_, d) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await).await;
        assert_eq!((d["decision"].as_str(), d["reason_codes"].clone()), (Some("deny"), json!(["risk_tier_too_high"])));
        // Good feedback brings it down again.
        for _ in 0..4 {
            feedback(&app, &agent.id, "good").await;
        }
        let (_, after) = feedback(&app, &agent.id, "good").await;
        assert_eq!(after["risk_tier"], "low");
        assert_eq!(audit_events(&app, "event_type=reputation.feedback").await.len(), 8);
    }
}

both_engines! {
    async fn every_feedback_error_has_its_code(app) {
        let agent = app.active_agent("rated").await;
        let body = json!({"agent_id": agent.id, "verdict": "bad"});
        let res = app.client.post(app.url("/v1/reputation/feedback")).header("X-Service-Api-Key", &app.key).json(&body).send().await.unwrap();
        assert_error(res, 401, "missing_signature_headers").await;
        let res = app.client.post(app.url("/v1/reputation/feedback")).json(&body).send().await.unwrap();
        assert_error(res, 401, "missing_api_key").await;
        assert_error(send(&app, &body, &now_ms().to_string(), &random_nonce(), "svc_test_another_key_entirely_0000000000000000").await, 401, "bad_signature").await;
        assert_error(send(&app, &body, &(now_ms() / 1000).to_string(), &random_nonce(), &app.key).await, 401, "timestamp_out_of_range").await;
        let (ts, nonce) = (now_ms().to_string(), random_nonce());
        assert_eq!(send(&app, &body, &ts, &nonce, &app.key).await.status(), 200);
        assert_error(send(&app, &body, &ts, &nonce, &app.key).await, 401, "replay_detected").await;
        assert_error(send(&app, &json!({"agent_id": agent.id, "verdict": "meh"}), &now_ms().to_string(), &random_nonce(), &app.key).await, 400, "invalid_verdict").await;
        assert_error(send(&app, &json!({"verdict": "bad"}), &now_ms().to_string(), &random_nonce(), &app.key).await, 400, "missing_agent_id").await;
        assert_error(send(&app, &json!({"agent_id": "agt_0123456789abcdef0123456789abcdef", "verdict": "bad"}), &now_ms().to_string(), &random_nonce(), &app.key).await, 404, "unknown_agent").await;
        // A rejected request did not burn its nonce.
        let nonce = random_nonce();
        assert_error(send(&app, &json!({"agent_id": agent.id, "verdict": "meh"}), &now_ms().to_string(), &nonce, &app.key).await, 400, "invalid_verdict").await;
        assert_eq!(send(&app, &body, &now_ms().to_string(), &nonce, &app.key).await.status(), 200);
    }
}

/// Feedback for one agent arriving at two server processes at once: every report counts (the
/// agent's row is locked while its score moves).
async fn concurrent_feedback_on_two_replicas_is_never_lost(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let (mut other, other_base) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let other_app = app.at(other_base);
    for round in 0..4 {
        let agent = app.active_agent(&format!("raced-{round}")).await;
        let reports = [&app, &other_app, &app]
            .into_iter()
            .map(|a| feedback(a, &agent.id, "bad"));
        let answers = futures::future::join_all(reports).await;
        assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
        let (_, a) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!(
            a["agent"]["risk_tier"], "high",
            "three bad reports, all counted"
        );
    }
    other.kill().await.ok();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_feedback_on_two_sqlite_processes_is_never_lost() {
    concurrent_feedback_on_two_replicas_is_never_lost(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_feedback_on_two_postgres_replicas_is_never_lost() {
    concurrent_feedback_on_two_replicas_is_never_lost(Engine::Postgres).await;
}
