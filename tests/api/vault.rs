//! The vault's administration: secret sets sealed at rest with envelope
//! encryption, their versions, lifecycle and grants; the master-key check at start and
//! `acp admin vault rewrap`. On both engines.

use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

const STRIPE_KEY: &str = "sk_live_plaintext-canary-4242";

fn stripe_set() -> Value {
    json!({
        "name": "stripe-prod", "provider": "stripe", "environment": "production",
        "entries": {"STRIPE_SECRET_KEY": STRIPE_KEY, "ACCOUNT": "acct_1"},
        "profiles": {"stripe": {"hosts": ["api.stripe.com"], "methods": ["GET", "POST"], "path_prefixes": ["/v1/"],
            "inject": {"headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY}"}}}}
    })
}

/// Every text column of the vault's tables, as the database holds them.
async fn stored_text(app: &TestApp) -> String {
    use sqlx::Row;
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&app.db_url).await.unwrap();
    let mut all = String::new();
    for sql in [
        "SELECT id || ' ' || name || ' ' || data_key AS t FROM vault_secret_sets",
        "SELECT sealed || ' ' || keys || ' ' || profiles AS t FROM vault_secret_versions",
        "SELECT COALESCE(details, '') AS t FROM audit_events",
    ] {
        for row in sqlx::query(sql).fetch_all(&pool).await.unwrap() {
            all.push_str(&row.try_get::<String, _>("t").unwrap());
            all.push('\n');
        }
    }
    pool.close().await;
    all
}

