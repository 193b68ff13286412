//! Batch decisions (`/v1/check/batch`), the OpenID AuthZEN Authorization API 1.0 over them,
//! and the impact of a policy change replayed from recorded checks (`diff.impact`).

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

/// `read`/`can_read` allowed but document 2 denied, `can_edit` not allowed; refunds allowed up
/// to `allow_up_to` USD, challenged up to 1,000, denied above; `drop_db` denied.
fn spec(agent_id: &str, allow_up_to: f64) -> Value {
    json!({
        "reusable_policy_blocks": {
            "docs": {
                "actions": {"allow": ["read", "can_read"], "deny": ["drop_db"]},
                "cedar": [{"name": "restricted", "when": "context.fields.contains(\"resource_id=2\")",
                           "outcome": "deny", "reason_code": "document_restricted", "reason": "document 2 is restricted"}]
            },
            "refunds": {"amount": {"limits": {"USD": {"allow_up_to": allow_up_to, "challenge_up_to": 1000}}}}
        },
        "agent_groups": [{"name": "team", "members": [agent_id]}],
        "bindings": [
            {"name": "team-docs", "group": "team", "blocks": ["docs"]},
            {"name": "team-refunds", "group": "team", "blocks": ["refunds"], "actions": ["refund"]}
        ]
    })
}

async fn owner(app: &TestApp) -> Browser {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.login("owner@example.com").await
}

