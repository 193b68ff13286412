//! The vault's agent side, driven the way the public client's
//! `VaultProvider` drives it: signed requests with no `agent_id` in the body and an integer
//! `secret_set_id`. Every refusal, the audit trail without values, and two processes racing for
//! one one-use lease. On both engines.

use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

pub const STRIPE_KEY: &str = "sk_live_agent-side-canary-4242";

pub fn stripe_set() -> Value {
    json!({
        "name": "stripe-prod", "provider": "stripe", "environment": "production",
        "entries": {"STRIPE_SECRET_KEY": STRIPE_KEY, "ACCOUNT": "acct_agent_1"},
        "profiles": {"stripe": {"hosts": ["api.stripe.com"], "methods": ["GET", "POST"], "path_prefixes": ["/v1/"],
            "inject": {"headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY}"}}}}
    })
}

/// A policy that allows every vault action; reads in production need approval when
/// `approve_reads` is set.
pub fn vault_policy(approve_reads: bool) -> Value {
    let mut spec = json!({
        "global_guardrails": {"actions": {"allow": ["vault.read", "vault.proxy", "vault.mint_lease"]}},
    });
    if approve_reads {
        spec["global_guardrails"]["cedar"] = json!([{
            "name": "production-reads", "outcome": "challenge", "reason_code": "production_read",
            "reason": "reading production secrets needs approval",
            "when": "context.action == \"vault.read\" && context.fields.contains(\"environment=production\")"}]);
    }
    spec
}

/// The owner's session, a set, and an active agent holding a grant and a workflow lease.
pub struct Setup {
    pub owner: Browser,
    pub agent: TestAgent,
    pub workflow_token: String,
    pub grant_id: String,
}