both_engines! {
    async fn secret_sets_are_versioned_and_sealed_at_rest(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;

        let (s, made) = status_json(owner.post("/v1/vault/secret-sets", &stripe_set()).await).await;
        assert_eq!(s, 200, "{made}");
        let set = &made["secret_set"];
        let id = set["secret_set_id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("ss_"));
        assert_eq!((set["number"].as_i64(), set["version"].as_i64()), (Some(1), Some(1)));
        assert_eq!(set["keys"], json!(["ACCOUNT", "STRIPE_SECRET_KEY"]));
        assert!(!made.to_string().contains(STRIPE_KEY), "no value in an answer");

        // Readers see names, never values; the number works wherever the id does.
        let (_, listed) = status_json(member.get("/v1/vault/secret-sets").await).await;
        assert_eq!(listed["items"][0]["secret_set_id"], id.as_str());
        let (_, by_number) = status_json(member.get("/v1/vault/secret-sets/1").await).await;
        assert_eq!(by_number["secret_set"]["secret_set_id"], id.as_str());
        assert!(!listed.to_string().contains(STRIPE_KEY));
        assert_error(member.post("/v1/vault/secret-sets", &stripe_set()).await, 403, "insufficient_role").await;
        assert_error(app.get("/v1/vault/secret-sets").await, 401, "session_required").await;
        assert_error(owner.post("/v1/vault/secret-sets", &stripe_set()).await, 409, "secret_set_exists").await;
        assert_error(owner.get("/v1/vault/secret-sets/99").await, 404, "unknown_secret_set").await;

        // Bad input: key names, profiles naming missing keys, a header value with a newline.
        let mut bad = stripe_set();
        bad["name"] = json!("other");
        bad["entries"]["9BAD"] = json!("x");
        assert_error(owner.post("/v1/vault/secret-sets", &bad).await, 400, "invalid_entries").await;
        let mut bad = stripe_set();
        bad["name"] = json!("other");
        bad["profiles"]["stripe"]["inject"]["headers"]["Authorization"] = json!("Bearer ${NOPE}");
        assert_error(owner.post("/v1/vault/secret-sets", &bad).await, 400, "invalid_profiles").await;
        let mut bad = stripe_set();
        bad["name"] = json!("other");
        bad["entries"]["STRIPE_SECRET_KEY"] = json!("sk\r\nX-Injected: 1");
        assert_error(owner.post("/v1/vault/secret-sets", &bad).await, 400, "invalid_entries").await;

        // Versions with check-and-set.
        let path = format!("/v1/vault/secret-sets/{id}");
        let (s, v2) = status_json(owner.post(&path, &json!({"set": {"WEBHOOK": "whsec_1"}, "expected_version": 1})).await).await;
        assert_eq!(s, 200, "{v2}");
        assert_eq!(v2["secret_set"]["version"], 2);
        assert_eq!(v2["secret_set"]["keys"], json!(["ACCOUNT", "STRIPE_SECRET_KEY", "WEBHOOK"]));
        assert_error(owner.post(&path, &json!({"unset": ["ACCOUNT"], "expected_version": 1})).await, 409, "version_conflict").await;
        let (_, v3) = status_json(owner.post(&path, &json!({"unset": ["ACCOUNT"]})).await).await;
        assert_eq!(v3["secret_set"]["keys"], json!(["STRIPE_SECRET_KEY", "WEBHOOK"]));
        // Back to version 1's entries, as version 4.
        let (s, v4) = status_json(owner.post(&format!("{path}/rollback"), &json!({"version": 1})).await).await;
        assert_eq!(s, 200, "{v4}");
        assert_eq!((v4["secret_set"]["version"].as_i64(), &v4["secret_set"]["keys"]), (Some(4), &json!(["ACCOUNT", "STRIPE_SECRET_KEY"])));
        let (_, versions) = status_json(member.get(&format!("{path}/versions")).await).await;
        let numbers: Vec<i64> = versions["items"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
        assert_eq!(numbers, [4, 3, 2, 1]);
        assert_error(owner.post(&format!("{path}/rollback"), &json!({"version": 9})).await, 404, "unknown_version").await;

        // Nothing in the database, nor in the audit trail, holds a value in the clear.
        let stored = stored_text(&app).await;
        assert!(stored.contains(&id) && stored.contains("STRIPE_SECRET_KEY"));
        assert!(!stored.contains(STRIPE_KEY) && !stored.contains("whsec_1"), "a value in the clear");
        if let Some(file) = app.db_url.strip_prefix("sqlite:") {
            let file = file.split('?').next().unwrap();
            let mut bytes = std::fs::read(file).unwrap();
            if let Ok(wal) = std::fs::read(format!("{file}-wal")) {
                bytes.extend(wal);
            }
            let needle = STRIPE_KEY.as_bytes();
            assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the value is in the SQLite file");
        }

        // Audited with the person, key names only.
        let events = audit_events(&app, "event_type=vault.secret_set.updated").await;
        assert_eq!(events.len(), 2);
        assert!(events[0]["actor"].as_str().unwrap().starts_with("user:"));
        assert_eq!(events[0]["details"]["secret_set_id"], id.as_str());

        // Delete hides it, undelete brings it back, destroy forgets the values.
        let (_, deleted) = status_json(owner.post(&format!("{path}/delete"), &json!({})).await).await;
        assert!(deleted["secret_set"]["deleted_at"].is_string());
        let (_, listed) = status_json(owner.get("/v1/vault/secret-sets").await).await;
        assert_eq!(listed["items"], json!([]));
        let (_, listed) = status_json(owner.get("/v1/vault/secret-sets?include_deleted=true").await).await;
        assert_eq!(listed["items"].as_array().unwrap().len(), 1);
        assert_error(owner.post(&path, &json!({"set": {"X": "y"}})).await, 404, "unknown_secret_set").await;
        let (_, back) = status_json(owner.post(&format!("{path}/undelete"), &json!({})).await).await;
        assert!(back["secret_set"]["deleted_at"].is_null());
        let (s, gone) = status_json(owner.post(&format!("{path}/destroy"), &json!({})).await).await;
        assert_eq!(s, 200, "{gone}");
        assert!(gone["secret_set"]["destroyed_at"].is_string());
        assert_error(owner.get(&format!("{path}/versions")).await, 404, "unknown_secret_set").await;
        assert_error(owner.post(&format!("{path}/undelete"), &json!({})).await, 404, "unknown_secret_set").await;
        // The name is free again.
        assert_eq!(owner.post("/v1/vault/secret-sets", &stripe_set()).await.status(), 200);
        app.stop().await;
    }
}

both_engines! {
    async fn dotenv_imports_and_history_is_bounded(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let dotenv = "# payments\nexport DB_URL=postgres://u:p@db/x\nAPI_KEY='k 1'\nMULTI=\"a\\nb\"\n";
        let (s, made) = status_json(owner.post("/v1/vault/secret-sets/import", &json!({
            "name": "env", "provider": "generic", "environment": "staging", "dotenv": dotenv})).await).await;
        assert_eq!(s, 200, "{made}");
        assert_eq!(made["secret_set"]["keys"], json!(["API_KEY", "DB_URL", "MULTI"]));
        assert_error(owner.post("/v1/vault/secret-sets/import", &json!({
            "name": "bad", "provider": "generic", "environment": "staging", "dotenv": "1X=y\n"})).await, 400, "invalid_dotenv").await;
        // Eleven more versions: the default history keeps the last ten.
        let id = made["secret_set"]["secret_set_id"].as_str().unwrap().to_owned();
        for n in 0..11 {
            let res = owner.post(&format!("/v1/vault/secret-sets/{id}"), &json!({"set": {"N": n.to_string()}})).await;
            assert_eq!(res.status(), 200);
        }
        let (_, versions) = status_json(owner.get(&format!("/v1/vault/secret-sets/{id}/versions")).await).await;
        let numbers: Vec<i64> = versions["items"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
        assert_eq!(numbers, (3..=12).rev().collect::<Vec<_>>());
        assert_error(owner.post(&format!("/v1/vault/secret-sets/{id}/rollback"), &json!({"version": 1})).await, 404, "unknown_version").await;
        app.stop().await;
    }
}

both_engines! {
    async fn grants_name_an_agent_or_a_group(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let agent = app.active_agent("payer").await;
        let (_, made) = status_json(owner.post("/v1/vault/secret-sets", &stripe_set()).await).await;
        let id = made["secret_set"]["secret_set_id"].as_str().unwrap().to_owned();

        // By number (as the public client sends it) or by id.
        let (s, g) = status_json(owner.post("/v1/vault/grants", &json!({
            "secret_set_id": 1, "agent_id": agent.id, "allowed_keys": ["STRIPE_SECRET_KEY"], "allowed_actions": ["proxy_use"]})).await).await;
        assert_eq!(s, 200, "{g}");
        let grant = &g["grant"];
        assert_eq!((grant["secret_set_id"].as_str(), grant["number"].as_i64()), (Some(id.as_str()), Some(1)));
        assert_eq!(grant["allowed_actions"], json!(["proxy"]), "an alias in, the name out");
        let (s, g2) = status_json(owner.post("/v1/vault/grants", &json!({
            "secret_set_id": id, "group": "finance", "allowed_keys": "*", "allowed_actions": ["read", "mint_request_lease"],
            "expires_at": "2099-01-01T00:00:00Z"})).await).await;
        assert_eq!(s, 200, "{g2}");
        assert_eq!(g2["grant"]["allowed_keys"], "*");
        assert_eq!(g2["grant"]["allowed_actions"], json!(["read", "mint_lease"]));

        for (body, code) in [
            (json!({"secret_set_id": 1, "allowed_keys": "*", "allowed_actions": ["read"]}), "missing_agent_id"),
            (json!({"secret_set_id": 1, "agent_id": agent.id, "allowed_keys": "*", "allowed_actions": ["write"]}), "invalid_allowed_actions"),
            (json!({"secret_set_id": 1, "agent_id": agent.id, "allowed_keys": [], "allowed_actions": ["read"]}), "invalid_allowed_keys"),
            (json!({"secret_set_id": 1, "agent_id": agent.id, "allowed_keys": "*", "allowed_actions": ["read"], "expires_at": "2001-01-01T00:00:00Z"}), "invalid_expires_at"),
        ] {
            assert_error(owner.post("/v1/vault/grants", &body).await, 400, code).await;
        }
        assert_error(owner.post("/v1/vault/grants", &json!({"secret_set_id": 7, "agent_id": agent.id, "allowed_keys": "*", "allowed_actions": ["read"]})).await, 404, "unknown_secret_set").await;
        assert_error(owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": "agt_00000000000000000000000000000000", "allowed_keys": "*", "allowed_actions": ["read"]})).await, 404, "unknown_agent").await;

        let (_, listed) = status_json(owner.get("/v1/vault/grants?secret_set_id=1").await).await;
        assert_eq!(listed["items"].as_array().unwrap().len(), 2);
        let grant_id = grant["grant_id"].as_str().unwrap();
        assert_eq!(owner.post(&format!("/v1/vault/grants/{grant_id}/revoke"), &json!({})).await.status(), 200);
        assert_error(owner.post(&format!("/v1/vault/grants/{grant_id}/revoke"), &json!({})).await, 404, "unknown_grant").await;
        let (_, listed) = status_json(owner.get("/v1/vault/grants").await).await;
        let revoked = listed["items"].as_array().unwrap().iter().find(|g| g["grant_id"] == grant_id).unwrap();
        assert!(revoked["revoked_at"].is_string());
        let events = audit_events(&app, "event_type=vault.grant.created").await;
        assert_eq!(events.len(), 2);

        // Another workspace sees none of it.
        let (other_ws, _) = app.other_workspace().await;
        app.grant(&other_ws, "owner@example.com", "owner").await;
        let (_, token) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "t"})).await).await;
        let res = app.client.get(app.url("/v1/vault/secret-sets/1")).bearer_auth(token["token"].as_str().unwrap())
            .header("X-Service-Workspace", &other_ws).send().await.unwrap();
        assert_error(res, 404, "unknown_secret_set").await;
        app.stop().await;
    }
}