async fn apply(app: &TestApp, owner: &Browser, spec: &Value) {
    let (s, out) = status_json(
        owner
            .post("/v1/policies/sync", &json!({"spec": spec}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{out}");
    let _ = app;
}

/// The fields of a decision that do not vary between two checks of one request.
fn stable(d: &Value) -> Value {
    json!([
        d["ok"],
        d["decision"],
        d["reasons"],
        d["reason_codes"],
        d["policy_id"],
        d["policy_hash"],
        d["policy_version"],
        d["determining_policies"],
        d.get("challenge").is_some()
    ])
}

/// The `seq` of each decision event of `trace_ids` (commit order; on Postgres the writing
/// transaction's id).
async fn sequences(app: &TestApp, trace_ids: &[String]) -> Vec<i64> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let url = if app.db_url.starts_with("postgres") {
        app.db_url.clone()
    } else {
        format!(
            "sqlite://{}",
            app.db_url
                .trim_start_matches("sqlite:")
                .trim_start_matches("//")
        )
    };
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    let mut out = Vec::new();
    for trace in trace_ids {
        let seq: i64 = sqlx::query_scalar(
            "SELECT seq FROM audit_events WHERE trace_id = $1 AND event_type = 'decision.check'",
        )
        .bind(trace)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        out.push(seq);
    }
    out
}

both_engines! {
    async fn a_batch_answers_each_check_as_a_single_check_would(app) {
        let agent = app.active_agent("batcher").await;
        let owner = owner(&app).await;
        apply(&app, &owner, &spec(&agent.id, 100.0)).await;
        let checks = vec![
            json!({"agent_id": agent.id, "action": "read"}),
            json!({"agent_id": agent.id, "action": "drop_db"}),
            json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 500, "currency": "USD"}}),
            json!({"agent_id": "agt_nobody", "action": "read"}),
            json!({"agent_id": agent.id, "action": " "}),
            json!({"agent_id": agent.id, "action": "refund", "context": {"amount": 50, "currency": "USD"}}),
            json!({"agent_id": agent.id, "action": "read", "policy_id": "pol_missing"}),
        ];
        let (s, batch) = status_json(app.post("/v1/check/batch", &json!({"checks": checks})).await).await;
        assert_eq!(s, 200, "{batch}");
        assert_eq!(batch["ok"], true);
        let results = batch["results"].as_array().unwrap();
        assert_eq!(results.len(), checks.len());
        let mut traces = Vec::new();
        for (check, result) in checks.iter().zip(results) {
            let (status, single) = status_json(app.post("/v1/check", check).await).await;
            if status == 200 {
                assert_eq!(stable(result), stable(&single), "{check}");
                let trace = result["trace_id"].as_str().unwrap().to_owned();
                assert_ne!(result["trace_id"], single["trace_id"]);
                // Its own audit event.
                let events = audit_events(&app, &format!("trace_id={trace}")).await;
                assert_eq!(events.len(), 1, "{trace}");
                assert_eq!(events[0]["decision"], result["decision"]);
                traces.push(trace);
            } else {
                assert_eq!((result["ok"].as_bool(), result["status"].as_u64()), (Some(false), Some(u64::from(status.as_u16()))), "{check}");
                assert_eq!(result["error"], single["error"], "{check}");
                assert_eq!(result["message"], single["message"], "{check}");
            }
        }
        assert_eq!(results.iter().map(|r| r["decision"].as_str().unwrap_or("error")).collect::<Vec<_>>(),
                   ["allow", "deny", "challenge", "error", "error", "allow", "error"]);
        assert_eq!(results[3]["error"], "unknown_agent");
        assert_eq!(results[4]["error"], "missing_action");
        assert_eq!(results[6]["error"], "unknown_policy");
        // The challenge exists, with its approval link.
        let challenge_id = results[2]["challenge_id"].as_str().unwrap();
        assert!(results[2]["challenge"]["url"].as_str().unwrap().contains("/v1/approval-links/apr_"));
        let (s, status) = status_json(app.get(&format!("/v1/policy-challenges/{challenge_id}")).await).await;
        assert_eq!((s.as_u16(), status["challenge"]["status"].as_str()), (200, Some("pending")), "{status}");
        // One commit: on Postgres one transaction id for every decision of the batch, on
        // SQLite (one writer) consecutive rows.
        let seqs = sequences(&app, &traces).await;
        if app.db_url.starts_with("postgres") {
            assert!(seqs.iter().all(|s| *s == seqs[0]), "{seqs:?}");
        } else {
            assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        }

        assert_error(app.post("/v1/check/batch", &json!({"checks": []})).await, 400, "missing_checks").await;
        let many: Vec<Value> = (0..101).map(|_| json!({"agent_id": agent.id, "action": "read"})).collect();
        assert_error(app.post("/v1/check/batch", &json!({"checks": many})).await, 400, "invalid_checks").await;
        assert_error(app.post("/v1/check/batch", &json!({})).await, 400, "missing_checks").await;
        let hundred: Vec<Value> = (0..100).map(|_| json!({"agent_id": agent.id, "action": "read"})).collect();
        let (s, full) = status_json(app.post("/v1/check/batch", &json!({"checks": hundred})).await).await;
        assert_eq!(s, 200);
        assert!(full["results"].as_array().unwrap().iter().all(|r| r["decision"] == "allow"));
        let res = app.client.post(app.url("/v1/check/batch")).json(&json!({"checks": []})).send().await.unwrap();
        assert_eq!(res.status(), 401);
    }
}

/// The AuthZEN 1.0 specification's examples, with `alice@example.com` standing for an agent.
mod authzen_examples {
    use serde_json::{json, Value};

