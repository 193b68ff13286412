//! What operators do besides the endpoints of the first wave: list and decide policy challenges
//! by id, roll a policy back to an earlier version, and follow the audit trail as a stream.

use std::time::Duration;

use reqwest::Response;
use serde_json::{json, Value};

use crate::approvals::setup;
use crate::both_engines;
use crate::helpers::*;

fn refund(agent: &TestAgent, amount: f64) -> Value {
    json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": amount}})
}

async fn challenge(app: &TestApp, agent: &TestAgent, amount: f64) -> String {
    let (s, out) = status_json(app.post("/v1/check", &refund(agent, amount)).await).await;
    assert_eq!(
        (s.as_u16(), out["decision"].as_str()),
        (200, Some("challenge")),
        "{out}"
    );
    out["challenge_id"].as_str().unwrap().to_owned()
}

both_engines! {
    async fn challenges_are_listed_and_decided_by_approvers(app) {
        let agent = setup(&app).await;
        let first = challenge(&app, &agent, 200.0).await;
        let second = challenge(&app, &agent, 300.0).await;

        let (s, listed) = status_json(app.get("/v1/policy-challenges?status=pending").await).await;
        assert_eq!(s, 200, "{listed}");
        let ids: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| c["challenge_id"].as_str().unwrap()).collect();
        assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");
        // Paged by cursor.
        let (_, page) = status_json(app.get("/v1/policy-challenges?limit=1").await).await;
        assert_eq!(page["items"][0]["challenge_id"], second.as_str());
        let cursor = page["next_cursor"].as_str().unwrap().to_owned();
        let (_, page) = status_json(app.get(&format!("/v1/policy-challenges?limit=1&cursor={cursor}")).await).await;
        assert_eq!(page["items"][0]["challenge_id"], first.as_str());
        assert!(page["next_cursor"].is_null());
        assert_error(app.get("/v1/policy-challenges?status=maybe").await, 400, "invalid_status").await;

        // An approver decides by id; a member may not; an API key is no person.
        app.grant(&app.workspace_id, "approver@example.com", "approver").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let approver = app.login("approver@example.com").await;
        let member = app.login("member@example.com").await;
        let decide = |id: &str, decision: &str| (format!("/v1/policy-challenges/{id}/decide"), json!({"decision": decision}));
        let (path, body) = decide(&first, "approve");
        assert_error(member.post(&path, &body).await, 403, "insufficient_role").await;
        assert_error(app.post(&path, &body).await, 401, "session_required").await;
        let (s, decided) = status_json(approver.post(&path, &body).await).await;
        assert_eq!(s, 200, "{decided}");
        assert_eq!(decided["challenge"]["status"], "approved");
        let (_, me) = status_json(approver.get("/auth/me").await).await;
        let user = format!("user:{}", me["user"]["user_id"].as_str().unwrap());
        assert_eq!(decided["challenge"]["decided_by"], user.as_str());
        assert_error(approver.post(&path, &body).await, 409, "challenge_already_decided").await;
        let (path2, deny) = decide(&second, "deny");
        assert_error(approver.post(&path2, &json!({"decision": "later"})).await, 400, "invalid_decision").await;
        assert_eq!(approver.post(&path2, &deny).await.status(), 200);

        // The approved request is allowed once on the re-check.
        let (_, again) = status_json(app.post("/v1/check", &refund(&agent, 200.0)).await).await;
        assert_eq!(again["decision"], "allow", "{again}");
        let (_, approved) = status_json(app.get("/v1/policy-challenges?status=approved").await).await;
        assert_eq!(approved["items"].as_array().unwrap().len(), 1);
        assert_eq!(approved["items"][0]["used"], true);
        let (_, denied) = status_json(app.get(&format!("/v1/policy-challenges?status=denied&agent_id={}", agent.id)).await).await;
        assert_eq!(denied["items"][0]["challenge_id"], second.as_str());

        // Audited with the person as actor.
        let events = audit_events(&app, "event_type=approval.approved").await;
        assert_eq!(events[0]["actor"], user.as_str(), "{:?}", events[0]);

        // Another workspace's challenge does not exist here.
        let (other_ws, other_key) = app.other_workspace().await;
        app.grant(&other_ws, "approver@example.com", "approver").await;
        let res = app.client.post(app.url(&format!("/v1/policy-challenges/{first}/decide")))
            .bearer_auth(status_json(approver.post("/v1/auth/tokens", &json!({"name": "t"})).await).await.1["token"].as_str().unwrap())
            .header("X-Service-Workspace", &other_ws)
            .json(&json!({"decision": "deny"})).send().await.unwrap();
        assert_error(res, 404, "unknown_challenge").await;
        let (_, theirs) = status_json(app.get_as(&other_key, "/v1/policy-challenges").await).await;
        assert_eq!(theirs["items"], json!([]));
        app.stop().await;
    }
}

