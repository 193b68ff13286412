//! Who may call what: every management endpoint against every kind of
//! credential (API key, scoped API key, session, token, scoped token, a token of another
//! workspace, expired and revoked tokens) and every role, on both engines.

use reqwest::{Method, RequestBuilder, Response};
use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

/// What an endpoint needs, as `domain::access::Need` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    AgentsRead,
    AgentsChange,
    AuditRead,
    KillSwitchRead,
    KillSwitch,
    Credentials,
    PoliciesRead,
    PolicySync,
    ChallengesRead,
    ChallengesDecide,
    WorkspaceRead,
    WorkspaceChange,
    VaultRead,
    VaultChange,
    VaultLeasesRead,
    VaultLeases,
}

impl Need {
    fn is_read(self) -> bool {
        matches!(
            self,
            Need::AgentsRead
                | Need::AuditRead
                | Need::KillSwitchRead
                | Need::PoliciesRead
                | Need::ChallengesRead
                | Need::WorkspaceRead
                | Need::VaultRead
                | Need::VaultLeasesRead
        )
    }

    /// API keys reach everything but people's matters.
    fn for_keys(self) -> bool {
        !matches!(
            self,
            Need::PolicySync
                | Need::ChallengesDecide
                | Need::WorkspaceRead
                | Need::WorkspaceChange
                | Need::VaultRead
                | Need::VaultChange
        )
    }

    fn allowed_to(self, role: &str) -> bool {
        match role {
            "owner" | "admin" => true,
            "member" => self.is_read(),
            "approver" => self.is_read() || self == Need::ChallengesDecide,
            _ => unreachable!("{role}"),
        }
    }
}

struct Endpoint {
    method: Method,
    path: String,
    body: Option<Value>,
    need: Need,
    /// A second grant the endpoint needs besides `need` (an answer that shows what both read).
    also: Option<Need>,
}

impl Endpoint {
    /// Whether `may` holds for every grant the endpoint needs.
    fn all(&self, may: impl Fn(Need) -> bool) -> bool {
        may(self.need) && self.also.is_none_or(may)
    }
}

