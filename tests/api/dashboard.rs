//! Dashboard identity: magic-link login through a real SMTP server, sessions, CSRF, workspaces,
//! roles, API keys and personal access tokens, status and contact.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

both_engines! {
    async fn login_reads_the_link_from_a_real_message_and_lands_on_the_dashboard(app) {
        app.grant(&app.workspace_id, "Ada@Example.com", "owner").await;
        let link = app.request_login_link("ada@example.com").await;
        let message = app.smtp.messages().pop().unwrap();
        assert_eq!(message.from, "acp@example.test");
        assert!(message.data.contains("Subject: Your acp login link"));
        assert!(link.starts_with(&app.base) && link.contains("/auth/verify-login?token=lgn_"), "{link}");

        let res = app.client.get(&link).send().await.unwrap();
        assert_eq!(res.status(), 303);
        assert!(res.headers()["location"].to_str().unwrap().ends_with("/dashboard"));
        let set_cookie = res.headers()["set-cookie"].to_str().unwrap().to_owned();
        for attr in ["HttpOnly", "SameSite=Lax", "Path=/"] {
            assert!(set_cookie.contains(attr), "{set_cookie}");
        }
        assert!(!set_cookie.contains("Secure"), "plain http on a laptop");
        let cookie = session_cookie_of(&res);

        let (s, me) = status_json(app.client.get(app.url("/auth/me")).header("Cookie", &cookie).send().await.unwrap()).await;
        assert_eq!(s, 200, "{me}");
        assert_eq!(me["user"]["email"], "ada@example.com");
        assert_eq!(me["active_workspace_id"], app.workspace_id.as_str());
        assert_eq!(me["workspaces"][0]["role"], "owner");
        assert_eq!(me["auth"], "session");

        let page = app.client.get(app.url("/dashboard")).header("Cookie", &cookie).send().await.unwrap();
        assert_eq!(page.status(), 200);
        let html = page.text().await.unwrap();
        assert!(html.contains("ada@example.com") && html.contains(&app.workspace_id) && html.contains("id=\"api-keys\""));
        assert!(html.contains(&format!("…{}", &app.key[app.key.len() - 4..])), "the bootstrap key is listed by its last four");
        assert!(!html.contains(&app.key));

        let login_events = audit_events(&app, "event_type=auth.login").await;
        assert_eq!(login_events.len(), 1);
        assert!(!login_events[0].to_string().contains("lgn_"));

        let csrf = me["csrf_token"].as_str().unwrap();
        let res = app.client.post(app.url("/auth/logout")).header("Cookie", &cookie).header("X-CSRF-Token", csrf).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
        assert_error(app.client.get(app.url("/auth/me")).header("Cookie", &cookie).send().await.unwrap(), 401, "unauthenticated").await;
        let res = app.client.get(app.url("/dashboard")).header("Cookie", &cookie).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap().ends_with("/login")), (303, true));
    }
}

both_engines! {
    async fn login_links_work_once_and_expire(app) {
        let link = app.request_login_link("bob@example.com").await;
        let token = link.split("token=").nth(1).unwrap().to_owned();
        let (s, body) = status_json(app.client.post(app.url("/auth/verify-login")).json(&json!({"token": token})).send().await.unwrap()).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["user"]["email"], "bob@example.com", "a first login creates the user");
        assert!(body["active_workspace_id"].is_null());
        // Used: both forms refuse it; the browser form as a page.
        assert_error(app.client.post(app.url("/auth/verify-login")).json(&json!({"token": token})).send().await.unwrap(), 409, "token_used").await;
        let page = app.client.get(&link).send().await.unwrap();
        assert_eq!(page.status(), 409);
        assert!(page.text().await.unwrap().contains("data-code=\"token_used\""));
        assert_error(app.client.post(app.url("/auth/verify-login")).json(&json!({"token": "lgn_nope"})).send().await.unwrap(), 400, "invalid_token").await;

        // Expiry: the link's 15 minutes pass (moved in the database, as the clock would).
        let link = app.request_login_link("bob@example.com").await;
        let token = link.split("token=").nth(1).unwrap();
        expire_login_tokens(&app).await;
        assert_error(app.client.post(app.url("/auth/verify-login")).json(&json!({"token": token})).send().await.unwrap(), 410, "token_expired").await;
    }
}

