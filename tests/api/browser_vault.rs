//! The console's vault in a real browser (headless Chromium through WebDriver): an admin
//! creates a secret set and writes a new version through the forms, and issues a workflow
//! lease whose token is shown once; a member reads the set's page without forms and a forged
//! POST is refused. SQLite only.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::webdriver::Browser;

const FIRST: &str = "sk_live_browser-canary-5555";
const SECOND: &str = "whsec_browser-canary-6666";

async fn page_html(browser: &Browser) -> String {
    browser
        .execute("return document.documentElement.outerHTML;", json!([]))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_creates_a_set_and_writes_a_new_version_in_a_browser() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &admin).await;
    browser.open(&app.url("/dashboard/vault")).await;
    assert_eq!(browser.text("#role").await, "admin");
    assert!(browser.exists("#empty").await, "the empty state");
    browser.type_into("#set-name", "stripe-prod").await;
    browser.type_into("#set-provider", "stripe").await;
    browser.type_into("#set-environment", "production").await;
    browser.type_into("#key-1", "STRIPE_SECRET_KEY").await;
    browser.type_into("#value-1", FIRST).await;
    browser.click("#create").await;
    browser.wait_text("#version", "1").await;
    assert_eq!(browser.text("#set-name").await, "stripe-prod");
    assert!(browser
        .text("#done")
        .await
        .starts_with("Secret set created"));
    let html = page_html(&browser).await;
    assert!(html.contains("STRIPE_SECRET_KEY") && !html.contains(FIRST));

    // A new key and a new value: version 2, the previous one in the history.
    browser.type_into("#new-key-1", "WEBHOOK_SECRET").await;
    browser.type_into("#new-value-1", SECOND).await;
    browser.click("#write").await;
    browser.wait_text("#version", "2").await;
    assert!(browser
        .text("#done")
        .await
        .starts_with("New values written"));
    assert!(browser.exists("#rollback-1").await);
    let html = page_html(&browser).await;
    assert!(html.contains("WEBHOOK_SECRET") && !html.contains(FIRST) && !html.contains(SECOND));
    let value: Value = browser
        .execute(
            "return Array.from(document.querySelectorAll('input[type=password]')).map(i => i.value).join('');",
            json!([]),
        )
        .await;
    assert_eq!(value, "", "no value input is ever pre-filled");
    browser.quit().await;

    let (s, set) = status_json(admin.get("/v1/vault/secret-sets/1").await).await;
    assert_eq!(s, 200, "{set}");
    assert_eq!(set["secret_set"]["version"], 2);
    assert_eq!(
        set["secret_set"]["keys"],
        json!(["STRIPE_SECRET_KEY", "WEBHOOK_SECRET"])
    );
    let (_, trail) = status_json(admin.get("/v1/vault/audit?secret_set_id=1").await).await;
    assert_eq!(trail["items"][0]["event_type"], "vault.secret_set.updated");
    assert!(trail["items"][0]["actor"]
        .as_str()
        .unwrap()
        .starts_with("user:usr_"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reads_a_set_without_forms_and_a_forged_write_is_refused() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let owner = app.login("owner@example.com").await;
    let member = app.login("member@example.com").await;
    let (s, made) = status_json(
        owner
            .post(
                "/v1/vault/secret-sets",
                &json!({"name": "stripe-prod", "provider": "stripe", "environment": "production",
                    "entries": {"STRIPE_SECRET_KEY": FIRST}}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let id = made["secret_set"]["secret_set_id"].as_str().unwrap();

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser.open(&app.url("/dashboard/vault")).await;
    assert_eq!(browser.text("#role").await, "member");
    assert!(browser.exists("#read-only").await && !browser.exists("#create-set").await);
    browser
        .click(&format!("a[href$=\"/dashboard/vault/{id}\"]"))
        .await;
    browser.wait_text("#version", "1").await;
    for form in ["#write-values", "#grant", "#lifecycle"] {
        assert!(!browser.exists(form).await, "a member sees no {form}");
    }
    assert!(!page_html(&browser).await.contains(FIRST));

    // A write the page never offered, posted from the page with the member's own token.
    let forge = r#"const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];
        for (const [k, v] of arguments[1]) { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
        document.body.appendChild(f); f.submit();"#;
    let token = browser
        .execute(
            "return document.querySelector('input[name=csrf]').value;",
            json!([]),
        )
        .await;
    assert_eq!(token.as_str(), Some(member.csrf.as_str()));
    browser
        .execute(
            forge,
            json!([
                format!("/dashboard/vault/{id}"),
                [
                    ["csrf", token],
                    ["key", "STRIPE_SECRET_KEY"],
                    ["value", SECOND]
                ]
            ]),
        )
        .await;
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
    assert!(!page_html(&browser).await.contains(SECOND));
    browser.quit().await;

    let (_, set) = status_json(owner.get(&format!("/v1/vault/secret-sets/{id}")).await).await;
    assert_eq!(set["secret_set"]["version"], 1, "nothing changed");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_issues_a_workflow_lease_and_sees_its_token_once() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "admin@example.com", "admin")
        .await;
    let admin = app.login("admin@example.com").await;
    let agent = app.active_agent("payments-bot").await;
    let (s, made) = status_json(
        admin
            .post(
                "/v1/vault/secret-sets",
                &json!({"name": "stripe-prod", "provider": "stripe", "environment": "production",
                    "entries": {"STRIPE_SECRET_KEY": FIRST}}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let id = made["secret_set"]["secret_set_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let browser = Browser::start().await;
    browser.log_in_as(&app, &admin).await;
    browser
        .open(&app.url(&format!("/dashboard/vault/{id}")))
        .await;
    assert!(browser.exists("#no-leases").await && browser.exists("#issue-lease").await);
    browser.type_into("#lease-agent", &agent.id).await;
    browser.click("#lease-action-proxy").await;
    browser.click("#lease-action-read").await;
    browser.type_into("#lease-purpose", "nightly payouts").await;
    browser.click("#lease-submit").await;
    browser.wait_text("#set-name", "stripe-prod").await;
    let token = browser.text("#lease-token").await;
    assert!(token.starts_with("vwl_") && token.len() == 47, "{token}");
    assert!(browser
        .text("#shown-once")
        .await
        .starts_with("Copy the token now"));
    let facts = browser.text("#lease-facts").await;
    assert!(
        facts.contains("proxy, read")
            && facts.contains("nightly payouts")
            && facts.contains(&agent.id),
        "{facts}"
    );
    assert!(!page_html(&browser).await.contains(FIRST));

    // Back on the set's page: the lease is listed, its token is not.
    browser.click("#done-lease").await;
    browser.wait_text("#version", "1").await;
    assert!(!browser.exists("#no-leases").await, "the lease is live");
    let html = page_html(&browser).await;
    assert!(html.contains("nightly payouts") && !html.contains(&token));
    browser.quit().await;

    // The token is the agent's workflow lease (the mint gets past it to the missing grant).
    let res = agent
        .signed_post(
            &app,
            "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": token, "secret_set_id": 1, "action": "read"}),
        )
        .await;
    assert_error(res, 403, "no_grant").await;
    let (_, leases) = status_json(admin.get("/v1/vault/leases").await).await;
    assert_eq!(leases["items"][0]["actions"], json!(["proxy", "read"]));
    assert!(!leases.to_string().contains(&token));
    app.stop().await;
}