fn endpoints(agent_id: &str) -> Vec<Endpoint> {
    let e = |method: Method, path: &str, body: Option<Value>, need| Endpoint {
        method,
        path: path.to_owned(),
        body,
        need,
        also: None,
    };
    let get = Method::GET;
    let post = Method::POST;
    let reason = || Some(json!({"reason": "matrix"}));
    vec![
        e(get.clone(), "/v1/agents", None, Need::AgentsRead),
        e(
            get.clone(),
            &format!("/v1/agents/{agent_id}"),
            None,
            Need::AgentsRead,
        ),
        e(
            post.clone(),
            &format!("/v1/agents/{agent_id}/suspend"),
            reason(),
            Need::AgentsChange,
        ),
        e(
            post.clone(),
            &format!("/v1/agents/{agent_id}/resume"),
            reason(),
            Need::AgentsChange,
        ),
        e(
            post.clone(),
            "/v1/agents/agt_00000000000000000000000000000000/revoke",
            reason(),
            Need::AgentsChange,
        ),
        e(
            post.clone(),
            "/v1/agents/agt_00000000000000000000000000000000/approve",
            reason(),
            Need::AgentsChange,
        ),
        e(get.clone(), "/v1/workspace/agents", None, Need::AgentsRead),
        e(
            get.clone(),
            &format!("/v1/telemetry/heartbeat/recent?agent_id={agent_id}"),
            None,
            Need::AgentsRead,
        ),
        e(
            get.clone(),
            "/v1/workspace/audit/events?limit=5",
            None,
            Need::AuditRead,
        ),
        e(
            post.clone(),
            "/v1/workspace/audit/export",
            Some(json!({"format": "json"})),
            Need::AuditRead,
        ),
        e(
            get.clone(),
            "/v1/identity/kill-switch/status",
            None,
            Need::KillSwitchRead,
        ),
        e(
            post.clone(),
            "/v1/identity/kill-switch/minting",
            Some(json!({"paused": false, "reason": "matrix"})),
            Need::KillSwitch,
        ),
        e(
            post.clone(),
            "/v1/identity/kill-switch/revoke-all",
            Some(json!({"reason": "matrix"})),
            Need::KillSwitch,
        ),
        e(
            post.clone(),
            "/v1/identity/credentials/revoke",
            Some(json!({"token": "nope"})),
            Need::Credentials,
        ),
        e(
            post.clone(),
            "/v1/identity/credentials/revoke-by-agent",
            Some(json!({"agent_id": agent_id})),
            Need::Credentials,
        ),
        e(
            post.clone(),
            "/v1/identity/introspect",
            Some(json!({"token": "nope"})),
            Need::Credentials,
        ),
        e(get.clone(), "/v1/policies", None, Need::PoliciesRead),
        e(
            get.clone(),
            "/v1/policies/pol_default",
            None,
            Need::PoliciesRead,
        ),
        e(
            get.clone(),
            "/v1/policies/pol_default/versions",
            None,
            Need::PoliciesRead,
        ),
        e(
            get.clone(),
            "/v1/policies/pol_default/versions/1",
            None,
            Need::PoliciesRead,
        ),
        // An agent's effective permissions show its metadata and labels too.
        Endpoint {
            also: Some(Need::AgentsRead),
            ..e(
                get.clone(),
                &format!("/v1/access/agents/{agent_id}"),
                None,
                Need::PoliciesRead,
            )
        },
        e(
            get.clone(),
            "/v1/access/actions/refund",
            None,
            Need::PoliciesRead,
        ),
        e(
            post.clone(),
            "/v1/policies/sync",
            Some(json!({"spec": {}, "dry_run": true})),
            Need::PolicySync,
        ),
        e(
            get.clone(),
            "/v1/policy-challenges/chl_00000000000000000000000000000000",
            None,
            Need::ChallengesRead,
        ),
        e(
            get.clone(),
            "/v1/policy-challenges?status=pending",
            None,
            Need::ChallengesRead,
        ),
        e(
            post.clone(),
            "/v1/policy-challenges/pch_00000000000000000000000000000000/decide",
            Some(json!({"decision": "deny"})),
            Need::ChallengesDecide,
        ),
        e(
            post.clone(),
            "/v1/policies/pol_default/rollback",
            Some(json!({"version": 1, "dry_run": true})),
            Need::PolicySync,
        ),
        e(get.clone(), "/v1/vault/secret-sets", None, Need::VaultRead),
        e(
            get.clone(),
            "/v1/vault/secret-sets/1/versions",
            None,
            Need::VaultRead,
        ),
        e(get.clone(), "/v1/vault/grants", None, Need::VaultRead),
        e(get.clone(), "/v1/vault/audit", None, Need::VaultRead),
        e(get.clone(), "/v1/vault/leases", None, Need::VaultLeasesRead),
        e(
            post.clone(),
            "/v1/vault/leases/ls_00000000000000000000000000000000/revoke",
            None,
            Need::VaultLeases,
        ),
        e(
            post.clone(),
            "/v1/vault/secret-sets",
            Some(json!({"name": "", "provider": "p", "environment": "e", "entries": {}})),
            Need::VaultChange,
        ),
        e(
            post.clone(),
            "/v1/vault/secret-sets/1/delete",
            None,
            Need::VaultChange,
        ),
        e(
            post.clone(),
            "/v1/vault/grants/grt_00000000000000000000000000000000/revoke",
            None,
            Need::VaultChange,
        ),
        e(
            get.clone(),
            "/v1/workspace/settings",
            None,
            Need::WorkspaceRead,
        ),
        e(
            post.clone(),
            "/v1/workspace/settings",
            Some(json!({})),
            Need::WorkspaceChange,
        ),
        e(
            get.clone(),
            "/v1/workspace/members",
            None,
            Need::WorkspaceRead,
        ),
        e(
            post.clone(),
            "/v1/workspace/members",
            Some(json!({"email": "new@example.com", "role": "member"})),
            Need::WorkspaceChange,
        ),
        e(
            post.clone(),
            "/v1/workspace/members/usr_00000000000000000000000000000000/remove",
            None,
            Need::WorkspaceChange,
        ),
        e(
            get.clone(),
            "/v1/workspace/api-keys",
            None,
            Need::WorkspaceRead,
        ),
        e(
            post.clone(),
            "/v1/workspace/api-keys",
            Some(json!({"name": "matrix"})),
            Need::WorkspaceChange,
        ),
        e(
            post.clone(),
            "/v1/workspace/api-keys/key_00000000000000000000000000000000/revoke",
            None,
            Need::WorkspaceChange,
        ),
    ]
}