    /// Replaces the spec's subject id by the agent's.
    pub fn as_agent(mut request: Value, agent_id: &str) -> Value {
        fn walk(v: &mut Value, agent_id: &str) {
            match v {
                Value::Object(o) => {
                    if o.get("type").and_then(Value::as_str) == Some("user")
                        && o.get("id") == Some(&json!("alice@example.com"))
                    {
                        o.insert("id".into(), json!(agent_id));
                    }
                    for value in o.values_mut() {
                        walk(value, agent_id);
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(|x| walk(x, agent_id)),
                _ => {}
            }
        }
        walk(&mut request, agent_id);
        request
    }

    /// Section 6.1 (the Access Evaluation request).
    pub fn evaluation() -> Value {
        json!({
          "subject": {"type": "user", "id": "alice@example.com"},
          "resource": {"type": "account", "id": "123"},
          "action": {"name": "can_read", "properties": {"method": "GET"}},
          "context": {"time": "1985-10-26T01:22-07:00"}
        })
    }

    /// Section 7.1: three requests with no default values.
    pub fn boxcar_no_defaults() -> Value {
        let one = |doc: &str| {
            json!({
                "subject": {"type": "user", "id": "alice@example.com"},
                "action": {"name": "can_read"},
                "resource": {"type": "document", "id": doc},
                "context": {"time": "2024-05-31T15:22-07:00"}
            })
        };
        json!({"evaluations": [one("boxcarring.md"), one("subject-search.md"), one("resource-search.md")]})
    }

    /// Section 7.1.1: a single subject and context as defaults.
    pub fn boxcar_defaults() -> Value {
        json!({
          "subject": {"type": "user", "id": "alice@example.com"},
          "context": {"time": "2024-05-31T15:22-07:00"},
          "evaluations": [
            {"action": {"name": "can_read"}, "resource": {"type": "document", "id": "boxcarring.md"}},
            {"action": {"name": "can_read"}, "resource": {"type": "document", "id": "subject-search.md"}},
            {"action": {"name": "can_read"}, "resource": {"type": "document", "id": "resource-search.md"}}
          ]
        })
    }

    /// Section 7.1.1: a default action, overridden by the third request.
    pub fn boxcar_overridden_action() -> Value {
        json!({
          "subject": {"type": "user", "id": "alice@example.com"},
          "context": {"time": "2024-05-31T15:22-07:00"},
          "action": {"name": "can_read"},
          "evaluations": [
            {"resource": {"type": "document", "id": "boxcarring.md"}},
            {"resource": {"type": "document", "id": "subject-search.md"}},
            {"action": {"name": "can_edit"}, "resource": {"type": "document", "id": "resource-search.md"}}
          ]
        })
    }

    /// Section 7.1.2.1: `read` of documents 1, 2 and 3 under one semantic.
    pub fn three_documents(semantic: &str) -> Value {
        json!({
          "subject": {"type": "user", "id": "alice@example.com"},
          "action": {"name": "read"},
          "options": {"evaluations_semantic": semantic},
          "evaluations": [
            {"resource": {"type": "document", "id": "1"}},
            {"resource": {"type": "document", "id": "2"}},
            {"resource": {"type": "document", "id": "3"}}
          ]
        })
    }
}

fn decisions(answer: &Value) -> Vec<bool> {
    answer["evaluations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["decision"].as_bool().unwrap())
        .collect()
}

both_engines! {
    async fn authzen_answers_the_specification_examples(app) {
        use authzen_examples::*;
        let agent = app.active_agent("pep").await;
        let owner = owner(&app).await;
        apply(&app, &owner, &spec(&agent.id, 100.0)).await;

        // Discovery.
        let (s, config) = status_json(app.client.get(app.url("/.well-known/authzen-configuration")).send().await.unwrap()).await;
        assert_eq!(s, 200);
        let pdp = config["policy_decision_point"].as_str().unwrap().to_owned();
        assert_eq!(config["access_evaluation_endpoint"], format!("{pdp}/access/v1/evaluation"));
        assert_eq!(config["access_evaluations_endpoint"], format!("{pdp}/access/v1/evaluations"));

        // 6.1: the minimal decision, `{"decision": true}` exactly; the request id comes back.
        let res = app.client.post(app.url("/access/v1/evaluation")).header("X-Service-Api-Key", &app.key)
            .header("X-Request-ID", "bfe9eb29-ab87-4ca3-be83-a1d5d8305716")
            .json(&as_agent(evaluation(), &agent.id)).send().await.unwrap();
        assert_eq!(res.headers()["x-request-id"], "bfe9eb29-ab87-4ca3-be83-a1d5d8305716");
        let (s, decision) = status_json(res).await;
        assert_eq!((s.as_u16(), decision), (200, json!({"decision": true})));
        // Its decision event: the action, and the resource and action properties as context.
        let events = audit_events(&app, "action=can_read").await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["decision"], "allow");

        // 7.1 and 7.1.1: boxcarred requests, with and without defaults.
        for (request, expected) in [
            (boxcar_no_defaults(), vec![true, true, true]),
            (boxcar_defaults(), vec![true, true, true]),
            (boxcar_overridden_action(), vec![true, true, false]),
        ] {
            let (s, answer) = status_json(app.post("/access/v1/evaluations", &as_agent(request.clone(), &agent.id)).await).await;
            assert_eq!(s, 200, "{answer}");
            assert_eq!(decisions(&answer), expected, "{request}");
        }

        // 7.1.2.1: the three semantics give the three responses of the specification.
        let before = audit_events(&app, "action=read").await.len();
        let (_, all) = status_json(app.post("/access/v1/evaluations", &as_agent(three_documents("execute_all"), &agent.id)).await).await;
        assert_eq!(decisions(&all), [true, false, true], "{all}");
        assert_eq!(all["evaluations"][0], json!({"decision": true}));
        assert_eq!(all["evaluations"][1]["context"]["reason"], "document_restricted");
        let (_, deny_first) = status_json(app.post("/access/v1/evaluations", &as_agent(three_documents("deny_on_first_deny"), &agent.id)).await).await;
        assert_eq!(decisions(&deny_first), [true, false], "{deny_first}");
        let (_, permit_first) = status_json(app.post("/access/v1/evaluations", &as_agent(three_documents("permit_on_first_permit"), &agent.id)).await).await;
        assert_eq!(permit_first, json!({"evaluations": [{"decision": true}]}));
        // Only what was evaluated is recorded: 3 + 2 + 1 decisions.
        assert_eq!(audit_events(&app, "action=read").await.len() - before, 6);

        // Without `evaluations` the request is one evaluation.
        let (s, one) = status_json(app.post("/access/v1/evaluations", &as_agent(evaluation(), &agent.id)).await).await;
        assert_eq!((s.as_u16(), one), (200, json!({"decision": true})));

        // A challenge is a denial that carries the challenge and its approval link.
        let refund = json!({"subject": {"type": "agent", "id": agent.id}, "action": {"name": "refund"},
                            "resource": {"type": "payment", "id": "p-1", "properties": {"amount": 500, "currency": "USD"}}});
        let (_, challenged) = status_json(app.post("/access/v1/evaluation", &refund).await).await;
        assert_eq!(challenged["decision"], false, "{challenged}");
        let context = &challenged["context"];
        assert_eq!((context["decision"].as_str(), context["reason"].as_str()), (Some("challenge"), Some("challenge")));
        assert!(context["challenge_id"].as_str().unwrap().starts_with("pch_"));
        assert!(context["challenge"]["url"].as_str().unwrap().contains("/v1/approval-links/apr_"));
        assert!(context["trace_id"].as_str().unwrap().starts_with("trc_"));

        // The specification's own subject is no agent: a denial carrying the error.
        let (s, unknown) = status_json(app.post("/access/v1/evaluation", &evaluation()).await).await;
        assert_eq!(s, 200);
        assert_eq!(unknown["decision"], false);
        assert_eq!(unknown["context"]["error"]["status"], 404);
        assert_eq!(unknown["context"]["error"]["code"], "unknown_agent");
        // In a list, an undecidable evaluation is a denial in its place.
        let mut mixed = as_agent(boxcar_defaults(), &agent.id);
        mixed["evaluations"][1]["subject"] = json!({"type": "agent", "id": "agt_nobody"});
        let (_, answer) = status_json(app.post("/access/v1/evaluations", &mixed).await).await;
        assert_eq!(decisions(&answer), [true, false, true]);
        assert_eq!(answer["evaluations"][1]["context"]["error"]["code"], "unknown_agent");

        // Payload errors are 400; the API key is required.
        let mut no_subject = as_agent(boxcar_defaults(), &agent.id);
        no_subject.as_object_mut().unwrap().remove("subject");
        assert_error(app.post("/access/v1/evaluations", &no_subject).await, 400, "missing_subject").await;
        assert_error(app.post("/access/v1/evaluation", &json!({"action": {"name": "read"}})).await, 400, "missing_subject").await;
        let bad_semantic = json!({"options": {"evaluations_semantic": "sometimes"}, "evaluations": []});
        assert_error(app.post("/access/v1/evaluations", &bad_semantic).await, 400, "invalid_evaluations_semantic").await;
        let mut clash = as_agent(evaluation(), &agent.id);
        clash["context"]["method"] = json!("POST");
        assert_error(app.post("/access/v1/evaluation", &clash).await, 400, "invalid_context").await;
        let res = app.client.post(app.url("/access/v1/evaluation")).json(&as_agent(evaluation(), &agent.id)).send().await.unwrap();
        assert_eq!(res.status(), 401);
        // Another policy by query.
        let (_, other) = status_json(app.post("/access/v1/evaluation?policy_id=pol_other", &as_agent(evaluation(), &agent.id)).await).await;
        assert_eq!(other["context"]["error"]["code"], "unknown_policy");
    }
}

both_engines! {
    async fn a_dry_run_replays_recorded_checks_into_its_impact(app) {
        let agent = app.active_agent("refunder").await;
        let owner = owner(&app).await;
        apply(&app, &owner, &spec(&agent.id, 100.0)).await;
        let refund = |amount: f64| json!({"agent_id": agent.id, "action": "refund", "context": {"amount": amount, "currency": "USD"}});
        let mut checks = vec![refund(50.0), refund(500.0), refund(700.0), refund(5000.0)];
        checks.extend((0..6).map(|_| json!({"agent_id": agent.id, "action": "read"})));
        let (_, batch) = status_json(app.post("/v1/check/batch", &json!({"checks": checks})).await).await;
        let outcomes: Vec<&str> = batch["results"].as_array().unwrap().iter().map(|r| r["decision"].as_str().unwrap()).collect();
        assert_eq!(outcomes[..4], ["allow", "challenge", "challenge", "deny"]);
        // Each decision event records what its evaluation read (never a subject or body).
        let events = audit_events(&app, "event_type=decision.check&action=refund").await;
        let input = &events[0]["details"]["input"];
        assert_eq!(input["agent"]["status"], "active");
        assert_eq!(input["context"]["currency"], "USD");

        // Raising the allowed amount to 600: the 500 refund would be allowed.
        let dry = |spec: Value, extra: Value| {
            let owner = owner.clone();
            async move {
                let mut body = json!({"dry_run": true, "spec": spec});
                for (k, v) in extra.as_object().unwrap() {
                    body[k] = v.clone();
                }
                let (s, out) = status_json(owner.post("/v1/policies/sync", &body).await).await;
                assert_eq!(s, 200, "{out}");
                out
            }
        };
        let out = dry(spec(&agent.id, 600.0), json!({})).await;
        let impact = &out["diff"]["impact"];
        assert_eq!((impact["requested"].as_u64(), impact["read"].as_u64(), impact["replayed"].as_u64(), impact["skipped"].as_u64()),
                   (Some(10_000), Some(10), Some(10), Some(0)), "{impact}");
        assert_eq!((impact["changed"].as_u64(), impact["more_permissive"].as_u64(), impact["less_permissive"].as_u64()), (Some(1), Some(1), Some(0)));
        let kind = &impact["kinds"][0];
        assert_eq!((kind["kind"].as_str(), kind["count"].as_u64()), (Some("challenge_to_allow"), Some(1)));
        assert_eq!(kind["examples"][0]["trace_id"], batch["results"][1]["trace_id"]);
        assert_eq!(kind["examples"][0]["action"], "refund");

        // The semantic diff: refunds over 100 and up to 600 USD go from challenge to allow.
        let semantic = &out["diff"]["semantic"];
        assert_eq!((semantic["more_permissive_total"].as_u64(), semantic["less_permissive_total"].as_u64()), (Some(1), Some(0)), "{semantic}");
        let cell = &semantic["more_permissive"][0];
        assert_eq!((cell["group"].as_str(), cell["action"].as_str(), cell["condition"].as_str(), cell["before"].as_str(), cell["after"].as_str()),
                   (Some("team"), Some("refund"), Some("amount.USD in (100, 600]"), Some("challenge"), Some("allow")), "{cell}");
        assert_eq!(cell["example"]["context"]["currency"], "USD");
        // The raw Cedar rule is listed as not analysed.
        assert!(semantic["not_analysed"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("restricted")), "{semantic}");

        // No longer allowing reads: six allow→deny, less permissive.
        let mut no_reads = spec(&agent.id, 100.0);
        no_reads["reusable_policy_blocks"]["docs"]["actions"]["allow"] = json!(["can_read"]);
        let out = dry(no_reads.clone(), json!({})).await;
        let impact = &out["diff"]["impact"];
        assert_eq!((impact["changed"].as_u64(), impact["more_permissive"].as_u64(), impact["less_permissive"].as_u64()), (Some(6), Some(0), Some(6)), "{impact}");
        assert_eq!(impact["kinds"][0]["kind"], "allow_to_deny");
        assert_eq!(impact["kinds"][0]["examples"].as_array().unwrap().len(), 6);
        // Only the newest N: the six reads are the newest.
        let out = dry(no_reads, json!({"impact_checks": 2})).await;
        assert_eq!((out["diff"]["impact"]["read"].as_u64(), out["diff"]["impact"]["changed"].as_u64()), (Some(2), Some(2)));
        // 0 skips the replay; an apply has none.
        let out = dry(spec(&agent.id, 600.0), json!({"impact_checks": 0})).await;
        assert!(out["diff"].get("impact").is_none(), "{out}");
        let body = json!({"dry_run": true, "spec": spec(&agent.id, 600.0), "impact_checks": -1});
        assert_error(owner.post("/v1/policies/sync", &body).await, 400, "invalid_impact_checks").await;
        let body = json!({"dry_run": true, "spec": spec(&agent.id, 600.0), "impact_checks": 100_001});
        assert_error(owner.post("/v1/policies/sync", &body).await, 400, "invalid_impact_checks").await;

        // An input over the cap is not recorded, and its event is skipped.
        let big = "x".repeat(20_000);
        let (s, _) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "read", "context": {"note": big}})).await).await;
        assert_eq!(s, 200);
        let events = audit_events(&app, "event_type=decision.check&action=read&limit=1").await;
        assert_eq!(events[0]["details"]["input"]["omitted"], "too_large");
        let out = dry(spec(&agent.id, 600.0), json!({})).await;
        assert_eq!((out["diff"]["impact"]["read"].as_u64(), out["diff"]["impact"]["skipped"].as_u64()), (Some(11), Some(1)));

        // The CLI gates CI on it: exit 7 when the impact matches, 2 when it does not.
        let (_, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
        let token = pat["token"].as_str().unwrap().to_owned();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spec.json");
        let sync = |spec: Value, flags: Vec<&'static str>| {
            let (file, token, base) = (file.clone(), token.clone(), app.base.clone());
            async move {
                std::fs::write(&file, spec.to_string()).unwrap();
                let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
                    .arg("sync").arg(&file).args(flags)
                    .env("ACP_SERVER", base).env("ACP_TOKEN", token)
                    .env_remove("ACP_DATABASE_URL").env_remove("ACP_CREDENTIALS")
                    .output().await.unwrap();
                (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
            }
        };
        let (code, out) = sync(spec(&agent.id, 600.0), vec!["--dry-run", "--fail-on-impact", "more-permissive"]).await;
        assert_eq!(code, Some(7), "{out}");
        assert!(out.contains("challenge -> allow: 1"), "{out}");
        let (code, out) = sync(spec(&agent.id, 10.0), vec!["--dry-run", "--fail-on-impact", "more-permissive"]).await;
        assert_eq!(code, Some(2), "less permissive only: {out}");
        let (code, out) = sync(spec(&agent.id, 10.0), vec!["--dry-run", "--fail-on-impact", "any"]).await;
        assert_eq!(code, Some(7), "{out}");
        let (code, out) = sync(spec(&agent.id, 600.0), vec!["--dry-run", "--fail-on", "more-permissive", "--impact-checks", "0"]).await;
        assert_eq!(code, Some(7), "{out}");
        assert!(out.contains("+ team refund when amount.USD in (100, 600]: challenge -> allow"), "{out}");
        let (code, out) = sync(spec(&agent.id, 10.0), vec!["--dry-run", "--fail-on", "more-permissive"]).await;
        assert_eq!(code, Some(2), "{out}");
        assert!(out.contains("- team refund when amount.USD in (10, 100]: allow -> challenge"), "{out}");
        let (code, out) = sync(spec(&agent.id, 600.0), vec!["--apply", "--fail-on-impact", "any"]).await;
        assert_eq!(code, Some(1), "a gate is for dry runs: {out}");
    }
}

