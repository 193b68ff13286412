//! Registration, attestation, claim codes, listing and admin status changes.

use crate::both_engines;
use crate::helpers::*;
use base64::Engine as _;
use ed25519_dalek::pkcs8::EncodePublicKey;
use ed25519_dalek::Signer;
use serde_json::{json, Value};

both_engines! {
    async fn register_and_attest_activate_an_agent(app) {
        let agent = TestAgent::new();
        let id = agent.register(&app, Some(&app.key), "billing-bot").await;
        assert!(id.starts_with("agt_"));
        let (_, body) = status_json(app.get(&format!("/v1/agents/{id}")).await).await;
        assert_eq!(body["agent"]["status"], "pending");
        assert_eq!(body["agent"]["verification_tier"], "unverified");
        assert_eq!(body["agent"]["workspace_id"], app.workspace_id.as_str());
        let (s, body) = status_json(agent.attest_latest(&app).await).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["agent_id"], id.as_str());
        assert_eq!(body["status"], "active");
        let (_, body) = status_json(app.get(&format!("/v1/agents/{id}")).await).await;
        assert_eq!(body["agent"]["status"], "active");
        assert_eq!(body["agent"]["verification_tier"], "attested");
        assert_eq!(body["agent"]["metadata"]["team"], "t");
        let types: Vec<Value> = audit_events(&app, &format!("agent_id={id}")).await.iter().map(|e| e["event_type"].clone()).collect();
        assert_eq!(types, vec![json!("agent.attested"), json!("agent.registered")]);
    }
}

both_engines! {
    async fn registering_the_same_key_again_yields_a_new_challenge_for_the_same_agent(app) {
        let agent = TestAgent::new();
        let first = agent.register(&app, Some(&app.key), "a").await;
        let (_, c1, _) = agent.last_challenge.lock().unwrap().clone().unwrap();
        let second = agent.register(&app, Some(&app.key), "renamed").await;
        let (_, c2, _) = agent.last_challenge.lock().unwrap().clone().unwrap();
        assert_eq!(first, second);
        assert_ne!(c1, c2);
        let (_, list) = status_json(app.get("/v1/agents").await).await;
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        assert_eq!(list["items"][0]["name"], "a", "a re-registration changes nothing about the agent");
        assert_eq!(agent.attest_latest(&app).await.status(), 200);
    }
}

both_engines! {
    async fn attest_errors_have_their_codes(app) {
        let agent = TestAgent::new();
        let id = agent.register(&app, Some(&app.key), "a").await;
        let (_, challenge_id, challenge) = agent.last_challenge.lock().unwrap().clone().unwrap();
        let attest = |body: Value| app.client.post(app.url("/v1/agents/attest")).json(&body).send();
        // A signature by another key, and one over the base64 text instead of the bytes.
        let intruder = TestAgent::new();
        let bytes = base64::engine::general_purpose::STANDARD.decode(&challenge).unwrap();
        let wrong_key = b64(&intruder.key.sign(&bytes).to_bytes());
        let res = attest(json!({"agent_id": id, "challenge_id": challenge_id, "signature": wrong_key})).await.unwrap();
        assert_error(res, 401, "invalid_signature").await;
        let over_text = b64(&agent.key.sign(challenge.as_bytes()).to_bytes());
        let res = attest(json!({"agent_id": id, "challenge_id": challenge_id, "signature": over_text})).await.unwrap();
        assert_error(res, 401, "invalid_signature").await;
        let res = attest(json!({"agent_id": id, "challenge_id": challenge_id, "signature": "not-base64!"})).await.unwrap();
        assert_error(res, 401, "invalid_signature").await;
        let res = attest(json!({"agent_id": id, "challenge_id": "ch_0123456789abcdef0123456789abcdef", "signature": wrong_key})).await.unwrap();
        assert_error(res, 404, "unknown_challenge").await;
        let res = attest(json!({"agent_id": "agt_0123456789abcdef0123456789abcdef", "challenge_id": challenge_id, "signature": wrong_key})).await.unwrap();
        assert_error(res, 404, "unknown_challenge").await;
        // Failed attempts do not use the challenge up.
        assert_eq!(agent.attest_latest(&app).await.status(), 200);
        assert_error(agent.attest_latest(&app).await, 409, "challenge_used").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_challenge_answers_410() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| c.challenge_ttl_ms = 50).await;
    let agent = TestAgent::new();
    agent.register(&app, None, "slow").await;
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    assert_error(agent.attest_latest(&app).await, 410, "challenge_expired").await;
    app.stop().await;
}