async fn expire_login_tokens(app: &TestApp) {
    use sqlx::Connection;
    if app.db_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
        sqlx::query("UPDATE login_tokens SET expires_at = 0")
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(&app.db_url).await.unwrap();
        sqlx::query("UPDATE login_tokens SET expires_at = 0")
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

both_engines! {
    async fn start_login_does_not_enumerate_accounts_and_is_rate_limited(app) {
        app.grant(&app.workspace_id, "known@example.com", "member").await;
        let start = |email: &str| app.client.post(app.url("/auth/start-login")).json(&json!({"email": email})).send();
        let (s1, known) = status_json(start("known@example.com").await.unwrap()).await;
        let (s2, unknown) = status_json(start("nobody@example.com").await.unwrap()).await;
        assert_eq!((s1.as_u16(), s2.as_u16()), (202, 202));
        assert_eq!(known, unknown, "the answer says nothing about the account");
        assert_error(start("not-an-address").await.unwrap(), 400, "invalid_email").await;
        assert_error(app.client.post(app.url("/auth/start-login")).json(&json!({})).send().await.unwrap(), 400, "missing_email").await;
        // Five links per address per 15 minutes.
        for _ in 0..4 {
            assert_eq!(start("Known@example.com").await.unwrap().status(), 202);
        }
        let body = assert_error(start("known@example.com").await.unwrap(), 429, "rate_limited").await;
        assert!(body["retry_after"].as_i64().unwrap() > 0);
        assert_eq!(start("other@example.com").await.unwrap().status(), 202, "the limit is per address");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_login_is_rate_limited_per_client_ip() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| c.login_limit_per_ip = 3).await;
    for i in 0..3 {
        let res = app
            .client
            .post(app.url("/auth/start-login"))
            .json(&json!({"email": format!("u{i}@example.com")}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202);
    }
    let res = app
        .client
        .post(app.url("/auth/start-login"))
        .json(&json!({"email": "u9@example.com"}))
        .send()
        .await
        .unwrap();
    assert_error(res, 429, "rate_limited").await;
    app.stop().await;
}

both_engines! {
    async fn a_cookie_client_posting_json_needs_no_other_header(app) {
        // The spec's own flow: hold the session cookie, post JSON, with no Origin (a CI script)
        // or with the service's own origin (the dashboard in a browser). No `X-CSRF-Token`.
        app.grant(&app.workspace_id, "carol@example.com", "owner").await;
        let browser = app.login("carol@example.com").await;
        let own_origin = app.base.trim_end_matches('/').to_owned();
        let post = |path: &str, origin: Option<&str>, body: Value| {
            let mut req = app.client.post(app.url(path)).header("Cookie", &browser.cookie).json(&body);
            if let Some(origin) = origin {
                req = req.header("Origin", origin);
            }
            req.send()
        };
        let spec = json!({"reusable_policy_blocks": {"ops": {"actions": {"allow": ["read"]}}},
            "agent_groups": [], "bindings": [], "global_guardrails": {}});
        for origin in [None, Some(own_origin.as_str())] {
            let (s, dry) = status_json(post("/v1/policies/sync", origin, json!({"dry_run": true, "spec": spec})).await.unwrap()).await;
            assert_eq!((s.as_u16(), dry["dry_run"].as_bool()), (200, Some(true)), "{origin:?}: {dry}");
            let (s, dry) = status_json(post("/v1/sync", origin, json!({"dry_run": true, "spec": spec})).await.unwrap()).await;
            assert_eq!(s, 200, "{origin:?}: {dry}");
        }
        let (s, applied) = status_json(post("/v1/policies/sync", None, json!({"spec": spec})).await.unwrap()).await;
        assert_eq!((s.as_u16(), applied["applied"].as_bool()), (200, Some(true)), "{applied}");

        let (s, created) = status_json(post("/v1/workspaces", None, json!({"name": "ci"})).await.unwrap()).await;
        assert_eq!(s, 200, "{created}");
        let (s, other) = status_json(post("/v1/workspaces", Some(&own_origin), json!({"name": "web"})).await.unwrap()).await;
        assert_eq!(s, 200, "{other}");
        for (origin, ws) in [(None, &app.workspace_id), (Some(own_origin.as_str()), &other["workspace"]["workspace_id"].as_str().unwrap().to_owned())] {
            let (s, selected) = status_json(post("/v1/workspaces/select", origin, json!({"workspace_id": ws})).await.unwrap()).await;
            assert_eq!((s.as_u16(), selected["active_workspace_id"].as_str()), (200, Some(ws.as_str())), "{selected}");
        }
        let res = post("/auth/logout", Some(&own_origin), json!({})).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_error(browser.get("/auth/me").await, 401, "unauthenticated").await;

        // Logout with no body at all (what `requests.post(url)` sends) is fine too.
        let again = app.login("carol@example.com").await;
        let res = app.client.post(app.url("/auth/logout")).header("Cookie", &again.cookie).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_error(again.get("/auth/me").await, 401, "unauthenticated").await;
    }
}

both_engines! {
    async fn cross_site_and_non_json_cookie_requests_are_refused(app) {
        let browser = app.login("dave@example.com").await;
        let own_origin = app.base.trim_end_matches('/').to_owned();
        let create = |headers: &[(&str, &str)], body: &str| {
            let mut req = app.client.post(app.url("/v1/workspaces")).header("Cookie", &browser.cookie).body(body.to_owned());
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            req.send()
        };
        let json_body = r#"{"name": "x"}"#;
        let json_ct = ("Content-Type", "application/json");
        let token = ("X-CSRF-Token", browser.csrf.as_str());
        // Cross-site: a foreign Origin or Sec-Fetch-Site: cross-site, with the token or not.
        for headers in [
            vec![json_ct, ("Origin", "https://evil.example")],
            vec![json_ct, token, ("Origin", "https://evil.example")],
            vec![json_ct, ("Origin", "null")],
            vec![json_ct, ("Sec-Fetch-Site", "cross-site")],
            vec![json_ct, token, ("Sec-Fetch-Site", "cross-site")],
            // Bodies that are not JSON, with the cookie and no token: what a foreign form posts.
            vec![("Content-Type", "text/plain")],
            vec![("Content-Type", "application/x-www-form-urlencoded")],
            vec![("Content-Type", "text/plain"), ("Origin", own_origin.as_str())],
            vec![],
            // A token that is not the session's.
            vec![json_ct, ("X-CSRF-Token", "forged")],
        ] {
            let body = assert_error(create(&headers, json_body).await.unwrap(), 403, "csrf_failed").await;
            assert!(!body["message"].as_str().unwrap().is_empty(), "{headers:?}");
        }
        let form = assert_error(app.client.post(app.url("/auth/logout")).header("Cookie", &browser.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded").body("a=b").send().await.unwrap(), 403, "csrf_failed").await;
        assert!(form["message"].as_str().unwrap().contains("application/json"), "{form}");
        let (_, list) = status_json(browser.get("/v1/workspaces").await).await;
        assert_eq!(list["items"].as_array().unwrap().len(), 0, "nothing was created");
        assert_eq!(browser.get("/auth/me").await.status(), 200, "still logged in");

        // The service's own pages carry the session's token: the dashboard's logout button posts
        // with it, from the own origin, whatever the body.
        let (s, created) = status_json(create(&[json_ct, token, ("Origin", &own_origin), ("Sec-Fetch-Site", "same-origin")], json_body).await.unwrap()).await;
        assert_eq!(s, 200, "{created}");
        assert_eq!(created["workspace"]["role"], "owner");
        let html = browser.get("/dashboard").await.text().await.unwrap();
        assert!(html.contains(&format!("data-csrf=\"{}\"", browser.csrf)), "the page carries the token");
        let res = app.client.post(app.url("/auth/logout")).header("Cookie", &browser.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded").header("Origin", &own_origin)
            .header("X-CSRF-Token", &browser.csrf).body("").send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_error(browser.get("/auth/me").await, 401, "unauthenticated").await;
    }
}

both_engines! {
    async fn personal_access_tokens_need_no_csrf_defence(app) {
        let browser = app.login("erin@example.com").await;
        let (s, created) = status_json(browser.post("/v1/auth/tokens", &json!({"name": "ci", "expires_in_days": 1})).await).await;
        assert_eq!(s, 200, "{created}");
        let pat = created["token"].as_str().unwrap();
        // A browser never attaches a bearer token on its own, so a request that carries one is
        // its holder's doing: no CSRF defence applies, whatever its Origin.
        let res = app.client.post(app.url("/v1/workspaces")).bearer_auth(pat).header("Origin", "https://elsewhere.example")
            .json(&json!({"name": "from-ci"})).send().await.unwrap();
        let (s, body) = status_json(res).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["workspace"]["name"], "from-ci");
    }
}

both_engines! {
    async fn roles_decide_who_manages_keys_and_members(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let (s, added) = status_json(owner.post("/v1/workspace/members", &json!({"email": "Mia@Example.com"})).await).await;
        assert_eq!(s, 200, "{added}");
        assert_eq!(added["member"]["role"], "member");
        let member = app.login("mia@example.com").await;
        let (_, me) = status_json(member.get("/auth/me").await).await;
        assert_eq!(me["active_workspace_id"], app.workspace_id.as_str());

        assert_error(member.post("/v1/workspace/api-keys", &json!({"name": "ci"})).await, 403, "insufficient_role").await;
        assert_error(member.post("/v1/workspace/members", &json!({"email": "x@example.com"})).await, 403, "insufficient_role").await;
        let (s, keys) = status_json(member.get("/v1/workspace/api-keys").await).await;
        assert_eq!(s, 200, "members read");
        assert_eq!(keys["items"].as_array().unwrap().len(), 1);
        let (_, members) = status_json(member.get("/v1/workspace/members").await).await;
        assert_eq!(members["items"].as_array().unwrap().len(), 2);

        let (_, promoted) = status_json(owner.post("/v1/workspace/members", &json!({"email": "mia@example.com", "role": "admin"})).await).await;
        assert_eq!(promoted["member"]["role"], "admin");
        let (s, made) = status_json(member.post("/v1/workspace/api-keys", &json!({"name": "ci", "live": true})).await).await;
        assert_eq!(s, 200, "{made}");
        assert!(made["key"].as_str().unwrap().starts_with("svc_live_"));
        assert_error(member.post("/v1/workspace/members", &json!({"email": "z@example.com", "role": "owner"})).await, 403, "insufficient_role").await;
        // An admin can neither demote nor remove an owner.
        assert_error(member.post("/v1/workspace/members", &json!({"email": "owner@example.com", "role": "member"})).await, 403, "insufficient_role").await;
        assert_error(owner.post("/v1/workspace/members", &json!({"email": "owner@example.com", "role": "admin"})).await, 409, "last_owner").await;
        let owner_id = me["workspaces"].as_array().map(|_| ()).and(None::<String>);
        let _ = owner_id;
        let (_, all) = status_json(owner.get("/v1/workspace/members").await).await;
        let owner_user = all["items"].as_array().unwrap().iter().find(|m| m["role"] == "owner").unwrap()["user_id"].as_str().unwrap().to_owned();
        assert_error(owner.post(&format!("/v1/workspace/members/{owner_user}/remove"), &json!({})).await, 409, "last_owner").await;
        let mia = all["items"].as_array().unwrap().iter().find(|m| m["email"] == "mia@example.com").unwrap()["user_id"].as_str().unwrap().to_owned();
        assert_eq!(owner.post(&format!("/v1/workspace/members/{mia}/remove"), &json!({})).await.status(), 200);
        assert_error(member.get("/v1/workspace/api-keys").await, 403, "not_a_member").await;
        let types: Vec<String> = audit_events(&app, "").await.iter().map(|e| e["event_type"].as_str().unwrap().to_owned()).collect();
        assert!(types.contains(&"membership.granted".into()) && types.contains(&"membership.removed".into()), "{types:?}");
    }
}

both_engines! {
    async fn users_cannot_select_or_read_workspaces_they_do_not_belong_to(app) {
        let eve = app.login("eve@example.com").await;
        let (_, own) = status_json(eve.post("/v1/workspaces", &json!({"name": "eve's"})).await).await;
        let eve_ws = own["workspace"]["workspace_id"].as_str().unwrap().to_owned();
        assert_error(eve.post("/v1/workspaces/select", &json!({"workspace_id": app.workspace_id})).await, 404, "unknown_workspace").await;
        let (_, me) = status_json(eve.get("/auth/me").await).await;
        assert_eq!(me["active_workspace_id"], eve_ws.as_str(), "unchanged");
        let (_, keys) = status_json(eve.get("/v1/workspace/api-keys").await).await;
        assert_eq!(keys["items"].as_array().unwrap().len(), 0, "eve sees her own workspace's keys only");
        // A token naming someone else's workspace gets nothing either.
        let (_, pat) = status_json(eve.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
        let token = pat["token"].as_str().unwrap();
        let res = app.client.get(app.url("/v1/workspace/api-keys")).bearer_auth(token)
            .header("X-Service-Workspace-Id", &app.workspace_id).send().await.unwrap();
        assert_error(res, 403, "not_a_member").await;
        let res = app.client.get(app.url("/v1/workspace/members")).bearer_auth(token).send().await.unwrap();
        assert_eq!(res.status(), 200, "her only workspace is implied");
    }
}

both_engines! {
    async fn revoked_keys_and_tokens_stop_working_at_once(app) {
        app.grant(&app.workspace_id, "ops@example.com", "admin").await;
        let ops = app.login("ops@example.com").await;
        let (_, made) = status_json(ops.post("/v1/workspace/api-keys", &json!({"name": "deploy"})).await).await;
        let key = made["key"].as_str().unwrap().to_owned();
        let key_id = made["api_key"]["key_id"].as_str().unwrap().to_owned();
        assert_eq!(app.get_as(&key, "/v1/agents").await.status(), 200);
        // Last use is recorded off the request path; wait for it.
        let mut listed = Value::Null;
        for _ in 0..50 {
            listed = status_json(ops.get("/v1/workspace/api-keys").await).await.1;
            if listed["items"].as_array().unwrap().iter().any(|k| k["key_id"] == key_id.as_str() && k["last_used_at"].is_string()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let item = listed["items"].as_array().unwrap().iter().find(|k| k["key_id"] == key_id.as_str()).unwrap().clone();
        assert!(item["last_used_at"].is_string(), "{item}");
        assert_eq!((item["name"].as_str(), item["prefix"].as_str()), (Some("deploy"), Some("svc_test_")));
        assert_eq!(item["last_four"], &key[key.len() - 4..]);
        assert!(!listed.to_string().contains(&key));
        assert_eq!(ops.post(&format!("/v1/workspace/api-keys/{key_id}/revoke"), &json!({})).await.status(), 200);
        assert_error(app.get_as(&key, "/v1/agents").await, 401, "invalid_api_key").await;
        assert_error(ops.post(&format!("/v1/workspace/api-keys/{key_id}/revoke"), &json!({})).await, 404, "unknown_api_key").await;

        let (s, pat) = status_json(ops.post("/v1/auth/tokens", &json!({"name": "pipeline", "expires_in_days": 30})).await).await;
        assert_eq!(s, 200, "{pat}");
        let token = pat["token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("svc_pat_"));
        let me = || app.client.get(app.url("/auth/me")).bearer_auth(&token).send();
        let (s, body) = status_json(me().await.unwrap()).await;
        assert_eq!((s.as_u16(), body["auth"].as_str()), (200, Some("token")));
        // A token needs no CSRF token; an unscoped one makes tokens that expire no later than
        // itself, a scoped one none.
        let res = app.client.post(app.url("/v1/auth/tokens")).bearer_auth(&token).json(&json!({"name": "more", "expires_in_days": 90})).send().await.unwrap();
        let (s, more) = status_json(res).await;
        assert_eq!(s, 200, "{more}");
        assert_eq!(more["access_token"]["expires_at"], pat["access_token"]["expires_at"]);
        let scoped = more["token"].as_str().unwrap().to_owned();
        let res = app.client.post(app.url("/v1/auth/tokens")).bearer_auth(&token).json(&json!({"name": "narrow", "scopes": ["read"]})).send().await.unwrap();
        let narrow = status_json(res).await.1["token"].as_str().unwrap().to_owned();
        let res = app.client.post(app.url("/v1/auth/tokens")).bearer_auth(&narrow).json(&json!({"name": "wider"})).send().await.unwrap();
        let body = assert_error(res, 403, "insufficient_scope").await;
        assert!(body["message"].as_str().unwrap().contains("scopes"), "{body}");
        let res = app.client.post(app.url("/v1/auth/tokens")).bearer_auth(&token).json(&json!({"name": "many", "scopes": vec!["read"; 17]})).send().await.unwrap();
        assert_error(res, 400, "invalid_scopes").await;
        let res = app.client.post(app.url("/v1/workspaces")).bearer_auth(&narrow).json(&json!({"name": "mine"})).send().await.unwrap();
        assert_error(res, 403, "insufficient_scope").await;
        let res = app.client.post(app.url("/v1/auth/tokens/pat_00000000000000000000000000000000/revoke")).bearer_auth(&scoped).json(&json!({})).send().await.unwrap();
        assert_error(res, 404, "unknown_token").await;
        let token_id = pat["access_token"]["token_id"].as_str().unwrap();
        assert_eq!(ops.post(&format!("/v1/auth/tokens/{token_id}/revoke"), &json!({})).await.status(), 200);
        assert_error(me().await.unwrap(), 401, "invalid_token").await;
        let (_, tokens) = status_json(ops.get("/v1/auth/tokens").await).await;
        let revoked = tokens["items"].as_array().unwrap().iter().find(|t| t["token_id"] == token_id).unwrap();
        assert!(revoked["revoked_at"].is_string());
        assert_error(ops.post("/v1/auth/tokens", &json!({"name": "x", "expires_in_days": 400})).await, 400, "invalid_expires_in_days").await;
    }
}

both_engines! {
    async fn api_keys_are_refused_on_session_endpoints(app) {
        let res = app.client.get(app.url("/v1/workspaces")).bearer_auth(&app.key).send().await.unwrap();
        assert_error(res, 401, "session_required").await;
        assert_error(app.client.get(app.url("/v1/workspaces")).send().await.unwrap(), 401, "unauthenticated").await;
    }
}

both_engines! {
    async fn status_checks_run_and_summarise(app) {
        let (_, before) = status_json(app.client.get(app.url("/v1/status/summary")).send().await.unwrap()).await;
        assert_eq!(before["status"], "unknown");
        assert_error(app.client.post(app.url("/v1/status/checks/run")).send().await.unwrap(), 401, "unauthenticated").await;
        let (s, run) = status_json(app.post("/v1/status/checks/run", &json!({})).await).await;
        assert_eq!(s, 200, "{run}");
        assert_eq!(run["status"], "ok");
        let (_, after) = status_json(app.client.get(app.url("/v1/status/summary")).send().await.unwrap()).await;
        let components: Vec<(&str, &str)> = after["components"].as_array().unwrap().iter()
            .map(|c| (c["component"].as_str().unwrap(), c["status"].as_str().unwrap())).collect();
        assert_eq!(components, [("database", "ok"), ("mailer", "ok")]);
        app.grant(&app.workspace_id, "m@example.com", "member").await;
        let member = app.login("m@example.com").await;
        assert_error(member.post("/v1/status/checks/run", &json!({})).await, 403, "insufficient_role").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contact_is_stored_mailed_and_rate_limited() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| {
        c.contact_email = Some("ops@example.com".into());
        c.contact_limit_per_ip = 2;
    })
    .await;
    let submit = |body: Value| {
        app.client
            .post(app.url("/v1/contact/submit"))
            .json(&body)
            .send()
    };
    let (s, body) = status_json(
        submit(
            json!({"name": "Lin", "email": "lin@example.com", "message": "Do you support SAML?"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["notified"], true);
    let messages = app.smtp.wait_for(1).await;
    assert_eq!(messages[0].rcpt, ["ops@example.com"]);
    assert!(messages[0].data.contains("Do you support SAML?"));
    assert_error(
        submit(json!({"name": "Lin", "email": "nope", "message": "x"}))
            .await
            .unwrap(),
        400,
        "invalid_email",
    )
    .await;
    assert_error(
        submit(json!({"name": "Lin", "email": "lin@example.com", "message": " "}))
            .await
            .unwrap(),
        400,
        "missing_message",
    )
    .await;
    assert_eq!(
        submit(json!({"name": "Lin", "email": "lin@example.com", "message": "again"}))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_error(
        submit(json!({"name": "Lin", "email": "lin@example.com", "message": "third"}))
            .await
            .unwrap(),
        429,
        "rate_limited",
    )
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_server_that_is_down_is_an_error_the_caller_sees() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| {
        c.email_url = "smtp://127.0.0.1:1?tls=none".into()
    })
    .await;
    let res = app
        .client
        .post(app.url("/auth/start-login"))
        .json(&json!({"email": "a@example.com"}))
        .send()
        .await
        .unwrap();
    assert_error(res, 502, "provider_unavailable").await;
    let (_, run) = status_json(app.post("/v1/status/checks/run", &json!({})).await).await;
    assert_eq!(run["status"], "down");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_keeps_mail_for_a_laptop_without_a_mail_server() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| c.email_url = "outbox".into()).await;
    app.grant(&app.workspace_id, "dev@example.com", "owner")
        .await;
    let res = app
        .client
        .post(app.url("/auth/start-login"))
        .json(&json!({"email": "dev@example.com"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let outbox = run_cli(
        &app.db_url,
        &["admin", "outbox", "list", "--output", "json"],
    )
    .await;
    let text = outbox["items"][0]["text"].as_str().unwrap();
    assert_eq!(outbox["items"][0]["to"], json!(["dev@example.com"]));
    let link = text
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    let res = app.client.get(link).send().await.unwrap();
    assert_eq!(res.status(), 303);
    let cookie = session_cookie_of(&res);
    let (_, me) = status_json(
        app.client
            .get(app.url("/auth/me"))
            .header("Cookie", cookie)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(me["user"]["email"], "dev@example.com");
    app.stop().await;
}

both_engines! {
    async fn a_workspace_created_with_an_owner_has_that_owner(app) {
        let made = run_cli(&app.db_url, &["admin", "workspace", "create", "team", "--owner", "Lead@Example.com", "--output", "json"]).await;
        let ws = made["workspace"]["workspace_id"].as_str().unwrap().to_owned();
        assert_eq!(made["workspace"]["owner"], "lead@example.com");
        let lead = app.login("lead@example.com").await;
        let (s, me) = status_json(lead.get("/auth/me").await).await;
        assert_eq!(s, 200, "{me}");
        assert_eq!(me["workspaces"][0]["workspace_id"], ws.as_str(), "{me}");
        assert_eq!(me["workspaces"][0]["role"], "owner", "{me}");
        let key = run_cli(&app.db_url, &["admin", "api-key", "create", "--workspace", &ws, "--output", "json"]).await;
        let key = key["api_key"]["key"].as_str().unwrap();
        let (_, events) = status_json(app.get_as(key, "/v1/workspace/audit/events?event_type=membership.granted").await).await;
        assert_eq!(events["items"].as_array().map(Vec::len), Some(1), "{events}");
    }
}

// ---- the console --------------------------------------------------------------------------

/// Posts a console form (`application/x-www-form-urlencoded`) with the person's cookie.
pub(crate) async fn post_form(
    browser: &Browser,
    path: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let body = fields
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    browser
        .app
        .client
        .post(browser.app.url(path))
        .header("Cookie", &browser.cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

pub(crate) fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) async fn page(browser: &Browser, path: &str) -> (u16, String) {
    let res = browser.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

pub(crate) async fn agent_status(app: &TestApp, agent_id: &str) -> String {
    let (s, got) = status_json(app.get(&format!("/v1/agents/{agent_id}")).await).await;
    assert_eq!(s, 200, "{got}");
    got["agent"]["status"].as_str().unwrap().to_owned()
}

pub(crate) const HOSTILE: &str = "<script>alert(1)</script>\"&'";

both_engines! {
    async fn console_pages_render_for_each_role_and_escape_what_agents_send(app) {
        let hostile = app.active_agent(HOSTILE).await;
        let calm = app.active_agent("calm-bot").await;
        let (s, body) = status_json(app.post("/v1/workspace/agents/upsert", &json!({
            "external_agent_key": "ext-1", "agent_id": hostile.id, "labels": ["payments"]
        })).await).await;
        assert_eq!(s, 200, "{body}");

        for role in ["owner", "admin", "member", "approver"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;

            let (s, html) = page(&person, "/dashboard").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains(&format!("id=\"role\" title=\"your role in this workspace\">{role}</span>")), "{role}");
            assert!(html.contains("href=\"/dashboard/agents\""), "{role}: every role reads agents");
            assert!(html.contains(&format!("name=\"csrf\" value=\"{}\"", person.csrf)), "the switcher carries the token");

            let (s, html) = page(&person, "/dashboard/agents").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("aria-current=\"page\">Agents</a>"));
            assert!(html.contains(&hostile.id) && html.contains(&calm.id));
            assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;&#34;&#38;&#39;"), "{html}");
            assert!(!html.contains("<script>alert(1)"), "{role}: the name is escaped");

            let (s, html) = page(&person, &format!("/dashboard/agents/{}", hostile.id)).await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(!html.contains("<script>alert(1)"));
            assert!(html.contains("<span class=\"badge\">payments</span>"), "labels are shown");
            assert!(html.contains("agent.registered"), "{role}: its audit events");
            let may_change = role == "owner" || role == "admin";
            assert_eq!(html.contains("id=\"action-suspend\""), may_change, "{role}: actions only for those who may");

            let (s, html) = page(&person, &format!("/dashboard/agents/{}/suspend", hostile.id)).await;
            if may_change {
                assert_eq!(s, 200, "{role}: {html}");
                assert!(html.contains("method=\"post\"") && html.contains(&format!("name=\"csrf\" value=\"{}\"", person.csrf)));
            } else {
                assert_eq!(s, 403, "{role}: the server refuses the confirmation page too");
                assert!(html.contains("data-code=\"insufficient_role\""), "{html}");
            }
        }

        // Filters and pages.
        let owner = app.login("owner@example.com").await;
        let listed = |html: &str, agent: &TestAgent| html.contains(&format!("<code>{}</code>", agent.id));
        let (_, html) = page(&owner, "/dashboard/agents?q=CALM").await;
        assert!(listed(&html, &calm) && !listed(&html, &hostile), "search by part of the name");
        let (_, html) = page(&owner, &format!("/dashboard/agents?q={}", hostile.id)).await;
        assert!(listed(&html, &hostile) && !listed(&html, &calm), "search by id");
        let (_, html) = page(&owner, "/dashboard/agents?q=%25").await;
        assert!(!listed(&html, &hostile) && !listed(&html, &calm) && html.contains("id=\"empty\""), "a % is a character, not a wildcard");
        let (_, html) = page(&owner, "/dashboard/agents?label=payments").await;
        assert!(listed(&html, &hostile) && !listed(&html, &calm), "by label");
        let (_, html) = page(&owner, "/dashboard/agents?label=nothing").await;
        assert!(html.contains("No agent matches these filters."));
        let (_, html) = page(&owner, "/dashboard/agents?status=active&risk_tier=low").await;
        assert!(listed(&html, &hostile) && listed(&html, &calm));
        let (_, html) = page(&owner, "/dashboard/agents?status=suspended").await;
        assert!(!listed(&html, &hostile) && !listed(&html, &calm));
        let (s, html) = page(&owner, "/dashboard/agents?risk_tier=extreme").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_risk_tier\""), "{html}");

        let (_, first) = page(&owner, "/dashboard/agents?limit=1").await;
        assert!(listed(&first, &calm) && !listed(&first, &hostile), "newest first");
        let next = first.split("id=\"next-page\"").next().unwrap().rsplit("href=\"").next().unwrap().split('"').next().unwrap().replace("&#38;", "&");
        let (s, second) = page(&owner, &next).await;
        assert_eq!(s, 200, "{next}");
        assert!(listed(&second, &hostile) && !listed(&second, &calm));
        assert!(!second.contains("id=\"next-page\"") && second.contains("id=\"first-page\""));

        // An agent's heartbeats: a latency chart over time (oldest left) above the table.
        let (_, html) = page(&owner, &format!("/dashboard/agents/{}", calm.id)).await;
        assert!(html.contains("id=\"no-heartbeats\"") && !html.contains("id=\"latency-chart\""));
        let items: Vec<Value> = [(40.0, "2026-01-01T00:00:00Z"), (80.0, "2026-01-01T00:01:00Z"), (20.0, "2026-01-01T00:02:00Z")]
            .iter()
            .map(|(ms, at)| json!({"agent_id": calm.id, "status": "ok", "latency_ms": ms, "observed_at": at}))
            .collect();
        let (s, body) = status_json(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": items})).await).await;
        assert_eq!((s.as_u16(), body["accepted"].as_i64()), (200, Some(3)), "{body}");
        let (_, html) = page(&owner, &format!("/dashboard/agents/{}", calm.id)).await;
        assert!(html.contains("points=\"0,32 120,4 240,46\""), "40, 80, 20 ms scaled to the highest: {html}");
        assert!(html.contains("3 heartbeats from 2026-01-01T00:00:00.000Z to 2026-01-01T00:02:00.000Z: latency from 20 to 80 ms, last 20 ms"), "{html}");

        // Not logged in: to the login page.
        let res = app.client.get(app.url("/dashboard/agents")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/login"));
        let (s, _) = page(&owner, "/dashboard/agents/agt_nope").await;
        assert_eq!(s, 404);
    }
}

both_engines! {
    async fn agent_actions_are_forms_for_admins_with_the_csrf_token(app) {
        let agent = app.active_agent("worker").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        let member = app.login("member@example.com").await;
        let admin = app.login("admin@example.com").await;
        let suspend = format!("/dashboard/agents/{}/suspend", agent.id);

        // A member's POST is refused by the server, with the right token.
        let res = post_form(&member, &suspend, &[("csrf", &member.csrf)]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("Not allowed"));
        assert_eq!(agent_status(&app, &agent.id).await, "active");

        // CSRF: no token, a wrong token, or another site's request are refused.
        let res = post_form(&admin, &suspend, &[]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"csrf_failed\""));
        assert_eq!(post_form(&admin, &suspend, &[("csrf", "forged")]).await.status(), 403);
        let cross = admin.app.client.post(app.url(&suspend)).header("Cookie", &admin.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded").header("Origin", "https://evil.example")
            .body(format!("csrf={}", admin.csrf)).send().await.unwrap();
        assert_eq!(cross.status(), 403);
        assert_eq!(agent_status(&app, &agent.id).await, "active");

        // The admin's form, with the token: done, audited with the admin as actor.
        let res = post_form(&admin, &suspend, &[("csrf", &admin.csrf), ("reason", "looks <odd>")]).await;
        assert_eq!(res.status(), 303);
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        assert_eq!(location, format!("/dashboard/agents/{}?done=suspend", agent.id));
        assert_eq!(agent_status(&app, &agent.id).await, "suspended");
        let me: Value = app.client.get(app.url("/auth/me")).header("Cookie", &admin.cookie).send().await.unwrap().json().await.unwrap();
        let events = audit_events(&app, &format!("event_type=agent.suspended&agent_id={}", agent.id)).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["actor"], format!("user:{}", me["user"]["user_id"].as_str().unwrap()));
        assert_eq!(events[0]["details"]["reason"], "looks <odd>");
        let (s, html) = page(&admin, &location).await;
        assert_eq!(s, 200);
        assert!(html.contains("Agent suspended.") && html.contains("id=\"agent-status\">suspended<"));
        assert!(html.contains("id=\"action-resume\"") && !html.contains("id=\"action-suspend\""));
        assert!(html.contains("<td>agent.suspended</td>"), "the agent's audit events show the change");

        // Resume, and a move the status does not allow.
        let res = post_form(&admin, &format!("/dashboard/agents/{}/resume", agent.id), &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(agent_status(&app, &agent.id).await, "active");
        let res = post_form(&admin, &format!("/dashboard/agents/{}/approve", agent.id), &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 303, "approving an active agent changes nothing");
        let res = post_form(&admin, &format!("/dashboard/agents/{}/revoke", agent.id), &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 303);
        let res = post_form(&admin, &format!("/dashboard/agents/{}/resume", agent.id), &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 409);
        assert!(res.text().await.unwrap().contains("data-code=\"invalid_status_transition\""));
        let res = post_form(&admin, &format!("/dashboard/agents/{}/delete", agent.id), &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 404);

        // The workspace switcher is a form too.
        let (other, _) = app.other_workspace().await;
        app.grant(&other, "admin@example.com", "member").await;
        assert_eq!(post_form(&admin, "/dashboard/workspace", &[("workspace_id", &other)]).await.status(), 403, "no token");
        let res = post_form(&admin, "/dashboard/workspace", &[("csrf", &admin.csrf), ("workspace_id", &other)]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard"));
        let (_, html) = page(&admin, "/dashboard").await;
        assert!(html.contains("id=\"role\" title=\"your role in this workspace\">member</span>"), "the role in the new workspace");
        let (s, _) = page(&admin, &format!("/dashboard/agents/{}", agent.id)).await;
        assert_eq!(s, 404, "the agent is in the other workspace");
    }
}

both_engines! {
    async fn the_overview_shows_agents_decisions_approvals_and_the_kill_switch(app) {
        let agent = crate::approvals::setup(&app).await;
        let idle = app.active_agent("idle").await;
        assert_eq!(app.post(&format!("/v1/agents/{}/suspend", idle.id), &json!({})).await.status(), 200);
        let pending = TestAgent::new();
        pending.register(&app, Some(&app.key), "pending-bot").await;
        for amount in [50, 60, 2000, 400] {
            let body = json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": amount}});
            assert_eq!(app.post("/v1/check", &body).await.status(), 200);
        }
        let (s, body) = status_json(app.post("/v1/identity/kill-switch/minting", &json!({"paused": true, "reason": "drill <now>"})).await).await;
        assert_eq!(s, 200, "{body}");

        let owner = app.login("owner@example.com").await;
        let (s, html) = page(&owner, "/dashboard").await;
        assert_eq!(s, 200, "{html}");
        for (status, n) in [("pending", 1), ("active", 1), ("suspended", 1), ("revoked", 0)] {
            assert!(html.contains(&format!("data-status=\"{status}\">{n}<")), "{status}: {html}");
        }
        for (outcome, n) in [("allow", 2), ("deny", 1), ("challenge", 1)] {
            for window in ["hour", "day"] {
                assert!(html.contains(&format!("data-window=\"{window}\" data-outcome=\"{outcome}\">{n}<")), "{outcome} {window}: {html}");
            }
        }
        // The chart: the day in 24 columns, this hour's stacked allow, challenge and deny.
        assert!(html.contains("id=\"decisions-chart\""), "{html}");
        assert_eq!(html.matches("<g><title>").count(), 24, "a column an hour");
        assert!(html.contains("<title>the last hour: 2 allow, 1 challenge, 1 deny</title>"), "{html}");
        assert_eq!(html.matches("<rect ").count(), 3, "only the last hour has bars");
        assert!(html.contains("id=\"no-leaks\""), "no leak yet");
        assert!(html.contains("id=\"pending-approvals\">1<"));
        assert!(html.contains("id=\"minting\">minting paused</strong>: drill &#60;now&#62;"), "{html}");
        assert!(html.contains("id=\"denials\"") && html.contains(&format!("/dashboard/agents/{}", agent.id)));
        assert!(html.contains("id=\"api-keys\"") && !html.contains(&app.key), "keys by their last four only");
    }
}

// ---- the console's policies -----------------------------------------------------------------

fn finance_spec(agent_id: &str, allow_up_to: f64) -> Value {
    json!({
        "reusable_policy_blocks": {
            "refunds": {"amount": {"limits": {"USD": {"allow_up_to": allow_up_to, "challenge_up_to": 1000}}}},
            "ops": {"actions": {"allow": ["read"], "deny": ["drop_db"]}}
        },
        "agent_groups": [{"name": "finance", "members": [agent_id]}],
        "bindings": [
            {"name": "finance-refunds", "group": "finance", "blocks": ["refunds"], "actions": ["refund"]},
            {"name": "finance-ops", "group": "finance", "blocks": ["ops"]}
        ]
    })
}

/// The value of a form's hidden field, as the browser would post it.
pub(crate) fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no field `{name}` in {html}"))
        + marker.len();
    let value = &html[start..start + html[start..].find('"').unwrap()];
    value
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
}

async fn policy_now(app: &TestApp) -> (i64, String) {
    let (s, got) = status_json(app.get("/v1/policies/pol_default").await).await;
    assert_eq!(s, 200, "{got}");
    (
        got["version"].as_i64().unwrap(),
        got["policy_hash"].as_str().unwrap().to_owned(),
    )
}

both_engines! {
    async fn policy_pages_render_for_each_role_and_escape_hostile_strings(app) {
        let agent = app.active_agent("fin").await;
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        for (allow, name) in [(100.0, HOSTILE), (200.0, HOSTILE)] {
            let (s, body) = status_json(owner.post("/v1/policies/sync", &json!({"spec": finance_spec(&agent.id, allow), "policy_name": name})).await).await;
            assert_eq!(s, 200, "{body}");
        }
        let (_, v2_hash) = policy_now(&app).await;

        for role in ["owner", "admin", "member", "approver"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;
            let may_change = role == "owner" || role == "admin";

            let (s, html) = page(&person, "/dashboard").await;
            assert_eq!(s, 200);
            assert!(html.contains("href=\"/dashboard/policies\">Policies</a>"), "{role}: every role reads policies");

            let (s, html) = page(&person, "/dashboard/policies").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("aria-current=\"page\">Policies</a>"));
            assert!(html.contains("<code>pol_default</code>") && html.contains(&v2_hash), "{html}");
            assert!(html.contains("<td class=\"num\">2</td>"), "the version");
            assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;&#34;&#38;&#39;"), "{html}");
            assert!(!html.contains("<script>alert(1)"), "{role}: the name is escaped");

            let (s, html) = page(&person, "/dashboard/policies/pol_default").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(!html.contains("<script>alert(1)"));
            assert!(html.contains("id=\"spec-yaml\"") && html.contains("finance-refunds") && html.contains("allow_up_to: 200"), "{html}");
            assert!(html.contains("id=\"cedar\"") && html.contains("@source(&#34;finance-refunds/refunds&#34;)"), "the compiled Cedar");
            assert!(html.contains("id=\"versions\"") && html.contains("id=\"policy-version\">2<"));
            assert!(html.contains("action=\"/dashboard/policies/pol_default/diff\""), "the diff form");
            assert!(html.contains("href=\"/dashboard/policies/pol_default/test\""), "{role}: the bench");
            assert_eq!(html.contains("id=\"dry-run\""), may_change, "{role}: dry run only for those who may");
            assert_eq!(html.contains("id=\"rollback-1\""), may_change, "{role}: rollback only for those who may");

            let (s, html) = page(&person, "/dashboard/policies/pol_default/diff?from=1&to=2").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("<tr><td>blocks</td><td>changed</td><td><code>refunds</code></td></tr>"), "{html}");
            assert!(html.contains("<span class=\"del\">") && html.contains("<span class=\"add\">"), "{html}");

            for path in ["/dashboard/policies/pol_default/dry-run", "/dashboard/policies/pol_default/rollback/1"] {
                let (s, html) = page(&person, path).await;
                if may_change {
                    assert_eq!(s, 200, "{role} {path}: {html}");
                    assert!(html.contains("method=\"post\"") && html.contains(&format!("name=\"csrf\" value=\"{}\"", person.csrf)));
                } else {
                    assert_eq!(s, 403, "{role} {path}: the server refuses the page too");
                    assert!(html.contains("data-code=\"insufficient_role\""), "{html}");
                }
            }

            // The bench, for every role that reads: evaluation only.
            let (s, html) = page(&person, "/dashboard/policies/pol_default/test").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("id=\"bench-form\"") && html.contains(&format!("name=\"csrf\" value=\"{}\"", person.csrf)));
            let res = post_form(&person, "/dashboard/policies/pol_default/test", &[
                ("csrf", &person.csrf), ("agent_id", &agent.id), ("status", "active"), ("risk_tier", "low"),
                ("metadata", "{}"), ("labels", "{}"), ("action", "read"), ("context", "{}"), ("against", "current"),
            ]).await;
            assert_eq!(res.status(), 200, "{role}");
            let html = res.text().await.unwrap();
            assert!(html.contains("id=\"outcome\">allow<"), "{html}");
            assert!(html.contains("id=\"determining\"><code>finance-ops/ops</code>"), "{html}");
        }

        let owner = app.login("owner@example.com").await;
        let (s, html) = page(&owner, "/dashboard/policies/pol_default/diff?from=one&to=2").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_from\""), "{html}");
        let (s, html) = page(&owner, "/dashboard/policies/pol_default/diff?from=1&to=9").await;
        assert_eq!(s, 404);
        assert!(html.contains("data-code=\"unknown_version\""), "{html}");
        let (s, _) = page(&owner, "/dashboard/policies/pol_nope").await;
        assert_eq!(s, 404);
        let res = app.client.get(app.url("/dashboard/policies")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/login"));
    }
}

both_engines! {
    async fn dry_run_apply_conflict_and_rollback_through_the_console(app) {
        let agent = app.active_agent("fin").await;
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;
        let (_, default_hash) = policy_now(&app).await;
        let yaml = serde_yaml_ng::to_string(&finance_spec(&agent.id, 100.0)).unwrap();
        let dry = "/dashboard/policies/pol_default/dry-run";
        let apply = "/dashboard/policies/pol_default/apply";

        // A member's POSTs are refused by the server, with the right token.
        let res = post_form(&member, dry, &[("csrf", &member.csrf), ("spec", &yaml)]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"insufficient_role\""));
        let res = post_form(&member, apply, &[("csrf", &member.csrf), ("spec", &yaml), ("expected_policy_hash", &default_hash)]).await;
        assert_eq!(res.status(), 403);
        assert_eq!(policy_now(&app).await.0, 0, "nothing applied");

        // CSRF: without the token, or with another, refused.
        let res = post_form(&admin, dry, &[("spec", &yaml)]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"csrf_failed\""));
        let res = post_form(&admin, apply, &[("csrf", "forged"), ("spec", &yaml), ("expected_policy_hash", &default_hash)]).await;
        assert_eq!(res.status(), 403);

        // A spec that does not compile: its errors, escaped, and the text kept.
        let bad = format!("{yaml}\"{HOSTILE}\": 1\n");
        let res = post_form(&admin, dry, &[("csrf", &admin.csrf), ("spec", &bad)]).await;
        assert_eq!(res.status(), 422);
        let html = res.text().await.unwrap();
        assert!(html.contains("id=\"errors\"") && html.contains("&#60;script&#62;"), "{html}");
        assert!(!html.contains("<script>alert(1)"), "{html}");

        // A recorded check the spec would decide otherwise (the default policy denies it).
        let (s, read) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await).await;
        assert_eq!((s.as_u16(), read["decision"].as_str()), (200, Some("deny")), "{read}");

        // The dry run: the diff, both hashes, and the apply form carrying the current hash.
        let res = post_form(&admin, dry, &[("csrf", &admin.csrf), ("spec", &yaml)]).await;
        assert_eq!(res.status(), 200);
        let html = res.text().await.unwrap();
        assert!(html.contains(&format!("id=\"current-hash\">{default_hash}<")), "{html}");
        assert!(html.contains("<tr><td>blocks</td><td>added</td><td><code>ops, refunds</code></td></tr>"), "{html}");
        assert_eq!(hidden(&html, "expected_policy_hash"), default_hash);
        assert_eq!(hidden(&html, "spec"), yaml, "the apply form carries the spec that was dry-run");
        // What it makes more permissive, and what it would change in recorded checks: the
        // read, linked to its event.
        assert!(html.contains("id=\"semantic-summary\""), "{html}");
        assert!(html.contains("<td>(no group) → finance</td><td><code>read</code></td><td><code>status = active</code></td><td>deny</td><td>allow</td>"), "{html}");
        assert!(html.contains("id=\"impact-summary\" data-changed=\"1\""), "{html}");
        assert!(html.contains("id=\"impact-deny_to_allow\""), "{html}");
        assert!(html.contains("/dashboard/audit/evt_"), "{html}");
        let desired = html.split("id=\"desired-hash\">").nth(1).unwrap().split('<').next().unwrap().to_owned();
        let key = hidden(&html, "idempotency_key");
        assert_eq!(policy_now(&app).await.0, 0, "a dry run changes nothing");

        // Apply: live, audited with the admin as actor; the same form again is applied once.
        let form = [("csrf", admin.csrf.as_str()), ("spec", &yaml), ("expected_policy_hash", &default_hash), ("idempotency_key", &key)];
        let res = post_form(&admin, apply, &form).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"].to_str().unwrap(), "/dashboard/policies/pol_default?done=applied");
        assert_eq!(policy_now(&app).await, (1, desired.clone()));
        let res = post_form(&admin, apply, &form).await;
        assert_eq!(res.status(), 303, "a second click replays the first answer");
        assert_eq!(policy_now(&app).await.0, 1);
        let events = audit_events(&app, "event_type=policy.applied").await;
        assert_eq!(events.len(), 1);
        assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
        let (_, html) = page(&admin, "/dashboard/policies/pol_default?done=applied").await;
        assert!(html.contains("id=\"done\"") && html.contains("id=\"policy-version\">1<"));

        // A dry run, then the policy changes meanwhile: the apply is a visible conflict.
        let next = serde_yaml_ng::to_string(&finance_spec(&agent.id, 300.0)).unwrap();
        let res = post_form(&admin, dry, &[("csrf", &admin.csrf), ("spec", &next)]).await;
        let html = res.text().await.unwrap();
        let (expected, key) = (hidden(&html, "expected_policy_hash"), hidden(&html, "idempotency_key"));
        assert_eq!(expected, desired);
        let (s, body) = status_json(owner.post("/v1/policies/sync", &json!({"spec": finance_spec(&agent.id, 50.0)})).await).await;
        assert_eq!(s, 200, "{body}");
        let (_, changed_hash) = policy_now(&app).await;
        let res = post_form(&admin, apply, &[("csrf", &admin.csrf), ("spec", &next), ("expected_policy_hash", &expected), ("idempotency_key", &key)]).await;
        assert_eq!(res.status(), 409);
        let html = res.text().await.unwrap();
        assert!(html.contains("id=\"conflict\"") && html.contains(&format!("id=\"conflict-hash\">{changed_hash}<")), "{html}");
        assert!(html.contains("allow_up_to: 300"), "the spec is kept to dry-run again");
        assert_eq!(policy_now(&app).await, (2, changed_hash.clone()), "not overwritten");

        // Rollback to version 1: a confirmation with the diff, then a new version.
        let (s, html) = page(&admin, "/dashboard/policies/pol_default/rollback/1").await;
        assert_eq!(s, 200, "{html}");
        assert_eq!(hidden(&html, "expected_policy_hash"), changed_hash);
        let form = [("csrf", admin.csrf.clone()), ("expected_policy_hash", changed_hash.clone()), ("idempotency_key", hidden(&html, "idempotency_key"))];
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let res = post_form(&member, "/dashboard/policies/pol_default/rollback/1", &[("csrf", &member.csrf), ("expected_policy_hash", &changed_hash)]).await;
        assert_eq!(res.status(), 403, "a member may not roll back");
        let res = post_form(&admin, "/dashboard/policies/pol_default/rollback/1", &form[1..]).await;
        assert_eq!(res.status(), 403, "no token");
        let res = post_form(&admin, "/dashboard/policies/pol_default/rollback/1", &form).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"].to_str().unwrap(), "/dashboard/policies/pol_default?done=rolled_back");
        assert_eq!(policy_now(&app).await, (3, desired.clone()));
        assert_eq!(audit_events(&app, "event_type=policy.rolled_back").await.len(), 1);
        let res = post_form(&admin, "/dashboard/policies/pol_default/rollback/1", &form).await;
        assert_eq!(res.status(), 303, "the same confirmation again is replayed, not applied twice");
        assert_eq!(policy_now(&app).await.0, 3);
        let (s, html) = page(&admin, "/dashboard/policies/pol_default/rollback/9").await;
        assert_eq!(s, 404);
        assert!(html.contains("data-code=\"unknown_version\""));

        // The bench against a draft: the draft decides, nothing is recorded.
        let before = audit_events(&app, "limit=200").await.len();
        let draft = "reusable_policy_blocks: {w: {actions: {allow: [write]}}}\nagent_groups: [{name: all, members: [agt_0123456789abcdef0123456789abcdef]}]\nbindings: [{name: all-w, group: all, blocks: [w]}]\n";
        let bench = |action: &'static str, against: &'static str, context: &'static str| {
            let member = member.clone();
            async move {
                post_form(&member, "/dashboard/policies/pol_default/test", &[
                    ("csrf", &member.csrf), ("agent_id", "agt_0123456789abcdef0123456789abcdef"), ("status", "active"),
                    ("risk_tier", "low"), ("metadata", ""), ("labels", "{}"), ("action", action), ("context", context),
                    ("against", against), ("draft", draft),
                ]).await
            }
        };
        let html = bench("write", "draft", "{}").await.text().await.unwrap();
        assert!(html.contains("id=\"outcome\">allow<") && html.contains("<code>all-w/w</code>"), "{html}");
        let html = bench("write", "current", "{}").await.text().await.unwrap();
        assert!(html.contains("id=\"outcome\">deny<") && html.contains("<code>no_matching_rule</code>"), "{html}");
        let res = bench(HOSTILE, "current", "[1]").await;
        assert_eq!(res.status(), 400);
        let html = res.text().await.unwrap();
        assert!(html.contains("`context` must be an object") && !html.contains("<script>alert(1)"), "{html}");
        let res = post_form(&member, "/dashboard/policies/pol_default/test", &[("action", "read")]).await;
        assert_eq!(res.status(), 403, "the bench's form needs the token too");
        assert_eq!(audit_events(&app, "limit=200").await.len(), before, "the bench records nothing");
    }
}

// ---- approvals and the audit trail in the console -------------------------------------------

/// An agent named `name` whose refunds over 100 USD wait for a human (up to 1000).
async fn refunds_agent(app: &TestApp, name: &str) -> TestAgent {
    let agent = app.active_agent(name).await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"refunds": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}}}},
        "agent_groups": [{"name": "finance", "members": [agent.id]}],
        "bindings": [{"group": "finance", "blocks": ["refunds"]}]
    }))
    .await;
    agent
}

