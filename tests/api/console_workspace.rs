//! The console's workspace page (`/dashboard/settings`): members and roles, API keys (a new key
//! shown once), personal access tokens, approval settings, and creating and switching
//! workspaces; each role reads it, owners and admins change it, every person manages their own
//! tokens, and forged or cross-site posts change nothing.

use crate::both_engines;
use crate::dashboard::{hidden, link_of, page, post_form, HOSTILE};
use crate::helpers::*;
use serde_json::Value;

async fn user_id(browser: &Browser) -> String {
    let me: Value = browser.get("/auth/me").await.json().await.unwrap();
    me["user"]["user_id"].as_str().unwrap().to_owned()
}

/// The `data-code` of an error page, with its status.
async fn refused(res: reqwest::Response) -> (u16, String) {
    let status = res.status().as_u16();
    let html = res.text().await.unwrap();
    let code = html
        .split("data-code=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no error code in {html}"))
        .to_owned();
    (status, code)
}

async fn members(app: &TestApp, owner: &Browser) -> Vec<(String, String)> {
    let (s, got) = status_json(owner.get("/v1/workspace/members").await).await;
    assert_eq!(s, 200, "{got}");
    let _ = app;
    got["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["email"].as_str().unwrap().to_owned(),
                m["role"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn role_of(list: &[(String, String)], email: &str) -> Option<String> {
    list.iter()
        .find(|(e, _)| e == email)
        .map(|(_, r)| r.clone())
}

/// The new secret on a page that shows one.
fn new_secret(html: &str) -> String {
    html.split("<code id=\"new-secret\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("no secret in {html}"))
        .to_owned()
}

both_engines! {
    async fn every_role_reads_the_workspace_page_and_only_owners_and_admins_get_forms(app) {
        for role in ["owner", "admin", "member", "approver"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;
            let (s, html) = page(&person, "/dashboard").await;
            assert_eq!(s, 200);
            assert!(html.contains("href=\"/dashboard/settings\""), "{role}: the navigation links the page");
            let (s, html) = page(&person, "/dashboard/settings").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("href=\"/dashboard/settings\" aria-current=\"page\""), "{role}");
            assert!(html.contains("id=\"member-list\"") && html.contains(&email), "{role}: members are listed");
            assert!(html.contains("id=\"key-list\""), "{role}: the bootstrap key is listed");
            assert!(html.contains("id=\"require-member-approval\">yes<"), "{role}: approvals by a logged-in approver by default");
            assert!(html.contains("id=\"create-token\""), "{role}: every role makes its own tokens");
            assert!(html.contains("id=\"create-workspace\""), "{role}");
            let manages = matches!(role, "owner" | "admin");
            for form in ["id=\"add-member\"", "id=\"create-key\"", "id=\"settings-form\"", "class=\"role-form\""] {
                assert_eq!(html.contains(form), manages, "{role}: {form}");
            }
            assert_eq!(html.contains("id=\"read-only\""), !manages, "{role}");
            assert_eq!(html.contains("<option value=\"owner\""), role == "owner", "{role}: only owners make owners");
            assert!(!html.contains(&app.key), "{role}: no key is ever rendered");
        }
        // A bad cursor is a 400 page.
        let owner = app.login("owner@example.com").await;
        let (s, code) = refused(owner.get("/dashboard/settings?keys=junk").await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_cursor"));
        // Without a session: the login page.
        let res = app.client.get(app.url("/dashboard/settings")).send().await.unwrap();
        assert_eq!(res.status(), 303);
    }
}

both_engines! {
    async fn owners_add_change_and_remove_members_with_the_api_rules(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        let owner = app.login("owner@example.com").await;
        let admin = app.login("admin@example.com").await;
        let me = user_id(&owner).await;

        // Add a member with a role.
        let res = post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", "new@example.com"), ("role", "approver")]).await;
        assert_eq!(res.status(), 303);
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        assert_eq!(location, "/dashboard/settings?done=member");
        assert_eq!(role_of(&members(&app, &owner).await, "new@example.com").as_deref(), Some("approver"));
        let (_, html) = page(&owner, &location).await;
        assert!(html.contains("id=\"done\"") && html.contains("new@example.com"));

        // Change the role (the same form with an existing email).
        let res = post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", "new@example.com"), ("role", "admin")]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(role_of(&members(&app, &owner).await, "new@example.com").as_deref(), Some("admin"));
        let events = audit_events(&app, "event_type=membership.granted").await;
        assert!(events[..2].iter().all(|e| e["actor"] == format!("user:{me}")), "{events:?}");

        // The use case's rules, as error pages with their codes.
        let (s, code) = refused(post_form(&admin, "/dashboard/settings/members", &[("csrf", &admin.csrf), ("email", "x@example.com"), ("role", "owner")]).await).await;
        assert_eq!((s, code.as_str()), (403, "insufficient_role"), "an admin makes no owner");
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", "owner@example.com"), ("role", "member")]).await).await;
        assert_eq!((s, code.as_str()), (409, "last_owner"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", "not an email"), ("role", "member")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_email"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", "y@example.com"), ("role", "king")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_role"));
        let (s, code) = refused(post_form(&owner, &format!("/dashboard/settings/members/{me}/remove"), &[("csrf", &owner.csrf)]).await).await;
        assert_eq!((s, code.as_str()), (409, "last_owner"));
        assert_eq!(role_of(&members(&app, &owner).await, "owner@example.com").as_deref(), Some("owner"));

        // Remove, through the confirmation page.
        let (_, html) = page(&owner, "/dashboard/settings").await;
        let new_id = html.split("data-user=\"").skip(1).map(|r| r.split('"').next().unwrap().to_owned())
            .find(|id| html.contains(&format!("data-user=\"{id}\"><td>new@example.com"))).unwrap();
        let confirm = link_of(&html, &format!("remove-{new_id}"));
        let (s, html) = page(&owner, &confirm).await;
        assert_eq!(s, 200);
        assert!(html.contains("new@example.com (admin)") && html.contains("id=\"confirm-action\""));
        let res = post_form(&owner, &confirm, &[("csrf", &hidden(&html, "csrf"))]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=removed"));
        assert_eq!(role_of(&members(&app, &owner).await, "new@example.com"), None);
        let events = audit_events(&app, "event_type=membership.removed").await;
        assert_eq!(events[0]["actor"], format!("user:{me}"));
        let (s, code) = refused(owner.get(&confirm).await).await;
        assert_eq!((s, code.as_str()), (404, "unknown_member"));

        // A hostile email is refused as an email; the escaped page shows nothing raw.
        let (s, _) = refused(post_form(&owner, "/dashboard/settings/members", &[("csrf", &owner.csrf), ("email", HOSTILE), ("role", "member")]).await).await;
        assert_eq!(s, 400);
    }
}

both_engines! {
    async fn an_api_key_is_shown_once_then_listed_by_its_last_four_and_revoked(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let me = user_id(&owner).await;

        let res = post_form(&owner, "/dashboard/settings/api-keys", &[
            ("csrf", &owner.csrf), ("name", HOSTILE), ("mode", "test"), ("scopes", "agents:read"), ("scopes", "check"),
        ]).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["cache-control"], "no-store");
        assert!(res.headers().get("location").is_none());
        let html = res.text().await.unwrap();
        let key = new_secret(&html);
        assert!(key.starts_with("svc_test_"), "{key}");
        assert!(!html.contains(HOSTILE) && html.contains("&#60;script&#62;"), "the name is escaped");
        assert!(html.contains("agents:read, check"));

        // The API lists it by its last four only; the key works for its scopes.
        let (s, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
        assert_eq!(s, 200);
        let item = listed["items"].as_array().unwrap().iter().find(|k| k["name"] == HOSTILE).unwrap().clone();
        assert_eq!(item["last_four"], key[key.len() - 4..]);
        assert!(!listed.to_string().contains(&key));
        let key_id = item["key_id"].as_str().unwrap().to_owned();
        assert_eq!(app.get_as(&key, "/v1/agents").await.status(), 200);
        assert_eq!(app.get_as(&key, "/v1/workspace/audit/events").await.status(), 403, "not in its scopes");

        // No later page shows it.
        let (s, html) = page(&owner, "/dashboard/settings").await;
        assert_eq!(s, 200);
        assert!(!html.contains(&key) && !html.contains(HOSTILE));
        assert!(html.contains(&format!("…{}</code>", &key[key.len() - 4..])));
        let (_, overview) = page(&owner, "/dashboard").await;
        assert!(!overview.contains(&key));
        let created = audit_events(&app, "event_type=api_key.created").await;
        assert_eq!(created[0]["actor"], format!("user:{me}"));
        assert!(!created[0].to_string().contains(&key), "the audit trail has no key");

        // Revoke through the confirmation; then the key is refused.
        let confirm = link_of(&html, &format!("revoke-{key_id}"));
        let (s, html) = page(&owner, &confirm).await;
        assert_eq!(s, 200);
        assert!(html.contains("Revoke this API key?") && !html.contains(&key));
        let res = post_form(&owner, &confirm, &[("csrf", &owner.csrf)]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=key_revoked"));
        assert_eq!(app.get_as(&key, "/v1/agents").await.status(), 401);
        let revoked = audit_events(&app, "event_type=api_key.revoked").await;
        assert_eq!(revoked[0]["actor"], format!("user:{me}"));
        let (s, code) = refused(post_form(&owner, &confirm, &[("csrf", &owner.csrf)]).await).await;
        assert_eq!((s, code.as_str()), (404, "unknown_api_key"));

        // Bad input is a page with its code.
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/api-keys", &[("csrf", &owner.csrf), ("scopes", "root")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_scopes"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/api-keys", &[("csrf", &owner.csrf), ("mode", "prod")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_mode"));
    }
}

both_engines! {
    async fn every_role_creates_and_revokes_its_own_tokens(app) {
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        app.grant(&app.workspace_id, "other@example.com", "member").await;
        let member = app.login("member@example.com").await;
        let other = app.login("other@example.com").await;
        let me = user_id(&member).await;

        let res = post_form(&member, "/dashboard/settings/tokens", &[
            ("csrf", &member.csrf), ("name", HOSTILE), ("expires_in_days", "30"), ("scopes", "read"),
        ]).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["cache-control"], "no-store");
        let html = res.text().await.unwrap();
        let token = new_secret(&html);
        assert!(token.starts_with("svc_pat_"), "{token}");
        assert!(!html.contains(HOSTILE));
        let bearer = |path: &str| app.client.get(app.url(path)).header("Authorization", format!("Bearer {token}")).send();
        assert_eq!(bearer("/v1/workspace/settings").await.unwrap().status(), 200);

        let (_, html) = page(&member, "/dashboard/settings").await;
        assert!(!html.contains(&token) && html.contains("id=\"token-list\""));
        let token_id = html.split("data-token=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let confirm = link_of(&html, &format!("revoke-{token_id}"));
        // Someone else's token is no one else's to revoke.
        let (s, code) = refused(other.get(&confirm).await).await;
        assert_eq!((s, code.as_str()), (404, "unknown_token"));
        let (s, code) = refused(post_form(&other, &confirm, &[("csrf", &other.csrf)]).await).await;
        assert_eq!((s, code.as_str()), (404, "unknown_token"));
        assert_eq!(bearer("/v1/workspace/settings").await.unwrap().status(), 200);

        let (s, _) = page(&member, &confirm).await;
        assert_eq!(s, 200);
        let res = post_form(&member, &confirm, &[("csrf", &member.csrf)]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=token_revoked"));
        assert_eq!(bearer("/v1/workspace/settings").await.unwrap().status(), 401);
        for event_type in ["access_token.created", "access_token.revoked"] {
            let events = audit_events(&app, &format!("event_type={event_type}")).await;
            assert_eq!(events[0]["actor"], format!("user:{me}"), "{event_type}");
            assert!(!events[0].to_string().contains(&token));
        }

        let (s, code) = refused(post_form(&member, "/dashboard/settings/tokens", &[("csrf", &member.csrf), ("name", "ci"), ("expires_in_days", "999")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_expires_in_days"));
        let (s, code) = refused(post_form(&member, "/dashboard/settings/tokens", &[("csrf", &member.csrf), ("name", "  ")]).await).await;
        assert_eq!((s, code.as_str()), (400, "missing_name"));
    }
}

both_engines! {
    async fn settings_and_workspaces_change_for_owners_and_forged_posts_change_nothing(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        app.grant(&app.workspace_id, "approver@example.com", "approver").await;
        let owner = app.login("owner@example.com").await;
        let me = user_id(&owner).await;

        // Approval settings: the public-link flow turned on (off by default).
        let res = post_form(&owner, "/dashboard/settings/approval", &[("csrf", &owner.csrf), ("require_member_approval", "false")]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=settings"));
        let (_, got) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!(got["require_member_approval"], false);
        let (_, html) = page(&owner, "/dashboard/settings?done=settings").await;
        assert!(html.contains("id=\"require-member-approval\">no<") && html.contains("Approval settings saved."));
        let events = audit_events(&app, "event_type=workspace.settings_changed").await;
        assert_eq!(events[0]["actor"], format!("user:{me}"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/approval", &[("csrf", &owner.csrf)]).await).await;
        assert_eq!((s, code.as_str()), (400, "missing_require_member_approval"));

        // Member and approver: forged posts are refused and change nothing.
        let key_id = {
            let (_, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
            listed["items"][0]["key_id"].as_str().unwrap().to_owned()
        };
        for email in ["member@example.com", "approver@example.com"] {
            let person = app.login(email).await;
            let csrf = person.csrf.clone();
            let (me, key_id) = (me.as_str(), key_id.as_str());
            let forged: Vec<(String, Vec<(&str, &str)>)> = vec![
                ("/dashboard/settings/members".into(), vec![("csrf", csrf.as_str()), ("email", "evil@example.com"), ("role", "admin")]),
                (format!("/dashboard/settings/members/{me}/remove"), vec![("csrf", csrf.as_str())]),
                ("/dashboard/settings/api-keys".into(), vec![("csrf", csrf.as_str()), ("name", "evil")]),
                (format!("/dashboard/settings/api-keys/{key_id}/revoke"), vec![("csrf", csrf.as_str())]),
                ("/dashboard/settings/approval".into(), vec![("csrf", csrf.as_str()), ("require_member_approval", "true")]),
            ];
            for (path, fields) in &forged {
                let (s, code) = refused(post_form(&person, path, fields).await).await;
                assert_eq!((s, code.as_str()), (403, "insufficient_role"), "{email} {path}");
            }
            for path in [format!("/dashboard/settings/members/{me}/remove"), format!("/dashboard/settings/api-keys/{key_id}/revoke")] {
                let (s, code) = refused(person.get(&path).await).await;
                assert_eq!((s, code.as_str()), (403, "insufficient_role"), "{email} {path}");
            }
        }
        assert_eq!(role_of(&members(&app, &owner).await, "evil@example.com"), None);
        let (_, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
        assert_eq!(listed["items"].as_array().unwrap().len(), 1);
        assert!(listed["items"][0]["revoked_at"].is_null());
        let (_, got) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!(got["require_member_approval"], false);

        // CSRF: missing, forged or cross-site is refused.
        let path = "/dashboard/settings/approval";
        let (s, code) = refused(post_form(&owner, path, &[("require_member_approval", "true")]).await).await;
        assert_eq!((s, code.as_str()), (403, "csrf_failed"));
        let (s, code) = refused(post_form(&owner, path, &[("csrf", "forged"), ("require_member_approval", "true")]).await).await;
        assert_eq!((s, code.as_str()), (403, "csrf_failed"));
        let cross = app.client.post(app.url(path)).header("Cookie", &owner.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded").header("Origin", "https://evil.example")
            .body(format!("csrf={}&require_member_approval=true", owner.csrf)).send().await.unwrap();
        assert_eq!(cross.status(), 403);
        for path in ["/dashboard/settings/tokens", "/dashboard/settings/workspaces", "/dashboard/settings/api-keys"] {
            let (s, code) = refused(post_form(&owner, path, &[("name", "x")]).await).await;
            assert_eq!((s, code.as_str()), (403, "csrf_failed"), "{path}");
        }
        let (_, got) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!(got["require_member_approval"], false);

        // Create a workspace: the person owns it and it is selected; switch back.
        let res = post_form(&owner, "/dashboard/settings/workspaces", &[("csrf", &owner.csrf), ("name", HOSTILE)]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=workspace"));
        let (_, listed) = status_json(owner.get("/v1/workspaces").await).await;
        let created = listed["items"].as_array().unwrap().iter().find(|w| w["name"] == HOSTILE).unwrap().clone();
        assert_eq!(created["role"], "owner");
        assert_eq!(listed["active_workspace_id"], created["workspace_id"]);
        let (s, html) = page(&owner, "/dashboard/settings?done=workspace").await;
        assert_eq!(s, 200);
        assert!(!html.contains(HOSTILE) && html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
        assert!(html.contains("id=\"role\" title=\"your role in this workspace\">owner</span>"));
        assert!(html.contains(&format!("id=\"switch-{}\"", app.workspace_id)));
        let (s, got) = status_json(owner.get("/v1/workspace/audit/events?event_type=workspace.created").await).await;
        assert_eq!(s, 200, "{got}");
        assert_eq!(got["items"][0]["actor"], format!("user:{me}"), "{got}");
        let res = post_form(&owner, "/dashboard/workspace", &[("csrf", &owner.csrf), ("workspace_id", &app.workspace_id)]).await;
        assert_eq!(res.status(), 303);
        let (_, listed) = status_json(owner.get("/v1/workspaces").await).await;
        assert_eq!(listed["active_workspace_id"], app.workspace_id.as_str());
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/workspaces", &[("csrf", &owner.csrf), ("name", " ")]).await).await;
        assert_eq!((s, code.as_str()), (400, "missing_name"));
    }
}

both_engines! {
    async fn retention_is_set_from_the_console_and_sinks_are_shown_with_their_state(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;
        let (_, html) = page(&owner, "/dashboard/settings").await;
        assert!(html.contains("id=\"audit-retention\">all<") && html.contains("id=\"no-sinks\""), "{html}");

        let res = post_form(&owner, "/dashboard/settings/retention", &[("csrf", &owner.csrf), ("audit_retention_days", "90"), ("heartbeat_retention_days", "")]).await;
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/dashboard/settings?done=retention"));
        let (_, got) = status_json(owner.get("/v1/workspace/settings").await).await;
        assert_eq!((got["audit_retention_days"].clone(), got["heartbeat_retention_days"].clone()), (serde_json::json!(90), Value::Null));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/retention", &[("csrf", &owner.csrf), ("audit_retention_days", "0")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_retention"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/retention", &[("csrf", &owner.csrf), ("audit_retention_days", "soon")]).await).await;
        assert_eq!((s, code.as_str()), (400, "invalid_retention"));
        let (s, code) = refused(post_form(&member, "/dashboard/settings/retention", &[("csrf", &member.csrf), ("audit_retention_days", "1")]).await).await;
        assert_eq!((s, code.as_str()), (403, "insufficient_role"));
        let (s, code) = refused(post_form(&owner, "/dashboard/settings/retention", &[("audit_retention_days", "1")]).await).await;
        assert_eq!((s, code.as_str()), (403, "csrf_failed"));

        // A sink made through the API is listed, escaped, with its state; never its secret.
        let (s, made) = status_json(owner.post("/v1/workspace/audit/sinks", &serde_json::json!({"name": HOSTILE, "url": "https://siem.example.com/acp", "enabled": false})).await).await;
        assert_eq!(s, 200, "{made}");
        for person in [&owner, &member] {
            let (_, html) = page(person, "/dashboard/settings?done=retention").await;
            assert!(html.contains("id=\"audit-retention\">90 days<"), "{html}");
            assert!(html.contains("https://siem.example.com/acp") && html.contains(">paused<"), "{html}");
            assert!(!html.contains(HOSTILE) && !html.contains(made["secret"].as_str().unwrap()));
        }
        let (_, html) = page(&member, "/dashboard/settings").await;
        assert!(!html.contains("id=\"retention-form\""), "members read, owners and admins change");
    }
}