both_engines! {
    async fn spki_der_public_keys_are_accepted(app) {
        let agent = TestAgent::new();
        let der = agent.key.verifying_key().to_public_key_der().unwrap();
        let res = app.post("/v1/agents/register", &json!({"name": "der", "public_key": b64(der.as_bytes())})).await;
        let (s, body) = status_json(res).await;
        assert_eq!(s, 200, "{body}");
        let (_, got) = status_json(app.get(&format!("/v1/agents/{}", body["agent_id"].as_str().unwrap())).await).await;
        assert_eq!(got["agent"]["public_key"], agent.public_key_b64(), "stored as the raw key");
    }
}

both_engines! {
    async fn unclaimed_agents_get_claim_codes_and_stay_invisible_to_workspaces(app) {
        let mut agent = TestAgent::new();
        agent.id = agent.register(&app, None, "stray").await;
        assert_eq!(agent.attest_latest(&app).await.status(), 200);
        assert_error(app.get(&format!("/v1/agents/{}", agent.id)).await, 404, "unknown_agent").await;
        let path = format!("/v1/agents/{}/claim-code", agent.id);
        let (s, body) = status_json(agent.signed_post(&app, &path, &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        let code = body["claim_code"].as_str().unwrap();
        assert!(code.starts_with("clm_"));
        assert!(body["claim_url"].as_str().unwrap().ends_with(&format!("/v1/agent-approval/{code}")));
        assert!(body["expires_at"].as_str().unwrap().ends_with('Z'));
        // Another agent cannot ask for this agent's code.
        let other = app.active_agent("other").await;
        let res = other.signed_post(&app, &path, &json!({})).await;
        assert_error(res, 401, "agent_header_mismatch").await;
        // A claimed agent has nothing to claim.
        let res = other.signed_post(&app, &format!("/v1/agents/{}/claim-code", other.id), &json!({})).await;
        assert_error(res, 409, "agent_already_claimed").await;
    }
}

both_engines! {
    async fn agents_are_listed_filtered_and_paged(app) {
        let a = app.active_agent("alpha").await;
        let _pending = TestAgent::new().register(&app, Some(&app.key), "beta").await;
        let _c = app.active_agent("gamma").await;
        let (_, all) = status_json(app.get("/v1/agents").await).await;
        let names: Vec<&str> = all["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["gamma", "beta", "alpha"]);
        let (_, pending) = status_json(app.get("/v1/agents?status=pending").await).await;
        assert_eq!(pending["items"].as_array().unwrap().len(), 1);
        let (_, named) = status_json(app.get("/v1/agents?name=alpha").await).await;
        assert_eq!(named["items"][0]["agent_id"], a.id.as_str());
        let (_, page1) = status_json(app.get("/v1/agents?limit=2").await).await;
        assert_eq!(page1["items"].as_array().unwrap().len(), 2);
        let cursor = page1["next_cursor"].as_str().unwrap();
        let (_, page2) = status_json(app.get(&format!("/v1/agents?limit=2&cursor={cursor}")).await).await;
        assert_eq!(page2["items"][0]["name"], "alpha");
        assert!(page2["next_cursor"].is_null());
        assert_error(app.get("/v1/agents?status=sleeping").await, 400, "invalid_status").await;
        assert_error(app.get("/v1/agents?limit=0").await, 400, "invalid_limit").await;
        assert_error(app.get("/v1/agents?cursor=zzz").await, 400, "invalid_cursor").await;
    }
}

both_engines! {
    async fn suspend_resume_and_revoke_move_the_agent_and_are_audited(app) {
        let agent = app.active_agent("ops").await;
        let hb = json!({"agent_id": agent.id, "status": "ok", "latency_ms": 1});
        let path = |verb: &str| format!("/v1/agents/{}/{verb}", agent.id);
        let (s, body) = status_json(app.post(&path("suspend"), &json!({"reason": "incident 42"})).await).await;
        assert_eq!((s.as_u16(), body["agent"]["status"].as_str()), (200, Some("suspended")));
        assert_error(agent.signed_post(&app, "/v1/telemetry/heartbeat", &hb).await, 403, "agent_not_active").await;
        let (_, body) = status_json(app.post(&path("resume"), &json!({})).await).await;
        assert_eq!(body["agent"]["status"], "active");
        assert_eq!(agent.signed_post(&app, "/v1/telemetry/heartbeat", &hb).await.status(), 200);
        // No body at all is fine for these.
        let res = app.client.post(app.url(&path("revoke"))).header("X-Service-Api-Key", &app.key).send().await.unwrap();
        let (_, body) = status_json(res).await;
        assert_eq!(body["agent"]["status"], "revoked");
        assert_error(app.post(&path("resume"), &json!({})).await, 409, "invalid_status_transition").await;
        assert_error(agent.signed_post(&app, "/v1/telemetry/heartbeat", &hb).await, 403, "agent_not_active").await;
        // Revoked is final: re-registering the key does not bring the agent back.
        let res = app.post("/v1/agents/register", &json!({"name": "ops", "public_key": agent.public_key_b64()})).await;
        assert_error(res, 403, "agent_not_active").await;
        let events = audit_events(&app, &format!("agent_id={}", agent.id)).await;
        let types: Vec<&str> = events.iter().map(|e| e["event_type"].as_str().unwrap()).collect();
        assert_eq!(types, ["agent.revoked", "agent.resumed", "agent.suspended", "agent.attested", "agent.registered"]);
        assert_eq!(events[2]["details"]["reason"], "incident 42");
        assert!(events[0]["actor"].as_str().unwrap().starts_with("api_key:key_"));
    }
}

both_engines! {
    async fn only_the_key_holder_decides_an_unclaimed_agents_name_and_metadata(app) {
        let victim = TestAgent::new();
        // Someone who knows the public key (it is public) registers it first.
        let res = app.client.post(app.url("/v1/agents/register"))
            .json(&json!({"name": "evil", "public_key": victim.public_key_b64(), "metadata": {"role": "admin"}}))
            .send().await.unwrap();
        let (_, squatted) = status_json(res).await;
        let res = app.client.post(app.url("/v1/agents/register"))
            .json(&json!({"name": "honest", "public_key": victim.public_key_b64(), "metadata": {"role": "reader"}}))
            .send().await.unwrap();
        let (_, mine) = status_json(res).await;
        assert_eq!(mine["agent_id"], squatted["agent_id"], "the same unclaimed agent");
        let id = mine["agent_id"].as_str().unwrap().to_owned();
        *victim.last_challenge.lock().unwrap() = Some((id.clone(), mine["challenge_id"].as_str().unwrap().into(), mine["challenge"].as_str().unwrap().into()));
        assert_eq!(victim.attest_latest(&app).await.status(), 200);
        // Claim code requests carry the agent; its stored description is the attested one.
        let agent = TestAgent { id: id.clone(), ..victim.clone() };
        assert_eq!(agent.signed_post(&app, &format!("/v1/agents/{id}/claim-code"), &json!({})).await.status(), 200);
        let events = audit_events(&app, "").await;
        assert!(events.iter().all(|e| e["agent_id"] != id.as_str()), "unclaimed agents' events belong to no workspace");
        // Register the same key into the workspace and attest: the workspace copy is described
        // by the workspace's registration.
        let in_ws = victim.register(&app, Some(&app.key), "ws-copy").await;
        assert_eq!(victim.attest_latest(&app).await.status(), 200);
        let (_, got) = status_json(app.get(&format!("/v1/agents/{in_ws}")).await).await;
        assert_eq!(got["agent"]["name"], "ws-copy");
        assert_eq!(got["agent"]["metadata"], json!({"team": "t"}));
    }
}

both_engines! {
    async fn re_registration_updates_name_and_metadata_only_when_attested(app) {
        let agent = app.active_agent("v1").await;
        let res = app.post("/v1/agents/register", &json!({"name": "v2", "public_key": agent.public_key_b64(), "metadata": {"v": 2}})).await;
        let (_, reg) = status_json(res).await;
        let (_, before) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!(before["agent"]["name"], "v1", "nothing changes before the key holder attests");
        *agent.last_challenge.lock().unwrap() = Some((agent.id.clone(), reg["challenge_id"].as_str().unwrap().into(), reg["challenge"].as_str().unwrap().into()));
        assert_eq!(agent.attest_latest(&app).await.status(), 200);
        let (_, after) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!((after["agent"]["name"].as_str(), after["agent"]["metadata"]["v"].as_i64()), (Some("v2"), Some(2)));
    }
}

both_engines! {
    /// A status change's `reason` over the documented 500 characters is refused whatever the
    /// agent's state, a change that would be a no-op included.
    async fn a_long_status_reason_is_refused_even_for_a_no_op(app) {
        let agent = app.active_agent("reasoned").await;
        let long = json!({"reason": "0".repeat(501)});
        for action in ["suspend", "resume", "revoke", "approve"] {
            // `resume` and `approve` of an active agent would change nothing.
            assert_error(app.post(&format!("/v1/agents/{}/{action}", agent.id), &long).await, 400, "invalid_reason").await;
        }
        // Whatever the agent: a malformed id with a long reason is refused for the reason.
        assert_error(app.post("/v1/agents/agt_nope/suspend", &long).await, 400, "invalid_reason").await;
        assert_error(app.post("/v1/agents/agt_nope/suspend", &json!({})).await, 404, "unknown_agent").await;
        let (s, _) = status_json(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({"reason": "0".repeat(500)})).await).await;
        assert_eq!(s, 200);
    }
}