/// Checks a refund of `amount` USD and answers the decision.
async fn refund_check(app: &TestApp, agent: &TestAgent, amount: i64) -> Value {
    let body = json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": amount}});
    let (s, out) = status_json(app.post("/v1/check", &body).await).await;
    assert_eq!(s, 200, "{out}");
    out
}

async fn challenge_status(app: &TestApp, id: &str) -> String {
    let (s, got) = status_json(app.get(&format!("/v1/policy-challenges/{id}")).await).await;
    assert_eq!(s, 200, "{got}");
    got["challenge"]["status"].as_str().unwrap().to_owned()
}

async fn user_actor(browser: &Browser) -> String {
    let me: Value = browser.get("/auth/me").await.json().await.unwrap();
    format!("user:{}", me["user"]["user_id"].as_str().unwrap())
}

/// The `href` of the link with this id in the page, unescaped.
pub(crate) fn link_of(html: &str, id: &str) -> String {
    html.split(&format!("id=\"{id}\""))
        .next()
        .unwrap()
        .rsplit("href=\"")
        .next()
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&#38;", "&")
}

both_engines! {
    async fn approvals_queue_decides_for_approvers_and_reads_for_members(app) {
        let agent = refunds_agent(&app, HOSTILE).await;
        let mut ids = Vec::new();
        for amount in [500, 600, 700] {
            let asked = refund_check(&app, &agent, amount).await;
            assert_eq!(asked["decision"], "challenge", "{asked}");
            ids.push(asked["challenge_id"].as_str().unwrap().to_owned());
        }
        let (first, second, third) = (&ids[0], &ids[1], &ids[2]);

        for role in ["owner", "admin", "approver", "member"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;
            let (s, html) = page(&person, "/dashboard").await;
            assert_eq!(s, 200);
            assert!(html.contains("href=\"/dashboard/approvals\">Approvals</a>") && html.contains("href=\"/dashboard/audit\">Audit</a>"), "{role}: both sections in the navigation");

            let (s, html) = page(&person, "/dashboard/approvals").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("aria-current=\"page\">Approvals</a>"));
            for id in &ids {
                assert!(html.contains(&format!("id=\"challenge-{id}\"")), "{role}: {id} is in the queue");
            }
            assert!(html.contains("<code class=\"action\">refund</code>"));
            assert!(html.contains("data-field=\"amount\">500<") && html.contains("data-field=\"currency\">USD<"), "the values the rule read: {html}");
            assert!(html.contains(" min <span class=\"muted\">(until "), "time left: {html}");
            assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;&#34;&#38;&#39;"), "{html}");
            assert!(!html.contains("<script>alert(1)"), "{role}: the agent's name is escaped");
            let decides = role != "member";
            assert_eq!(html.contains(&format!("id=\"approve-{first}\"")), decides, "{role}: buttons only for those who decide");
            assert_eq!(html.contains("id=\"read-only\""), !decides, "{role}");
            if decides {
                assert!(html.contains(&format!("action=\"/dashboard/approvals/{first}\"")) && html.contains(&format!("name=\"csrf\" value=\"{}\"", person.csrf)));
            }
            assert!(html.contains("id=\"history-empty\""), "nothing decided yet");
        }

        // A member's POST is refused by the server, with the right token.
        let member = app.login("member@example.com").await;
        let decide = format!("/dashboard/approvals/{first}");
        let res = post_form(&member, &decide, &[("csrf", &member.csrf), ("decision", "approve")]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"insufficient_role\""));
        assert_eq!(challenge_status(&app, first).await, "pending");

        // CSRF: no token, a wrong one, another site.
        let approver = app.login("approver@example.com").await;
        let res = post_form(&approver, &decide, &[("decision", "approve")]).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"csrf_failed\""));
        assert_eq!(post_form(&approver, &decide, &[("csrf", "forged"), ("decision", "approve")]).await.status(), 403);
        let cross = app.client.post(app.url(&decide)).header("Cookie", &approver.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded").header("Origin", "https://evil.example")
            .body(format!("csrf={}&decision=approve", approver.csrf)).send().await.unwrap();
        assert_eq!(cross.status(), 403);
        assert_eq!(challenge_status(&app, first).await, "pending");

        // The approver approves with a reason, the admin denies without one: audited as them.
        let res = post_form(&approver, &decide, &[("csrf", &approver.csrf), ("decision", "approve"), ("reason", "known <customer>")]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/approvals?done=approve"));
        assert_eq!(challenge_status(&app, first).await, "approved");
        let events = audit_events(&app, "event_type=approval.approved").await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["actor"], user_actor(&approver).await.as_str());
        assert_eq!((events[0]["details"]["challenge_id"].as_str(), events[0]["details"]["reason"].as_str()), (Some(first.as_str()), Some("known <customer>")));
        let again = refund_check(&app, &agent, 500).await;
        assert_eq!(again["decision"], "allow", "the approval counts for the agent's re-check: {again}");

        let admin = app.login("admin@example.com").await;
        let res = post_form(&admin, &format!("/dashboard/approvals/{second}"), &[("csrf", &admin.csrf), ("decision", "deny"), ("reason", "  ")]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(challenge_status(&app, second).await, "denied");
        let events = audit_events(&app, "event_type=approval.denied").await;
        assert_eq!(events[0]["actor"], user_actor(&admin).await.as_str());
        assert!(events[0]["details"].get("reason").is_none(), "a blank reason is none: {}", events[0]);

        let (s, html) = page(&approver, "/dashboard/approvals?done=approve").await;
        assert_eq!(s, 200);
        assert!(html.contains("id=\"done\" role=\"status\">Approved"));
        assert!(html.contains(&format!("id=\"challenge-{third}\"")) && !html.contains(&format!("id=\"challenge-{first}\"")), "decided ones leave the queue");
        assert!(html.contains("<span class=\"badge approved\">approved</span>") && html.contains("<span class=\"badge denied\">denied</span>"));

        // Refusals: decided already, a bad decision, a long reason, an unknown challenge.
        let res = post_form(&approver, &decide, &[("csrf", &approver.csrf), ("decision", "deny")]).await;
        assert_eq!(res.status(), 409);
        assert!(res.text().await.unwrap().contains("data-code=\"challenge_already_decided\""));
        let third_decide = format!("/dashboard/approvals/{third}");
        let res = post_form(&approver, &third_decide, &[("csrf", &approver.csrf), ("decision", "maybe")]).await;
        assert_eq!(res.status(), 400);
        assert!(res.text().await.unwrap().contains("data-code=\"invalid_decision\""));
        let long = "x".repeat(501);
        let res = post_form(&approver, &third_decide, &[("csrf", &approver.csrf), ("decision", "deny"), ("reason", &long)]).await;
        assert_eq!(res.status(), 400);
        assert_eq!(challenge_status(&app, third).await, "pending");
        let res = post_form(&approver, "/dashboard/approvals/pch_nope", &[("csrf", &approver.csrf), ("decision", "deny")]).await;
        assert_eq!(res.status(), 404);

        // The history, by pages.
        let (_, first_page) = page(&approver, "/dashboard/approvals?limit=1").await;
        assert!(first_page.contains("badge denied") && !first_page.contains("badge approved"), "newest first: {first_page}");
        let next = link_of(&first_page, "next-page");
        let (s, second_page) = page(&approver, &next).await;
        assert_eq!(s, 200, "{next}");
        assert!(second_page.contains("badge approved") && !second_page.contains("badge denied"));
        assert!(!second_page.contains("id=\"next-page\"") && second_page.contains("id=\"first-page\""));
        let (s, html) = page(&approver, "/dashboard/approvals?cursor=nope").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_cursor\""));

        let res = app.client.get(app.url("/dashboard/approvals")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/login"));
    }
}