/// How a request authenticates.
#[derive(Clone)]
enum Credential {
    Key(String),
    Session(Browser),
    /// A personal access token and the workspace it names.
    Token(String, String),
}

fn request(app: &TestApp, cred: &Credential, ep: &Endpoint) -> RequestBuilder {
    let mut req = app.client.request(ep.method.clone(), app.url(&ep.path));
    req = match cred {
        Credential::Key(key) => req.header("X-Service-Api-Key", key),
        Credential::Session(b) => req
            .header("Cookie", &b.cookie)
            .header("X-CSRF-Token", &b.csrf),
        Credential::Token(token, ws) => req.bearer_auth(token).header("X-Service-Workspace", ws),
    };
    match &ep.body {
        Some(body) => req.json(body),
        None if ep.method == Method::POST => req.json(&json!({})),
        None => req,
    }
}

/// The status and error code of an answer.
async fn outcome(res: Response) -> (u16, String) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (status, body["error"].as_str().unwrap_or("").to_owned())
}

/// Refused for who the caller is (not for what it sent)?
fn refused_for_access(outcome: &(u16, String)) -> bool {
    matches!(outcome.0, 401 | 403)
}

/// A token of `email`'s, made from their session, with `scopes`.
async fn token_of(browser: &Browser, scopes: &[&str]) -> String {
    let (s, body) = status_json(
        browser
            .post(
                "/v1/auth/tokens",
                &json!({"name": "matrix", "scopes": scopes}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

async fn scoped_key(owner: &Browser, scopes: &[&str]) -> String {
    let (s, body) = status_json(
        owner
            .post(
                "/v1/workspace/api-keys",
                &json!({"name": "scoped", "scopes": scopes}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["api_key"]["scopes"], json!(scopes));
    body["key"].as_str().unwrap().to_owned()
}

both_engines! {
    async fn every_management_endpoint_by_credential_and_role(app) {
        let agent = app.active_agent("matrix-agent").await;
        let ws = app.workspace_id.clone();
        let eps = endpoints(&agent.id);

        // The workspace API key: everything but people's matters (401 session_required).
        for ep in &eps {
            let got = outcome(request(&app, &Credential::Key(app.key.clone()), ep).send().await.unwrap()).await;
            if ep.all(Need::for_keys) {
                assert!(!refused_for_access(&got), "key on {} {}: {got:?}", ep.method, ep.path);
            } else {
                assert_eq!(got, (401, "session_required".into()), "key on {} {}", ep.method, ep.path);
            }
        }

        // People by role, by session and by token.
        for role in ["owner", "admin", "member", "approver"] {
            let email = format!("{role}@example.com");
            app.grant(&ws, &email, role).await;
            let session = app.login(&email).await;
            let token = token_of(&session, &[]).await;
            for cred in [Credential::Session(session.clone()), Credential::Token(token, ws.clone())] {
                let kind = if matches!(cred, Credential::Session(_)) { "session" } else { "token" };
                for ep in &eps {
                    let got = outcome(request(&app, &cred, ep).send().await.unwrap()).await;
                    if ep.all(|n| n.allowed_to(role)) {
                        assert!(!refused_for_access(&got), "{role} {kind} on {} {}: {got:?}", ep.method, ep.path);
                    } else {
                        assert_eq!(got, (403, "insufficient_role".into()), "{role} {kind} on {} {}", ep.method, ep.path);
                    }
                }
            }
        }

        // A scoped key does only what its scopes grant.
        let owner = app.login("owner@example.com").await;
        let gateway = scoped_key(&owner, &["check", "verify"]).await;
        let reader = scoped_key(&owner, &["agents:read", "audit:read"]).await;
        for ep in &eps {
            let got = outcome(request(&app, &Credential::Key(gateway.clone()), ep).send().await.unwrap()).await;
            let want = if ep.need.for_keys() { (403, "insufficient_scope") } else { (401, "session_required") };
            assert_eq!((got.0, got.1.as_str()), want, "gateway key on {} {}", ep.method, ep.path);
            let got = outcome(request(&app, &Credential::Key(reader.clone()), ep).send().await.unwrap()).await;
            if ep.all(|n| matches!(n, Need::AgentsRead | Need::AuditRead)) {
                assert!(!refused_for_access(&got), "reader key on {} {}: {got:?}", ep.method, ep.path);
            } else {
                assert!(refused_for_access(&got), "reader key on {} {}: {got:?}", ep.method, ep.path);
            }
        }
        // The scope is named.
        let res = app.client.post(app.url("/v1/identity/kill-switch/revoke-all"))
            .header("X-Service-Api-Key", &gateway).json(&json!({"reason": "x"})).send().await.unwrap();
        let body = assert_error(res, 403, "insufficient_scope").await;
        assert_eq!(body["required_scope"], "kill-switch");
        // And the machine endpoints check theirs too.
        let res = app.post_as(&reader, "/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await;
        let body = assert_error(res, 403, "insufficient_scope").await;
        assert_eq!(body["required_scope"], "check");
        let res = app.post_as(&gateway, "/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await;
        assert_eq!(res.status(), 200);

        // A `read` token of the owner reads, and changes nothing.
        let read = Credential::Token(token_of(&owner, &["read"]).await, ws.clone());
        for ep in &eps {
            let got = outcome(request(&app, &read, ep).send().await.unwrap()).await;
            if ep.all(Need::is_read) {
                assert!(!refused_for_access(&got), "read token on {} {}: {got:?}", ep.method, ep.path);
            } else {
                assert_eq!(got.0, 403, "read token on {} {}: {got:?}", ep.method, ep.path);
                assert_eq!(got.1, "insufficient_scope", "read token on {} {}", ep.method, ep.path);
            }
        }
        // A `policy:sync` token syncs and reads policies, nothing else.
        let sync = Credential::Token(token_of(&owner, &["policy:sync"]).await, ws.clone());
        for ep in &eps {
            let got = outcome(request(&app, &sync, ep).send().await.unwrap()).await;
            if ep.all(|n| matches!(n, Need::PolicySync | Need::PoliciesRead)) {
                assert!(!refused_for_access(&got), "sync token on {} {}: {got:?}", ep.method, ep.path);
            } else {
                assert_eq!(got.1, "insufficient_scope", "sync token on {} {}", ep.method, ep.path);
            }
        }

        // A token of someone who is not a member here, naming this workspace.
        let (other_ws, _) = app.other_workspace().await;
        app.grant(&other_ws, "stranger@example.com", "owner").await;
        let stranger = app.login("stranger@example.com").await;
        let foreign = Credential::Token(token_of(&stranger, &[]).await, ws.clone());
        // Expired and revoked tokens of the owner.
        let revoked = token_of(&owner, &[]).await;
        let (_, list) = status_json(owner.get("/v1/auth/tokens").await).await;
        let revoked_id = list["items"][0]["token_id"].as_str().unwrap().to_owned();
        assert_eq!(owner.post(&format!("/v1/auth/tokens/{revoked_id}/revoke"), &json!({})).await.status(), 200);
        let expired = expired_token(&app, "owner@example.com").await;
        for ep in &eps {
            let got = outcome(request(&app, &foreign, ep).send().await.unwrap()).await;
            assert_eq!(got, (403, "not_a_member".into()), "foreign token on {} {}", ep.method, ep.path);
            for (name, token) in [("revoked", &revoked), ("expired", &expired)] {
                let got = outcome(request(&app, &Credential::Token(token.clone(), ws.clone()), ep).send().await.unwrap()).await;
                assert_eq!(got, (401, "invalid_token".into()), "{name} token on {} {}", ep.method, ep.path);
            }
        }
        app.stop().await;
    }
}

/// A token of `email` whose expiry has passed, written to the store directly (the API gives at
/// least a day).
async fn expired_token(app: &TestApp, email: &str) -> String {
    use acp::store::{AccountOp, AccountStore, Change, PatRecord, SqlStore};
    let store = SqlStore::open(&app.db_url, &Default::default())
        .await
        .unwrap();
    let user = store.user_by_email(email).await.unwrap().unwrap();
    let token = format!("svc_pat_{}", "e".repeat(43));
    let now = now_ms();
    let record = PatRecord {
        id: "pat_expired0000000000000000000000".into(),
        user_id: user.id,
        name: "expired".into(),
        token_hash: sha256_hex(token.as_bytes()),
        last_four: "eeee".into(),
        created_at: now - 2 * 86_400_000,
        expires_at: now - 1_000,
        revoked_at: None,
        last_used_at: None,
        scopes: None,
        parent_id: None,
    };
    acp::store::apply_one(&store, Change::new(AccountOp::CreatePat(record)))
        .await
        .unwrap();
    store.close().await;
    token
}

both_engines! {
    async fn a_persons_actions_are_audited_with_the_person_as_actor(app) {
        let agent = app.active_agent("audited").await;
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        let admin = app.login("admin@example.com").await;
        let (_, me) = status_json(admin.get("/auth/me").await).await;
        let user_id = me["user"]["user_id"].as_str().unwrap().to_owned();
        let (s, body) = status_json(admin.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({"reason": "by hand"})).await).await;
        assert_eq!(s, 200, "{body}");
        let token = token_of(&admin, &[]).await;
        let res = app.client.post(app.url("/v1/identity/kill-switch/minting"))
            .bearer_auth(&token).header("X-Service-Workspace", &app.workspace_id)
            .json(&json!({"paused": true, "reason": "drill"})).send().await.unwrap();
        assert_eq!(res.status(), 200);
        // `?workspace_id=` names the workspace too.
        let res = app.client.get(app.url(&format!("/v1/identity/kill-switch/status?workspace_id={}", app.workspace_id)))
            .bearer_auth(&token).send().await.unwrap();
        let (s, status) = status_json(res).await;
        assert_eq!((s.as_u16(), status["minting_paused"].as_bool()), (200, Some(true)), "{status}");
        let events = audit_events(&app, "limit=50").await;
        for event_type in ["agent.suspended", "kill_switch.minting_paused"] {
            let event = events.iter().find(|e| e["event_type"] == event_type)
                .unwrap_or_else(|| panic!("no {event_type} in {events:?}"));
            assert_eq!(event["actor"], format!("user:{user_id}"), "{event}");
        }
        app.stop().await;
    }
}

/// A token made with `bearer`: `(token, token_id)`.
async fn token_made_by(app: &TestApp, bearer: &str, name: &str) -> (String, String) {
    let res = app
        .client
        .post(app.url("/v1/auth/tokens"))
        .bearer_auth(bearer)
        .json(&json!({"name": name, "expires_in_days": 365}))
        .send()
        .await
        .unwrap();
    let (s, body) = status_json(res).await;
    assert_eq!(s, 200, "{body}");
    (
        body["token"].as_str().unwrap().to_owned(),
        body["access_token"]["token_id"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

both_engines! {
    /// A token made by a token dies with it: revoking a token revokes what it made, and what
    /// that made, in one transaction (the answer counts them all); none outlives its maker;
    /// tokens a session made are nobody's children.
    async fn revoking_a_token_revokes_the_tokens_it_made(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let (s, root) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "cli", "expires_in_days": 2})).await).await;
        assert_eq!(s, 200, "{root}");
        let (root_token, root_id) = (root["token"].as_str().unwrap().to_owned(), root["access_token"]["token_id"].as_str().unwrap().to_owned());
        let (child, child_id) = token_made_by(&app, &root_token, "ci").await;
        let (grandchild, grandchild_id) = token_made_by(&app, &child, "ci-job").await;
        let (sibling, sibling_id) = token_made_by(&app, &root_token, "deploy").await;
        let (_, session_made) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "apart"})).await).await;
        let apart = session_made["token"].as_str().unwrap().to_owned();

        // Each names its maker and expires no later than it.
        let (_, listed) = status_json(owner.get("/v1/auth/tokens").await).await;
        let item = |id: &str| listed["items"].as_array().unwrap().iter().find(|t| t["token_id"] == id).unwrap().clone();
        assert_eq!(item(&root_id)["parent_token_id"], Value::Null);
        assert_eq!(item(&child_id)["parent_token_id"], root_id.as_str());
        assert_eq!(item(&grandchild_id)["parent_token_id"], child_id.as_str());
        assert_eq!(item(&sibling_id)["parent_token_id"], root_id.as_str());
        assert_eq!(item(&grandchild_id)["expires_at"], item(&root_id)["expires_at"]);
        let made = audit_events(&app, "event_type=access_token.created").await;
        assert!(made.iter().any(|e| e["details"]["token_id"] == grandchild_id && e["details"]["parent_token_id"] == child_id.as_str()), "{made:?}");

        let works = |token: String| {
            let app = app.clone();
            async move {
                let me = app.client.get(app.url("/auth/me")).bearer_auth(&token).send().await.unwrap().status().as_u16();
                let agents = app.client.get(app.url("/v1/agents")).bearer_auth(&token).send().await.unwrap().status().as_u16();
                match (me, agents) {
                    (200, 200) => true,
                    (401, 401) => false,
                    other => panic!("{other:?}"),
                }
            }
        };
        for t in [&root_token, &child, &grandchild, &sibling, &apart] {
            assert!(works(t.clone()).await);
        }

        // Revoking the child revokes the grandchild with it: both counted, both refused
        // everywhere a token is taken; the root, its other child and the session's token work.
        let (s, body) = status_json(owner.post(&format!("/v1/auth/tokens/{child_id}/revoke"), &json!({})).await).await;
        assert_eq!((s.as_u16(), &body), (200, &json!({"ok": true, "revoked": 2})));
        assert!(!works(child.clone()).await);
        assert!(!works(grandchild.clone()).await);
        for t in [&root_token, &sibling, &apart] {
            assert!(works(t.clone()).await);
        }
        let (_, listed) = status_json(owner.get("/v1/auth/tokens").await).await;
        let revoked = listed["items"].as_array().unwrap().iter().find(|t| t["token_id"] == grandchild_id).unwrap().clone();
        assert!(revoked["revoked_at"].is_string(), "{revoked}");
        // A revoked token makes nothing.
        let res = app.client.post(app.url("/v1/auth/tokens")).bearer_auth(&child).json(&json!({"name": "late"})).send().await.unwrap();
        assert_error(res, 401, "invalid_token").await;

        // A grandchild that a revocation missed (made on another replica meanwhile) is refused
        // for its revoked maker all the same.
        run_sql(&app.db_url, &format!("UPDATE personal_access_tokens SET revoked_at = NULL WHERE id = '{grandchild_id}'")).await;
        let res = app.client.get(app.url("/auth/me")).bearer_auth(&grandchild).send().await.unwrap();
        let body = assert_error(res, 401, "invalid_token").await;
        assert!(body["message"].as_str().unwrap().contains("the token that made it"), "{body}");

        // The root revoked with itself (as `acp logout` does): it, its live child, and the
        // grandchild below its revoked child that the earlier revocation missed.
        let res = app.client.post(app.url(&format!("/v1/auth/tokens/{root_id}/revoke"))).bearer_auth(&root_token).json(&json!({})).send().await.unwrap();
        let (s, body) = status_json(res).await;
        assert_eq!((s.as_u16(), &body), (200, &json!({"ok": true, "revoked": 3})));
        assert!(!works(root_token.clone()).await);
        assert!(!works(sibling.clone()).await);
        assert!(works(apart.clone()).await, "a session's token is nobody's child");
        assert_error(owner.post(&format!("/v1/auth/tokens/{root_id}/revoke"), &json!({})).await, 404, "unknown_token").await;
    }
}