pub async fn setup(app: &TestApp, set: Value, grant: Value, lease_actions: Value) -> Setup {
    app.apply_policy(vault_policy(false)).await;
    let owner = app.login("owner@example.com").await;
    let (s, made) = status_json(owner.post("/v1/vault/secret-sets", &set).await).await;
    assert_eq!(s, 200, "{made}");
    let agent = app.active_agent("payer").await;
    let mut grant = grant;
    grant["secret_set_id"] = json!(1);
    grant["agent_id"] = json!(agent.id);
    let (s, g) = status_json(owner.post("/v1/vault/grants", &grant).await).await;
    assert_eq!(s, 200, "{g}");
    let (s, lease) = status_json(
        app.post(
            "/v1/vault/leases/workflow",
            &json!({"agent_id": agent.id, "secret_set_id": 1, "purpose": "payouts", "actions": lease_actions, "ttl_seconds": 600}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{lease}");
    Setup {
        owner,
        agent,
        workflow_token: lease["workflow_lease_token"].as_str().unwrap().to_owned(),
        grant_id: g["grant"]["grant_id"].as_str().unwrap().to_owned(),
    }
}

impl Setup {
    /// `POST /v1/vault/leases/request/mint` as the client sends it.
    pub async fn mint(&self, app: &TestApp, action: &str, extra: Value) -> reqwest::Response {
        let mut body = json!({"workflow_lease_token": self.workflow_token, "secret_set_id": 1, "action": action});
        if let Value::Object(extra) = extra {
            body.as_object_mut().unwrap().extend(extra);
        }
        self.agent
            .signed_post(app, "/v1/vault/leases/request/mint", &body)
            .await
    }

    pub async fn minted(&self, app: &TestApp, action: &str, extra: Value) -> String {
        let (s, lease) = status_json(self.mint(app, action, extra).await).await;
        assert_eq!(s, 200, "{lease}");
        lease["request_lease_token"].as_str().unwrap().to_owned()
    }

    pub async fn read(&self, app: &TestApp, token: &str, keys: Value) -> reqwest::Response {
        self.agent
            .signed_post(
                app,
                "/v1/vault/secrets/read",
                &json!({"request_lease_token": token, "secret_set_id": 1, "keys": keys}),
            )
            .await
    }
}

fn read_grant() -> Value {
    json!({"allowed_keys": "*", "allowed_actions": ["read", "mint_lease"]})
}

both_engines! {
    async fn the_public_clients_flow_reads_granted_keys_once(app) {
        let s = setup(&app, stripe_set(), read_grant(), json!(["read"])).await;

        // Policy eval: the decision, nothing consumed.
        let (st, eval) = status_json(s.agent.signed_post(&app, "/v1/vault/policy/eval",
            &json!({"secret_set_id": 1, "action": "read", "keys": ["STRIPE_SECRET_KEY"], "environment": "production", "provider": "stripe"})).await).await;
        assert_eq!(st, 200, "{eval}");
        assert_eq!(eval["decision"], "allow");
        assert!(eval["trace_id"].as_str().unwrap().starts_with("trc_"));

        let (st, minted) = status_json(s.mint(&app, "read", json!({"keys": ["STRIPE_SECRET_KEY"]})).await).await;
        assert_eq!(st, 200, "{minted}");
        let token = minted["request_lease_token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("vrl_") && minted["lease_id"].as_str().unwrap().starts_with("ls_"));
        assert_eq!(minted["uses_left"], 1);

        let (st, read) = status_json(s.read(&app, &token, json!(["STRIPE_SECRET_KEY"])).await).await;
        assert_eq!(st, 200, "{read}");
        assert_eq!(read["secrets"], json!({"STRIPE_SECRET_KEY": STRIPE_KEY}));
        // One use: the second read is refused.
        assert_error(s.read(&app, &token, json!(["STRIPE_SECRET_KEY"])).await, 409, "lease_used").await;

        // A lease minted for one key reads no other.
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        assert_error(s.read(&app, &token, json!(["STRIPE_SECRET_KEY"])).await, 403, "key_not_granted").await;
        assert_error(s.read(&app, &token, json!(["NOPE"])).await, 404, "unknown_key").await;
        // The trail: minted, used, read, with key names and never a value or a token.
        for kind in ["vault.lease.minted", "vault.lease.used", "vault.secret.read"] {
            let events = audit_events(&app, &format!("event_type={kind}")).await;
            assert!(!events.is_empty(), "{kind}");
            assert_eq!(events[0]["actor"], format!("agent:{}", s.agent.id));
        }
        let read_event = &audit_events(&app, "event_type=vault.secret.read").await[0];
        assert_eq!(read_event["details"]["keys"], json!(["STRIPE_SECRET_KEY"]));
        let (_, vault_trail) = status_json(s.owner.get("/v1/vault/audit?secret_set_id=1&limit=200").await).await;
        let trail = vault_trail.to_string();
        assert!(trail.contains("vault.secret.read"));
        assert!(!trail.contains(STRIPE_KEY) && !trail.contains(&token) && !trail.contains(&s.workflow_token));
        let decisions = audit_events(&app, "action=vault.read").await;
        assert!(decisions.iter().any(|e| e["event_type"] == "decision.check"));
        // The set named by its id reads alike; a set that is not there is named before the lease.
        let (_, sets) = status_json(s.owner.get("/v1/vault/secret-sets").await).await;
        let id = sets["items"][0]["secret_set_id"].as_str().unwrap().to_owned();
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let (agent, served) = (&s.agent, &app);
        let read_in = move |set: Value, token: String| {
            let body = json!({"request_lease_token": token, "secret_set_id": set, "keys": ["ACCOUNT"]});
            async move { agent.signed_post(served, "/v1/vault/secrets/read", &body).await }
        };
        for set in [json!(9), json!("ss_00000000000000000000000000000000")] {
            assert_error(read_in(set, token.clone()).await, 404, "unknown_secret_set").await;
        }
        let (st, read) = status_json(read_in(json!(id), token).await).await;
        assert_eq!(st, 200, "{read}");
        assert!(read["secrets"]["ACCOUNT"].is_string(), "{read}");
        // A deleted set is not there for a lease of it either.
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let (st, body) = status_json(s.owner.post(&format!("/v1/vault/secret-sets/{id}/delete"), &json!({})).await).await;
        assert_eq!(st, 200, "{body}");
        assert_error(read_in(json!(id), token).await, 404, "unknown_secret_set").await;
        app.stop().await;
    }
}

both_engines! {
    async fn every_refusal_has_its_code(app) {
        let s = setup(&app, stripe_set(), json!({"allowed_keys": ["ACCOUNT"], "allowed_actions": ["read", "mint_lease"]}), json!(["read"])).await;

        // Input.
        assert_error(s.mint(&app, "write", json!({})).await, 400, "invalid_action").await;
        assert_error(s.mint(&app, "read", json!({"ttl_seconds": 901})).await, 400, "invalid_ttl_seconds").await;
        assert_error(s.mint(&app, "proxy", json!({"keys": ["ACCOUNT"]})).await, 403, "action_not_leased").await;
        let res = s.agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": "vwl_unknown", "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 401, "invalid_lease").await;
        let res = s.agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": s.workflow_token, "secret_set_id": 9, "action": "read"})).await;
        assert_error(res, 404, "unknown_secret_set").await;
        // The set's details are for those holding a lease of it: a bad token is refused first.
        let res = s.agent.signed_post(&app, "/v1/vault/secrets/read",
            &json!({"request_lease_token": "x", "secret_set_id": 1, "keys": ["ACCOUNT"], "environment": "staging"})).await;
        assert_error(res, 401, "invalid_lease").await;
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let res = s.agent.signed_post(&app, "/v1/vault/secrets/read",
            &json!({"request_lease_token": token, "secret_set_id": 1, "keys": ["ACCOUNT"], "environment": "staging"})).await;
        assert_error(res, 400, "invalid_environment").await;
        // Another agent's body names the signer: refused.
        let res = s.agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"agent_id": "agt_00000000000000000000000000000000", "workflow_lease_token": s.workflow_token, "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 401, "agent_header_mismatch").await;

        // Grants: a key the grant does not allow; no grant for another agent.
        assert_error(s.mint(&app, "read", json!({"keys": ["STRIPE_SECRET_KEY"]})).await, 403, "key_not_granted").await;
        let (_, first) = status_json(s.mint(&app, "read", json!({"keys": ["ACCOUNT"]})).await).await;
        let token = first["request_lease_token"].as_str().unwrap().to_owned();
        assert_error(s.read(&app, &token, json!(["STRIPE_SECRET_KEY"])).await, 403, "key_not_granted").await;
        // A lease minted without keys gets the keys both the minting and the reading grant
        // allow, however wide the reading one is.
        let (_, wide) = status_json(s.owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": s.agent.id,
            "allowed_keys": "*", "allowed_actions": ["read"]})).await).await;
        let (st, unkeyed) = status_json(s.mint(&app, "read", json!({})).await).await;
        assert_eq!(st, 200, "{unkeyed}");
        let unkeyed = unkeyed["request_lease_token"].as_str().unwrap().to_owned();
        assert_error(s.read(&app, &unkeyed, json!(["STRIPE_SECRET_KEY"])).await, 403, "key_not_granted").await;
        let wide_id = wide["grant"]["grant_id"].as_str().unwrap();
        assert_eq!(s.owner.post(&format!("/v1/vault/grants/{wide_id}/revoke"), &json!({})).await.status(), 200);
        let other = app.active_agent("other").await;
        let (_, lease) = status_json(app.post("/v1/vault/leases/workflow",
            &json!({"agent_id": other.id, "secret_set_id": 1, "purpose": "p", "actions": ["read"]})).await).await;
        let res = other.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": lease["workflow_lease_token"], "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 403, "no_grant").await;
        // Nor may it ask the policy about the set.
        let res = other.signed_post(&app, "/v1/vault/policy/eval", &json!({"secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 403, "no_grant").await;
        // A workflow lease is not the signer's: invalid for another agent.
        let res = other.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": s.workflow_token, "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 401, "invalid_lease").await;

        // Expired.
        let short = s.minted(&app, "read", json!({"keys": ["ACCOUNT"], "ttl_seconds": 1})).await;
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_error(s.read(&app, &short, json!(["ACCOUNT"])).await, 410, "lease_expired").await;

        // Revoked by id.
        let request_lease_id = first["lease_id"].as_str().unwrap();
        assert_eq!(s.owner.post(&format!("/v1/vault/leases/{request_lease_id}/revoke"), &json!({})).await.status(), 200);
        assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 401, "invalid_lease").await;
        // The revocation is in the set's own trail, naming the agent.
        let (_, trail) = status_json(s.owner.get("/v1/vault/audit?secret_set_id=1&limit=200").await).await;
        let revoked = trail["items"].as_array().unwrap().iter().find(|e| e["event_type"] == "vault.lease.revoked").unwrap();
        assert_eq!((revoked["agent_id"].as_str(), revoked["details"]["lease_id"].as_str()), (Some(s.agent.id.as_str()), Some(request_lease_id)));
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;

        // A revoked grant: the lease in hand no longer reads.
        assert_eq!(s.owner.post(&format!("/v1/vault/grants/{}/revoke", s.grant_id), &json!({})).await.status(), 200);
        assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 403, "no_grant").await;
        let (_, g) = status_json(s.owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": s.agent.id,
            "allowed_keys": "*", "allowed_actions": ["read", "mint_lease"]})).await).await;
        assert!(g["grant"]["grant_id"].is_string(), "{g}");

        // The kill switch: paused minting mints nothing; revoke-all revokes what was minted.
        let token = s.minted(&app, "read", json!({})).await;
        assert_eq!(app.post("/v1/identity/kill-switch/minting", &json!({"paused": true})).await.status(), 200);
        let body = assert_error(s.mint(&app, "read", json!({})).await, 403, "minting_paused").await;
        assert!(body["message"].is_string());
        assert_eq!(app.post("/v1/identity/kill-switch/minting", &json!({"paused": false})).await.status(), 200);
        assert_eq!(app.post("/v1/identity/kill-switch/revoke-all", &json!({"reason": "drill"})).await.status(), 200);
        assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 401, "invalid_lease").await;
        assert_error(s.mint(&app, "read", json!({})).await, 401, "invalid_lease").await;

        // A suspended agent signs nothing that verifies.
        let (_, fresh) = status_json(app.post("/v1/vault/leases/workflow",
            &json!({"agent_id": s.agent.id, "secret_set_id": 1, "purpose": "p", "actions": ["read"]})).await).await;
        let s2 = Setup { workflow_token: fresh["workflow_lease_token"].as_str().unwrap().to_owned(), ..s };
        let token = s2.minted(&app, "read", json!({})).await;
        assert_eq!(app.post(&format!("/v1/agents/{}/suspend", s2.agent.id), &json!({})).await.status(), 200);
        assert_error(s2.read(&app, &token, json!(["ACCOUNT"])).await, 403, "agent_not_active").await;
        app.stop().await;
    }
}