both_engines! {
    async fn the_audit_trail_searches_pages_shows_one_event_and_exports(app) {
        let agent = refunds_agent(&app, "fin").await;
        let other = app.active_agent("other").await;
        let mut traces = Vec::new();
        for amount in [50, 2000, 500] {
            traces.push(refund_check(&app, &agent, amount).await["trace_id"].as_str().unwrap().to_owned());
        }
        let (s, body) = status_json(app.post(&format!("/v1/agents/{}/suspend", other.id), &json!({"reason": HOSTILE})).await).await;
        assert_eq!(s, 200, "{body}");
        let suspended = audit_events(&app, "event_type=agent.suspended").await;
        let suspended_id = suspended[0]["event_id"].as_str().unwrap().to_owned();

        let shown = |html: &str, event: &Value| html.contains(&format!("href=\"/dashboard/audit/{}\"", event["event_id"].as_str().unwrap()));
        for role in ["owner", "admin", "approver", "member"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;
            let (s, html) = page(&person, "/dashboard/audit").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("aria-current=\"page\">Audit</a>"));
            assert!(html.contains("data-stream=\"/v1/workspace/audit/stream?\""), "{role}: the live tail reads the stream");
            assert!(html.contains("href=\"/dashboard/audit/export?format=csv\"") && html.contains("href=\"/dashboard/audit/export?format=json\""));
            assert!(shown(&html, &suspended[0]), "{role}");
            let (s, html) = page(&person, &format!("/dashboard/audit/{suspended_id}")).await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains(&format!("id=\"event-id\">{suspended_id}<")) && html.contains("id=\"event-type\">agent.suspended<"));
            assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"), "the reason in the details, escaped: {html}");
            assert!(!html.contains("<script>alert(1)"), "{role}");
        }
        let owner = app.login("owner@example.com").await;

        // Each filter shows what the API's same filter answers, and only that.
        let all = audit_events(&app, "limit=200").await;
        for (query, api_query) in [
            ("decision=deny".to_owned(), "decision=deny".to_owned()),
            (format!("agent_id={}", other.id), format!("agent_id={}", other.id)),
            ("event_type=decision.check".to_owned(), "event_type=decision.check".to_owned()),
            (format!("trace_id={}", traces[2]), format!("trace_id={}", traces[2])),
            ("action=suspend".to_owned(), "action=suspend".to_owned()),
            ("decision=challenge&event_type=decision.check".to_owned(), "decision=challenge&event_type=decision.check".to_owned()),
        ] {
            let want = audit_events(&app, &api_query).await;
            assert!(!want.is_empty() && want.len() < all.len(), "{query}: a filter that narrows");
            let (s, html) = page(&owner, &format!("/dashboard/audit?{query}&limit=200")).await;
            assert_eq!(s, 200, "{query}: {html}");
            for event in &all {
                assert_eq!(shown(&html, event), want.contains(event), "{query}: {event}");
            }
        }
        let (_, html) = page(&owner, "/dashboard/audit?from=2000-01-01T00:00&until=2000-01-02").await;
        assert!(html.contains("No event matches this search.") && !html.contains("id=\"live\""), "a search with an end has no live tail");
        let (_, html) = page(&owner, "/dashboard/audit?from=2000-01-01T00:00:00Z").await;
        assert!(shown(&html, &suspended[0]));
        let (s, html) = page(&owner, "/dashboard/audit?from=yesterday").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_from\""), "{html}");
        let (s, html) = page(&owner, "/dashboard/audit?from=2025-01-02&until=2025-01-01").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_end_ms\""), "{html}");

        // Pages: newest first, one at a time.
        let (_, first) = page(&owner, "/dashboard/audit?limit=1&event_type=decision.check").await;
        let checks = audit_events(&app, "event_type=decision.check").await;
        assert!(shown(&first, &checks[0]) && !shown(&first, &checks[1]));
        let next = link_of(&first, "next-page");
        assert!(next.contains("event_type=decision.check") && next.contains("limit=1"), "{next}");
        let (s, second) = page(&owner, &next).await;
        assert_eq!(s, 200);
        assert!(shown(&second, &checks[1]) && !shown(&second, &checks[0]));
        assert!(second.contains("id=\"first-page\"") && !second.contains("id=\"live\""), "the live tail is for the first page");

        // One event's page: unknown, malformed, and another workspace's.
        let (s, html) = page(&owner, "/dashboard/audit/evt_0190aaaaaaaa7aaa8aaaaaaaaaaaaaaa").await;
        assert_eq!(s, 404);
        assert!(html.contains("data-code=\"unknown_event\""));
        assert_eq!(page(&owner, "/dashboard/audit/nope").await.0, 404);
        let (other_ws, _) = app.other_workspace().await;
        app.grant(&other_ws, "owner@example.com", "owner").await;
        assert_eq!(post_form(&owner, "/dashboard/workspace", &[("csrf", &owner.csrf), ("workspace_id", &other_ws)]).await.status(), 303);
        assert_eq!(page(&owner, &format!("/dashboard/audit/{suspended_id}")).await.0, 404, "the event is in the other workspace");
        assert_eq!(post_form(&owner, "/dashboard/workspace", &[("csrf", &owner.csrf), ("workspace_id", &app.workspace_id)]).await.status(), 303);

        // Export: a file of what the API exports, with its headers.
        let res = owner.get("/dashboard/audit/export?format=csv&decision=deny").await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/csv; charset=utf-8");
        assert_eq!(res.headers()["content-disposition"], "attachment; filename=\"audit-events.csv\"");
        let csv = res.text().await.unwrap();
        let denies = audit_events(&app, "decision=deny").await;
        assert_eq!(csv.lines().count(), denies.len() + 1, "a header and one line an event: {csv}");
        assert!(csv.contains(denies[0]["event_id"].as_str().unwrap()));
        let res = owner.get("/dashboard/audit/export?format=json").await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-disposition"], "attachment; filename=\"audit-events.json\"");
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let exported: Value = res.json().await.unwrap();
        let (_, api_export) = status_json(app.post("/v1/workspace/audit/export", &json!({"format": "json"})).await).await;
        assert_eq!(exported["count"], api_export["count"]);
        assert_eq!(exported["items"][0]["event_id"], api_export["items"][0]["event_id"]);
        let (s, html) = page(&owner, "/dashboard/audit/export?format=xml").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_format\""));

        // The stream the live tail reads accepts the session cookie.
        let res = owner.get("/v1/workspace/audit/stream").await;
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        drop(res);

        let res = app.client.get(app.url("/dashboard/audit/export?format=csv")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/login"));
    }
}

