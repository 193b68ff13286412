//! The console's credentials and kill switch (`/dashboard/credentials`) and the agent page's
//! credentials and leases: every role reads; owners and admins pause and resume minting,
//! revoke everything behind a typed confirmation, revoke one credential and every credential of
//! an agent, all through the API's use cases and audited with the person; members' and
//! approvers' forms are refused whatever they post. No token is ever on a page.

use crate::both_engines;
use crate::dashboard::{hidden, link_of, page, post_form, HOSTILE};
use crate::helpers::*;
use serde_json::{json, Value};

/// Agents allowed to mint; answers them.
pub(crate) async fn minters(app: &TestApp, names: &[&str]) -> Vec<TestAgent> {
    let mut agents = Vec::new();
    for name in names {
        agents.push(app.active_agent(name).await);
    }
    app.apply_policy(json!({
        "reusable_policy_blocks": {"mint": {"actions": {"allow": ["mint_credential"]}}},
        "agent_groups": [{"name": "minters", "members": agents.iter().map(|a| a.id.clone()).collect::<Vec<_>>()}],
        "bindings": [{"group": "minters", "blocks": ["mint"]}]
    }))
    .await;
    agents
}

/// Mints through the API; answers `(cred_id, token)`.
pub(crate) async fn mint(app: &TestApp, body: Value) -> (String, String) {
    let (s, out) = status_json(app.post("/v1/identity/credentials/mint", &body).await).await;
    assert_eq!(s, 200, "{out}");
    (
        out["credential"]["cred_id"].as_str().unwrap().to_owned(),
        out["credential"]["token"].as_str().unwrap().to_owned(),
    )
}