both_engines! {
    async fn a_server_refuses_a_vault_its_master_key_cannot_open(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        assert_eq!(owner.post("/v1/vault/secret-sets", &stripe_set()).await.status(), 200);
        // An audit sink's signing secret is sealed with the master key too.
        let (s, sink) = status_json(owner.post("/v1/workspace/audit/sinks", &json!({"name": "siem", "url": "https://siem.example.com/", "enabled": false})).await).await;
        assert_eq!(s, 200, "{sink}");
        let db_url = app.db_url.clone();
        let new_key = "bmV3LW1hc3Rlci1rZXktb2YtdGhlLWFjcC10ZXN0cyE=";
        let start = |key: &str| {
            let mut config = acp::config::Config::for_database(&db_url).expect("config");
            config.addr = "127.0.0.1:0".parse().unwrap();
            config.master_key = Some(acp::secret::Secret::new(key.to_owned()));
            config.email_url = "outbox".into();
            acp::app::App::build(config)
        };
        let refused = start(new_key).await.err().expect("refused").to_string();
        assert!(refused.contains("vault") && refused.contains("acp admin vault rewrap"), "{refused}");

        // Re-wrapped with the new key: the server starts, and the old key is refused.
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args(["admin", "vault", "rewrap", "--output", "json"])
            .env("ACP_DATABASE_URL", &db_url)
            .env("ACP_MASTER_KEY", new_key)
            .env("ACP_OLD_MASTER_KEY", TEST_MASTER_KEY)
            .output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let done: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((done["rewrapped"].as_i64(), done["signing_keys_resealed"].as_i64()), (Some(1), Some(1)), "{done}");
        assert_eq!(done["sink_secrets_resealed"], 1, "{done}");
        let started = start(new_key).await.expect("starts with the new key");
        drop(started);
        // The JWT issuer still signs: its key opens with the new master key.
        let store = acp::store::SqlStore::open(&db_url, &Default::default()).await.unwrap();
        let new_master = acp::secret::MasterKey::from_base64(new_key).unwrap();
        use acp::store::CredentialStore;
        for k in store.signing_keys(0).await.unwrap() {
            assert!(new_master.open(k.private_key.expose(), &k.kid).is_ok(), "{}", k.kid);
        }
        use acp::store::AuditStore;
        let sinks = store.all_sinks().await.unwrap();
        assert_eq!(sinks.len(), 1);
        let opened = new_master.open(&sinks[0].secret_sealed, &acp::audit::delivery::secret_context(&sinks[0].id)).unwrap();
        assert_eq!(String::from_utf8(opened).unwrap(), sink["secret"].as_str().unwrap());
        store.close().await;
        assert!(start(TEST_MASTER_KEY).await.is_err());
        app.stop().await;
    }
}