/// An agent registered without a workspace and its claim link.
async fn stray_agent(app: &TestApp, name: &str) -> (TestAgent, String) {
    let mut agent = TestAgent::new();
    agent.id = agent.register(app, None, name).await;
    assert_eq!(agent.attest_latest(app).await.status(), 200);
    let (s, code) = status_json(
        agent
            .signed_post(
                app,
                &format!("/v1/agents/{}/claim-code", agent.id),
                &json!({}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{code}");
    let url = code["claim_url"].as_str().unwrap().to_owned();
    (agent, url)
}

both_engines! {
    async fn admins_claim_and_reject_agents_from_the_console(app) {
        let (agent, link) = stray_agent(&app, HOSTILE).await;
        let code = link.rsplit('/').next().unwrap().to_owned();
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;

        let (_, html) = page(&admin, "/dashboard/agents").await;
        assert!(html.contains("id=\"claim-an-agent\"") && html.contains("action=\"/dashboard/agents/claim\""));
        let (_, html) = page(&member, "/dashboard/agents").await;
        assert!(!html.contains("id=\"claim-an-agent\""), "no claim form for a member");

        // A member may neither look the link up nor claim; nor may a request without the token.
        for fields in [vec![("code", link.as_str())], vec![("code", link.as_str()), ("decision", "claim")]] {
            let mut with_token = fields.clone();
            with_token.push(("csrf", &member.csrf));
            let res = post_form(&member, "/dashboard/agents/claim", &with_token).await;
            assert_eq!(res.status(), 403);
            assert!(res.text().await.unwrap().contains("data-code=\"insufficient_role\""));
            let res = post_form(&admin, "/dashboard/agents/claim", &fields).await;
            assert_eq!(res.status(), 403, "no CSRF token");
        }

        // The admin pastes the link: the agent is shown (escaped), the code only in the form.
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &link)]).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["cache-control"], "no-store");
        let html = res.text().await.unwrap();
        assert!(html.contains(&agent.id) && !html.contains("<script>alert(1)"), "{html}");
        assert!(html.contains(&format!("name=\"code\" value=\"{code}\"")) && html.contains("id=\"claim\""));

        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &code), ("decision", "adopt")]).await;
        assert_eq!(res.status(), 400);
        assert!(res.text().await.unwrap().contains("data-code=\"invalid_decision\""));
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &code), ("decision", "claim")]).await;
        assert_eq!(res.status(), 303);
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        assert_eq!(location, format!("/dashboard/agents/{}?done=claim", agent.id));
        let (s, html) = page(&admin, &location).await;
        assert_eq!(s, 200);
        assert!(html.contains("Agent claimed into this workspace."));
        let events = audit_events(&app, &format!("event_type=agent.claimed&agent_id={}", agent.id)).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["actor"], user_actor(&admin).await);

        // A used link, an unknown one.
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &code), ("decision", "claim")]).await;
        assert_eq!(res.status(), 409);
        assert!(res.text().await.unwrap().contains("data-code=\"claim_code_used\""));
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &code)]).await;
        assert_eq!(res.status(), 200);
        assert!(res.text().await.unwrap().contains("id=\"claim-closed\""), "a used link is shown, not offered");
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", "clm_nope")]).await;
        assert_eq!(res.status(), 404);

        // Rejecting: the link is used up and the agent stays out.
        let (other, link) = stray_agent(&app, "other-bot").await;
        let res = post_form(&admin, "/dashboard/agents/claim", &[("csrf", &admin.csrf), ("code", &link), ("decision", "reject")]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/agents?done=reject"));
        let (_, html) = page(&admin, "/dashboard/agents?done=reject").await;
        assert!(html.contains("Claim rejected"));
        let (s, _) = page(&admin, &format!("/dashboard/agents/{}", other.id)).await;
        assert_eq!(s, 404, "not in the workspace");
    }
}

