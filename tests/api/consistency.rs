//! Once a change has been answered 2xx on any replica, no replica answers a
//! 2xx based on the state it replaced. Two servers on one database (this process and a real
//! `acp serve` process): every change is made on the first and answered, and the very next
//! request goes to the second, which has the replaced state cached.

use crate::both_engines;
use crate::helpers::*;
use crate::replicas::start_replica;
use serde_json::{json, Value};

/// Trials of each kind of change.
const TRIALS: usize = 8;

fn spec(agent_id: &str, allow_read: bool) -> Value {
    let actions = if allow_read {
        json!({"allow": ["read", "list"]})
    } else {
        json!({"allow": ["list"], "deny": ["read"]})
    };
    json!({
        "reusable_policy_blocks": {"ops": {"actions": actions}},
        "agent_groups": [{"name": "ops", "members": [agent_id]}],
        "bindings": [{"name": "ops", "group": "ops", "blocks": ["ops"]}],
        "global_guardrails": {}
    })
}

async fn decision(app: &TestApp, key: &str, agent_id: &str, action: &str) -> Value {
    let (s, out) = status_json(
        app.post_as(
            key,
            "/v1/check",
            &json!({"agent_id": agent_id, "action": action}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
    out
}

both_engines! {
    async fn no_replica_answers_on_state_another_replica_replaced(app) {
        let (mut process, base_two) = start_replica(&app.db_url, &app.key).await;
        let two = app.at(base_two);
        let one = &app;
        let agent = one.active_agent("worker").await;
        one.grant(&one.workspace_id, "owner@example.com", "owner").await;
        let owner = one.login("owner@example.com").await;
        let apply = |allow: bool| {
            let owner = owner.clone();
            let agent_id = agent.id.clone();
            async move {
                let (s, out) = status_json(owner.post("/v1/policies/sync", &json!({"spec": spec(&agent_id, allow)})).await).await;
                assert_eq!(s, 200, "{out}");
                out["policy_hash"].as_str().unwrap().to_owned()
            }
        };
        apply(true).await;
        assert_eq!(decision(&two, &app.key, &agent.id, "read").await["decision"], "allow");

        // Policy applied: the other replica decides with the new version at once.
        for trial in 0..TRIALS {
            let allow = trial % 2 == 1;
            let hash = apply(allow).await;
            let out = decision(&two, &app.key, &agent.id, "read").await;
            assert_eq!(out["policy_hash"], hash.as_str(), "trial {trial}: {out}");
            assert_eq!(out["decision"], if allow { "allow" } else { "deny" }, "trial {trial}: {out}");
        }
        apply(true).await;

        // API key revoked: the other replica, which had it cached, refuses it for decisions
        // and for reads.
        for trial in 0..TRIALS {
            let (s, made) = status_json(owner.post("/v1/workspace/api-keys", &json!({"name": format!("k{trial}")})).await).await;
            assert_eq!(s, 200, "{made}");
            let key = made["key"].as_str().unwrap().to_owned();
            let key_id = made["api_key"]["key_id"].as_str().unwrap().to_owned();
            assert_eq!(decision(&two, &key, &agent.id, "list").await["decision"], "allow");
            assert_eq!(two.get_as(&key, "/v1/workspace/audit/events?limit=1").await.status(), 200);
            let res = owner.post(&format!("/v1/workspace/api-keys/{key_id}/revoke"), &json!({})).await;
            assert_eq!(res.status(), 200, "revoke");
            let check = two.post_as(&key, "/v1/check", &json!({"agent_id": agent.id, "action": "list"})).await;
            assert_error(check, 401, "invalid_api_key").await;
            assert_error(two.get_as(&key, "/v1/workspace/audit/events?limit=1").await, 401, "invalid_api_key").await;
        }

        // Personal access token revoked.
        for trial in 0..TRIALS {
            let (_, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": format!("ci{trial}")})).await).await;
            let token = pat["token"].as_str().unwrap().to_owned();
            let token_id = pat["access_token"]["token_id"].as_str().unwrap().to_owned();
            let read = || two.client.get(two.url("/v1/policies")).bearer_auth(&token).send();
            assert_eq!(read().await.unwrap().status(), 200);
            let res = owner.post(&format!("/v1/auth/tokens/{token_id}/revoke"), &json!({})).await;
            assert_eq!(res.status(), 200, "revoke token");
            assert_eq!(read().await.unwrap().status(), 401, "trial {trial}");
        }

        // Agent suspended and resumed: decisions and verifications follow at once.
        for trial in 0..TRIALS {
            let res = one.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({"reason": "trial"})).await;
            assert_eq!(res.status(), 200, "suspend");
            let out = decision(&two, &app.key, &agent.id, "list").await;
            assert_eq!(out["decision"], "deny", "trial {trial}: {out}");
            let v = agent.sign("GET", "/x", &now_ms().to_string(), &random_nonce(), b"");
            let (_, verified) = status_json(two.post("/v1/verify", &json!({"agent_id": agent.id, "method": "GET", "path": "/x",
                "timestamp_ms": v.timestamp.parse::<i64>().unwrap(), "nonce": v.nonce, "body_sha256": v.body_sha256, "signature_b64": v.signature})).await).await;
            assert_eq!(verified["valid"], false, "trial {trial}: {verified}");
            let res = one.post(&format!("/v1/agents/{}/resume", agent.id), &json!({})).await;
            assert_eq!(res.status(), 200, "resume");
            assert_eq!(decision(&two, &app.key, &agent.id, "list").await["decision"], "allow", "trial {trial}");
        }

        // Kill switch: pausing minting on one replica stops minting on the other.
        let mint_body = json!({"agent_id": agent.id});
        let mint = || two.post("/v1/identity/credentials/mint", &mint_body);
        for trial in 0..TRIALS {
            let res = one.post("/v1/identity/kill-switch/minting", &json!({"paused": true, "reason": "drill"})).await;
            assert_eq!(res.status(), 200);
            assert_error(mint().await, 403, "minting_paused").await;
            let res = one.post("/v1/identity/kill-switch/minting", &json!({"paused": false})).await;
            assert_eq!(res.status(), 200);
            let (s, out) = status_json(mint().await).await;
            assert!(s == 200 || s == 403 && out["error"] == "policy_denied", "trial {trial}: {s} {out}");
        }
        // Revoke-all: a credential minted before it is inactive on the other replica at once.
        apply_mint_policy(&owner, &agent.id).await;
        for trial in 0..TRIALS {
            let (s, minted) = status_json(mint().await).await;
            assert_eq!(s, 200, "{minted}");
            let token = minted["credential"]["token"].as_str().unwrap().to_owned();
            let res = one.post("/v1/identity/kill-switch/revoke-all", &json!({"reason": "drill"})).await;
            assert_eq!(res.status(), 200);
            let (_, seen) = status_json(two.post("/v1/identity/introspect", &json!({"token": token})).await).await;
            assert_eq!(seen["active"], false, "trial {trial}: {seen}");
            // Later mints are after the cutoff.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }

        // Agent revoked: denied everywhere from then on.
        let res = one.post(&format!("/v1/agents/{}/revoke", agent.id), &json!({"reason": "done"})).await;
        assert_eq!(res.status(), 200);
        let out = decision(&two, &app.key, &agent.id, "list").await;
        assert_eq!(out["decision"], "deny", "{out}");

        process.kill().await.ok();
    }
}

async fn apply_mint_policy(owner: &Browser, agent_id: &str) {
    let spec = json!({
        "reusable_policy_blocks": {"ops": {"actions": {"allow": ["list", "mint_credential"]}}},
        "agent_groups": [{"name": "ops", "members": [agent_id]}],
        "bindings": [{"name": "ops", "group": "ops", "blocks": ["ops"]}],
        "global_guardrails": {}
    });
    let (s, out) = status_json(
        owner
            .post("/v1/policies/sync", &json!({"spec": spec}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
}
