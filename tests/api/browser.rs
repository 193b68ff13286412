//! End-to-end in a real browser (headless Chromium driven by chromedriver over the WebDriver
//! protocol): a logged-in approver opens an approval link and clicks Approve, and the backend's re-check is
//! allowed; an admin opens a claim link and claims an agent; in the console an admin suspends an
//! agent through its confirmation, and a member sees no action and has a forged POST refused;
//! an approver approves a pending challenge from the approvals queue; a member sees the queue
//! without buttons, and the audit page's live tail shows a new event. Compiled when
//! `ACP_TEST_BROWSER` is set at build time (`.ci/run` installs Chromium and sets it).

use serde_json::json;

use crate::helpers::*;
use crate::webdriver::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_in_a_browser_and_the_backend_recheck_is_allowed() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = crate::approvals::setup(&app).await;
    let request = json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 400, "currency": "USD"}});
    let (_, first) = status_json(app.post("/v1/check", &request).await).await;
    assert_eq!(first["decision"], "challenge");

    // Approvals need a logged-in approver (the default): the approver's session cookie, as
    // after following a login link in this browser.
    app.grant(&app.workspace_id, "approver@example.com", "approver")
        .await;
    let approver = app.login("approver@example.com").await;
    let browser = Browser::start().await;
    browser.open(&app.url("/login")).await;
    let (name, value) = approver.cookie.split_once('=').unwrap();
    browser.set_cookie(name, value).await;
    browser
        .open(first["challenge"]["url"].as_str().unwrap())
        .await;
    assert_eq!(browser.text("#action").await, "refund");
    browser.wait_text("#status", "pending").await;
    browser.click("#approve").await;
    browser.wait_text("#status", "approved").await;
    browser.quit().await;

    let (_, again) = status_json(app.post("/v1/check", &request).await).await;
    assert_eq!(
        (again["decision"].as_str(), again["reason_codes"].clone()),
        (Some("allow"), json!(["approved"]))
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_claims_an_agent_in_a_browser() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let mut agent = TestAgent::new();
    agent.id = agent.register(&app, None, "stray-bot").await;
    assert_eq!(agent.attest_latest(&app).await.status(), 200);
    let (_, code) = status_json(
        agent
            .signed_post(
                &app,
                &format!("/v1/agents/{}/claim-code", agent.id),
                &json!({}),
            )
            .await,
    )
    .await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;

    let browser = Browser::start().await;
    // The session cookie of the admin, as after following a login link in this browser.
    browser.open(&app.url("/login")).await;
    let (name, value) = admin.cookie.split_once('=').unwrap();
    browser.set_cookie(name, value).await;
    browser.open(code["claim_url"].as_str().unwrap()).await;
    assert_eq!(browser.text("#agent-name").await, "stray-bot");
    browser.click("#claim").await;
    browser.wait_text("#status", "claimed").await;
    browser.quit().await;

    let (s, got) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
    assert_eq!(
        (s.as_u16(), got["agent"]["workspace_id"].as_str()),
        (200, Some(app.workspace_id.as_str()))
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_suspends_an_agent_through_the_confirmation() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = app.active_agent("worker").await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &admin).await;
    browser.open(&app.url("/dashboard/agents")).await;
    assert_eq!(browser.text("#role").await, "admin");
    browser
        .click(&format!("a[href$=\"/dashboard/agents/{}\"]", agent.id))
        .await;
    browser.wait_text("#agent-status", "active").await;
    browser.click("#action-suspend").await;
    // The confirmation step: nothing has changed yet.
    assert_eq!(browser.text("#agent-name").await, "worker");
    assert_eq!(status_of(&app, &agent.id).await, "active");
    browser.type_into("#reason", "rotating its key").await;
    browser.click("#confirm-action").await;
    browser.wait_text("#agent-status", "suspended").await;
    assert_eq!(browser.text("#done").await, "Agent suspended.");
    assert!(browser.exists("#action-resume").await);
    browser.quit().await;

    assert_eq!(status_of(&app, &agent.id).await, "suspended");
    let events = audit_events(
        &app,
        &format!("event_type=agent.suspended&agent_id={}", agent.id),
    )
    .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["details"]["reason"], "rotating its key");
    assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_sees_no_action_and_a_forged_post_is_refused() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = app.active_agent("worker").await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let member = app.login("member@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser
        .open(&app.url(&format!("/dashboard/agents/{}", agent.id)))
        .await;
    browser.wait_text("#agent-status", "active").await;
    assert_eq!(browser.text("#role").await, "member");
    assert!(!browser.exists("#actions").await, "a member sees no action");

    // A form the page never offered, posted from the page with the member's own token: the
    // server refuses the role.
    let forge = r#"const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];
        if (arguments[1]) { const i = document.createElement('input'); i.type = 'hidden'; i.name = 'csrf'; i.value = arguments[1]; f.appendChild(i); }
        document.body.appendChild(f); f.submit();"#;
    let suspend = format!("/dashboard/agents/{}/suspend", agent.id);
    let token = browser
        .execute(
            "return document.querySelector('input[name=csrf]').value;",
            json!([]),
        )
        .await;
    assert_eq!(token.as_str(), Some(member.csrf.as_str()));
    browser.execute(forge, json!([suspend, token])).await;
    browser.wait_text("h1", "Not allowed").await;
    assert_eq!(
        browser
            .execute(
                "return document.getElementById('error').dataset.code;",
                json!([])
            )
            .await,
        "insufficient_role"
    );
    // Without the token it is refused before the role is even asked.
    browser
        .open(&app.url(&format!("/dashboard/agents/{}", agent.id)))
        .await;
    browser.wait_text("#agent-status", "active").await;
    browser.execute(forge, json!([suspend, ""])).await;
    browser.wait_text("h1", "That did not work").await;
    assert_eq!(
        browser
            .execute(
                "return document.getElementById('error').dataset.code;",
                json!([])
            )
            .await,
        "csrf_failed"
    );
    browser.quit().await;

    assert_eq!(status_of(&app, &agent.id).await, "active");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_approves_a_pending_challenge_from_the_queue() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = crate::approvals::setup(&app).await;
    let request = json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 400, "currency": "USD"}});
    let (_, first) = status_json(app.post("/v1/check", &request).await).await;
    assert_eq!(first["decision"], "challenge");
    let id = first["challenge_id"].as_str().unwrap().to_owned();
    app.grant(&app.workspace_id, "approver@example.com", "approver")
        .await;
    let approver = app.login("approver@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &approver).await;
    browser.open(&app.url("/dashboard")).await;
    browser.click("a[href$=\"/dashboard/approvals\"]").await;
    assert_eq!(browser.text("#role").await, "approver");
    assert_eq!(
        browser
            .text(&format!("#challenge-{id} dd[data-field=amount]"))
            .await,
        "400"
    );
    browser
        .type_into(&format!("#reason-{id}"), "refund agreed on the phone")
        .await;
    browser.click(&format!("#approve-{id}")).await;
    browser
        .wait_text(
            "#done",
            "Approved: the agent's next check of this request is allowed once.",
        )
        .await;
    assert!(!browser.exists(&format!("#challenge-{id}")).await);
    assert_eq!(browser.text("#decided .badge").await, "approved");
    browser.quit().await;

    let events = audit_events(&app, "event_type=approval.approved").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["details"]["reason"], "refund agreed on the phone");
    assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
    let (_, again) = status_json(app.post("/v1/check", &request).await).await;
    assert_eq!(again["decision"], "allow");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reads_the_queue_without_buttons_and_the_audit_tail_is_live() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = crate::approvals::setup(&app).await;
    let request = json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 400, "currency": "USD"}});
    let (_, first) = status_json(app.post("/v1/check", &request).await).await;
    let id = first["challenge_id"].as_str().unwrap().to_owned();
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let member = app.login("member@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser.open(&app.url("/dashboard/approvals")).await;
    assert_eq!(browser.text("#role").await, "member");
    assert_eq!(
        browser.text(&format!("#title-{id} code")).await,
        "refund",
        "the member reads the queue"
    );
    assert!(browser.exists("#read-only").await);
    assert!(!browser.exists("#queue form").await, "no form");
    assert!(!browser.exists("#queue button").await, "no button");

    // The audit page: a new event appears on top without a reload (the stream, by cookie).
    browser.open(&app.url("/dashboard/audit")).await;
    browser
        .wait_text("#live", "Live: new events appear at the top.")
        .await;
    assert!(!browser.exists("#event-rows tr.fresh").await);
    let worker = app.active_agent("late-bot").await;
    browser
        .wait_text(
            &format!(
                "#event-rows tr.fresh a[href$=\"/dashboard/agents/{}\"] code",
                worker.id
            ),
            &worker.id,
        )
        .await;
    browser.quit().await;
    assert_eq!(
        status_json(app.get(&format!("/v1/policy-challenges/{id}")).await)
            .await
            .1["challenge"]["status"],
        "pending"
    );
    app.stop().await;
}