both_engines! {
    async fn the_policy_denies_and_challenges_vault_actions(app) {
        let s = setup(&app, stripe_set(), read_grant(), json!(["read"])).await;
        // Reads in production need a human; the approval allows that very read once.
        app.apply_policy(vault_policy(true)).await;
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let body = assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 403, "policy_challenge").await;
        assert_eq!(body["decision"], "challenge");
        assert_eq!(body["reason_codes"], json!(["production_read"]));
        let url = body["challenge"]["url"].as_str().unwrap().to_owned();
        let challenge_id = body["challenge_id"].as_str().unwrap().to_owned();
        // The lease was not spent by the refused read.
        let (_, listed) = status_json(s.owner.get("/v1/vault/leases?kind=request").await).await;
        assert_eq!(listed["items"][0]["uses_left"], 1);
        // The agent asked for itself: it gets a status link, never the deciding link.
        assert!(url.ends_with(&format!("/v1/policy-challenges/{challenge_id}/status")), "{url}");
        let (st, decided) = status_json(s.owner.post(&format!("/v1/policy-challenges/{challenge_id}/decide"), &json!({"decision": "approve"})).await).await;
        assert_eq!(st, 200, "{decided}");
        // Asking does not use the approval up.
        for _ in 0..2 {
            let (st, eval) = status_json(s.agent.signed_post(&app, "/v1/vault/policy/eval",
                &json!({"secret_set_id": 1, "action": "read", "keys": ["ACCOUNT"]})).await).await;
            assert_eq!((st.as_u16(), eval["decision"].as_str()), (200, Some("allow")), "{eval}");
            assert_eq!(eval["reason_codes"], json!(["approved"]));
        }
        let (st, read) = status_json(s.read(&app, &token, json!(["ACCOUNT"])).await).await;
        assert_eq!(st, 200, "{read}");
        assert_eq!(read["secrets"]["ACCOUNT"], "acct_agent_1");

        // No rule allows it: denied, and nothing is consumed.
        app.apply_policy(json!({})).await;
        let owner = app.login("owner@example.com").await;
        let _ = owner;
        let body = assert_error(s.mint(&app, "read", json!({})).await, 403, "policy_denied").await;
        assert_eq!(body["reason_codes"], json!(["no_matching_rule"]));
        let (st, eval) = status_json(s.agent.signed_post(&app, "/v1/vault/policy/eval",
            &json!({"secret_set_id": 1, "action": "vault.mint_lease"})).await).await;
        assert_eq!((st.as_u16(), eval["decision"].as_str()), (200, Some("deny")), "{eval}");
        assert_error(s.agent.signed_post(&app, "/v1/vault/policy/eval", &json!({"secret_set_id": 1, "action": "write"})).await, 400, "invalid_action").await;
        app.stop().await;
    }
}

