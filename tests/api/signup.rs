//! Who may sign up (`ACP_SIGNUP`): by default only members of some workspace (`invite`), with
//! `domains:` also any address of the listed domains, with `open` anyone. An address that may
//! not sign up gets the same 202 from `/auth/start-login`, but no mail, and nothing is stored
//! for it; one that may logs in and creates workspaces as before.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

/// Rows in the login tokens table of the database at `url`.
async fn login_tokens(url: &str) -> i64 {
    run_sql(url, "SELECT COUNT(*) FROM login_tokens")
        .await
        .unwrap_or_default()
}

async fn spawn(engine: Engine, signup: &str) -> TestApp {
    let signup = acp::domain::Signup::parse(signup).unwrap();
    TestApp::spawn_with(engine, move |c| c.signup = signup).await
}

/// Asks for a login link for `email` and checks that none was sent or stored: the same 202.
async fn refused(app: &TestApp, email: &str) {
    let (mails, tokens) = (app.smtp.messages().len(), login_tokens(&app.db_url).await);
    let res = app
        .client
        .post(app.url("/auth/start-login"))
        .json(&json!({"email": email}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_json(res).await;
    assert_eq!(status, 202, "{body}");
    let same = json!({"ok": true, "message": "if the address can log in, a link is on its way; it expires in 15 minutes"});
    assert_eq!(body, same, "the same answer as for anyone");
    // The mail of an admitted address is sent before the answer: none came, none was stored.
    assert_eq!(app.smtp.messages().len(), mails, "no mail to {email}");
    assert_eq!(
        login_tokens(&app.db_url).await,
        tokens,
        "nothing stored for {email}"
    );
}

/// A workspace made by `who`: its status and body.
async fn create_workspace(who: &Browser, name: &str) -> (u16, Value) {
    let (s, body) = status_json(who.post("/v1/workspaces", &json!({"name": name})).await).await;
    (s.as_u16(), body)
}

async fn invite_admits_members_only(engine: Engine) {
    let app = spawn(engine, "invite").await;
    refused(&app, "stranger@example.com").await;
    refused(&app, "Stranger@Example.com").await;

    // The server's first owner, added with the CLI, and the members an owner adds.
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let mut user_ids = Vec::new();
    for email in ["member@example.com", "leaver@example.com"] {
        let (s, added) = status_json(
            owner
                .post(
                    "/v1/workspace/members",
                    &json!({"email": email, "role": "member"}),
                )
                .await,
        )
        .await;
        assert_eq!(s, 200, "{added}");
        user_ids.push(added["member"]["user_id"].as_str().unwrap().to_owned());
    }
    // They log in (in any case) and create workspaces as before, as their owners.
    let member = app.login("Member@Example.com").await;
    let (s, made) = create_workspace(&member, "side project").await;
    assert_eq!(
        (s, made["workspace"]["role"].as_str()),
        (200, Some("owner")),
        "{made}"
    );

    // Removed from the only workspace they had, a person is refused again: no new link, the
    // link sent before does not log in, and the session they still hold makes no workspace.
    let link = app.request_login_link("leaver@example.com").await;
    let leaver = app.login("leaver@example.com").await;
    let (s, body) = status_json(
        owner
            .post(
                &format!("/v1/workspace/members/{}/remove", user_ids[1]),
                &json!({}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    refused(&app, "leaver@example.com").await;
    let token = link.split("token=").nth(1).unwrap();
    let res = app
        .client
        .post(app.url("/auth/verify-login"))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap();
    assert_error(res, 403, "signup_closed").await;
    let (s, body) = create_workspace(&leaver, "after").await;
    assert_eq!(
        (s, body["error"].as_str()),
        (403, Some("signup_closed")),
        "{body}"
    );
    assert_eq!(create_workspace(&owner, "second").await.0, 200);
    app.stop().await;
}

async fn domains_admit_their_addresses(engine: Engine) {
    let app = spawn(engine, "domains:example.org, Example.NET").await;
    refused(&app, "eve@example.com").await;
    refused(&app, "eve@sub.example.org").await;
    refused(&app, "eve@example.org.evil.test").await;
    // Any address of a listed domain, in any case, signs up and makes its workspace.
    let ada = app.login("Ada@EXAMPLE.org").await;
    let (s, made) = create_workspace(&ada, "ada's").await;
    assert_eq!(s, 200, "{made}");
    assert_eq!(made["workspace"]["role"], "owner", "{made}");
    let bob = app.login("bob@example.net").await;
    assert_eq!(create_workspace(&bob, "bob's").await.0, 200);
    // Members of other domains still log in.
    app.grant(&app.workspace_id, "owner@elsewhere.test", "owner")
        .await;
    app.login("owner@elsewhere.test").await;
    app.stop().await;
}

async fn open_admits_anyone(engine: Engine) {
    let app = spawn(engine, "open").await;
    let anyone = app.login("anyone@anywhere.test").await;
    assert_eq!(create_workspace(&anyone, "mine").await.0, 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invite_admits_members_only_on_sqlite() {
    invite_admits_members_only(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invite_admits_members_only_on_postgres() {
    invite_admits_members_only(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_admit_their_addresses_on_sqlite() {
    domains_admit_their_addresses(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_admit_their_addresses_on_postgres() {
    domains_admit_their_addresses(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_admits_anyone_on_sqlite() {
    open_admits_anyone(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_admits_anyone_on_postgres() {
    open_admits_anyone(Engine::Postgres).await;
}

/// The real binary: `invite` is the default, and a malformed value stops the start with what
/// is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_signup_setting_stops_the_start() {
    let db = TestDb::new(Engine::Sqlite).await;
    for (flag, env) in [
        (Some("domains:"), None),
        (None, Some("closed")),
        (Some("domains:example"), Some("open")),
    ] {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"));
        command
            .args(["serve", "--addr", "127.0.0.1:0", "--database-url", &db.url])
            .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
            .kill_on_drop(true);
        if let Some(flag) = flag {
            command.args(["--signup", flag]);
        }
        match env {
            Some(value) => command.env("ACP_SIGNUP", value),
            None => command.env_remove("ACP_SIGNUP"),
        };
        let out = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .expect("stops")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("`signup` must be `invite`, `open` or `domains:`"),
            "{stderr}"
        );
    }
    // Unset, a stranger gets no link from the real server.
    let key = random_api_key();
    let (mut server, base) = crate::replicas::start_replica_with(&db.url, &key, &[]).await;
    let res = reqwest::Client::new()
        .post(format!("{base}/auth/start-login"))
        .json(&json!({"email": "stranger@example.com"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    crate::replicas::sigterm(&mut server).await;
    assert_eq!(
        login_tokens(&db.url).await,
        0,
        "no link for a stranger by default"
    );
}
