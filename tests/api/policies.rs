//! Policy sync (dry run, apply, conflicts, idempotency, versions) and `/v1/check`.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

fn spec(agent_id: &str, allow_up_to: f64) -> Value {
    json!({
        "reusable_policy_blocks": {
            "refunds": {"amount": {"limits": {"USD": {"allow_up_to": allow_up_to, "challenge_up_to": 1000}}}},
            "ops": {"actions": {"allow": ["read"], "deny": ["drop_db"]}}
        },
        "agent_groups": [{"name": "finance", "members": [agent_id]}],
        "bindings": [
            {"name": "finance-refunds", "group": "finance", "blocks": ["refunds"], "actions": ["refund"]},
            {"name": "finance-ops", "group": "finance", "blocks": ["ops"]}
        ],
        "global_guardrails": {"actions": {"deny": ["wire_transfer"]}}
    })
}

async fn owner(app: &TestApp) -> Browser {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.login("owner@example.com").await
}

async fn check(app: &TestApp, body: Value) -> Value {
    let (s, out) = status_json(app.post("/v1/check", &body).await).await;
    assert_eq!(s, 200, "{out}");
    out
}

both_engines! {
    async fn dry_run_apply_and_no_op(app) {
        let agent = app.active_agent("fin").await;
        let owner = owner(&app).await;
        let desired = spec(&agent.id, 100.0);
        let (s, dry) = status_json(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": desired})).await).await;
        assert_eq!(s, 200, "{dry}");
        assert_eq!((dry["ok"].as_bool(), dry["dry_run"].as_bool(), dry["policy_id"].as_str()), (Some(true), Some(true), Some("pol_default")));
        assert!(dry["current_policy_hash"].as_str().unwrap().starts_with("sha256:"));
        assert_ne!(dry["current_policy_hash"], dry["desired_policy_hash"]);
        assert_eq!(dry["diff"]["changed"], true);
        assert!(dry["diff"]["cedar_diff"].as_str().unwrap().contains("+@source(\"finance-refunds/refunds\")"));
        assert_eq!(dry["diff"]["summary"]["blocks"]["added"], json!(["ops", "refunds"]));
        assert_eq!(dry["diff"]["summary"]["memberships"]["added"], json!([format!("finance:{}", agent.id)]));
        assert!(dry.get("applied").is_none());
        // A dry run changes nothing.
        let before = check(&app, json!({"agent_id": agent.id, "action": "read"})).await;
        assert_eq!((before["decision"].as_str(), before["policy_version"].as_i64()), (Some("deny"), Some(0)));
        assert_eq!(before["reason_codes"], json!(["no_matching_rule"]));

        let (s, applied) = status_json(owner.post("/v1/sync", &json!({"spec": desired, "policy_name": "Finance"})).await).await;
        assert_eq!(s, 200, "{applied}");
        assert_eq!((applied["applied"].as_bool(), applied["version"].as_i64()), (Some(true), Some(1)));
        assert_eq!(applied["policy_hash"], dry["desired_policy_hash"]);
        let after = check(&app, json!({"agent_id": agent.id, "action": "read"})).await;
        assert_eq!((after["decision"].as_str(), after["policy_version"].as_i64()), (Some("allow"), Some(1)));
        assert_eq!(after["policy_hash"], applied["policy_hash"]);
        assert_eq!(after["determining_policies"], json!(["finance-ops/ops"]));

        let (_, again) = status_json(owner.post("/v1/policies/sync", &json!({"spec": desired})).await).await;
        assert_eq!((again["applied"].as_bool(), again["version"].as_i64(), again["diff"]["changed"].as_bool()), (Some(false), Some(1), Some(false)));

        let (_, list) = status_json(owner.get("/v1/policies").await).await;
        assert_eq!(list["items"][0]["policy_id"], "pol_default");
        assert_eq!(list["items"][0]["name"], "Finance");
        let (_, detail) = status_json(owner.get("/v1/policies/pol_default").await).await;
        assert_eq!(detail["version"], 1);
        assert!(detail["cedar"].as_str().unwrap().contains("permit"));
        assert_eq!(detail["spec"]["agent_groups"][0]["name"], "finance");
        let (_, versions) = status_json(owner.get("/v1/policies/pol_default/versions").await).await;
        assert_eq!(versions["items"].as_array().unwrap().len(), 1);
        assert!(versions["items"][0]["author"].as_str().unwrap().starts_with("user:usr_"));
        let (_, v1) = status_json(owner.get("/v1/policies/pol_default/versions/1").await).await;
        assert_eq!(v1["policy_hash"], applied["policy_hash"]);
        assert_error(owner.get("/v1/policies/pol_default/versions/7").await, 404, "unknown_version").await;
        assert_error(owner.get("/v1/policies/pol_nope").await, 404, "unknown_policy").await;
        let applies = audit_events(&app, "event_type=policy.applied").await;
        assert_eq!(applies.len(), 1, "only the real apply is an event");
        assert_eq!(applies[0]["policy_hash"], applied["policy_hash"]);
    }
}

both_engines! {
    async fn conflicts_invalid_specs_and_idempotency(app) {
        let agent = app.active_agent("fin").await;
        let owner = owner(&app).await;
        let (_, first) = status_json(owner.post("/v1/policies/sync", &json!({"spec": spec(&agent.id, 100.0)})).await).await;
        let hash = first["policy_hash"].as_str().unwrap().to_owned();
        let stale = json!({"spec": spec(&agent.id, 50.0), "expected_policy_hash": "sha256:0000"});
        let body = assert_error(owner.post("/v1/policies/sync", &stale).await, 409, "sync_conflict").await;
        assert_eq!(body["current_policy_hash"], hash.as_str());
        let fresh = json!({"spec": spec(&agent.id, 50.0), "expected_policy_hash": hash});
        assert_eq!(status_json(owner.post("/v1/policies/sync", &fresh).await).await.1["version"], 2);

        let broken = json!({"spec": {"bindings": [{"group": "ghost", "blocks": ["nope"]}], "agent_groups": [{"name": "g", "members": ["bob"]}]}});
        let body = assert_error(owner.post("/v1/policies/sync", &broken).await, 422, "invalid_spec").await;
        let paths: Vec<&str> = body["errors"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
        assert!(paths.contains(&"bindings[0].group") && paths.contains(&"bindings[0].blocks[0]") && paths.contains(&"agent_groups[0].members[0]"), "{paths:?}");
        let body = assert_error(owner.post("/v1/policies/sync", &json!({"spec": {"agent_groupz": []}})).await, 422, "invalid_spec").await;
        assert_eq!(body["errors"][0]["path"], "agent_groupz");
        assert_error(owner.post("/v1/policies/sync", &json!({"dry_run": true})).await, 400, "missing_spec").await;

        let post_with_key = |key: &'static str, body: Value| {
            let owner = owner.clone();
            async move {
                owner.app.client.post(owner.app.url("/v1/policies/sync")).header("Cookie", &owner.cookie)
                    .header("X-CSRF-Token", &owner.csrf).header("Idempotency-Key", key).json(&body).send().await.unwrap()
            }
        };
        let body = json!({"spec": spec(&agent.id, 10.0), "policy_id": "pol_refunds"});
        let (_, one) = status_json(post_with_key("deploy-42", body.clone()).await).await;
        assert_eq!((one["applied"].as_bool(), one["version"].as_i64()), (Some(true), Some(1)));
        let (_, replay) = status_json(post_with_key("deploy-42", body.clone()).await).await;
        assert_eq!(replay, one, "the first answer is replayed");
        let (_, versions) = status_json(owner.get("/v1/policies/pol_refunds/versions").await).await;
        assert_eq!(versions["items"].as_array().unwrap().len(), 1, "the retry applied nothing");
        assert_error(post_with_key("deploy-42", json!({"spec": spec(&agent.id, 11.0), "policy_id": "pol_refunds"})).await, 422, "idempotency_key_reused").await;
        assert_error(owner.post("/v1/policies/sync", &json!({"spec": {}, "policy_id": "Bad Id"})).await, 400, "invalid_policy_id").await;
    }
}

both_engines! {
    async fn sync_needs_an_owner_or_admin_session_or_token(app) {
        let res = app.client.post(app.url("/v1/policies/sync")).bearer_auth(&app.key).json(&json!({"spec": {}})).send().await.unwrap();
        assert_error(res, 401, "session_required").await;
        let res = app.client.post(app.url("/v1/policies/sync")).header("X-Service-Api-Key", &app.key).json(&json!({"spec": {}})).send().await.unwrap();
        assert_error(res, 401, "session_required").await;
        let res = app.client.post(app.url("/v1/policies/sync")).json(&json!({"spec": {}})).send().await.unwrap();
        assert_error(res, 401, "unauthenticated").await;
        app.grant(&app.workspace_id, "m@example.com", "member").await;
        let member = app.login("m@example.com").await;
        assert_error(member.post("/v1/policies/sync", &json!({"spec": {}, "dry_run": true})).await, 403, "insufficient_role").await;
        assert_eq!(member.get("/v1/policies").await.status(), 200, "members read");
        let owner = owner(&app).await;
        let (_, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
        let res = app.client.post(app.url("/v1/policies/sync")).bearer_auth(pat["token"].as_str().unwrap())
            .json(&json!({"spec": {}, "dry_run": true})).send().await.unwrap();
        assert_eq!(res.status(), 200, "a CI token stands for its user");
    }
}

both_engines! {
    async fn concurrent_applies_never_both_win_against_one_version(app) {
        let agent = app.active_agent("fin").await;
        let owner = owner(&app).await;
        let base = status_json(owner.get("/v1/policies/pol_default").await).await.1["policy_hash"].clone();
        let mut tasks = Vec::new();
        for i in 0..6 {
            let owner = owner.clone();
            let body = json!({"spec": spec(&agent.id, 10.0 + f64::from(i)), "expected_policy_hash": base});
            tasks.push(tokio::spawn(async move { owner.post("/v1/policies/sync", &body).await.status().as_u16() }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
        let wins = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(wins, 1, "all six were computed against the same hash: {statuses:?}");
        assert!(statuses.iter().all(|s| *s == 200 || *s == 409), "{statuses:?}");
        let (_, versions) = status_json(owner.get("/v1/policies/pol_default/versions").await).await;
        assert_eq!(versions["items"].as_array().unwrap().len(), 1);
    }
}

both_engines! {
    async fn check_answers_each_outcome_with_reasons_and_audit(app) {
        let agent = app.active_agent("fin").await;
        let owner = owner(&app).await;
        owner.post("/v1/policies/sync", &json!({"spec": spec(&agent.id, 100.0)})).await;
        let refund = |amount: f64| json!({"agent_id": agent.id, "action": "refund", "context": {"amount": amount, "currency": "USD"}});
        let allow = check(&app, refund(40.0)).await;
        assert_eq!((allow["decision"].as_str(), allow["reasons"].as_array().unwrap().len()), (Some("allow"), 0));
        assert!(allow["trace_id"].as_str().unwrap().starts_with("trc_"));
        assert!(allow.get("challenge").is_none());
        let challenge = check(&app, refund(500.0)).await;
        assert_eq!(challenge["decision"], "challenge");
        assert_eq!(challenge["reason_codes"], json!(["amount_requires_approval"]));
        assert!(challenge["challenge_id"].as_str().unwrap().starts_with("pch_"));
        assert_eq!(challenge["challenge"]["type"], "approval_link");
        assert!(challenge["challenge"]["url"].as_str().unwrap().contains("/v1/approval-links/apr_"));
        assert_eq!(challenge["challenge"]["expires_in"], 300);
        let deny = check(&app, refund(5000.0)).await;
        assert_eq!((deny["decision"].as_str(), deny["reason_codes"].clone()), (Some("deny"), json!(["amount_over_limit"])));
        assert_eq!(deny["determining_policies"], json!(["finance-refunds/refunds"]));
        let guard = check(&app, json!({"agent_id": agent.id, "action": "wire_transfer"})).await;
        assert_eq!((guard["decision"].as_str(), guard["determining_policies"].clone()), (Some("deny"), json!(["global_guardrails"])));

        let events = audit_events(&app, &format!("trace_id={}", challenge["trace_id"].as_str().unwrap())).await;
        assert_eq!(events.len(), 1);
        assert_eq!((events[0]["event_type"].as_str(), events[0]["decision"].as_str(), events[0]["action"].as_str()), (Some("decision.check"), Some("challenge"), Some("refund")));
        assert_eq!(events[0]["policy_hash"], challenge["policy_hash"]);
        assert_eq!(events[0]["details"]["challenge_id"], challenge["challenge_id"]);
        assert!(!events[0].to_string().contains("apr_"), "no approval token in the audit trail");
        assert_eq!(audit_events(&app, "event_type=decision.check&decision=deny").await.len(), 2);

        // Checks like earlier ones (the server keeps their decisions per amount interval) are
        // still each recorded, and each challenge gets a challenge of its own.
        let again = check(&app, refund(45.5)).await;
        assert_eq!(again["decision"], "allow");
        assert_ne!(again["trace_id"], allow["trace_id"]);
        assert_eq!(audit_events(&app, "event_type=decision.check&decision=allow").await.len(), 2);
        let second = check(&app, refund(600.0)).await;
        assert_eq!(second["decision"], "challenge");
        assert_ne!(second["challenge_id"], challenge["challenge_id"]);
        assert_eq!(audit_events(&app, "event_type=decision.check&decision=challenge").await.len(), 2);

        // Status rules: pending is challenged, suspended and revoked are denied.
        let pending = TestAgent::new().register(&app, Some(&app.key), "new").await;
        let p = check(&app, json!({"agent_id": pending, "action": "read"})).await;
        assert_eq!((p["decision"].as_str(), p["reason_codes"].clone()), (Some("challenge"), json!(["agent_pending"])));
        app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await;
        let s = check(&app, json!({"agent_id": agent.id, "action": "read"})).await;
        assert_eq!((s["decision"].as_str(), s["reason_codes"].clone()), (Some("deny"), json!(["agent_suspended"])));
        app.post(&format!("/v1/agents/{}/revoke", agent.id), &json!({})).await;
        let r = check(&app, json!({"agent_id": agent.id, "action": "read"})).await;
        assert_eq!(r["reason_codes"], json!(["agent_revoked"]));
    }
}

both_engines! {
    async fn check_refuses_bad_input_unknown_agents_and_policies(app) {
        let agent = app.active_agent("a").await;
        assert_error(app.post("/v1/check", &json!({"action": "read"})).await, 400, "missing_agent_id").await;
        assert_error(app.post("/v1/check", &json!({"agent_id": agent.id})).await, 400, "missing_action").await;
        assert_error(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "x", "context": [1]})).await, 400, "invalid_context").await;
        assert_error(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "send_email", "email": {"to": 5}})).await, 400, "invalid_email").await;
        assert_error(app.post("/v1/check", &json!({"agent_id": "agt_0123456789abcdef0123456789abcdef", "action": "x"})).await, 404, "unknown_agent").await;
        assert_error(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "x", "policy_id": "pol_missing"})).await, 404, "unknown_policy").await;
        assert_error(app.client.post(app.url("/v1/check")).json(&json!({})).send().await.unwrap(), 401, "missing_api_key").await;
        // Another workspace sees neither the agent nor the policy.
        let (_, b) = app.other_workspace().await;
        assert_error(app.post_as(&b, "/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await, 404, "unknown_agent").await;
        let owner = owner(&app).await;
        owner.post("/v1/policies/sync", &json!({"policy_id": "pol_a_only", "spec": {}})).await;
        let b_agent = TestAgent::new();
        let b_id = b_agent.register(&app, Some(&b), "b").await;
        assert_error(app.post_as(&b, "/v1/check", &json!({"agent_id": b_id, "action": "read", "policy_id": "pol_a_only"})).await, 404, "unknown_policy").await;
    }
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_serves_a_new_policy_version_soon_after_an_apply() {
    use crate::replicas::start_replica;
    let app = TestApp::spawn(Engine::Postgres).await;
    let agent = app.active_agent("fin").await;
    let (mut other, other_base) = start_replica(&app.db_url, &app.key).await;
    let client = reqwest::Client::new();
    let check_other = || {
        client
            .post(format!("{other_base}/v1/check"))
            .header("X-Service-Api-Key", &app.key)
            .json(&json!({"agent_id": agent.id, "action": "read"}))
            .send()
    };
    let (_, first) = status_json(check_other().await.unwrap()).await;
    assert_eq!(first["policy_version"], 0);
    let owner = owner(&app).await;
    let (_, applied) = status_json(
        owner
            .post("/v1/policies/sync", &json!({"spec": spec(&agent.id, 1.0)}))
            .await,
    )
    .await;
    // Bounded wait: the other process hears NOTIFY (or polls) and reloads.
    let mut seen = Value::Null;
    for _ in 0..100 {
        seen = status_json(check_other().await.unwrap()).await.1;
        if seen["policy_version"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        (seen["policy_version"].as_i64(), seen["decision"].as_str()),
        (Some(1), Some("allow")),
        "{seen}"
    );
    assert_eq!(seen["policy_hash"], applied["policy_hash"]);
    other.kill().await.ok();
    app.stop().await;
}

async fn acp_sync(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
        .arg("sync")
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_cli_has_exit_codes_for_ci() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let agent = app.active_agent("fin").await;
    let owner = owner(&app).await;
    let (_, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
    let token = pat["token"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    let yaml = format!(
        "reusable_policy_blocks:\n  ops: {{ actions: {{ allow: [read] }} }}\nagent_groups:\n  - {{ name: team, members: [{}] }}\nbindings:\n  - {{ group: team, blocks: [ops] }}\n",
        agent.id
    );
    std::fs::write(&file, yaml).unwrap();
    let file = file.to_str().unwrap();
    let base = [file, "--server", &app.base, "--token", &token];

    let (code, out, _) = acp_sync(&base).await;
    assert_eq!(code, 2, "a dry run that finds changes: {out}");
    // In the spec's terms; the compiled Cedar only with `--cedar`.
    assert!(
        out.contains("+ blocks: ops") && out.contains("+    actions: {allow: [read]}"),
        "{out}"
    );
    assert!(!out.contains("+@source(\"team:ops/ops\")"), "{out}");
    let (code, out, _) = acp_sync(&[&base[..], &["--cedar"]].concat()).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("+@source(\"team:ops/ops\")"), "{out}");
    let (code, out, err) =
        acp_sync(&[&base[..], &["--apply", "--idempotency-key", "ci-1"]].concat()).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied: version 1"), "{out}");
    let (code, out, _) = acp_sync(&base).await;
    assert_eq!(
        (code, out.contains("dry run: no change")),
        (0, true),
        "{out}"
    );
    let (code, _, err) =
        acp_sync(&[&base[..], &["--apply", "--expect-hash", "sha256:stale"]].concat()).await;
    assert_eq!(code, 3, "a conflict: {err}");
    assert!(err.contains("sync_conflict"));
    let (code, out, _) = acp_sync(&[&base[..], &["--output", "json"]].concat()).await;
    let parsed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (code, parsed["response"]["diff"]["changed"].as_bool()),
        (0, Some(false))
    );
    // A credential that is not valid is exit 4, as for every command.
    let (code, _, err) = acp_sync(&[file, "--server", &app.base, "--token", "svc_pat_wrong"]).await;
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("(code: invalid_token)"), "{err}");
    // The server's spec errors are shown where they are written in the file.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "reusable_policy_blocks:\n  ops: { actions: { allow: [read] } }\nbindings:\n  - { group: team, blocks: [nope] }\n").unwrap();
    let bad = bad.to_str().unwrap();
    let (code, _, err) = acp_sync(&[bad, "--server", &app.base, "--token", &token]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("invalid_spec") && err.contains(&format!("--> {bad}:4:")),
        "{err}"
    );
    let check = check(&app, json!({"agent_id": agent.id, "action": "read"})).await;
    assert_eq!(check["decision"], "allow");
    app.stop().await;
}