both_engines! {
    async fn agents_filter_by_policy_group_and_last_heartbeat(app) {
        let payer = app.active_agent("payer").await;
        let gold = app.active_agent("gold").await;
        let plain = app.active_agent("plain").await;
        let picked = app.active_agent("picked").await;
        for (key, agent, labels) in [("k-payer", &payer, json!(["payments"])), ("k-gold", &gold, json!({"tier": "gold"}))] {
            let (s, body) = status_json(app.post("/v1/workspace/agents/upsert", &json!({"external_agent_key": key, "agent_id": agent.id, "labels": labels})).await).await;
            assert_eq!(s, 200, "{body}");
        }
        app.apply_policy(json!({"agent_groups": [
            {"name": "payers", "selectors": [{"labels": {"payments": "true"}}]},
            {"name": "gold", "selectors": [{"labels": {"tier": "gold"}}]},
            {"name": "picked", "members": [picked.id]},
            {"name": "everyone", "selectors": [{"metadata": {"team": "t"}}]},
            {"name": "nobody", "selectors": [{"metadata": {"team": "x"}}]},
            {"name": "gold-or-picked", "members": [picked.id], "selectors": [{"metadata": {"team": "t"}, "labels": {"tier": "gold"}}]}
        ]})).await;
        // A heartbeat now for the payer, two days ago for the gold one.
        let two_days_ago = chrono::Utc::now() - chrono::Duration::days(2);
        let items = json!([
            {"agent_id": payer.id, "status": "ok", "latency_ms": 5},
            {"agent_id": gold.id, "status": "ok", "latency_ms": 5, "observed_at": two_days_ago.to_rfc3339()}
        ]);
        let (s, body) = status_json(app.post("/v1/telemetry/heartbeat/ingest", &json!({"items": items})).await).await;
        assert_eq!((s.as_u16(), body["accepted"].as_i64()), (200, Some(2)), "{body}");

        let names = |query: &str| { let app = app.clone(); let query = query.to_owned(); async move {
            let (s, body) = status_json(app.get(&format!("/v1/agents?{query}")).await).await;
            assert_eq!(s, 200, "{query}: {body}");
            let mut names: Vec<String> = body["items"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap().to_owned()).collect();
            names.sort();
            names
        }};
        assert_eq!(names("group=payers").await, ["payer"], "a list label reads as true");
        assert_eq!(names("group=gold").await, ["gold"]);
        assert_eq!(names("group=picked").await, ["picked"]);
        assert_eq!(names("group=everyone").await, ["gold", "payer", "picked", "plain"]);
        assert!(names("group=nobody").await.is_empty());
        assert_eq!(names("group=gold-or-picked").await, ["gold", "picked"], "members or every key of a selector");
        assert_eq!(names("group=everyone&status=active&label=payments").await, ["payer"]);
        assert_eq!(names("seen=hour").await, ["payer"]);
        assert_eq!(names("seen=day").await, ["payer"]);
        assert_eq!(names("seen=stale").await, ["gold"]);
        assert_eq!(names("seen=never").await, ["picked", "plain"]);
        assert!(names("group=ghosts").await.is_empty(), "a group the policy lacks has no members");
        assert_error(app.get("/v1/agents?seen=week").await, 400, "invalid_seen").await;
        let _ = plain;

        // The console: the groups of the default policy to choose from, the filters kept.
        let owner = app.login("owner@example.com").await;
        let (s, html) = page(&owner, "/dashboard/agents?group=gold-or-picked&seen=never").await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains("<option value=\"gold-or-picked\" selected>gold-or-picked</option>"), "{html}");
        assert!(html.contains("<option value=\"never\" selected>never</option>"));
        assert!(html.contains(&format!("<code>{}</code>", picked.id)) && !html.contains(&format!("<code>{}</code>", gold.id)));
        let (s, html) = page(&owner, "/dashboard/agents?group=ghosts").await;
        assert_eq!(s, 200);
        assert!(html.contains("No agent matches these filters."));

        // The store reads the same members whether it looks the few candidates up by id or
        // walks the newest agents probing each (its choice past `list_candidates`).
        use acp::store::{AgentQuery, AgentStore, GroupMembers, IdRange, OpenOptions, SelectorTerms, SqlStore};
        let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
        let selector = |metadata: &[(&str, &str)], labels: &[(&str, &str)]| SelectorTerms { metadata: pairs(metadata), labels: pairs(labels) };
        let group = |ids: Vec<String>, selectors: Vec<SelectorTerms>| Some(GroupMembers { ids, selectors });
        let queries = [
            AgentQuery { label: Some("payments".into()), ..Default::default() },
            AgentQuery { label: Some("tier=gold".into()), ..Default::default() },
            AgentQuery { group: group(vec![], vec![selector(&[], &[("payments", "true")])]), ..Default::default() },
            AgentQuery { group: group(vec![], vec![selector(&[], &[("tier", "gold")])]), ..Default::default() },
            AgentQuery { group: group(vec![], vec![selector(&[("team", "t")], &[])]), ..Default::default() },
            AgentQuery { group: group(vec![picked.id.clone()], vec![selector(&[("team", "t")], &[("tier", "gold")])]), ..Default::default() },
            AgentQuery { group: group(vec![], vec![selector(&[("team", "t")], &[])]), label: Some("payments".into()), ..Default::default() },
            AgentQuery { group: group(vec![], vec![selector(&[], &[])]), ..Default::default() },
        ];
        let mut listed: Vec<Vec<Vec<String>>> = Vec::new();
        for list_candidates in [0, 5_000] {
            let store = SqlStore::open(&app.db_url, &OpenOptions { list_candidates, ..OpenOptions::default() }).await.expect("open");
            let mut lists = Vec::new();
            for query in &queries {
                let query = AgentQuery { workspace_id: app.workspace_id.clone(), limit: 50, ..query.clone() };
                let mut names: Vec<String> = store.list_agents(&query).await.expect("list").into_iter().map(|a| a.name).collect();
                names.sort();
                lists.push(names);
            }
            store.close().await;
            listed.push(lists);
        }
        assert_eq!(listed[0], listed[1]);
        assert_eq!(listed[0][0], ["payer"]);
        assert_eq!(listed[0][1], ["gold"]);
        assert_eq!(listed[0][5], ["gold", "picked"]);
        assert_eq!(listed[0][6], ["payer"]);
        assert_eq!(listed[0][7].len(), 4, "a selector without keys keeps every agent");
        // In order of their ids (as the subject search reads them): the same members, in that
        // order, either way; a range keeps those within it.
        for list_candidates in [0, 5_000] {
            let store = SqlStore::open(&app.db_url, &OpenOptions { list_candidates, ..OpenOptions::default() }).await.expect("open");
            for (query, names) in queries.iter().zip(&listed[0]) {
                let query = AgentQuery { workspace_id: app.workspace_id.clone(), limit: 50, by_id: Some(IdRange::default()), ..query.clone() };
                let found = store.list_agents(&query).await.expect("list");
                let ids: Vec<String> = found.iter().map(|a| a.id.clone()).collect();
                let mut sorted = ids.clone();
                sorted.sort();
                assert_eq!(ids, sorted, "in order of their ids");
                let mut got: Vec<String> = found.into_iter().map(|a| a.name).collect();
                got.sort();
                assert_eq!(&got, names);
                if ids.len() >= 2 {
                    let range = IdRange { after: Some(ids[0].clone()), through: Some(ids[1].clone()) };
                    let ranged = AgentQuery { by_id: Some(range), ..query.clone() };
                    let within: Vec<String> = store.list_agents(&ranged).await.expect("list").into_iter().map(|a| a.id).collect();
                    assert_eq!(within, [ids[1].clone()]);
                }
            }
            store.close().await;
        }
    }
}

