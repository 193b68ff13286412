//! The approval loop through the JSON API: check → challenge → approve → re-check allows once →
//! next re-check challenges again; deny and expiry; workspace isolation of challenges.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

async fn setup(app: &TestApp) -> TestAgent {
    let agent = app.active_agent("fin").await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let spec = json!({
        "reusable_policy_blocks": {"refunds": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}}}},
        "agent_groups": [{"name": "finance", "members": [agent.id]}],
        "bindings": [{"group": "finance", "blocks": ["refunds"]}]
    });
    let (s, body) = status_json(
        owner
            .post("/v1/policies/sync", &json!({"spec": spec}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    agent
}

fn refund(agent: &TestAgent, amount: f64) -> Value {
    json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": amount}})
}

async fn check(app: &TestApp, body: &Value) -> Value {
    let (s, out) = status_json(app.post("/v1/check", body).await).await;
    assert_eq!(s, 200, "{out}");
    out
}

fn token_of(decision: &Value) -> String {
    decision["challenge"]["url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

both_engines! {
    async fn approve_then_recheck_allows_once(app) {
        let agent = setup(&app).await;
        let first = check(&app, &refund(&agent, 500.0)).await;
        assert_eq!(first["decision"], "challenge");
        let id = first["challenge_id"].as_str().unwrap().to_owned();
        let token = token_of(&first);
        let (_, polled) = status_json(app.get(&format!("/v1/policy-challenges/{id}")).await).await;
        assert_eq!(polled["challenge"]["status"], "pending");

        // What the approver sees (JSON), with the request's shape but not its values.
        let (s, shown) = status_json(app.client.get(app.url(&format!("/v1/approval-links/{token}"))).send().await.unwrap()).await;
        assert_eq!(s, 200);
        assert_eq!((shown["challenge"]["action"].as_str(), shown["challenge"]["agent_id"].as_str()), (Some("refund"), Some(agent.id.as_str())));
        assert_eq!(shown["challenge"]["summary"]["context_fields"], json!(["amount", "currency"]));
        assert!(!shown.to_string().contains("500"), "no values of the request");
        let page = app.client.get(app.url(&format!("/v1/approval-links/{token}"))).header("Accept", "text/html").send().await.unwrap();
        assert!(page.text().await.unwrap().contains("id=\"approve\""));

        let approve = |decision: &'static str| {
            let app = app.clone();
            let token = token.clone();
            async move { app.client.post(app.url(&format!("/v1/approval-links/{token}"))).json(&json!({"decision": decision})).send().await.unwrap() }
        };
        let (s, decided) = status_json(approve("approve").await).await;
        assert_eq!((s.as_u16(), decided["challenge"]["status"].as_str()), (200, Some("approved")), "{decided}");
        assert_eq!(decided["challenge"]["decided_by"], "approval_link");
        assert_error(approve("approve").await, 409, "challenge_already_decided").await;
        assert_error(approve("deny").await, 409, "challenge_already_decided").await;

        let again = check(&app, &refund(&agent, 500.0)).await;
        assert_eq!((again["decision"].as_str(), again["reason_codes"].clone()), (Some("allow"), json!(["approved"])));
        let events = audit_events(&app, &format!("trace_id={}", again["trace_id"].as_str().unwrap())).await;
        assert_eq!(events[0]["details"]["approval"]["challenge_id"], id.as_str(), "the audit event links the challenge");
        // Once: the next identical request is challenged again; a different one never was approved.
        assert_eq!(check(&app, &refund(&agent, 500.0)).await["decision"], "challenge");
        assert_eq!(check(&app, &refund(&agent, 501.0)).await["decision"], "challenge");
        let (_, polled) = status_json(app.get(&format!("/v1/policy-challenges/{id}")).await).await;
        assert_eq!((polled["challenge"]["status"].as_str(), polled["challenge"]["used"].as_bool()), (Some("approved"), Some(true)));
        let approvals = audit_events(&app, "event_type=approval.approved").await;
        assert_eq!(approvals.len(), 1);
        assert_eq!(approvals[0]["actor"], "approval_link");
        assert_eq!(approvals[0]["details"]["challenge_id"], id.as_str());
    }
}

both_engines! {
    async fn deny_and_expiry(app) {
        let agent = setup(&app).await;
        let first = check(&app, &refund(&agent, 700.0)).await;
        let token = token_of(&first);
        let res = app.client.post(app.url(&format!("/v1/approval-links/{token}"))).json(&json!({"decision": "deny"})).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let denied = check(&app, &refund(&agent, 700.0)).await;
        assert_eq!((denied["decision"].as_str(), denied["reason_codes"].clone()), (Some("deny"), json!(["approval_denied"])));
        let res = app.client.post(app.url(&format!("/v1/approval-links/{token}"))).json(&json!({"decision": "maybe"})).send().await.unwrap();
        assert_error(res, 400, "invalid_decision").await;

        // Expiry (the 300 s pass in the database, as the clock would).
        let second = check(&app, &refund(&agent, 800.0)).await;
        let token = token_of(&second);
        expire_challenges(&app).await;
        let res = app.client.post(app.url(&format!("/v1/approval-links/{token}"))).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_error(res, 410, "challenge_expired").await;
        let (_, polled) = status_json(app.get(&format!("/v1/policy-challenges/{}", second["challenge_id"].as_str().unwrap())).await).await;
        assert_eq!(polled["challenge"]["status"], "expired");
        assert_eq!(check(&app, &refund(&agent, 800.0)).await["decision"], "challenge", "an expired challenge asks again");
        let res = app.client.get(app.url("/v1/approval-links/apr_nope")).send().await.unwrap();
        assert_error(res, 404, "unknown_approval_link").await;
    }
}

async fn expire_challenges(app: &TestApp) {
    use sqlx::Connection;
    let sql = "UPDATE policy_challenges SET expires_at = 1 WHERE status = 'pending'";
    if app.db_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(&app.db_url).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
}

both_engines! {
    async fn a_challenge_of_workspace_a_is_invisible_to_b(app) {
        let agent = setup(&app).await;
        let first = check(&app, &refund(&agent, 500.0)).await;
        let id = first["challenge_id"].as_str().unwrap();
        let (_, b) = app.other_workspace().await;
        assert_error(app.get_as(&b, &format!("/v1/policy-challenges/{id}")).await, 404, "unknown_challenge").await;
        assert_error(app.get("/v1/policy-challenges/pch_nope").await, 404, "unknown_challenge").await;
    }
}
