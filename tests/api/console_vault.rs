//! The console's vault: every role reads the secret sets and a set's page; owners and admins
//! create sets, write values, roll back, delete, undelete and destroy, grant and revoke, and
//! issue and revoke leases through forms, audited with the person as actor; members and
//! approvers are refused on the server. No page ever carries a value, not even an error page
//! after a bad submission, and a lease's token is on the page that issued it only. On both
//! engines.

use serde_json::{json, Value};

use crate::both_engines;
use crate::dashboard::{hidden, page, post_form, HOSTILE};
use crate::helpers::*;

/// Values typed into the forms; no page may ever contain one.
const FIRST: &str = "sk_live_console-canary-1111";
const SECOND: &str = "sk_live_console-canary-2222";
const THIRD: &str = "whsec_console-canary-3333";
const REJECTED: &str = "sk_live_console-canary-rejected-4444";
const VALUES: [&str; 4] = [FIRST, SECOND, THIRD, REJECTED];

fn assert_no_value(html: &str) {
    for value in VALUES {
        assert!(
            !html.contains(value),
            "a secret value reached a page: {value}"
        );
    }
}

/// An error page inside the shell, with its status and code, and no value in it.
async fn assert_refused(res: reqwest::Response, status: u16, code: &str) {
    assert_eq!(res.status().as_u16(), status);
    let html = res.text().await.unwrap();
    assert!(
        html.contains(&format!("data-code=\"{code}\"")),
        "{code}: {html}"
    );
    // A refused CSRF check is answered before the person is known: the plain error page.
    assert_eq!(
        html.contains("id=\"nav\""),
        code != "csrf_failed",
        "an error page inside the shell"
    );
    assert_no_value(&html);
}

fn location(res: &reqwest::Response) -> String {
    assert_eq!(res.status().as_u16(), 303, "a change answers see-other");
    res.headers()["location"].to_str().unwrap().to_owned()
}

async fn user_actor(browser: &Browser) -> String {
    let me: Value = browser.get("/auth/me").await.json().await.unwrap();
    format!("user:{}", me["user"]["user_id"].as_str().unwrap())
}

async fn set_json(browser: &Browser, id: &str) -> Value {
    let (s, got) = status_json(browser.get(&format!("/v1/vault/secret-sets/{id}")).await).await;
    assert_eq!(s, 200, "{got}");
    got["secret_set"].clone()
}