/// Asserts the browser headers of a page answer: `nosniff`, `Referrer-Policy: same-origin`, a
/// `Content-Security-Policy` that forbids framing, and, when the page has inline scripts or
/// styles, that each carries the policy's nonce. Answers the status and the nonce (if any).
async fn assert_page_headers(what: &str, res: reqwest::Response) -> (u16, Option<String>) {
    let status = res.status().as_u16();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{what}: no `{name}` header ({status})"))
    };
    assert_eq!(header("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(header("referrer-policy"), "same-origin", "{what}");
    let policy = header("content-security-policy");
    for directive in [
        "default-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(policy.contains(directive), "{what}: {policy}");
    }
    assert!(
        !policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"),
        "{what}: {policy}"
    );
    let nonce = policy
        .split("script-src 'nonce-")
        .nth(1)
        .map(|rest| rest.split('\'').next().unwrap().to_owned());
    let html = res.text().await.unwrap();
    let inline = html.matches("<script").count() + html.matches("<style").count();
    if inline > 0 {
        let nonce = nonce
            .as_deref()
            .unwrap_or_else(|| panic!("{what}: inline elements, no nonce in {policy}"));
        assert!(
            policy.contains(&format!("style-src 'nonce-{nonce}'")),
            "{what}: {policy}"
        );
        assert_eq!(
            html.matches(&format!(" nonce=\"{nonce}\"")).count(),
            inline,
            "{what}: every inline element carries the nonce"
        );
    }
    (status, nonce)
}

both_engines! {
    async fn every_page_forbids_framing_sniffing_and_referrers(app) {
        let agent = crate::approvals::setup(&app).await;
        let (_, decision) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "refund",
            "context": {"currency": "USD", "amount": 400}})).await).await;
        let approval = decision["challenge"]["url"].as_str().unwrap().to_owned();
        let (_, claim) = stray_agent(&app, "framed").await;
        let owner = app.login("owner@example.com").await;
        let html = |path: &str| app.client.get(app.url(path)).header("Accept", "text/html").send();

        // Without a session: the root, the login page, the console's redirect, error pages.
        let (s, _) = assert_page_headers("/", html("/").await.unwrap()).await;
        assert_eq!(s, 303);
        let (s, login_nonce) = assert_page_headers("/login", html("/login").await.unwrap()).await;
        assert_eq!(s, 200);
        let (_, again) = assert_page_headers("/login", html("/login").await.unwrap()).await;
        assert!(login_nonce.is_some() && login_nonce != again, "a nonce per answer");
        let (s, _) = assert_page_headers("/dashboard", html("/dashboard").await.unwrap()).await;
        assert_eq!(s, 303);
        let (s, _) = assert_page_headers("bad login link", html("/auth/verify-login?token=lgn_nope").await.unwrap()).await;
        assert_eq!(s, 400);
        // The approval and claim pages a link opens, and their error pages.
        let (s, nonce) = assert_page_headers("approval page", app.client.get(&approval).header("Accept", "text/html").send().await.unwrap()).await;
        assert_eq!((s, nonce.is_some()), (200, true));
        let (s, _) = assert_page_headers("unknown approval link", html("/v1/approval-links/apl_nope").await.unwrap()).await;
        assert_eq!(s, 404);
        let claim_page = app.client.get(&claim).header("Accept", "text/html").header("Cookie", &owner.cookie).send().await.unwrap();
        let (s, nonce) = assert_page_headers("claim page", claim_page).await;
        assert_eq!((s, nonce.is_some()), (200, true));
        let (s, _) = assert_page_headers("unknown claim code", html("/v1/agent-approval/clm_nope").await.unwrap()).await;
        assert_eq!(s, 404);

        // Every section of the console, a page of each kind within it, its error page.
        for path in [
            "/dashboard".to_owned(),
            "/dashboard/agents".to_owned(),
            format!("/dashboard/agents/{}", agent.id),
            format!("/dashboard/agents/{}/suspend", agent.id),
            "/dashboard/policies".to_owned(),
            "/dashboard/policies/pol_default".to_owned(),
            "/dashboard/policies/pol_default/dry-run".to_owned(),
            "/dashboard/approvals".to_owned(),
            "/dashboard/audit".to_owned(),
            "/dashboard/credentials".to_owned(),
            "/dashboard/vault".to_owned(),
            "/dashboard/settings".to_owned(),
        ] {
            let (s, nonce) = assert_page_headers(&path, owner.get(&path).await).await;
            assert_eq!((s, nonce.is_some()), (200, true), "{path}");
        }
        let events = audit_events(&app, "limit=1").await;
        let event = format!("/dashboard/audit/{}", events[0]["event_id"].as_str().unwrap());
        let (s, _) = assert_page_headers(&event, owner.get(&event).await).await;
        assert_eq!(s, 200);
        let (s, _) = assert_page_headers("unknown agent", owner.get("/dashboard/agents/agt_nope").await).await;
        assert_eq!(s, 404);

        // The API's JSON is never sniffed, and is no page.
        let res = app.get("/v1/agents").await;
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
        assert!(!res.headers().contains_key("content-security-policy"));
        let res = app.client.get(app.url("/v1/nope")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["x-content-type-options"].to_str().unwrap()), (404, "nosniff"));
    }
}