/// A top-level context of `fields` strings of `bytes` each, and `count` evaluations of `read`
/// of documents 0, 1, ... that take it (and the subject and action) from the defaults.
fn evaluations_with_context(agent_id: &str, fields: usize, bytes: usize, count: usize) -> Value {
    let context: serde_json::Map<String, Value> = (0..fields)
        .map(|i| (format!("pad{i}"), json!("x".repeat(bytes))))
        .collect();
    let evaluations: Vec<Value> = (0..count)
        .map(|i| json!({"resource": {"type": "document", "id": format!("d{i}")}}))
        .collect();
    json!({
        "subject": {"type": "agent", "id": agent_id},
        "action": {"name": "read"},
        "context": context,
        "evaluations": evaluations
    })
}

both_engines! {
    async fn authzen_evaluations_share_the_top_level_context_within_a_bound(app) {
        let agent = app.active_agent("pep-shared").await;
        let owner = owner(&app).await;
        let mut spec = spec(&agent.id, 100.0);
        spec["reusable_policy_blocks"]["docs"]["cedar"].as_array_mut().unwrap().push(json!({
            "name": "blocked-tier", "when": "context.fields.contains(\"tier=blocked\")",
            "outcome": "deny", "reason_code": "tier_blocked", "reason": "this tier is blocked"}));
        apply(&app, &owner, &spec).await;

        // Every evaluation reads the top-level context's fields; its own override them.
        let request = json!({
            "subject": {"type": "agent", "id": agent.id},
            "action": {"name": "read"},
            "context": {"tier": "blocked", "region": "eu"},
            "evaluations": [
                {"resource": {"type": "document", "id": "1"}},
                {"resource": {"type": "document", "id": "1"}, "context": {"tier": "open"}},
                {"resource": {"type": "document", "id": "2"}, "context": {"tier": "open"}}
            ]
        });
        let (s, answer) = status_json(app.post("/access/v1/evaluations", &request).await).await;
        assert_eq!(s, 200, "{answer}");
        assert_eq!(decisions(&answer), [false, true, false], "{answer}");
        assert_eq!(answer["evaluations"][0]["context"]["reason"], "tier_blocked");
        assert_eq!(answer["evaluations"][2]["context"]["reason"], "document_restricted");
        // The decision event records the context the check was decided on, merged.
        let trace = answer["evaluations"][0]["context"]["trace_id"].as_str().unwrap().to_owned();
        let events = audit_events(&app, &format!("trace_id={trace}")).await;
        assert_eq!(events.len(), 1, "{events:?}");
        let recorded = &events[0]["details"]["input"]["context"];
        assert_eq!(recorded["tier"], "blocked", "{recorded}");
        assert_eq!(recorded["region"], "eu", "{recorded}");
        assert_eq!(recorded["resource_id"], "1", "{recorded}");
        // A field of a resource that the top-level context names too: each evaluation is
        // answered undecided with `invalid_context`, as before.
        let mut clash = request.clone();
        clash["context"]["resource_id"] = json!("9");
        let (s, clashed) = status_json(app.post("/access/v1/evaluations", &clash).await).await;
        assert_eq!(s, 200, "{clashed}");
        assert_eq!(decisions(&clashed), [false, false, false]);
        assert_eq!(clashed["evaluations"][2]["context"]["error"]["code"], "invalid_context");

        // 100 evaluations of a 9 KiB top-level context: under the bound, all decided.
        let (s, under) = status_json(app.post("/access/v1/evaluations", &evaluations_with_context(&agent.id, 9, 1000, 100)).await).await;
        assert_eq!(s, 200, "{under}");
        assert_eq!(decisions(&under), vec![true; 100]);
        // With a 12 KiB one they come to over 1 MiB merged: refused whole, nothing decided.
        let before = audit_events(&app, "action=read&limit=200").await.len();
        let over = app.post("/access/v1/evaluations", &evaluations_with_context(&agent.id, 12, 1000, 100)).await;
        let body = assert_error(over, 413, "evaluations_too_large").await;
        assert!(body["message"].as_str().unwrap().contains("1048576"), "{body}");
        assert_eq!(audit_events(&app, "action=read&limit=200").await.len(), before);
    }
}