async fn newest_vault_event(browser: &Browser, id: &str) -> Value {
    let (s, got) = status_json(
        browser
            .get(&format!("/v1/vault/audit?secret_set_id={id}&limit=1"))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{got}");
    got["items"][0].clone()
}

/// Creates a set through the console's form as `browser` and answers its id.
async fn create_through_form(browser: &Browser, name: &str) -> String {
    let res = post_form(browser, "/dashboard/vault", &[
        ("csrf", &browser.csrf), ("name", name), ("provider", "stripe"), ("environment", "production"),
        ("key", "STRIPE_SECRET_KEY"), ("value", FIRST), ("key", ""), ("value", ""), ("key", ""), ("value", ""),
        ("profiles", r#"{"stripe": {"hosts": ["api.stripe.com"], "methods": ["POST"], "path_prefixes": ["/v1/"], "inject": {"headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY}"}}}}"#),
    ]).await;
    let to = location(&res);
    assert!(
        to.contains("/dashboard/vault/ss_") && to.ends_with("?done=created"),
        "{to}"
    );
    to.rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned()
}

both_engines! {
    async fn vault_pages_read_for_every_role_and_write_for_owners_and_admins(app) {
        for (email, role) in [("owner@example.com", "owner"), ("admin@example.com", "admin"),
            ("member@example.com", "member"), ("approver@example.com", "approver")] {
            app.grant(&app.workspace_id, email, role).await;
        }
        let owner = app.login("owner@example.com").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;
        let approver = app.login("approver@example.com").await;

        // The empty state: owners get the create form, members a word on who may.
        let (s, html) = page(&owner, "/dashboard/vault").await;
        assert_eq!(s, 200);
        assert!(html.contains("id=\"empty\"") && html.contains("id=\"create-set\""), "{html}");
        assert!(html.contains("type=\"password\"") && html.contains("autocomplete=\"off\""));
        let (s, html) = page(&member, "/dashboard/vault").await;
        assert_eq!(s, 200);
        assert!(html.contains("id=\"empty\"") && html.contains("id=\"read-only\"") && !html.contains("id=\"create-set\""));

        // The owner creates a set with a hostile name; the value goes in, never out.
        let id = create_through_form(&owner, HOSTILE).await;
        let set = set_json(&owner, &id).await;
        assert_eq!((set["name"].as_str(), set["version"].as_i64()), (Some(HOSTILE), Some(1)));
        assert_eq!(set["keys"], json!(["STRIPE_SECRET_KEY"]));
        assert_eq!(set["profiles"]["stripe"]["hosts"], json!(["api.stripe.com"]));
        let created = newest_vault_event(&owner, &id).await;
        assert_eq!(created["event_type"], "vault.secret_set.created");
        assert_eq!(created["actor"], user_actor(&owner).await.as_str());

        // Every role reads the list and the set's page; only owners and admins see forms.
        for (browser, changes) in [(&owner, true), (&admin, true), (&member, false), (&approver, false)] {
            let (s, list) = page(browser, "/dashboard/vault").await;
            assert_eq!(s, 200);
            assert!(list.contains(">Vault</a>") && list.contains(&format!("data-set=\"{id}\"")), "{list}");
            let (s, html) = page(browser, &format!("/dashboard/vault/{id}")).await;
            assert_eq!(s, 200, "{html}");
            assert!(html.contains("STRIPE_SECRET_KEY") && html.contains("api.stripe.com") && html.contains("vault.secret_set.created"));
            assert!(html.contains("Bearer ${STRIPE_SECRET_KEY}"), "the profile's template, not the value");
            for form in ["id=\"write-values\"", "id=\"grant\"", "id=\"lifecycle\""] {
                assert_eq!(html.contains(form), changes, "{form}");
            }
            for hostile in [&list, &html] {
                assert!(!hostile.contains("<script>alert(1)</script>") && hostile.contains("&#60;script&#62;alert(1)"));
                assert_no_value(hostile);
            }
        }
        let (_, by_number) = page(&member, "/dashboard/vault/1").await;
        assert!(by_number.contains(&id), "the set's number opens its page too");

        // The admin writes a new value and a new key: a new version, audited with the admin.
        let (_, html) = page(&admin, &format!("/dashboard/vault/{id}")).await;
        assert_eq!(hidden(&html, "expected_version"), "1");
        let write = |browser: &Browser, fields: Vec<(&'static str, String)>| {
            let browser = browser.clone();
            let id = id.clone();
            async move {
                let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                post_form(&browser, &format!("/dashboard/vault/{id}"), &fields).await
            }
        };
        let res = write(&admin, vec![("csrf", admin.csrf.clone()), ("expected_version", "1".into()),
            ("key", "STRIPE_SECRET_KEY".into()), ("value", SECOND.into()),
            ("key", "WEBHOOK_SECRET".into()), ("value", THIRD.into()), ("key", "".into()), ("value", "".into())]).await;
        assert!(location(&res).ends_with(&format!("/dashboard/vault/{id}?done=updated")));
        let set = set_json(&admin, &id).await;
        assert_eq!((set["version"].as_i64(), set["keys"].clone()), (Some(2), json!(["STRIPE_SECRET_KEY", "WEBHOOK_SECRET"])));
        let updated = newest_vault_event(&admin, &id).await;
        assert_eq!(updated["event_type"], "vault.secret_set.updated");
        assert_eq!(updated["actor"], user_actor(&admin).await.as_str());
        let (_, html) = page(&admin, &format!("/dashboard/vault/{id}?done=updated")).await;
        assert!(html.contains("id=\"done\"") && html.contains("WEBHOOK_SECRET"));
        assert_no_value(&html);

        // Bad submissions are error pages with the use case's code, and never echo a value.
        let res = write(&owner, vec![("csrf", owner.csrf.clone()), ("key", "9BAD".into()), ("value", REJECTED.into())]).await;
        assert_refused(res, 400, "invalid_set").await;
        let res = write(&owner, vec![("csrf", owner.csrf.clone()), ("key", "".into()), ("value", REJECTED.into())]).await;
        assert_refused(res, 400, "invalid_entries").await;
        let res = write(&owner, vec![("csrf", owner.csrf.clone()), ("key", "BRAND_NEW".into()), ("value", "".into())]).await;
        assert_refused(res, 400, "invalid_entries").await;
        let res = write(&owner, vec![("csrf", owner.csrf.clone()), ("key", "STRIPE_SECRET_KEY".into()), ("value", "".into())]).await;
        assert_refused(res, 400, "invalid_entries").await;
        let res = write(&owner, vec![("csrf", owner.csrf.clone()), ("expected_version", "1".into()),
            ("key", "STRIPE_SECRET_KEY".into()), ("value", REJECTED.into())]).await;
        assert_refused(res, 409, "version_conflict").await;
        let res = post_form(&owner, "/dashboard/vault", &[("csrf", &owner.csrf), ("name", HOSTILE), ("provider", "stripe"),
            ("environment", "production"), ("key", "OTHER"), ("value", REJECTED)]).await;
        assert_refused(res, 409, "secret_set_exists").await;
        let res = post_form(&owner, "/dashboard/vault", &[("csrf", &owner.csrf), ("name", "x"), ("provider", ""),
            ("environment", "production"), ("key", "OTHER"), ("value", REJECTED)]).await;
        assert_refused(res, 400, "missing_provider").await;
        let (s, html) = page(&owner, "/dashboard/vault/ss_nope").await;
        assert!(s == 404 && html.contains("data-code=\"unknown_secret_set\""));
        let (s, _) = page(&owner, "/dashboard/vault/99").await;
        assert_eq!(s, 404);

        // Members and approvers are refused on the server, and nothing changes.
        for browser in [&member, &approver] {
            let res = write(browser, vec![("csrf", browser.csrf.clone()), ("key", "STRIPE_SECRET_KEY".into()), ("value", REJECTED.into())]).await;
            assert_refused(res, 403, "insufficient_role").await;
            let res = post_form(browser, "/dashboard/vault", &[("csrf", &browser.csrf), ("name", "forged"), ("provider", "p"),
                ("environment", "e"), ("key", "K"), ("value", REJECTED)]).await;
            assert_refused(res, 403, "insufficient_role").await;
            for path in ["delete", "destroy", "rollback/1"] {
                let res = post_form(browser, &format!("/dashboard/vault/{id}/{path}"), &[("csrf", &browser.csrf), ("confirm_name", HOSTILE)]).await;
                assert_refused(res, 403, "insufficient_role").await;
                let (s, _) = page(browser, &format!("/dashboard/vault/{id}/{path}")).await;
                assert_eq!(s, 403, "no confirmation page for {path}");
            }
        }
        // Without the session's CSRF token, or with another one: refused, whoever asks.
        let res = write(&owner, vec![("key", "STRIPE_SECRET_KEY".into()), ("value", REJECTED.into())]).await;
        assert_refused(res, 403, "csrf_failed").await;
        let res = write(&owner, vec![("csrf", member.csrf.clone()), ("key", "STRIPE_SECRET_KEY".into()), ("value", REJECTED.into())]).await;
        assert_refused(res, 403, "csrf_failed").await;
        let set = set_json(&owner, &id).await;
        assert_eq!(set["version"].as_i64(), Some(2), "nothing refused changed the set");
        let (_, listed) = status_json(owner.get("/v1/vault/secret-sets").await).await;
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));

        // The whole vault trail, as the API and the pages give it, holds no value.
        let (_, trail) = status_json(owner.get("/v1/vault/audit").await).await;
        assert_no_value(&trail.to_string());
        let (_, html) = page(&owner, &format!("/dashboard/vault/{id}")).await;
        assert_no_value(&html);
    }
}