async fn introspect(app: &TestApp, token: &str) -> Value {
    let (s, out) = status_json(
        app.post("/v1/identity/introspect", &json!({"token": token}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
    out
}

/// The credential ids listed in a page's table, in order.
fn listed(html: &str) -> Vec<String> {
    html.split("<tr id=\"cred-")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// What the page asks to type to revoke everything.
fn confirm_word(html: &str) -> String {
    let start = html.find("id=\"confirm-word\">").unwrap() + "id=\"confirm-word\">".len();
    html[start..start + html[start..].find("</strong>").unwrap()]
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
}

fn no_token(html: &str, tokens: &[&str]) {
    for token in tokens {
        assert!(!html.contains(token), "a token on a page");
    }
    assert!(!html.contains("sct_"), "an opaque token on a page");
}

both_engines! {
    async fn every_role_reads_the_active_credentials_paged_and_filtered(app) {
        let agents = minters(&app, &["minter", HOSTILE]).await;
        let (a, b) = (&agents[0], &agents[1]);
        let mut live_a = Vec::new();
        let mut tokens = Vec::new();
        for i in 0..3 {
            let (id, token) = mint(&app, json!({"agent_id": a.id, "audience": format!("payments-{i}"), "scopes": ["refunds:write"], "provider": "stripe"})).await;
            live_a.push(id);
            tokens.push(token);
        }
        let (live_b, token_b) = mint(&app, json!({"agent_id": b.id, "audience": HOSTILE, "token_type": "jwt", "one_time": true})).await;
        tokens.push(token_b);
        // Not active: revoked, used up, expired.
        let (revoked, revoked_token) = mint(&app, json!({"agent_id": a.id})).await;
        let (s, _) = status_json(app.post("/v1/identity/credentials/revoke", &json!({"token": revoked_token})).await).await;
        assert_eq!(s, 200);
        let (used, used_token) = mint(&app, json!({"agent_id": a.id, "one_time": true})).await;
        assert_eq!(introspect(&app, &used_token).await["active"], true);
        let (expired, expired_token) = mint(&app, json!({"agent_id": a.id, "ttl_seconds": 1})).await;
        tokens.extend([revoked_token, used_token, expired_token]);
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();

        let mut all_live = live_a.clone();
        all_live.push(live_b.clone());
        all_live.reverse(); // newest first
        for role in ["owner", "admin", "member", "approver"] {
            let email = format!("{role}@example.com");
            app.grant(&app.workspace_id, &email, role).await;
            let person = app.login(&email).await;
            let (s, html) = page(&person, "/dashboard/credentials").await;
            assert_eq!(s, 200, "{role}: {html}");
            assert!(html.contains("href=\"/dashboard/credentials\" aria-current=\"page\"") || html.contains("href=\"/dashboard/credentials\""), "{role}: nav");
            assert!(html.contains(">Credentials</a>"), "{role}: the nav names it");
            assert_eq!(listed(&html), all_live, "{role}: the active ones, newest first");
            for gone in [&revoked, &used, &expired] {
                assert!(!html.contains(gone.as_str()), "{role}: {gone} is not active");
            }
            assert!(html.contains("id=\"minting-state\">on<"), "{role}");
            assert!(!html.contains(HOSTILE) && html.contains("&#60;script&#62;"), "{role}: escaped");
            no_token(&html, &token_refs);
            let changes = role == "owner" || role == "admin";
            assert_eq!(html.contains("id=\"minting-form\""), changes, "{role}: the minting form");
            assert_eq!(html.contains("id=\"revoke-all-form\""), changes, "{role}: the revoke-all form");
            assert_eq!(html.contains(&format!("id=\"revoke-{live_b}\"")), changes, "{role}: revoke links");
            assert_eq!(html.contains("id=\"read-only\""), !changes, "{role}");

            // The agent's page: its credentials (with a link to all) and its leases.
            let (s, html) = page(&person, &format!("/dashboard/agents/{}", a.id)).await;
            assert_eq!(s, 200, "{role}: {html}");
            let mut own = live_a.clone();
            own.reverse();
            assert_eq!(listed(&html), own, "{role}: the agent's active credentials");
            assert!(html.contains(&format!("href=\"/dashboard/credentials?agent_id={}\"", a.id)), "{role}");
            assert!(html.contains("id=\"no-leases\""), "{role}: no lease yet");
            no_token(&html, &token_refs);
        }

        let admin = app.login("admin@example.com").await;
        // Pages of two: every active credential once, in order.
        let (_, html) = page(&admin, "/dashboard/credentials?limit=2").await;
        let mut seen = listed(&html);
        assert_eq!(seen.len(), 2);
        let next = link_of(&html, "next-page");
        let (s, html) = page(&admin, &next).await;
        assert_eq!(s, 200, "{html}");
        seen.extend(listed(&html));
        assert!(!html.contains("id=\"next-page\"") && html.contains("id=\"first-page\""));
        assert_eq!(seen, all_live);
        // One agent's.
        let (_, html) = page(&admin, &format!("/dashboard/credentials?agent_id={}", b.id)).await;
        assert_eq!(listed(&html), vec![live_b.clone()]);
        assert!(html.contains("id=\"filter-agent\"") && html.contains("id=\"revoke-agent\""));
        let (s, html) = page(&admin, "/dashboard/credentials?agent_id=agt_00000000000000000000000000000000").await;
        assert_eq!(s, 404);
        assert!(html.contains("data-code=\"unknown_agent\""));
        let (s, html) = page(&admin, "/dashboard/credentials?cursor=nonsense").await;
        assert_eq!(s, 400);
        assert!(html.contains("data-code=\"invalid_cursor\""), "{html}");
        let (s, _) = page(&admin, "/dashboard/credentials?limit=0").await;
        assert_eq!(s, 400);
        // Not logged in: to the login page.
        let res = app.client.get(app.url("/dashboard/credentials")).send().await.unwrap();
        assert_eq!(res.status(), 303);
    }
}

both_engines! {
    async fn admins_pause_minting_and_revoke_everything_behind_a_typed_confirmation(app) {
        let agents = minters(&app, &["minter"]).await;
        let agent = &agents[0];
        let (_, t1) = mint(&app, json!({"agent_id": agent.id})).await;
        let (_, t2) = mint(&app, json!({"agent_id": agent.id, "token_type": "jwt"})).await;
        for role in ["admin", "member", "approver"] {
            app.grant(&app.workspace_id, &format!("{role}@example.com"), role).await;
        }
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;
        let approver = app.login("approver@example.com").await;

        // Refused: no CSRF token, a forged one, and roles that only read.
        let pause = [("minting", "pause"), ("reason", "incident 7")];
        let res = post_form(&admin, "/dashboard/credentials/minting", &pause).await;
        assert_eq!(res.status(), 403);
        assert!(res.text().await.unwrap().contains("data-code=\"csrf_failed\""));
        let res = post_form(&admin, "/dashboard/credentials/minting", &[("csrf", "forged"), ("minting", "pause")]).await;
        assert_eq!(res.status(), 403);
        for reader in [&member, &approver] {
            let res = post_form(reader, "/dashboard/credentials/minting", &[("csrf", &reader.csrf), ("minting", "pause")]).await;
            assert_eq!(res.status(), 403);
            assert!(res.text().await.unwrap().contains("data-code=\"insufficient_role\""));
        }
        let res = post_form(&admin, "/dashboard/credentials/minting", &[("csrf", &admin.csrf), ("minting", "maybe")]).await;
        assert_eq!(res.status(), 400);
        assert!(res.text().await.unwrap().contains("data-code=\"invalid_minting\""));
        let (_, status) = status_json(app.get("/v1/identity/kill-switch/status").await).await;
        assert_eq!(status["minting_paused"], false, "nothing refused changed anything");

        // The admin pauses: minting fails through the API, the page says why, when and who.
        let res = post_form(&admin, "/dashboard/credentials/minting", &[("csrf", &admin.csrf), ("minting", "pause"), ("reason", HOSTILE)]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"], "/dashboard/credentials?done=paused");
        assert_error(app.post("/v1/identity/credentials/mint", &json!({"agent_id": agent.id})).await, 403, "minting_paused").await;
        let (_, html) = page(&admin, "/dashboard/credentials?done=paused").await;
        assert!(html.contains("id=\"done\"") && html.contains("id=\"minting-state\">paused<"));
        assert!(html.contains("id=\"paused-reason\">&#60;script&#62;") && !html.contains(HOSTILE));
        // Who paused it, by email (the trail keeps the id).
        assert!(html.contains("id=\"resume-minting\"") && html.contains("by <code>admin@example.com</code>"));
        let (_, html) = page(&member, "/dashboard/credentials").await;
        assert!(html.contains("id=\"minting-state\">paused<") && !html.contains("<form method=\"post\" action=\"/dashboard/credentials"));
        let events = audit_events(&app, "event_type=kill_switch.minting_paused").await;
        assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"), "{events:?}");
        // And resumes.
        let res = post_form(&admin, "/dashboard/credentials/minting", &[("csrf", &admin.csrf), ("minting", "resume")]).await;
        assert_eq!(res.status(), 303);
        let (_, t3) = mint(&app, json!({"agent_id": agent.id})).await;

        // Revoke-all: the wrong name, none, or a reader's right one change nothing.
        let (_, html) = page(&admin, "/dashboard/credentials").await;
        let word = confirm_word(&html);
        assert!(!word.is_empty());
        for typed in [format!("{word}x"), word.to_uppercase() + "?", String::new()] {
            let res = post_form(&admin, "/dashboard/credentials/revoke-all", &[("csrf", &admin.csrf), ("confirm", &typed)]).await;
            assert_eq!(res.status(), 400, "{typed}");
            assert!(res.text().await.unwrap().contains("data-code=\"confirmation_mismatch\""));
        }
        let res = post_form(&admin, "/dashboard/credentials/revoke-all", &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.status(), 400);
        for reader in [&member, &approver] {
            let res = post_form(reader, "/dashboard/credentials/revoke-all", &[("csrf", &reader.csrf), ("confirm", &word)]).await;
            assert_eq!(res.status(), 403);
        }
        let res = post_form(&admin, "/dashboard/credentials/revoke-all", &[("confirm", &word)]).await;
        assert_eq!(res.status(), 403, "no CSRF token");
        for token in [&t1, &t2, &t3] {
            assert_eq!(introspect(&app, token).await["active"], true, "nothing was revoked");
        }
        let res = post_form(&admin, "/dashboard/credentials/revoke-all", &[("csrf", &admin.csrf), ("confirm", &word), ("reason", "incident 7")]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"], "/dashboard/credentials?done=revoked_all");
        for token in [&t1, &t2, &t3] {
            let seen = introspect(&app, token).await;
            assert_eq!((seen["active"].as_bool(), seen["reason"].as_str()), (Some(false), Some("revoked_by_kill_switch")));
        }
        let (_, html) = page(&admin, "/dashboard/credentials").await;
        assert!(html.contains("id=\"no-credentials\"") && listed(&html).is_empty());
        assert!(html.contains("id=\"last-revoke-all\">") && html.contains("(incident 7)"));
        let events = audit_events(&app, "event_type=kill_switch.revoke_all").await;
        assert_eq!(events.len(), 1);
        assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
        // Minted after the revoke-all: listed again.
        let (fresh, _) = mint(&app, json!({"agent_id": agent.id})).await;
        let (_, html) = page(&admin, "/dashboard/credentials").await;
        assert_eq!(listed(&html), vec![fresh]);
    }
}

both_engines! {
    async fn admins_revoke_one_credential_and_every_credential_of_an_agent(app) {
        let agents = minters(&app, &["first", "second"]).await;
        let (a, b) = (&agents[0], &agents[1]);
        let (one, t_one) = mint(&app, json!({"agent_id": a.id})).await;
        let (_, t_a2) = mint(&app, json!({"agent_id": a.id})).await;
        let (_, t_b1) = mint(&app, json!({"agent_id": b.id})).await;
        let (_, t_b2) = mint(&app, json!({"agent_id": b.id})).await;
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let admin = app.login("admin@example.com").await;
        let member = app.login("member@example.com").await;

        // One credential: a confirmation page, then the form.
        let (_, html) = page(&admin, "/dashboard/credentials").await;
        let confirm = link_of(&html, &format!("revoke-{one}"));
        assert_eq!(confirm, format!("/dashboard/credentials/{one}/revoke"));
        let (s, html) = page(&admin, &confirm).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains(&one) && html.contains("id=\"confirm-action\"") && html.contains(">live<"));
        no_token(&html, &[&t_one]);
        let (s, html) = page(&member, &confirm).await;
        assert_eq!(s, 403);
        assert!(html.contains("data-code=\"insufficient_role\""));
        let res = post_form(&member, &confirm, &[("csrf", &member.csrf)]).await;
        assert_eq!(res.status(), 403);
        let res = post_form(&admin, &confirm, &[("csrf", "forged")]).await;
        assert_eq!(res.status(), 403);
        assert_eq!(introspect(&app, &t_one).await["active"], true, "refusals revoke nothing");
        let res = post_form(&admin, &confirm, &[("csrf", &hidden(&html_of(&admin, &confirm).await, "csrf")), ("reason", "leaked")]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"], "/dashboard/credentials?done=revoked&revoked=1");
        assert_eq!(introspect(&app, &t_one).await["reason"], "revoked");
        assert_eq!(introspect(&app, &t_a2).await["active"], true, "only that one");
        let (_, html) = page(&admin, "/dashboard/credentials?done=revoked&revoked=1").await;
        assert!(html.contains("1 credential revoked") && !html.contains(&format!("cred-{one}")));
        // Again: nothing left to revoke. Unknown, malformed: 404.
        let res = post_form(&admin, &confirm, &[("csrf", &admin.csrf)]).await;
        assert_eq!(res.headers()["location"], "/dashboard/credentials?done=revoked&revoked=0");
        for bad in ["crd_00000000000000000000000000000000", "nonsense"] {
            let res = post_form(&admin, &format!("/dashboard/credentials/{bad}/revoke"), &[("csrf", &admin.csrf)]).await;
            assert_eq!(res.status(), 404, "{bad}");
            assert!(res.text().await.unwrap().contains("data-code=\"unknown_credential\""));
        }
        // Another workspace's admin cannot reach this workspace's credential.
        let (other_ws, _) = app.other_workspace().await;
        app.grant(&other_ws, "elsewhere@example.com", "admin").await;
        let stranger = app.login("elsewhere@example.com").await;
        let (_, t_a3) = mint(&app, json!({"agent_id": a.id})).await;
        let a3 = introspect(&app, &t_a3).await["cred_id"].as_str().unwrap().to_owned();
        let (s, _) = page(&stranger, &format!("/dashboard/credentials/{a3}/revoke")).await;
        assert_eq!(s, 404);
        let res = post_form(&stranger, &format!("/dashboard/credentials/{a3}/revoke"), &[("csrf", &stranger.csrf)]).await;
        assert_eq!(res.status(), 404);
        assert_eq!(introspect(&app, &t_a3).await["active"], true);

        // Every credential of an agent.
        let (_, html) = page(&admin, &format!("/dashboard/credentials?agent_id={}", b.id)).await;
        let confirm = link_of(&html, "revoke-agent");
        assert_eq!(confirm, format!("/dashboard/credentials/agents/{}/revoke", b.id));
        let (s, html) = page(&admin, &confirm).await;
        assert_eq!(s, 200);
        assert!(html.contains("second"));
        let (s, _) = page(&member, &confirm).await;
        assert_eq!(s, 403);
        let res = post_form(&member, &confirm, &[("csrf", &member.csrf)]).await;
        assert_eq!(res.status(), 403);
        assert_eq!(introspect(&app, &t_b1).await["active"], true);
        let res = post_form(&admin, &confirm, &[("csrf", &admin.csrf), ("reason", "incident")]).await;
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"], format!("/dashboard/credentials?agent_id={}&done=revoked&revoked=2", b.id).as_str());
        for t in [&t_b1, &t_b2] {
            assert_eq!(introspect(&app, t).await["reason"], "revoked");
        }
        assert_eq!(introspect(&app, &t_a2).await["active"], true, "the other agent's stay");
        let (s, _) = page(&admin, "/dashboard/credentials/agents/agt_00000000000000000000000000000000/revoke").await;
        assert_eq!(s, 404);

        // Audited as the API's revokes are, with the person as actor and the agent named.
        let events = audit_events(&app, "event_type=credential.revoked").await;
        assert!(events.len() >= 3, "{events:?}");
        for e in &events {
            assert!(e["actor"].as_str().unwrap().starts_with("user:"), "{e}");
        }
        assert!(events.iter().any(|e| e["agent_id"] == b.id.as_str()));
        assert!(events.iter().any(|e| e["agent_id"] == a.id.as_str()));
    }
}

async fn html_of(person: &Browser, path: &str) -> String {
    page(person, path).await.1
}

both_engines! {
    async fn an_agents_page_shows_its_live_leases(app) {
        let agents = minters(&app, &["payer"]).await;
        let agent = &agents[0];
        let owner = app.login("owner@example.com").await;
        let (s, made) = status_json(owner.post("/v1/vault/secret-sets", &json!({
            "name": "stripe-prod", "provider": "stripe", "environment": "production",
            "entries": {"STRIPE_SECRET_KEY": "sk_live_secret_value_123", "ACCOUNT": "acct_1"}
        })).await).await;
        assert_eq!(s, 200, "{made}");
        let lease = |purpose: &str| json!({"agent_id": agent.id, "secret_set_id": 1, "purpose": purpose, "actions": ["read"], "ttl_seconds": 600});
        let (s, live) = status_json(app.post("/v1/vault/leases/workflow", &lease("payouts")).await).await;
        assert_eq!(s, 200, "{live}");
        let (_, gone) = status_json(app.post("/v1/vault/leases/workflow", &lease("old")).await).await;
        let gone_id = gone["lease_id"].as_str().unwrap();
        let (s, _) = status_json(app.post(&format!("/v1/vault/leases/{gone_id}/revoke"), &json!({})).await).await;
        assert_eq!(s, 200);
        let (_, token) = mint(&app, json!({"agent_id": agent.id, "scopes": ["payouts:read"]})).await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let member = app.login("member@example.com").await;
        for person in [&owner, &member] {
            let (s, html) = page(person, &format!("/dashboard/agents/{}", agent.id)).await;
            assert_eq!(s, 200, "{html}");
            let live_id = live["lease_id"].as_str().unwrap();
            assert!(html.contains(&format!("id=\"lease-{live_id}\"")), "the live lease");
            assert!(!html.contains(gone_id), "not the revoked one");
            assert!(html.contains("id=\"credentials-heading\"") && html.contains("payouts:read"));
            assert!(!html.contains(live["workflow_lease_token"].as_str().unwrap()) && !html.contains("vwl_"));
            assert!(!html.contains("sk_live_secret_value_123"));
            no_token(&html, &[&token]);
        }
        // An agent with nothing: both empty states.
        let idle = app.active_agent("idle").await;
        let (_, html) = page(&owner, &format!("/dashboard/agents/{}", idle.id)).await;
        assert!(html.contains("id=\"no-credentials\"") && html.contains("id=\"no-leases\""));
    }
}