both_engines! {
    async fn workflow_leases_are_issued_listed_and_revoked(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;
        let agent = app.active_agent("lessee").await;
        assert_eq!(owner.post("/v1/vault/secret-sets", &stripe_set()).await.status(), 200);
        let lease = |secret_set_id: Value| json!({"agent_id": agent.id, "secret_set_id": secret_set_id,
            "purpose": "nightly payouts", "actions": ["proxy", "read"], "ttl_seconds": 600});

        // A person by role, or an API key (unscoped, or scoped `vault:lease`).
        let (s, issued) = status_json(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await).await;
        assert_eq!(s, 200, "{issued}");
        let token = issued["workflow_lease_token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("vwl_") && issued["lease_id"].as_str().unwrap().starts_with("ls_"));
        let (s, by_key) = status_json(app.post("/v1/vault/leases/workflow", &lease(json!(1))).await).await;
        assert_eq!(s, 200, "{by_key}");
        assert_error(member.post("/v1/vault/leases/workflow", &lease(json!(1))).await, 403, "insufficient_role").await;
        let (_, gateway) = status_json(owner.post("/v1/workspace/api-keys", &json!({"name": "gw", "scopes": ["check"]})).await).await;
        let res = app.post_as(gateway["key"].as_str().unwrap(), "/v1/vault/leases/workflow", &lease(json!(1))).await;
        let body = assert_error(res, 403, "insufficient_scope").await;
        assert_eq!(body["required_scope"], "vault:lease");

        // Listed without tokens, actions normalised; members read.
        let (s, listed) = status_json(member.get("/v1/vault/leases?kind=workflow").await).await;
        assert_eq!(s, 200, "{listed}");
        assert_eq!(listed["items"].as_array().unwrap().len(), 2);
        assert_eq!(listed["items"][1]["actions"], json!(["proxy", "read"]));
        assert_eq!(listed["items"][1]["purpose"], "nightly payouts");
        assert!(!listed.to_string().contains(&token));

        // Refusals.
        let mut bad = lease(json!(1));
        bad["actions"] = json!(["write"]);
        assert_error(owner.post("/v1/vault/leases/workflow", &bad).await, 400, "invalid_actions").await;
        bad = lease(json!(1));
        bad["ttl_seconds"] = json!(0);
        assert_error(owner.post("/v1/vault/leases/workflow", &bad).await, 400, "invalid_ttl_seconds").await;
        bad = lease(json!(1));
        bad["purpose"] = json!(" ");
        assert_error(owner.post("/v1/vault/leases/workflow", &bad).await, 400, "missing_purpose").await;
        bad = lease(json!(1));
        bad["agent_id"] = json!("agt_00000000000000000000000000000000");
        assert_error(owner.post("/v1/vault/leases/workflow", &bad).await, 404, "unknown_agent").await;
        assert_error(owner.post("/v1/vault/leases/workflow", &lease(json!(5))).await, 404, "unknown_secret_set").await;
        assert_eq!(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await.status(), 200);
        assert_error(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await, 403, "agent_not_active").await;
        assert_eq!(app.post(&format!("/v1/agents/{}/resume", agent.id), &json!({})).await.status(), 200);

        // The kill switch: paused minting issues nothing; revoke-all revokes what was issued.
        assert_eq!(app.post("/v1/identity/kill-switch/minting", &json!({"paused": true})).await.status(), 200);
        assert_error(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await, 403, "minting_paused").await;
        assert_eq!(app.post("/v1/identity/kill-switch/minting", &json!({"paused": false})).await.status(), 200);
        assert_eq!(app.post("/v1/identity/kill-switch/revoke-all", &json!({"reason": "drill"})).await.status(), 200);
        let (_, listed) = status_json(owner.get("/v1/vault/leases").await).await;
        assert!(listed["items"].as_array().unwrap().iter().all(|l| l["revoked_at"].is_string()), "{listed}");

        // Revoked by id (once), by agent, and with its set.
        let (_, fresh) = status_json(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await).await;
        let id = fresh["lease_id"].as_str().unwrap().to_owned();
        let (_, listed) = status_json(owner.get(&format!("/v1/vault/leases?agent_id={}", agent.id)).await).await;
        assert!(listed["items"][0]["revoked_at"].is_null(), "a lease after the cutoff counts");
        let (s, done) = status_json(owner.post(&format!("/v1/vault/leases/{id}/revoke"), &json!({})).await).await;
        assert_eq!((s.as_u16(), done["revoked"].as_i64()), (200, Some(1)), "{done}");
        assert_error(owner.post(&format!("/v1/vault/leases/{id}/revoke"), &json!({})).await, 404, "unknown_lease").await;
        assert_eq!(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await.status(), 200);
        assert_eq!(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await.status(), 200);
        let (_, done) = status_json(app.post("/v1/vault/leases/revoke", &json!({"agent_id": agent.id})).await).await;
        assert_eq!(done["revoked"], 2);
        assert_error(app.post("/v1/vault/leases/revoke", &json!({})).await, 400, "missing_agent_id").await;
        assert_eq!(owner.post("/v1/vault/leases/workflow", &lease(json!(1))).await.status(), 200);
        assert_eq!(owner.post("/v1/vault/secret-sets/1/destroy", &json!({})).await.status(), 200);
        let (_, listed) = status_json(owner.get("/v1/vault/leases").await).await;
        assert!(listed["items"].as_array().unwrap().iter().all(|l| l["revoked_at"].is_string()), "destroy revokes: {listed}");

        // Audited without the token; the database keeps only its hash.
        let events = audit_events(&app, "event_type=vault.lease.minted").await;
        assert_eq!(events.len(), 6);
        assert_eq!(events[0]["agent_id"], agent.id.as_str());
        let stored = stored_text(&app).await;
        assert!(!stored.contains(&token));
        app.stop().await;
    }
}

both_engines! {
    async fn the_vault_audit_trail_is_kept_per_set(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;
        let agent = app.active_agent("audited").await;
        assert_eq!(owner.post("/v1/vault/secret-sets", &stripe_set()).await.status(), 200);
        let mut other = stripe_set();
        other["name"] = json!("other_set%");
        assert_eq!(owner.post("/v1/vault/secret-sets", &other).await.status(), 200);
        assert_eq!(owner.post("/v1/vault/secret-sets/1", &json!({"set": {"X": "y"}})).await.status(), 200);
        let (_, g) = status_json(owner.post("/v1/vault/grants", &json!({"secret_set_id": 1, "agent_id": agent.id,
            "allowed_keys": "*", "allowed_actions": ["read"]})).await).await;
        let grant_id = g["grant"]["grant_id"].as_str().unwrap().to_owned();
        assert_eq!(owner.post(&format!("/v1/vault/grants/{grant_id}/revoke"), &json!({})).await.status(), 200);
        assert_eq!(app.post("/v1/vault/leases/workflow", &json!({"agent_id": agent.id, "secret_set_id": 1,
            "purpose": "p", "actions": ["read"]})).await.status(), 200);
        assert_eq!(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await.status(), 200);

        // Set 1's trail: its own vault events only, newest first; members read it.
        let (s, trail) = status_json(member.get("/v1/vault/audit?secret_set_id=1").await).await;
        assert_eq!(s, 200, "{trail}");
        let types: Vec<&str> = trail["items"].as_array().unwrap().iter().map(|e| e["event_type"].as_str().unwrap()).collect();
        assert_eq!(types, ["vault.lease.minted", "vault.grant.revoked", "vault.grant.created", "vault.secret_set.updated", "vault.secret_set.created"]);
        let (_, page) = status_json(member.get("/v1/vault/audit?secret_set_id=1&limit=2").await).await;
        assert_eq!(page["items"].as_array().unwrap().len(), 2);
        let cursor = page["next_cursor"].as_str().unwrap();
        let (_, rest) = status_json(member.get(&format!("/v1/vault/audit?secret_set_id=1&cursor={cursor}")).await).await;
        assert_eq!(rest["items"].as_array().unwrap().len(), 3);
        // Every set's vault events, and not the agent's suspension.
        let (_, all) = status_json(owner.get("/v1/vault/audit").await).await;
        assert_eq!(all["items"].as_array().unwrap().len(), 6);
        assert!(all["items"].as_array().unwrap().iter().all(|e| e["event_type"].as_str().unwrap().starts_with("vault.")));
        assert_error(owner.get("/v1/vault/audit?secret_set_id=9").await, 404, "unknown_secret_set").await;
        assert_error(app.get("/v1/vault/audit").await, 401, "session_required").await;
        app.stop().await;
    }
}