both_engines! {
    async fn vault_forms_grant_revoke_lease_roll_back_and_end_sets(app) {
        for (email, role) in [("owner@example.com", "owner"), ("admin@example.com", "admin"), ("member@example.com", "member")] {
            app.grant(&app.workspace_id, email, role).await;
        }
        let owner = app.login("owner@example.com").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;
        let agent = app.active_agent("payments-bot").await;
        let id = create_through_form(&owner, "stripe-prod").await;
        let set_path = format!("/dashboard/vault/{id}");

        // Grants: to an agent on every key, and to a hostile-named group on one key.
        let res = post_form(&admin, &format!("{set_path}/grants"), &[("csrf", &admin.csrf), ("agent_id", &agent.id),
            ("action", "proxy_use"), ("action", "mint_request_lease"), ("all_keys", "1"), ("expires_at", "2099-01-31T09:00")]).await;
        assert!(location(&res).ends_with("?done=granted"));
        let res = post_form(&owner, &format!("{set_path}/grants"), &[("csrf", &owner.csrf), ("group", HOSTILE),
            ("action", "read"), ("key", "STRIPE_SECRET_KEY")]).await;
        assert!(location(&res).ends_with("?done=granted"));
        let (_, grants) = status_json(owner.get(&format!("/v1/vault/grants?secret_set_id={id}")).await).await;
        let grants = grants["items"].as_array().unwrap().clone();
        assert_eq!(grants.len(), 2);
        let to_agent = grants.iter().find(|g| g["agent_id"] == agent.id.as_str()).unwrap();
        assert_eq!(to_agent["allowed_actions"], json!(["proxy", "mint_lease"]), "the form's aliases, answered by their names");
        assert_eq!((to_agent["allowed_keys"].clone(), to_agent["expires_at"].as_str()), (json!("*"), Some("2099-01-31T09:00:00.000Z")), "a datetime-local time is read as UTC");
        let to_group = grants.iter().find(|g| g["group"] == HOSTILE).unwrap();
        assert_eq!(to_group["allowed_keys"], json!(["STRIPE_SECRET_KEY"]));
        let event = newest_vault_event(&owner, &id).await;
        assert_eq!((event["event_type"].as_str(), event["actor"].clone()), (Some("vault.grant.created"), json!(user_actor(&owner).await)));
        let res = post_form(&owner, &format!("{set_path}/grants"), &[("csrf", &owner.csrf), ("agent_id", &agent.id), ("all_keys", "1")]).await;
        assert_refused(res, 400, "missing_allowed_actions").await;
        let res = post_form(&owner, &format!("{set_path}/grants"), &[("csrf", &owner.csrf), ("agent_id", "agt_nope"), ("action", "read"), ("all_keys", "1")]).await;
        assert_refused(res, 404, "unknown_agent").await;
        let res = post_form(&member, &format!("{set_path}/grants"), &[("csrf", &member.csrf), ("agent_id", &agent.id), ("action", "read"), ("all_keys", "1")]).await;
        assert_refused(res, 403, "insufficient_role").await;
        let (_, html) = page(&member, &set_path).await;
        assert!(html.contains(&agent.id) && html.contains("&#60;script&#62;") && !html.contains("<script>alert(1)</script>"));
        assert!(!html.contains("/revoke\""), "members get no revoke buttons");

        // Revoking the group's grant: members may not, the owner may.
        let group_grant = to_group["grant_id"].as_str().unwrap();
        let revoke = format!("{set_path}/grants/{group_grant}/revoke");
        assert_refused(post_form(&member, &revoke, &[("csrf", &member.csrf)]).await, 403, "insufficient_role").await;
        assert!(location(&post_form(&owner, &revoke, &[("csrf", &owner.csrf)]).await).ends_with("?done=grant_revoked"));
        assert_refused(post_form(&owner, &format!("{set_path}/grants/grt_nope/revoke"), &[("csrf", &owner.csrf)]).await, 404, "unknown_grant").await;
        let (_, grants) = status_json(owner.get(&format!("/v1/vault/grants?secret_set_id={id}")).await).await;
        let revoked = grants["items"].as_array().unwrap().iter().find(|g| g["grant_id"] == group_grant).unwrap().clone();
        assert!(revoked["revoked_at"].is_string());

        // A live workflow lease is listed (never its token); members may not revoke it, admins may.
        let (s, issued) = status_json(owner.post("/v1/vault/leases/workflow", &json!({
            "agent_id": agent.id, "secret_set_id": id, "purpose": "nightly payouts", "actions": ["proxy"], "ttl_seconds": 600
        })).await).await;
        assert_eq!(s, 200, "{issued}");
        let lease_id = issued["lease_id"].as_str().unwrap();
        let token = issued["workflow_lease_token"].as_str().unwrap();
        let (_, html) = page(&member, &set_path).await;
        assert!(html.contains(lease_id) && html.contains("nightly payouts") && !html.contains(token));
        let revoke = format!("{set_path}/leases/{lease_id}/revoke");
        assert_refused(post_form(&member, &revoke, &[("csrf", &member.csrf)]).await, 403, "insufficient_role").await;
        let (_, html) = page(&admin, &set_path).await;
        assert!(html.contains(&format!("id=\"revoke-{lease_id}\"")) && !html.contains(token));
        assert!(location(&post_form(&admin, &revoke, &[("csrf", &admin.csrf)]).await).ends_with("?done=lease_revoked"));
        let (_, leases) = status_json(owner.get(&format!("/v1/vault/leases?secret_set_id={id}")).await).await;
        assert!(leases["items"][0]["revoked_at"].is_string(), "{leases}");
        let event = newest_vault_event(&owner, &id).await;
        assert_eq!((event["event_type"].as_str(), event["actor"].clone()), (Some("vault.lease.revoked"), json!(user_actor(&admin).await)));
        let (_, html) = page(&admin, &set_path).await;
        assert!(!html.contains(&format!("data-lease=\"{lease_id}\"")), "a revoked lease is no longer live");
        assert_refused(post_form(&admin, &format!("{set_path}/leases/ls_nope/revoke"), &[("csrf", &admin.csrf)]).await, 404, "unknown_lease").await;

        // Roll back: a second version, then version 1 again through the confirmation page.
        let res = post_form(&owner, &set_path, &[("csrf", &owner.csrf), ("key", "STRIPE_SECRET_KEY"), ("value", SECOND),
            ("key", "EXTRA"), ("value", THIRD)]).await;
        assert!(location(&res).ends_with("?done=updated"));
        let (s, confirm) = page(&owner, &format!("{set_path}/rollback/1")).await;
        assert_eq!(s, 200, "{confirm}");
        assert_eq!(hidden(&confirm, "expected_version"), "2");
        assert_no_value(&confirm);
        let (s, _) = page(&owner, &format!("{set_path}/rollback/7")).await;
        assert_eq!(s, 404);
        let res = post_form(&owner, &format!("{set_path}/rollback/1"), &[("csrf", &owner.csrf), ("expected_version", "2")]).await;
        assert!(location(&res).ends_with("?done=rolled_back"));
        let set = set_json(&owner, &id).await;
        assert_eq!((set["version"].as_i64(), set["keys"].clone()), (Some(3), json!(["STRIPE_SECRET_KEY"])));
        let event = newest_vault_event(&owner, &id).await;
        assert_eq!((event["event_type"].as_str(), event["actor"].clone()), (Some("vault.secret_set.rolled_back"), json!(user_actor(&owner).await)));
        let res = post_form(&owner, &format!("{set_path}/rollback/1"), &[("csrf", &owner.csrf), ("expected_version", "2")]).await;
        assert_refused(res, 409, "version_conflict").await;
        let (_, html) = page(&owner, &set_path).await;
        assert!(html.contains("id=\"rollback-2\"") && html.contains("EXTRA"));
        assert_no_value(&html);

        // Delete and undelete, each through its confirmation page.
        let (s, confirm) = page(&owner, &format!("{set_path}/delete")).await;
        assert!(s == 200 && confirm.contains("id=\"confirm\""));
        assert!(location(&post_form(&owner, &format!("{set_path}/delete"), &[("csrf", &owner.csrf)]).await).ends_with("?done=deleted"));
        assert!(set_json(&owner, &id).await["deleted_at"].is_string());
        let (_, list) = page(&owner, "/dashboard/vault").await;
        assert!(!list.contains(&id) && list.contains("id=\"empty\""));
        let (_, list) = page(&owner, "/dashboard/vault?deleted=true").await;
        assert!(list.contains(&id) && list.contains(">deleted</span>"));
        let (_, html) = page(&owner, &set_path).await;
        assert!(!html.contains("id=\"write-values\"") && html.contains("/undelete\""), "a deleted set is undeleted, not written");
        assert!(location(&post_form(&owner, &format!("{set_path}/undelete"), &[("csrf", &owner.csrf)]).await).ends_with("?done=undeleted"));
        assert!(set_json(&owner, &id).await["deleted_at"].is_null());
        assert_refused(post_form(&owner, &format!("{set_path}/obliterate"), &[("csrf", &owner.csrf)]).await, 404, "not_found").await;

        // Destroy asks for the set's name, typed.
        let (s, confirm) = page(&owner, &format!("{set_path}/destroy")).await;
        assert!(s == 200 && confirm.contains("name=\"confirm_name\""));
        let res = post_form(&owner, &format!("{set_path}/destroy"), &[("csrf", &owner.csrf), ("confirm_name", "stripe")]).await;
        assert_refused(res, 400, "invalid_confirm_name").await;
        assert!(set_json(&owner, &id).await["destroyed_at"].is_null());
        let res = post_form(&owner, &format!("{set_path}/destroy"), &[("csrf", &owner.csrf), ("confirm_name", "stripe-prod")]).await;
        assert!(location(&res).ends_with("/dashboard/vault?done=destroyed"));
        assert!(set_json(&owner, &id).await["destroyed_at"].is_string());
        let (s, html) = page(&member, &set_path).await;
        assert!(s == 200 && html.contains("destroyed") && html.contains("vault.secret_set.destroyed"), "{html}");
        let event = newest_vault_event(&owner, &id).await;
        assert_eq!(event["actor"], user_actor(&owner).await.as_str());
    }
}