/// `Vm...` of `/proc/PID/status` (`VmRSS`, `VmHWM`), bytes.
fn process_memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    kib * 1024
}

both_engines! {
    async fn concurrent_large_evaluation_requests_stay_within_a_memory_bound(app) {
        // A server process of its own, so that its memory is this test's alone.
        let (mut server, base) = crate::replicas::start_replica(&app.db_url, &app.key).await;
        let pid = server.id().expect("running");
        let replica = app.at(base);
        let agent = app.active_agent("pep-memory").await;
        let (s, warm) = status_json(replica.post("/access/v1/evaluations", &evaluations_with_context(&agent.id, 1, 10, 100)).await).await;
        assert_eq!(s, 200, "{warm}");
        let before = process_memory(pid, "VmHWM");

        // 16 requests at once, each a 939 KiB body: a top-level context of 900 strings of a
        // KiB, taken by 100 evaluations (close to 94 MB once merged into each).
        let body = serde_json::to_vec(&evaluations_with_context(&agent.id, 900, 1024, 100)).unwrap();
        assert!(body.len() < 1024 * 1024 && body.len() > 900 * 1024, "{}", body.len());
        let requests = (0..16).map(|_| {
            replica.client.post(replica.url("/access/v1/evaluations"))
                .header("X-Service-Api-Key", &replica.key)
                .header("Content-Type", "application/json")
                .body(body.clone())
                .send()
        });
        let answers = futures::future::join_all(requests).await;
        let peak = process_memory(pid, "VmHWM");
        let grown = peak.saturating_sub(before);
        assert!(
            grown < 256 * 1024 * 1024,
            "the server's peak resident memory grew by {} MiB (from {} MiB)",
            grown / (1024 * 1024),
            before / (1024 * 1024)
        );
        for answer in answers {
            assert_error(answer.unwrap(), 413, "evaluations_too_large").await;
        }
        crate::replicas::sigterm(&mut server).await;
    }
}