async fn status_of(app: &TestApp, agent_id: &str) -> String {
    let (_, got) = status_json(app.get(&format!("/v1/agents/{agent_id}")).await).await;
    got["agent"]["status"].as_str().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_dry_runs_and_applies_a_pasted_spec() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &admin).await;
    browser
        .open(&app.url("/dashboard/policies/pol_default/dry-run"))
        .await;
    // Paste a spec over the current one.
    let spec = "global_guardrails:\n  actions:\n    allow: [deploy]\n";
    browser
        .execute(
            "document.querySelector('#spec').value = arguments[0];",
            json!([spec]),
        )
        .await;
    browser.click("#run-dry-run").await;
    let desired = browser.text("#desired-hash").await;
    assert!(desired.starts_with("sha256:"), "{desired}");
    // Nothing is applied by the dry run.
    let (_, before) = status_json(app.get("/v1/policies/pol_default").await).await;
    assert_ne!(before["policy_hash"].as_str(), Some(desired.as_str()));
    browser.click("#apply").await;
    browser.wait_text("#policy-version", "1").await;
    assert!(browser.exists("#done").await);
    browser.quit().await;

    let (_, after) = status_json(app.get("/v1/policies/pol_default").await).await;
    assert_eq!(
        after["policy_hash"].as_str(),
        Some(desired.as_str()),
        "{after}"
    );
    let applied = audit_events(&app, "event_type=policy.applied").await;
    assert!(applied[0]["actor"].as_str().unwrap().starts_with("user:"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_claims_an_agent_from_the_console_and_a_member_cannot() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let mut agent = TestAgent::new();
    agent.id = agent.register(&app, None, "stray-bot").await;
    assert_eq!(agent.attest_latest(&app).await.status(), 200);
    let (_, code) = status_json(
        agent
            .signed_post(
                &app,
                &format!("/v1/agents/{}/claim-code", agent.id),
                &json!({}),
            )
            .await,
    )
    .await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;

    // A member's agents page has no claim form.
    let member = app.login("member@example.com").await;
    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser.open(&app.url("/dashboard/agents")).await;
    browser.element("#agents, #empty").await;
    assert!(!browser.exists("#claim-an-agent").await);

    // The admin pastes the link, sees the agent, and claims it.
    let admin = app.login("admin@example.com").await;
    browser.log_in_as(&app, &admin).await;
    browser.open(&app.url("/dashboard/agents")).await;
    browser.click("#claim-an-agent summary").await;
    browser
        .type_into("#claim-code", code["claim_url"].as_str().unwrap())
        .await;
    browser.click("#claim-an-agent button[type=submit]").await;
    browser.wait_text("#agent-name", "stray-bot").await;
    browser.click("#claim").await;
    browser
        .wait_text("#done", "Agent claimed into this workspace.")
        .await;
    assert_eq!(browser.text("#agent-id").await, agent.id);
    browser.quit().await;

    let (s, got) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
    assert_eq!(
        (s.as_u16(), got["agent"]["workspace_id"].as_str()),
        (200, Some(app.workspace_id.as_str()))
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reviews_access_from_the_matrix_and_an_audit_event() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = app.active_agent("fin").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"refunds": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}}}},
        "agent_groups": [{"name": "finance", "members": [agent.id]}],
        "bindings": [{"group": "finance", "blocks": ["refunds"], "actions": ["refund"]}]
    }))
    .await;
    let request = json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 50, "currency": "USD"}});
    let (s, decided) = status_json(app.post("/v1/check", &request).await).await;
    assert_eq!(s, 200, "{decided}");
    let event = &audit_events(&app, "action=refund").await[0];
    let event_id = event["event_id"].as_str().unwrap().to_owned();
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let member = app.login("member@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    // The matrix: the refund column, the agent's group allowed.
    browser.open(&app.url("/dashboard/access")).await;
    assert!(browser.exists("#matrix td[data-outcome=\"allow\"]").await);
    // An agent's effective permissions, looked up in the form.
    browser.type_into("#access-agent", &agent.id).await;
    browser.click("form[role=search] button").await;
    browser.wait_text("#agent-heading code", &agent.id).await;
    assert!(
        browser
            .exists("#agent-access tr[data-outcome=\"allow\"]")
            .await
    );
    assert!(
        browser
            .exists("#agent-access tr[data-outcome=\"challenge\"]")
            .await
    );
    // From an audit event: who may do this.
    browser
        .open(&app.url(&format!("/dashboard/audit/{event_id}")))
        .await;
    browser.click("#who-may").await;
    browser.wait_text("#action-heading code", "refund").await;
    assert!(
        browser
            .exists("#action-access tr[data-outcome=\"allow\"]")
            .await
    );
    browser.quit().await;
    app.stop().await;
}