/// Two server processes on one database, the same one-use lease read on both at once: exactly
/// one read succeeds, every time.
async fn one_use_is_one_success_across_processes(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let s = setup(&app, stripe_set(), read_grant(), json!(["read"])).await;
    let (mut one, base_one) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let (mut two, base_two) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let (r1, r2) = (app.at(base_one), app.at(base_two));
    for _ in 0..8 {
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let (a, b) = tokio::join!(
            s.read(&r1, &token, json!(["ACCOUNT"])),
            s.read(&r2, &token, json!(["ACCOUNT"]))
        );
        let mut codes = vec![a.status().as_u16(), b.status().as_u16()];
        codes.sort();
        assert_eq!(codes, vec![200, 409], "one use, one success");
    }
    let reads = audit_events(&app, "event_type=vault.secret.read&limit=200").await;
    assert_eq!(reads.len(), 8);
    one.kill().await.unwrap();
    two.kill().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_use_is_one_success_across_processes_sqlite() {
    one_use_is_one_success_across_processes(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_use_is_one_success_across_processes_postgres() {
    one_use_is_one_success_across_processes(Engine::Postgres).await;
}

both_engines! {
    async fn a_specs_vault_block_judges_grants_to_groups(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let agent = app.active_agent("payer").await;
        for set in [stripe_set(), json!({"name": "other", "provider": "x", "environment": "staging", "entries": {"K": "v-other-0001"}})] {
            let (s, made) = status_json(owner.post("/v1/vault/secret-sets", &set).await).await;
            assert_eq!(s, 200, "{made}");
        }
        // The spec's group `payers` holds the agent; the grants name the group, not the agent.
        app.apply_policy(json!({
            "reusable_policy_blocks": {"payer-vault": {"vault": {
                "allow": ["mint_lease", "read"], "secret_sets": ["stripe-prod"],
                "require_approval": {"actions": ["read"], "environments": ["production"]}}}},
            "agent_groups": [{"name": "payers", "members": [agent.id]}],
            "bindings": [{"group": "payers", "blocks": ["payer-vault"]}],
        })).await;
        for set in [1, 2] {
            let (s, g) = status_json(owner.post("/v1/vault/grants", &json!({"secret_set_id": set, "group": "payers",
                "allowed_keys": "*", "allowed_actions": ["read", "mint_lease"]})).await).await;
            assert_eq!(s, 200, "{g}");
        }
        let agent_id = agent.id.clone();
        let workflow = |set: i64| json!({"agent_id": agent_id, "secret_set_id": set, "purpose": "p", "actions": ["read"]});
        let (_, lease) = status_json(app.post("/v1/vault/leases/workflow", &workflow(1)).await).await;
        let s = Setup { owner, agent, workflow_token: lease["workflow_lease_token"].as_str().unwrap().to_owned(),
            grant_id: String::new() };

        // Reads in production wait for a human.
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let body = assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 403, "policy_challenge").await;
        assert_eq!(body["reason_codes"], json!(["vault_requires_approval"]));
        let challenge_id = body["challenge_id"].as_str().unwrap();
        let (_, shown) = status_json(s.owner.get(&format!("/v1/policy-challenges/{challenge_id}")).await).await;
        assert!(shown.to_string().contains("ACCOUNT"), "the approver sees the keys: {shown}");
        assert_eq!(s.owner.post(&format!("/v1/policy-challenges/{challenge_id}/decide"), &json!({"decision": "approve"})).await.status(), 200);
        let (st, read) = status_json(s.read(&app, &token, json!(["ACCOUNT"])).await).await;
        assert_eq!(st, 200, "{read}");

        // A set the block does not list: the grant is there, the policy says no.
        let (_, lease) = status_json(app.post("/v1/vault/leases/workflow", &workflow(2)).await).await;
        let res = s.agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": lease["workflow_lease_token"], "secret_set_id": 2, "action": "read"})).await;
        let body = assert_error(res, 403, "policy_denied").await;
        assert_eq!(body["reason_codes"], json!(["secret_set_not_allowed"]));
        app.stop().await;
    }
}

/// Whoever a challenge holds never holds a token that can decide it: on the vault's three agent
/// paths (policy eval, secrets read, proxy) a challenged agent gets the challenge id and a status
/// link it can poll with a signed request; the deciding link goes to the approvers by mail and
/// works only for a logged-in approver, even where the workspace lets the link alone decide a
/// backend's challenge.
async fn an_agent_never_decides_its_own_vault_challenge(engine: Engine) {
    // The proxied host is loopback, opened by the operator's allow-list: the decision comes
    // before any connection, so nothing needs to listen there.
    let app = TestApp::spawn_with(engine, |config| {
        config.vault_proxy_allow = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    let mut set = stripe_set();
    set["profiles"]["local"] = json!({"hosts": ["localhost"], "ports": [9],
        "inject": {"headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY}"}}});
    let grant = json!({"allowed_keys": "*", "allowed_actions": ["read", "proxy", "mint_lease"]});
    let s = setup(&app, set, grant, json!(["read", "proxy"])).await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"secrets": {
            "vault": {"allow": ["mint_lease", "read", "proxy"],
                "require_approval": {"actions": ["read", "proxy"], "environments": ["production"]}},
            "approval": {"approvers": ["cfo@example.com"]}
        }},
        "agent_groups": [{"name": "payers", "members": [s.agent.id]}],
        "bindings": [{"group": "payers", "blocks": ["secrets"]}]
    }))
    .await;
    // Even with the public-link flow on, an agent's own challenge needs a logged-in approver.
    let (st, set) = status_json(
        s.owner
            .post(
                "/v1/workspace/settings",
                &json!({"require_member_approval": false}),
            )
            .await,
    )
    .await;
    assert_eq!(st, 200, "{set}");
    let before = app.smtp.messages().len();

    let read_lease = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
    let proxy_lease = s.minted(&app, "proxy", json!({})).await;
    let asked: Vec<(&str, reqwest::Response)> = vec![
        (
            "eval",
            s.agent
                .signed_post(
                    &app,
                    "/v1/vault/policy/eval",
                    &json!({"secret_set_id": 1, "action": "read", "keys": ["ACCOUNT"]}),
                )
                .await,
        ),
        ("read", s.read(&app, &read_lease, json!(["ACCOUNT"])).await),
        (
            "proxy",
            s.agent
                .signed_post(
                    &app,
                    "/v1/vault/proxy/request",
                    &json!({
            "request_lease_token": proxy_lease, "secret_set_id": 1, "profile": "local",
            "request": {"method": "GET", "url": "https://localhost:9/v1/balance"}}),
                )
                .await,
        ),
    ];
    let mut ids = Vec::new();
    for (path, res) in asked {
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            status,
            if path == "eval" { 200 } else { 403 },
            "{path}: {body}"
        );
        assert_eq!(body["decision"], "challenge", "{path}: {body}");
        assert!(
            !text.contains("apr_") && !text.contains("approval-links"),
            "{path}: no deciding link reaches the agent: {text}"
        );
        let id = body["challenge_id"].as_str().unwrap().to_owned();
        assert_eq!(body["challenge"]["type"], "status_link", "{path}: {body}");
        let url = body["challenge"]["url"].as_str().unwrap();
        assert!(
            url.ends_with(&format!("/v1/policy-challenges/{id}/status")),
            "{path}: {url}"
        );
        ids.push(id);
    }

    // The agent polls its own challenge with a signed GET; another agent cannot see it, and
    // the status never carries a deciding link.
    let status_path = |id: &str| format!("/v1/policy-challenges/{id}/status");
    let (st, polled) = status_json(s.agent.signed_get(&app, &status_path(&ids[1])).await).await;
    assert_eq!(
        (st.as_u16(), polled["challenge"]["status"].as_str()),
        (200, Some("pending")),
        "{polled}"
    );
    assert!(!polled.to_string().contains("apr_"));
    let stranger = app.active_agent("stranger").await;
    assert_error(
        stranger.signed_get(&app, &status_path(&ids[1])).await,
        404,
        "unknown_challenge",
    )
    .await;
    assert_error(
        s.agent
            .signed_get(&app, "/v1/policy-challenges/pch_nope/status")
            .await,
        404,
        "unknown_challenge",
    )
    .await;

    // The approvers got the deciding link by mail; the link alone does not decide an agent's
    // own challenge (whoever holds it: here, as the agent would if it ever got hold of it).
    // The eval and the read ask the very same thing (one mail while it is open); the proxy
    // call is another request: two mails.
    let mails = app.smtp.wait_for(before + 2).await;
    assert_eq!(mails.len(), before + 2);
    let mut link = None;
    for mail in &mails[before..] {
        let candidate = crate::smtp::login_link(mail);
        assert!(candidate.contains("/v1/approval-links/apr_"), "{candidate}");
        let (_, shown) = status_json(app.client.get(&candidate).send().await.unwrap()).await;
        if shown["challenge"]["challenge_id"] == ids[0].as_str() {
            link = Some(candidate);
        }
    }
    let link = link.expect("the read's request was mailed with the eval's challenge");
    assert_error(
        decide_by_link(&app, &link, None, "approve").await,
        401,
        "login_required",
    )
    .await;
    let page = approval_page(&app, &link, None).await;
    assert!(
        page.contains("id=\"login-needed\"") && !page.contains("id=\"approve\""),
        "{page}"
    );
    // A read-only member is refused too; the named approver, once a logged-in member, decides.
    app.grant(&app.workspace_id, "viewer@example.com", "member")
        .await;
    let viewer = app.login("viewer@example.com").await;
    assert_error(
        decide_by_link(&app, &link, Some(&viewer), "approve").await,
        403,
        "insufficient_role",
    )
    .await;
    app.grant(&app.workspace_id, "cfo@example.com", "member")
        .await;
    let cfo = app.login("cfo@example.com").await;
    let page = approval_page(&app, &link, Some(&cfo)).await;
    assert!(
        page.contains("id=\"approve\""),
        "the named approver sees the decision: {page}"
    );
    let (st, decided) = status_json(decide_by_link(&app, &link, Some(&cfo), "approve").await).await;
    assert_eq!(
        (st.as_u16(), decided["challenge"]["status"].as_str()),
        (200, Some("approved")),
        "{decided}"
    );

    // The approved request now goes through once; the others wait for their own approval.
    let (_, mailed) = status_json(
        s.agent
            .signed_get(
                &app,
                &status_path(decided["challenge"]["challenge_id"].as_str().unwrap()),
            )
            .await,
    )
    .await;
    assert_eq!(mailed["challenge"]["status"], "approved");
    let read_lease = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
    let (st, read) = status_json(s.read(&app, &read_lease, json!(["ACCOUNT"])).await).await;
    assert_eq!(st, 200, "{read}");
    assert_eq!(read["secrets"]["ACCOUNT"], "acct_agent_1");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_never_decides_its_own_vault_challenge_sqlite() {
    an_agent_never_decides_its_own_vault_challenge(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_never_decides_its_own_vault_challenge_postgres() {
    an_agent_never_decides_its_own_vault_challenge(Engine::Postgres).await;
}

both_engines! {
    /// A backend's challenge of the very request an agent makes for itself, decided through its
    /// link alone (the public-link flow), does not approve the agent's own request: only an
    /// approval a person took counts there.
    async fn a_link_alone_never_approves_what_an_agent_asks_for_itself(app) {
        let s = setup(&app, stripe_set(), read_grant(), json!(["read"])).await;
        app.apply_policy(vault_policy(true)).await;
        let (st, set) = status_json(s.owner.post("/v1/workspace/settings", &json!({"require_member_approval": false})).await).await;
        assert_eq!(st, 200, "{set}");
        let (_, got) = status_json(s.owner.get("/v1/vault/secret-sets/1").await).await;
        let set_id = got["secret_set"]["secret_set_id"].as_str().unwrap().to_owned();
        // The backend asks about the agent's read with the very context the vault builds.
        let (st, asked) = status_json(app.post("/v1/check", &json!({"agent_id": s.agent.id, "action": "vault.read",
            "context": {"secret_set": "stripe-prod", "secret_set_id": set_id, "provider": "stripe",
                "environment": "production", "keys": ["ACCOUNT"]}})).await).await;
        assert_eq!((st.as_u16(), asked["decision"].as_str()), (200, Some("challenge")), "{asked}");
        let link = asked["challenge"]["url"].as_str().unwrap().to_owned();
        let (st, decided) = status_json(decide_by_link(&app, &link, None, "approve").await).await;
        assert_eq!((st.as_u16(), decided["challenge"]["decided_by"].as_str()), (200, Some("approval_link")), "{decided}");
        // The same request by the agent itself is still challenged.
        let token = s.minted(&app, "read", json!({"keys": ["ACCOUNT"]})).await;
        let body = assert_error(s.read(&app, &token, json!(["ACCOUNT"])).await, 403, "policy_challenge").await;
        assert_eq!(body["challenge"]["type"], "status_link", "{body}");
        // The backend's own re-check is approved once, as the public-link flow promises.
        let (_, again) = status_json(app.post("/v1/check", &json!({"agent_id": s.agent.id, "action": "vault.read",
            "context": {"secret_set": "stripe-prod", "secret_set_id": set_id, "provider": "stripe",
                "environment": "production", "keys": ["ACCOUNT"]}})).await).await;
        assert_eq!(again["decision"], "allow", "{again}");
    }
}

both_engines! {
    async fn every_spelling_of_an_action_is_accepted_and_answers_use_one(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let agent = app.active_agent("speller").await;
        // The policy spec names the actions by their aliases too.
        app.apply_policy(json!({
            "reusable_policy_blocks": {"v": {"vault": {"allow": ["proxy_use", "mint_request_lease", "vault.read"]}}},
            "agent_groups": [{"name": "payers", "members": [agent.id]}],
            "bindings": [{"group": "payers", "blocks": ["v"]}],
        })).await;
        let owner = app.login("owner@example.com").await;
        assert_eq!(owner.post("/v1/vault/secret-sets", &stripe_set()).await.status(), 200);

        // A grant: aliases in, names out (the answer, the list, the audit event).
        let (s, g) = status_json(owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": agent.id,
            "allowed_keys": "*", "allowed_actions": ["proxy_use", "mint_request_lease", "vault.read", "vault.proxy"]})).await).await;
        assert_eq!(s, 200, "{g}");
        assert_eq!(g["grant"]["allowed_actions"], json!(["proxy", "mint_lease", "read"]));
        let (_, listed) = status_json(owner.get("/v1/vault/grants").await).await;
        assert_eq!(listed["items"][0]["allowed_actions"], json!(["proxy", "mint_lease", "read"]));
        let (_, trail) = status_json(owner.get("/v1/vault/audit?secret_set_id=1&limit=1").await).await;
        assert_eq!(trail["items"][0]["event_type"], "vault.grant.created");
        assert_eq!(trail["items"][0]["details"]["allowed_actions"], json!(["proxy", "mint_lease", "read"]));

        // A workflow lease: `proxy_use` and `vault.read` in, `proxy` and `read` out.
        let (s, lease) = status_json(app.post("/v1/vault/leases/workflow", &json!({"agent_id": agent.id,
            "secret_set_id": 1, "purpose": "spelling", "actions": ["proxy_use", "vault.read", "proxy"]})).await).await;
        assert_eq!(s, 200, "{lease}");
        let workflow = lease["workflow_lease_token"].as_str().unwrap().to_owned();
        let (_, leases) = status_json(owner.get("/v1/vault/leases?kind=workflow").await).await;
        assert_eq!(leases["items"][0]["actions"], json!(["proxy", "read"]));
        let (_, trail) = status_json(owner.get("/v1/vault/audit?secret_set_id=1&limit=1").await).await;
        assert_eq!(trail["items"][0]["details"]["actions"], json!(["proxy", "read"]));

        // The agent's side: eval and mint take every spelling.
        for (action, lease_action) in [("mint_request_lease", Some("proxy_use")), ("vault.mint_lease", None),
            ("vault.read", None), ("proxy_use", None), ("mint_lease", Some("vault.proxy"))] {
            let mut body = json!({"secret_set_id": 1, "action": action});
            if let Some(l) = lease_action {
                body["lease_action"] = json!(l);
            }
            let (s, eval) = status_json(agent.signed_post(&app, "/v1/vault/policy/eval", &body).await).await;
            assert_eq!((s.as_u16(), eval["decision"].as_str()), (200, Some("allow")), "{action}: {eval}");
        }
        let mint = |action: &'static str| {
            let agent = agent.clone();
            let app = app.clone();
            let workflow = workflow.clone();
            async move {
                agent.signed_post(&app, "/v1/vault/leases/request/mint",
                    &json!({"workflow_lease_token": workflow, "secret_set_id": 1, "action": action})).await
            }
        };
        for (action, name) in [("vault.read", "read"), ("proxy_use", "proxy"), ("vault.proxy", "proxy")] {
            let (s, minted) = status_json(mint(action).await).await;
            assert_eq!(s, 200, "{action}: {minted}");
            let (_, leases) = status_json(owner.get("/v1/vault/leases?kind=request").await).await;
            assert_eq!(leases["items"][0]["actions"], json!([name]), "{action}");
            let (_, trail) = status_json(owner.get("/v1/vault/audit?secret_set_id=1&limit=20").await).await;
            let event = trail["items"].as_array().unwrap().iter()
                .find(|e| e["event_type"] == "vault.lease.minted" && e["details"]["lease_id"] == minted["lease_id"]).unwrap();
            assert_eq!(event["details"]["actions"], json!([name]), "{action}");
        }
        // A lease is for `proxy` or `read`, never `mint_lease`; other words are refused everywhere.
        assert_error(mint("mint_lease").await, 400, "invalid_action").await;
        assert_error(mint("lease").await, 400, "invalid_action").await;
        assert_error(app.post("/v1/vault/leases/workflow", &json!({"agent_id": agent.id, "secret_set_id": 1,
            "purpose": "p", "actions": ["mint_request_lease"]})).await, 400, "invalid_actions").await;
        assert_error(owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": agent.id,
            "allowed_keys": "*", "allowed_actions": ["mint-lease"]})).await, 400, "invalid_allowed_actions").await;
        let body = assert_error(agent.signed_post(&app, "/v1/vault/policy/eval",
            &json!({"secret_set_id": 1, "action": "write"})).await, 400, "invalid_action").await;
        assert!(body["message"].as_str().unwrap().contains("`proxy`, `read` or `mint_lease`"), "{body}");

        // Rows written with the old spellings read as the names, and still allow what they did.
        let grant_id = g["grant"]["grant_id"].as_str().unwrap();
        run_sql(&app.db_url, &format!(
            "UPDATE vault_grants SET allowed_actions = '[\"proxy_use\",\"mint_request_lease\",\"read\"]' WHERE id = '{grant_id}'")).await;
        run_sql(&app.db_url, "UPDATE vault_leases SET actions = '[\"proxy_use\",\"read\"]' WHERE kind = 'workflow'").await;
        let (_, listed) = status_json(owner.get("/v1/vault/grants").await).await;
        assert_eq!(listed["items"][0]["allowed_actions"], json!(["proxy", "mint_lease", "read"]));
        let (_, leases) = status_json(owner.get("/v1/vault/leases?kind=workflow").await).await;
        assert_eq!(leases["items"][0]["actions"], json!(["proxy", "read"]));
        let (s, minted) = status_json(mint("proxy").await).await;
        assert_eq!(s, 200, "{minted}");
    }
}