both_engines! {
    async fn a_policy_rolls_back_to_an_earlier_version(app) {
        let agent = app.active_agent("roller").await;
        let spec = |action: &str| json!({
            "reusable_policy_blocks": {"b": {"actions": {"allow": [action]}}},
            "agent_groups": [{"name": "g", "members": [agent.id]}],
            "bindings": [{"group": "g", "blocks": ["b"]}]
        });
        app.apply_policy(spec("read")).await;
        let owner = app.login("owner@example.com").await;
        let (s, v2) = status_json(owner.post("/v1/policies/sync", &json!({"spec": spec("write")})).await).await;
        assert_eq!(s, 200, "{v2}");
        let (_, v1) = status_json(app.get("/v1/policies/pol_default/versions/1").await).await;

        // A dry run shows the change and changes nothing.
        let (s, dry) = status_json(owner.post("/v1/policies/pol_default/rollback", &json!({"version": 1, "dry_run": true})).await).await;
        assert_eq!(s, 200, "{dry}");
        assert_eq!((dry["diff"]["changed"].as_bool(), dry["desired_policy_hash"].as_str()), (Some(true), v1["policy_hash"].as_str()));
        assert!(dry["applied"].is_null());
        // Conflict and unknown versions.
        let res = owner.post("/v1/policies/pol_default/rollback", &json!({"version": 1, "expected_policy_hash": "sha256:00"})).await;
        let body = assert_error(res, 409, "sync_conflict").await;
        assert_eq!(body["current_policy_hash"], v2["policy_hash"]);
        assert_error(owner.post("/v1/policies/pol_default/rollback", &json!({"version": 9})).await, 404, "unknown_version").await;
        assert_error(owner.post("/v1/policies/pol_default/rollback", &json!({"version": 0})).await, 400, "invalid_version").await;

        // Applied as version 3 with version 1's hash, once per idempotency key.
        let send = || owner.app.client.post(owner.app.url("/v1/policies/pol_default/rollback"))
            .header("Cookie", &owner.cookie).header("X-CSRF-Token", &owner.csrf)
            .header("Idempotency-Key", "rollback-1")
            .json(&json!({"version": 1, "expected_policy_hash": v2["policy_hash"]})).send();
        let (s, rolled) = status_json(send().await.unwrap()).await;
        assert_eq!(s, 200, "{rolled}");
        assert_eq!((rolled["applied"].as_bool(), rolled["version"].as_i64()), (Some(true), Some(3)));
        assert_eq!(rolled["policy_hash"], v1["policy_hash"]);
        let (_, replay) = status_json(send().await.unwrap()).await;
        assert_eq!(replay, rolled);
        let (_, versions) = status_json(app.get("/v1/policies/pol_default/versions").await).await;
        assert_eq!(versions["items"].as_array().unwrap().len(), 3);
        let (_, decision) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await).await;
        assert_eq!(decision["decision"], "allow", "{decision}");

        let events = audit_events(&app, "event_type=policy.rolled_back").await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["details"]["rolled_back_to"], 1);
        assert_eq!(events[0]["details"]["version"], 3);
        assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
        app.stop().await;
    }
}

/// Reads server-sent events from `res` until one whose data contains `needle`; answers that
/// event's `id` and data.
async fn next_event_with(res: &mut Response, buf: &mut String, needle: &str) -> (String, Value) {
    events_until(res, buf, needle).await.pop().unwrap()
}

/// Every event read from `res` up to and including the first whose data contains `needle`.
async fn events_until(res: &mut Response, buf: &mut String, needle: &str) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut id = String::new();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(v) = line
                    .strip_prefix("id: ")
                    .or_else(|| line.strip_prefix("id:"))
                {
                    id = v.to_owned();
                } else if let Some(v) = line
                    .strip_prefix("data: ")
                    .or_else(|| line.strip_prefix("data:"))
                {
                    data.push_str(v);
                }
            }
            if data.is_empty() {
                continue;
            }
            let found = data.contains(needle);
            seen.push((id, serde_json::from_str(&data).unwrap()));
            if found {
                return seen;
            }
        }
        // A hang guard, not a timing assertion: events come within a poll or two.
        let chunk = tokio::time::timeout(Duration::from_secs(30), res.chunk())
            .await
            .expect("an event within 30 s")
            .unwrap()
            .expect("the stream is open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

both_engines! {
    async fn the_audit_trail_streams_and_resumes(app) {
        let agent = app.active_agent("streamed").await;
        let stream = |query: String| {
            let app = app.clone();
            async move {
                app.client.get(app.url(&format!("/v1/workspace/audit/stream{query}")))
                    .header("X-Service-Api-Key", &app.key).send().await.unwrap()
            }
        };
        let mut res = stream(format!("?agent_id={}", agent.id)).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        let mut buf = String::new();
        assert_eq!(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({"reason": "first"})).await.status(), 200);
        let (cursor, event) = next_event_with(&mut res, &mut buf, "agent.suspended").await;
        assert_eq!(event["agent_id"], agent.id.as_str());
        assert!(!cursor.is_empty());
        drop(res);

        // Resumed after the first event: the next one arrives, the first does not come again.
        assert_eq!(app.post(&format!("/v1/agents/{}/resume", agent.id), &json!({"reason": "second"})).await.status(), 200);
        let mut res = stream(format!("?cursor={cursor}")).await;
        let mut buf = String::new();
        let events = events_until(&mut res, &mut buf, "agent.resumed").await;
        assert!(events.iter().all(|(id, _)| *id != cursor), "{events:?}");
        assert_eq!(events.iter().filter(|(_, e)| e["event_type"] == "agent.resumed").count(), 1);
        // Last-Event-ID works as the cursor does.
        let mut open = app.client.get(app.url("/v1/workspace/audit/stream"))
            .header("X-Service-Api-Key", &app.key).header("Last-Event-ID", &cursor).send().await.unwrap();
        let mut buf = String::new();
        let (_, event) = next_event_with(&mut open, &mut buf, "agent.resumed").await;
        assert_eq!(event["details"]["reason"], "second", "{event}");

        // Refusals come before the stream starts.
        assert_error(stream("?cursor=nonsense".into()).await, 400, "invalid_cursor").await;
        let anonymous = app.client.get(app.url("/v1/workspace/audit/stream")).send().await.unwrap();
        assert_eq!(anonymous.status(), 401);

        // The stream ends when the server shuts down.
        app.stop().await;
        let end = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(_)) = open.chunk().await {}
        }).await;
        assert!(end.is_ok(), "the stream ended with the server");
    }
}
