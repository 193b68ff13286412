//! The approval loop through the JSON API: check → challenge → approve → re-check allows once →
//! next re-check challenges again; deny and expiry; workspace isolation of challenges.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

/// An active agent in a `finance` group whose refunds over 100 USD are challenged.
pub async fn setup(app: &TestApp) -> TestAgent {
    let agent = app.active_agent("fin").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"refunds": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}}}},
        "agent_groups": [{"name": "finance", "members": [agent.id]}],
        "bindings": [{"group": "finance", "blocks": ["refunds"]}]
    }))
    .await;
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

/// Lets the approval links of backends' challenges decide on their own (the public-link flow,
/// off by default).
async fn public_links(app: &TestApp) {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let (s, set) = status_json(
        owner
            .post(
                "/v1/workspace/settings",
                &json!({"require_member_approval": false}),
            )
            .await,
    )
    .await;
    assert_eq!(
        (s.as_u16(), set["require_member_approval"].as_bool()),
        (200, Some(false)),
        "{set}"
    );
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
        public_links(&app).await;
        let mut asked = refund(&agent, 500.0);
        asked["context"]["memo"] = json!("offsite-dinner-memo");
        let first = check(&app, &asked).await;
        assert_eq!(first["decision"], "challenge");
        let id = first["challenge_id"].as_str().unwrap().to_owned();
        let token = token_of(&first);
        let (_, polled) = status_json(app.get(&format!("/v1/policy-challenges/{id}")).await).await;
        assert_eq!(polled["challenge"]["status"], "pending");

        // What the approver sees (JSON): the agent's name and the values the deciding rule
        // read (amount and currency), not the values it did not read.
        let (s, shown) = status_json(app.client.get(app.url(&format!("/v1/approval-links/{token}"))).send().await.unwrap()).await;
        assert_eq!(s, 200);
        assert_eq!((shown["challenge"]["action"].as_str(), shown["challenge"]["agent_id"].as_str()), (Some("refund"), Some(agent.id.as_str())));
        let summary = &shown["challenge"]["summary"];
        assert_eq!(summary["agent_name"], "fin");
        assert_eq!(summary["values"], json!({"amount": 500.0, "currency": "USD"}), "{summary}");
        assert_eq!(summary["context_fields"], json!(["amount", "currency", "memo"]));
        assert!(!shown.to_string().contains("offsite-dinner-memo"), "a value no rule read is not kept");
        let page = app.client.get(app.url(&format!("/v1/approval-links/{token}"))).header("Accept", "text/html").send().await.unwrap();
        let html = page.text().await.unwrap();
        assert!(html.contains("id=\"approve\""));
        assert!(html.contains(&format!("fin ({})", agent.id)), "the agent's name: {html}");
        assert!(html.contains("data-field=\"amount\">500.0<") && html.contains("data-field=\"currency\">USD<"), "{html}");
        assert!(!html.contains("context_fields") && !html.contains("offsite-dinner-memo"), "{html}");

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

        let again = check(&app, &asked).await;
        assert_eq!((again["decision"].as_str(), again["reason_codes"].clone()), (Some("allow"), json!(["approved"])));
        let events = audit_events(&app, &format!("trace_id={}", again["trace_id"].as_str().unwrap())).await;
        assert_eq!(events[0]["details"]["approval"]["challenge_id"], id.as_str(), "the audit event links the challenge");
        // Once: the next identical request is challenged again; a different one never was approved.
        assert_eq!(check(&app, &asked).await["decision"], "challenge");
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
        public_links(&app).await;
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

/// An unclaimed agent that attested and asked for a claim code; answers it and the code.
async fn unclaimed_with_code(app: &TestApp, name: &str) -> (TestAgent, String) {
    let mut agent = TestAgent::new();
    agent.id = agent.register(app, None, name).await;
    assert_eq!(agent.attest_latest(app).await.status(), 200);
    let (_, body) = status_json(
        agent
            .signed_post(
                app,
                &format!("/v1/agents/{}/claim-code", agent.id),
                &json!({}),
            )
            .await,
    )
    .await;
    let code = body["claim_code"].as_str().unwrap().to_owned();
    (agent, code)
}

both_engines! {
    async fn an_admin_claims_an_unclaimed_agent_once(app) {
        let (agent, code) = unclaimed_with_code(&app, "stray").await;
        let url = format!("/v1/agent-approval/{code}");
        let (s, info) = status_json(app.client.get(app.url(&url)).send().await.unwrap()).await;
        assert_eq!(s, 200);
        assert_eq!((info["claim"]["status"].as_str(), info["claim"]["agent"]["name"].as_str()), (Some("pending"), Some("stray")));
        assert_error(app.client.post(app.url(&url)).json(&json!({"decision": "claim"})).send().await.unwrap(), 401, "unauthenticated").await;
        app.grant(&app.workspace_id, "m@example.com", "member").await;
        let member = app.login("m@example.com").await;
        assert_error(member.post(&url, &json!({"decision": "claim"})).await, 403, "insufficient_role").await;

        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let page = app.client.get(app.url(&url)).header("Accept", "text/html").header("Cookie", &owner.cookie).send().await.unwrap();
        let html = page.text().await.unwrap();
        assert!(html.contains("id=\"claim\"") && html.contains(&app.workspace_id), "the admin sees the claim button");
        let (s, claimed) = status_json(owner.post(&url, &json!({"decision": "claim"})).await).await;
        assert_eq!(s, 200, "{claimed}");
        assert_eq!(claimed["agent"]["workspace_id"], app.workspace_id.as_str());
        let (s, got) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!((s.as_u16(), got["agent"]["status"].as_str()), (200, Some("active")));
        assert_error(owner.post(&url, &json!({"decision": "claim"})).await, 409, "claim_code_used").await;
        let events = audit_events(&app, "event_type=agent.claimed").await;
        assert_eq!(events[0]["agent_id"], agent.id.as_str());

        // Rejecting uses the code up and leaves the agent unclaimed.
        let (other, other_code) = unclaimed_with_code(&app, "other").await;
        let (s, _) = status_json(owner.post(&format!("/v1/agent-approval/{other_code}"), &json!({"decision": "reject"})).await).await;
        assert_eq!(s, 200);
        assert_error(app.get(&format!("/v1/agents/{}", other.id)).await, 404, "unknown_agent").await;
        assert_error(owner.post("/v1/agent-approval/clm_nope", &json!({"decision": "claim"})).await, 404, "unknown_claim_code").await;
    }
}

both_engines! {
    async fn an_admin_approves_a_pending_agent(app) {
        let agent = TestAgent::new();
        let id = agent.register(&app, Some(&app.key), "pending").await;
        let (s, body) = status_json(app.post(&format!("/v1/agents/{id}/approve"), &json!({"reason": "known host"})).await).await;
        assert_eq!((s.as_u16(), body["agent"]["status"].as_str()), (200, Some("active")));
        assert_eq!(body["agent"]["verification_tier"], "unverified", "approved, not attested");
        let revoked = app.active_agent("r").await;
        app.post(&format!("/v1/agents/{}/revoke", revoked.id), &json!({})).await;
        assert_error(app.post(&format!("/v1/agents/{}/approve", revoked.id), &json!({})).await, 409, "invalid_status_transition").await;
        assert_eq!(audit_events(&app, "event_type=agent.approved").await.len(), 1);
    }
}

both_engines! {
    async fn approvers_are_mailed_and_members_can_be_required(app) {
        let agent = app.active_agent("fin").await;
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let spec = json!({
            "reusable_policy_blocks": {"refunds": {
                "amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}},
                "approval": {"approvers": ["CFO@example.com"], "approver_role": "admin", "ttl_secs": 600}
            }},
            "agent_groups": [{"name": "finance", "members": [agent.id]}],
            "bindings": [{"group": "finance", "blocks": ["refunds"]}]
        });
        let (s, body) = status_json(owner.post("/v1/policies/sync", &json!({"spec": spec})).await).await;
        assert_eq!(s, 200, "{body}");
        let before = app.smtp.messages().len();
        let first = check(&app, &refund(&agent, 500.0)).await;
        assert_eq!((first["decision"].as_str(), first["challenge"]["expires_in"].as_i64()), (Some("challenge"), Some(600)));
        let messages = app.smtp.wait_for(before + 1).await;
        let mail = messages.last().unwrap();
        assert_eq!(mail.rcpt, vec!["cfo@example.com".to_string(), "owner@example.com".to_string()]);
        assert!(mail.data.contains("Approval needed: refund"));
        assert!(crate::smtp::login_link(mail).contains("/v1/approval-links/apr_"), "the link is in the message");
        // The message names the agent and shows the amount and currency the rule read.
        let body = mail.data.replace("=\r\n", "");
        assert!(body.contains(&format!("Agent fin ({})", agent.id)), "{body}");
        assert!(body.contains("amount: 500.0") && body.contains("currency: USD"), "{body}");
        assert!(!body.contains("context_fields"), "{body}");

        // New workspaces want approvers logged in.
        let (s, settings) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!((s.as_u16(), settings["require_member_approval"].as_bool()), (200, Some(true)));
        let token = token_of(&first);
        let url = app.url(&format!("/v1/approval-links/{token}"));
        let res = app.client.post(&url).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_error(res, 401, "login_required").await;
        let stranger = app.login("stranger@example.com").await;
        let res = app.client.post(&url).header("Cookie", &stranger.cookie).header("X-CSRF-Token", &stranger.csrf).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_error(res, 403, "not_a_member").await;
        // A session sent cross-site does not count, token or not (the link alone is not enough
        // here).
        let res = app.client.post(&url).header("Cookie", &owner.cookie).header("X-CSRF-Token", &owner.csrf).header("Origin", "https://evil.example").json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_error(res, 401, "login_required").await;
        // JSON with the session cookie and no Origin counts: no CSRF token needed.
        let res = app.client.post(&url).header("Cookie", &owner.cookie).json(&json!({"decision": "approve"})).send().await.unwrap();
        let (s, decided) = status_json(res).await;
        assert_eq!(s, 200, "{decided}");
        assert!(decided["challenge"]["decided_by"].as_str().unwrap().starts_with("user:usr_"));
        let (_, read) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!(read["require_member_approval"], true);
    }
}

both_engines! {
    async fn the_approver_sees_what_the_deciding_rule_read(app) {
        let agent = app.active_agent("deployer").await;
        app.apply_policy(json!({
            "reusable_policy_blocks": {
                "deploys": {
                    "actions": {"allow": ["deploy"]},
                    "cedar": [{"name": "prod", "when": "context.action == \"deploy\" && context.fields.contains(\"environment=production\")",
                        "outcome": "challenge", "reason_code": "production_deploy", "reason": "production deploys need a human"}]
                },
                "mail": {"email": {"allowed_domains": ["example.com"], "on_violation": "challenge"}}
            },
            "agent_groups": [{"name": "ops", "members": [agent.id]}],
            "bindings": [{"group": "ops", "blocks": ["deploys", "mail"]}]
        }))
        .await;
        let shown = |decision: Value| {
            let app = app.clone();
            async move {
                let (_, shown) = status_json(app.client.get(app.url(&format!("/v1/approval-links/{}", token_of(&decision)))).send().await.unwrap()).await;
                shown["challenge"]["summary"].clone()
            }
        };
        // A Cedar rule that tests `environment`: its value, not the service's.
        let deploy = check(&app, &json!({"agent_id": agent.id, "action": "deploy",
            "context": {"environment": "production", "service": "billing-secret-name"}})).await;
        assert_eq!(deploy["decision"], "challenge", "{deploy}");
        let summary = shown(deploy).await;
        assert_eq!(summary["values"], json!({"environment": "production"}), "{summary}");
        assert_eq!(summary["agent_name"], "deployer");
        assert!(!summary.to_string().contains("billing-secret-name"));

        // The email block: the recipients.
        let mail = check(&app, &json!({"agent_id": agent.id, "action": "send_email",
            "email": {"to": ["ann@example.com", "x@elsewhere.test"], "subject": "s"}})).await;
        assert_eq!(mail["decision"], "challenge", "{mail}");
        let token = token_of(&mail);
        let summary = shown(mail).await;
        assert_eq!(summary["recipients"], json!(["ann@example.com", "x@elsewhere.test"]), "{summary}");
        let page = app.client.get(app.url(&format!("/v1/approval-links/{token}"))).header("Accept", "text/html").send().await.unwrap();
        let html = page.text().await.unwrap();
        assert!(html.contains("data-field=\"recipients\">ann@example.com, x@elsewhere.test<"), "{html}");
    }
}

both_engines! {
    /// One rule decides who may decide, through the link and the API alike: an approver, admin
    /// or owner of the workspace, or a member the deciding rules name; never a read-only
    /// member, never the link alone by default.
    async fn one_rule_for_who_decides_by_link_and_by_api(app) {
        let agent = app.active_agent("fin").await;
        app.apply_policy(json!({
            "reusable_policy_blocks": {"refunds": {
                "amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}},
                "approval": {"approvers": ["named@example.com"]}
            }},
            "agent_groups": [{"name": "finance", "members": [agent.id]}],
            "bindings": [{"group": "finance", "blocks": ["refunds"]}]
        }))
        .await;
        app.grant(&app.workspace_id, "reader@example.com", "member").await;
        app.grant(&app.workspace_id, "approver@example.com", "approver").await;
        app.grant(&app.workspace_id, "named@example.com", "member").await;
        let reader = app.login("reader@example.com").await;
        let approver = app.login("approver@example.com").await;
        let named = app.login("named@example.com").await;

        // By default the backend's link alone decides nothing.
        let first = check(&app, &refund(&agent, 500.0)).await;
        assert_eq!(first["challenge"]["type"], "approval_link");
        let link = app.url(&format!("/v1/approval-links/{}", token_of(&first)));
        assert_error(decide_by_link(&app, &link, None, "approve").await, 401, "login_required").await;
        let page = approval_page(&app, &link, None).await;
        assert!(page.contains("id=\"login-needed\"") && !page.contains("id=\"approve\""), "{page}");
        // A read-only member: refused by the link as by the API.
        assert_error(decide_by_link(&app, &link, Some(&reader), "approve").await, 403, "insufficient_role").await;
        let id = first["challenge_id"].as_str().unwrap();
        assert_error(reader.post(&format!("/v1/policy-challenges/{id}/decide"), &json!({"decision": "approve"})).await, 403, "insufficient_role").await;
        // An API key never decides.
        assert_error(app.post(&format!("/v1/policy-challenges/{id}/decide"), &json!({"decision": "approve"})).await, 401, "session_required").await;
        // The approver decides through the link.
        let (s, decided) = status_json(decide_by_link(&app, &link, Some(&approver), "deny").await).await;
        assert_eq!((s.as_u16(), decided["challenge"]["status"].as_str()), (200, Some("denied")), "{decided}");

        // The member the rules name decides through the API, with a reason kept in the event.
        let second = check(&app, &refund(&agent, 600.0)).await;
        let id = second["challenge_id"].as_str().unwrap();
        let (s, decided) = status_json(named.post(&format!("/v1/policy-challenges/{id}/decide"),
            &json!({"decision": "approve", "reason": "known vendor"})).await).await;
        assert_eq!((s.as_u16(), decided["challenge"]["status"].as_str()), (200, Some("approved")), "{decided}");
        let events = audit_events(&app, "event_type=approval.approved").await;
        assert_eq!(events[0]["details"]["reason"], "known vendor");
        assert_eq!(check(&app, &refund(&agent, 600.0)).await["decision"], "allow");
        // ... and through the link; a reason over 500 characters is refused.
        let third = check(&app, &refund(&agent, 700.0)).await;
        let id = third["challenge_id"].as_str().unwrap();
        assert_error(named.post(&format!("/v1/policy-challenges/{id}/decide"),
            &json!({"decision": "approve", "reason": "x".repeat(501)})).await, 400, "invalid_reason").await;
        let link = app.url(&format!("/v1/approval-links/{}", token_of(&third)));
        assert_eq!(decide_by_link(&app, &link, Some(&named), "approve").await.status(), 200);
    }
}

both_engines! {
    /// An agent that keeps asking does not flood its approvers: one mail per open request,
    /// and a bound per agent and hour.
    async fn approval_mails_are_one_per_open_request_and_bounded_per_agent(app) {
        let agent = app.active_agent("fin").await;
        app.apply_policy(json!({
            "reusable_policy_blocks": {"refunds": {
                "amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 100000}}},
                "approval": {"approvers": ["cfo@example.com"]}
            }},
            "agent_groups": [{"name": "finance", "members": [agent.id]}],
            "bindings": [{"group": "finance", "blocks": ["refunds"]}]
        }))
        .await;
        let before = app.smtp.messages().len();
        let mut ids = std::collections::BTreeSet::new();
        for _ in 0..10 {
            let asked = check(&app, &refund(&agent, 500.0)).await;
            assert_eq!(asked["decision"], "challenge");
            ids.insert(asked["challenge_id"].as_str().unwrap().to_owned());
        }
        assert_eq!(ids.len(), 10, "every check still opens its own challenge");
        app.smtp.wait_for(before + 1).await;

        // Distinct requests: mailed each, up to the agent's hourly bound.
        for i in 0..30 {
            assert_eq!(check(&app, &refund(&agent, 200.0 + f64::from(i))).await["decision"], "challenge");
        }
        app.smtp.wait_for(before + 20).await;
        // The challenges themselves are all there to decide.
        let (_, listed) = status_json(app.get("/v1/policy-challenges?status=pending&limit=200").await).await;
        assert_eq!(listed["items"].as_array().unwrap().len(), 40);
        // The mails are sent after the answers; a graceful stop waits for every one of them,
        // so what arrived then is all there is.
        app.stop().await;
        let mails = app.smtp.messages()[before..].to_vec();
        assert_eq!(mails.len(), 20, "bounded at 20 an hour per agent");
        let for_500 = mails.iter().filter(|m| m.data.replace("=\r\n", "").contains("amount: 500")).count();
        assert_eq!(for_500, 1, "one mail for ten identical requests");
    }
}
