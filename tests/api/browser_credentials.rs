//! The console's credentials and kill switch in a real browser (headless Chromium through
//! WebDriver): an admin pauses minting, resumes it, and revokes every credential by typing the
//! workspace's name (a wrong name is refused first); a member sees no form, and a revoke-all
//! forged from the page with the member's own token is refused. Compiled when
//! `ACP_TEST_BROWSER` is set at build time.

use serde_json::json;

use crate::console_credentials::{mint, minters};
use crate::helpers::*;
use crate::webdriver::Browser;

async fn introspect(app: &TestApp, token: &str) -> serde_json::Value {
    let (s, out) = status_json(
        app.post("/v1/identity/introspect", &json!({"token": token}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
    out
}

async fn error_code(browser: &Browser) -> serde_json::Value {
    browser
        .execute(
            "return document.getElementById('error').dataset.code;",
            json!([]),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pauses_minting_and_revokes_everything_by_typing_the_name() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agents = minters(&app, &["minter"]).await;
    let agent = &agents[0];
    let (cred, token) = mint(
        &app,
        json!({"agent_id": agent.id, "audience": "payments-api"}),
    )
    .await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &admin).await;
    browser.open(&app.url("/dashboard")).await;
    browser.click("a[href$=\"/dashboard/credentials\"]").await;
    browser.wait_text("#minting-state", "on").await;
    assert!(browser.exists(&format!("#cred-{cred}")).await);

    // Pause, with a reason: minting through the API is refused.
    browser.type_into("#minting-reason", "incident 7").await;
    browser.click("#pause-minting").await;
    browser.wait_text("#minting-state", "paused").await;
    assert_eq!(browser.text("#paused-reason").await, "incident 7");
    assert_error(
        app.post(
            "/v1/identity/credentials/mint",
            &json!({"agent_id": agent.id}),
        )
        .await,
        403,
        "minting_paused",
    )
    .await;

    // Revoke-all: a wrong name is refused and changes nothing.
    let word = browser.text("#confirm-word").await;
    browser.type_into("#confirm", "not the name").await;
    browser.click("#revoke-all-button").await;
    browser.wait_text("h1", "That did not work").await;
    assert_eq!(error_code(&browser).await, "confirmation_mismatch");
    assert_eq!(introspect(&app, &token).await["active"], true);
    // The right one revokes everything.
    browser.open(&app.url("/dashboard/credentials")).await;
    browser.type_into("#confirm", &word).await;
    browser.type_into("#revoke-all-reason", "incident 7").await;
    browser.click("#revoke-all-button").await;
    browser
        .wait_text(
            "#done",
            "Every credential and vault lease issued so far is revoked.",
        )
        .await;
    assert!(browser.exists("#no-credentials").await);
    // And minting resumes.
    browser.click("#resume-minting").await;
    browser.wait_text("#minting-state", "on").await;
    browser.quit().await;

    let seen = introspect(&app, &token).await;
    assert_eq!(seen["reason"], "revoked_by_kill_switch");
    let events = audit_events(&app, "event_type=kill_switch.revoke_all").await;
    assert_eq!(events.len(), 1);
    assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
    mint(&app, json!({"agent_id": agent.id})).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_sees_no_kill_switch_form_and_a_forged_revoke_all_is_refused() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agents = minters(&app, &["minter"]).await;
    let (cred, token) = mint(&app, json!({"agent_id": agents[0].id})).await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let member = app.login("member@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser.open(&app.url("/dashboard/credentials")).await;
    browser.wait_text("#minting-state", "on").await;
    assert_eq!(browser.text("#role").await, "member");
    assert!(
        browser.exists(&format!("#cred-{cred}")).await,
        "members read"
    );
    for form in ["#minting-form", "#revoke-all-form", "#confirm-word"] {
        assert!(!browser.exists(form).await, "{form}");
    }
    assert!(!browser.exists(&format!("#revoke-{cred}")).await);
    assert!(browser.exists("#read-only").await);

    // The form the page never offered, posted with the member's own token.
    let token_on_page = browser
        .execute(
            "return document.querySelector('input[name=csrf]').value;",
            json!([]),
        )
        .await;
    assert_eq!(token_on_page.as_str(), Some(member.csrf.as_str()));
    let forge = r#"const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];
        for (const [k, v] of Object.entries(arguments[1])) { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
        document.body.appendChild(f); f.submit();"#;
    browser
        .execute(
            forge,
            json!(["/dashboard/credentials/revoke-all", {"csrf": member.csrf, "confirm": "anything"}]),
        )
        .await;
    browser.wait_text("h1", "Not allowed").await;
    assert_eq!(error_code(&browser).await, "insufficient_role");
    browser.open(&app.url("/dashboard/credentials")).await;
    browser.wait_text("#minting-state", "on").await;
    browser
        .execute(
            forge,
            json!(["/dashboard/credentials/minting", {"csrf": member.csrf, "minting": "pause"}]),
        )
        .await;
    browser.wait_text("h1", "Not allowed").await;
    assert_eq!(error_code(&browser).await, "insufficient_role");
    browser.quit().await;

    assert_eq!(introspect(&app, &token).await["active"], true);
    let (_, status) = status_json(app.get("/v1/identity/kill-switch/status").await).await;
    assert_eq!(status["minting_paused"], false);
    app.stop().await;
}