/// The token a lease page shows.
fn lease_token(html: &str) -> String {
    let start = html
        .find("id=\"lease-token\">")
        .expect("the token on the page")
        + "id=\"lease-token\">".len();
    let token = &html[start..start + html[start..].find('<').unwrap()];
    assert!(token.starts_with("vwl_") && token.len() == 47, "{token}");
    token.to_owned()
}

both_engines! {
    async fn a_workflow_lease_is_issued_on_the_set_page_and_its_token_shown_once(app) {
        for (email, role) in [("owner@example.com", "owner"), ("admin@example.com", "admin"),
            ("member@example.com", "member"), ("approver@example.com", "approver")] {
            app.grant(&app.workspace_id, email, role).await;
        }
        let owner = app.login("owner@example.com").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;
        let approver = app.login("approver@example.com").await;
        let agent = app.active_agent("payments-bot").await;
        let id = create_through_form(&owner, "stripe-prod").await;
        let set_path = format!("/dashboard/vault/{id}");
        let res = post_form(&owner, &format!("{set_path}/grants"), &[("csrf", &owner.csrf), ("agent_id", &agent.id),
            ("action", "proxy"), ("action", "mint_lease"), ("all_keys", "1")]).await;
        assert!(location(&res).ends_with("?done=granted"));

        // Owners and admins get the form (the set's grantees offered), members and approvers not.
        for (browser, offered) in [(&owner, true), (&admin, true), (&member, false), (&approver, false)] {
            let (s, html) = page(browser, &set_path).await;
            assert_eq!(s, 200);
            assert_eq!(html.contains("id=\"issue-lease\""), offered, "{html}");
            if offered {
                assert!(html.contains(&format!("<option value=\"{}\">", agent.id)), "the grantee is offered");
                assert!(html.contains("id=\"lease-action-proxy\"") && html.contains("id=\"lease-action-read\""));
                assert!(!html.contains("lease-action-mint_lease"), "a lease is for proxy or read");
            }
        }

        // The admin issues one: the token on the answer's page, once, never cached.
        let res = post_form(&admin, &format!("{set_path}/leases"), &[("csrf", &admin.csrf), ("agent_id", &agent.id),
            ("action", "proxy_use"), ("action", "read"), ("purpose", "nightly payouts"), ("ttl_seconds", "900")]).await;
        assert_eq!(res.status().as_u16(), 200);
        assert_eq!(res.headers()["cache-control"], "no-store");
        assert!(res.headers().get("location").is_none(), "no redirect carries the token");
        let html = res.text().await.unwrap();
        let token = lease_token(&html);
        assert!(html.contains("id=\"shown-once\"") && html.contains("nightly payouts") && html.contains("proxy, read"), "{html}");
        assert_no_value(&html);

        // Issued as the API issues it: listed (never the token), audited with the admin, and the
        // token is a live workflow lease of the agent (the mint gets past the lease to the grant).
        let (_, leases) = status_json(owner.get(&format!("/v1/vault/leases?secret_set_id={id}")).await).await;
        let lease = leases["items"][0].clone();
        assert_eq!((lease["kind"].as_str(), lease["agent_id"].as_str()), (Some("workflow"), Some(agent.id.as_str())));
        assert_eq!(lease["actions"], json!(["proxy", "read"]), "aliases in, names out");
        assert_eq!(lease["purpose"], "nightly payouts");
        assert!(!leases.to_string().contains(&token));
        let event = newest_vault_event(&owner, &id).await;
        assert_eq!((event["event_type"].as_str(), event["actor"].clone()), (Some("vault.lease.minted"), json!(user_actor(&admin).await)));
        let res = agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": token, "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 403, "no_grant").await;
        let res = agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": format!("vwl_{}", "x".repeat(43)), "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 401, "invalid_lease").await;

        // Never again: not on the set's page, its list, nor anywhere in the audit trail.
        for browser in [&owner, &admin, &member] {
            let (_, html) = page(browser, &set_path).await;
            assert!(html.contains(&format!("data-lease=\"{}\"", lease["lease_id"].as_str().unwrap())));
            assert!(!html.contains(&token));
        }
        let (_, trail) = status_json(owner.get("/v1/workspace/audit/events?limit=200").await).await;
        assert!(trail["items"].as_array().is_some_and(|i| !i.is_empty()));
        assert!(!trail.to_string().contains(&token));
        let (_, trail) = status_json(owner.get("/v1/vault/audit?limit=200").await).await;
        assert!(!trail.to_string().contains(&token));

        // Refusals: the use case's codes as error pages, and no lease written by any of them.
        let issue = |browser: &Browser, fields: Vec<(&'static str, String)>| {
            let browser = browser.clone();
            let set_path = set_path.clone();
            async move {
                let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                post_form(&browser, &format!("{set_path}/leases"), &fields).await
            }
        };
        let form = |browser: &Browser, agent_id: &str, action: &str, purpose: &str, ttl: &str| vec![
            ("csrf", browser.csrf.clone()), ("agent_id", agent_id.to_owned()), ("action", action.to_owned()),
            ("purpose", purpose.to_owned()), ("ttl_seconds", ttl.to_owned())];
        for (fields, status, code) in [
            (form(&owner, "", "proxy", "p", "600"), 400, "missing_agent_id"),
            (form(&owner, &agent.id, "mint_lease", "p", "600"), 400, "invalid_actions"),
            (form(&owner, &agent.id, "", "p", "600"), 400, "missing_actions"),
            (form(&owner, &agent.id, "proxy", "", "600"), 400, "missing_purpose"),
            (form(&owner, &agent.id, "proxy", "p", "86401"), 400, "invalid_ttl_seconds"),
            (form(&owner, &agent.id, "proxy", "p", "soon"), 400, "invalid_ttl_seconds"),
            (form(&owner, "agt_00000000000000000000000000000000", "proxy", "p", "600"), 404, "unknown_agent"),
            (form(&member, &agent.id, "proxy", "p", "600"), 403, "insufficient_role"),
            (form(&approver, &agent.id, "proxy", "p", "600"), 403, "insufficient_role"),
        ] {
            let browser = if code == "insufficient_role" { if fields[0].1 == member.csrf { &member } else { &approver } } else { &owner };
            assert_refused(issue(browser, fields).await, status, code).await;
        }
        let mut forged = form(&owner, &agent.id, "proxy", "p", "600");
        forged[0].1 = member.csrf.clone();
        assert_refused(issue(&owner, forged).await, 403, "csrf_failed").await;
        let (_, leases) = status_json(owner.get(&format!("/v1/vault/leases?secret_set_id={id}")).await).await;
        assert_eq!(leases["items"].as_array().unwrap().len(), 1, "nothing refused wrote a lease");

        // A deleted set issues nothing (and offers no form).
        assert!(location(&post_form(&owner, &format!("{set_path}/delete"), &[("csrf", &owner.csrf)]).await).ends_with("?done=deleted"));
        let (_, html) = page(&owner, &set_path).await;
        assert!(!html.contains("id=\"issue-lease\""));
        assert_refused(issue(&owner, form(&owner, &agent.id, "proxy", "p", "600")).await, 404, "unknown_secret_set").await;
    }
}
