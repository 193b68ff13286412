//! The console's workspace page in a real browser (headless Chromium over WebDriver): an owner
//! creates an API key, sees it once, and revokes it; a member sees no member, key or settings
//! form, and a forged POST from the page is refused. Compiled when `ACP_TEST_BROWSER` is set at
//! build time.

use serde_json::json;

use crate::helpers::*;
use crate::webdriver::Browser;

fn error_code() -> &'static str {
    "return document.getElementById('error').dataset.code;"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_creates_an_api_key_sees_it_once_and_revokes_it() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &owner).await;
    browser.open(&app.url("/dashboard")).await;
    browser.click("a[href$=\"/dashboard/settings\"]").await;
    browser.wait_text("h2#keys", "API keys").await;
    assert_eq!(browser.text("#role").await, "owner");
    browser.type_into("#key-name", "gateway").await;
    browser
        .click("#create-key input[value=\"agents:read\"]")
        .await;
    browser.click("#create-key-submit").await;
    browser.wait_text("h1", "Your new API key").await;
    let key = browser.text("#new-secret").await;
    assert!(key.starts_with("svc_test_"), "{key}");
    assert_eq!(app.get_as(&key, "/v1/agents").await.status(), 200);

    // Back on the page the key is listed by its last four only.
    browser.click("#done-secret").await;
    browser.wait_text("h2#keys", "API keys").await;
    let page = browser
        .execute("return document.body.innerHTML;", json!([]))
        .await;
    let page = page.as_str().unwrap();
    assert!(!page.contains(&key), "the key is shown once");
    assert!(page.contains(&format!("…{}", &key[key.len() - 4..])));
    let (_, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
    let key_id = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "gateway")
        .unwrap()["key_id"]
        .as_str()
        .unwrap()
        .to_owned();

    browser.click(&format!("#revoke-{key_id}")).await;
    browser.wait_text("h1", "Revoke this API key?").await;
    browser.click("#confirm-action").await;
    browser
        .wait_text(
            "#done",
            "API key revoked: requests with it fail from now on.",
        )
        .await;
    browser.quit().await;
    assert_eq!(app.get_as(&key, "/v1/agents").await.status(), 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_sees_no_workspace_forms_and_a_forged_post_is_refused() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let member = app.login("member@example.com").await;

    let browser = Browser::start().await;
    browser.log_in_as(&app, &member).await;
    browser.open(&app.url("/dashboard/settings")).await;
    browser.wait_text("h2#keys", "API keys").await;
    assert_eq!(browser.text("#role").await, "member");
    assert!(browser.exists("#read-only").await);
    for form in ["#add-member", "#create-key", "#settings-form", ".role-form"] {
        assert!(!browser.exists(form).await, "a member sees no {form}");
    }
    assert!(browser.exists("#create-token").await, "but makes tokens");

    let forge = r#"const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];
        for (const [k, v] of arguments[1]) { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
        document.body.appendChild(f); f.submit();"#;
    browser
        .execute(
            forge,
            json!([
                "/dashboard/settings/api-keys",
                [["csrf", member.csrf], ["name", "mine"]]
            ]),
        )
        .await;
    browser.wait_text("h1", "Not allowed").await;
    assert_eq!(
        browser.execute(error_code(), json!([])).await,
        "insufficient_role"
    );
    let (_, listed) = status_json(member.get("/v1/workspace/api-keys").await).await;
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        1,
        "no key was made"
    );
    browser.quit().await;
    app.stop().await;
}
