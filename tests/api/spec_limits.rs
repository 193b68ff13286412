//! Specs that cannot take the server down, and spec errors that are never silent: raw Cedar
//! nested too deep or too long answers 422 `invalid_spec` (and the server keeps serving), long
//! action lists compile, duplicate keys are errors naming both places, unknown keys suggest the
//! nearest one, type errors speak the spec's words, raw Cedar errors quote the user's text;
//! the same through `acp policy`; and the JSON Schema accepts every shipped and documented spec
//! and has exactly the keys of the Rust types.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

async fn owner(app: &TestApp) -> Browser {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.login("owner@example.com").await
}

fn raw_rule(when: &str) -> Value {
    json!({"global_guardrails": {"cedar": [
        {"name": "deep", "when": when, "outcome": "deny", "reason_code": "deep", "reason": "r"}
    ]}})
}

/// POSTs a dry run with this exact body text (so that duplicate keys reach the server).
async fn dry_run_text(owner: &Browser, body: &str) -> (u16, Value) {
    let res = owner
        .app
        .client
        .post(owner.app.url("/v1/policies/sync"))
        .header("Cookie", &owner.cookie)
        .header("X-CSRF-Token", &owner.csrf)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let (status, body) = status_json(res).await;
    (status.as_u16(), body)
}

fn first_error(body: &Value) -> (String, String) {
    let e = &body["errors"][0];
    (
        e["path"].as_str().unwrap_or_default().to_owned(),
        e["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// No message names a Rust type or a generated Cedar name.
fn assert_spec_words(message: &str) {
    for rust in [
        "f64",
        "u32",
        "u64",
        "i64",
        "struct ",
        "template#",
        "g:x/x",
        "::",
    ] {
        assert!(!message.contains(rust), "`{rust}` in {message}");
    }
}

both_engines! {
    async fn raw_cedar_too_deep_or_too_long_is_422_and_the_server_stays_up(app) {
        let owner = owner(&app).await;
        let parens = format!("{}true{}", "(".repeat(127), ")".repeat(127));
        let sets = format!("{}1{}.isEmpty()", "[".repeat(200), "]".repeat(200));
        let records = format!("{}1{}", "{a: ".repeat(200), "}".repeat(200));
        let ifs = format!("{}true{}", "if true then ".repeat(5000), " else false".repeat(5000));
        for (when, limit) in [(&parens, "at most 24"), (&sets, "at most 24"), (&records, "at most 24"), (&ifs, "bytes")] {
            for path in ["/v1/policies/sync", "/v1/sync"] {
                let body = assert_error(
                    owner.post(path, &json!({"dry_run": true, "spec": raw_rule(when)})).await,
                    422,
                    "invalid_spec",
                )
                .await;
                let (at, message) = first_error(&body);
                assert_eq!(at, "global_guardrails.cedar[0].when", "{body}");
                assert!(message.contains("rule `deep`") && message.contains(limit), "{message}");
            }
        }
        // Nested 24 deep is within the limit, and compiles.
        let ok = format!("{}true{}", "(".repeat(24), ")".repeat(24));
        let (s, body) = status_json(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": raw_rule(&ok)})).await).await;
        assert_eq!(s, 200, "{body}");
        // The process is alive and serves.
        let (s, _) = status_json(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
        assert_eq!(s, 200);
    }

}

both_engines! {
    async fn a_block_of_30000_action_names_compiles(app) {
        let owner = owner(&app).await;
        let agent = app.active_agent("many").await;
        let names: Vec<String> = (0..30_000).map(|i| format!("act.{i}")).collect();
        let spec = json!({
            "reusable_policy_blocks": {"many": {"actions": {"allow": names}}},
            "agent_groups": [{"name": "g", "members": [agent.id]}],
            "bindings": [{"group": "g", "blocks": ["many"]}],
        });
        let (s, body) = status_json(owner.post("/v1/policies/sync", &json!({"spec": spec})).await).await;
        assert_eq!(s, 200, "{body}");
        let (s, decision) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "act.29999"})).await).await;
        assert_eq!(s, 200, "{decision}");
        assert_eq!(decision["decision"], "allow", "{decision}");
    }

}

both_engines! {
    async fn sync_errors_are_never_silent(app) {
        let owner = owner(&app).await;
        // A duplicate key: the block would lose its allowed_domains.
        let (s, body) = dry_run_text(&owner, r#"{"dry_run": true, "spec": {"reusable_policy_blocks": {"mail": {
            "email": {"allowed_domains": ["example.com"]},
            "email": {"max_recipients": 3}}}}}"#).await;
        assert_eq!(s, 422, "{body}");
        assert_eq!(body["error"], "invalid_spec");
        let (at, message) = first_error(&body);
        assert_eq!(at, "reusable_policy_blocks.mail.email");
        assert!(message.contains("duplicate key `email`") && message.contains("line 2") && message.contains("line 3"), "{message}");
        // Outside the spec, a duplicate is a bad body.
        let (s, body) = dry_run_text(&owner, r#"{"dry_run": true, "dry_run": false, "spec": {}}"#).await;
        assert_eq!((s, body["error"].as_str()), (400, Some("invalid_json")), "{body}");

        // An unknown key suggests the nearest one.
        let body = assert_error(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": {
            "reusable_policy_blocks": {"pay": {"amount": {"limts": {"USD": {"allow_up_to": 1}}}}}}})).await, 422, "invalid_spec").await;
        let (at, message) = first_error(&body);
        assert_eq!(at, "reusable_policy_blocks.pay.amount.limts");
        assert!(message.contains("did you mean `limits`?"), "{message}");

        // Type errors in the spec's words.
        for (spec, expected) in [
            (json!({"reusable_policy_blocks": {"pay": {"amount": {"limits": {"USD": {"allow_up_to": "ten"}}}}}}), "expected a number"),
            (json!({"reusable_policy_blocks": {"m": {"email": {"max_recipients": -1}}}}), "whole number"),
            (json!({"reusable_policy_blocks": {"m": {"email": {"on_violation": "alow"}}}}), "did you mean `allow`?"),
        ] {
            let body = assert_error(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": spec})).await, 422, "invalid_spec").await;
            let (_, message) = first_error(&body);
            assert!(message.contains(expected), "{message}");
            assert_spec_words(&message);
        }

        // Raw Cedar errors point at the rule and quote what the user wrote.
        let agent = app.active_agent("raw").await;
        let spec = json!({
            "reusable_policy_blocks": {"x": {"cedar": [
                {"name": "big", "when": "context.amount > 5", "outcome": "deny", "reason_code": "big", "reason": "r"}]}},
            "agent_groups": [{"name": "x", "members": [agent.id]}],
            "bindings": [{"group": "x", "blocks": ["x"]}],
        });
        let body = assert_error(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": spec})).await, 422, "invalid_spec").await;
        let (at, message) = first_error(&body);
        assert_eq!(at, "reusable_policy_blocks.x.cedar[0].when", "{body}");
        assert!(message.contains("`context.amount`") && message.contains("`context.amount > 5`"), "{message}");
        assert_spec_words(&message);
        let body = assert_error(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": raw_rule("context.action == \"a\")")})).await, 422, "invalid_spec").await;
        let (_, message) = first_error(&body);
        assert!(message.contains("unexpected token `)`") && message.contains("column 22"), "{message}");
    }
}

// --- the CLI ------------------------------------------------------------------------------

fn acp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_acp"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("ACP_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn validate_reports_duplicates_limits_and_typos_with_places() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = write(
        dir.path(),
        "dup.yaml",
        "reusable_policy_blocks:\n  mail:\n    email:\n      allowed_domains: [example.com]\n    email:\n      max_recipients: 3\n",
    );
    let out = acp(&["policy", "validate", &yaml]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("reusable_policy_blocks.mail.email: duplicate key `email`"),
        "{t}"
    );
    assert!(
        t.contains("line 3, column 5") && t.contains("line 5, column 5"),
        "{t}"
    );
    assert!(t.contains(&format!("{yaml}:5:5")), "{t}");

    let json_file = write(
        dir.path(),
        "dup.json",
        "{\"reusable_policy_blocks\": {\"mail\": {\"email\": {\"allowed_domains\": [\"example.com\"]},\n \"email\": {}}}}",
    );
    let out = acp(&["policy", "compile", &json_file, "--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["errors"][0]["path"],
        "reusable_policy_blocks.mail.email"
    );
    assert_eq!(
        (
            report["errors"][0]["line"].as_u64(),
            report["errors"][0]["column"].as_u64()
        ),
        (Some(2), Some(2))
    );

    // Deep raw Cedar: an error, not an abort.
    let deep = write(
        dir.path(),
        "deep.yaml",
        &format!(
            "global_guardrails:\n  cedar:\n    - {{name: deep, when: '{}true{}', outcome: deny, reason_code: c, reason: r}}\n",
            "(".repeat(3000),
            ")".repeat(3000)
        ),
    );
    let out = acp(&["policy", "validate", &deep]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("global_guardrails.cedar[0].when: rule `deep`"),
        "{}",
        text(&out)
    );

    // Deep YAML and a billion laughs: errors too.
    let nested = write(
        dir.path(),
        "nested.yaml",
        &format!("tests: {}1{}\n", "[".repeat(500), "]".repeat(500)),
    );
    let out = acp(&["policy", "validate", &nested]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("nests more than"), "{}", text(&out));
    let mut laughs = String::from("x0: &a0 [l, l, l, l, l, l, l, l, l, l]\n");
    for i in 1..12 {
        let p = i - 1;
        laughs.push_str(&format!(
            "x{i}: &a{i} [{}]\n",
            vec![format!("*a{p}"); 10].join(", ")
        ));
    }
    let laughs = write(dir.path(), "laughs.yaml", &laughs);
    let out = acp(&["policy", "validate", &laughs]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("aliases"), "{}", text(&out));

    // A typo, and a type error.
    let typo = write(
        dir.path(),
        "typo.yaml",
        "reusable_policy_blocks:\n  pay:\n    amount:\n      limts: {USD: {allow_up_to: 10}}\n",
    );
    let out = acp(&["policy", "validate", &typo]);
    assert!(
        text(&out).contains("did you mean `limits`?") && text(&out).contains(":4:7"),
        "{}",
        text(&out)
    );
    let typed = write(
        dir.path(),
        "typed.yaml",
        "reusable_policy_blocks:\n  pay:\n    amount:\n      limits: {USD: {allow_up_to: ten}}\n",
    );
    let out = acp(&["policy", "validate", &typed]);
    assert!(
        text(&out).contains("expected a number, found the string \"ten\""),
        "{}",
        text(&out)
    );
    assert_spec_words(&text(&out));
}

#[test]
fn fmt_keeps_comments_and_sync_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "# kept: the leading lines\nreusable_policy_blocks:\n  b:\n    description: \"issue #12\"  # kept too\n    actions: {allow: [read]}\n";
    let file = write(dir.path(), "c.yaml", spec);
    let out = acp(&["policy", "fmt", "--write", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# kept: the leading lines\n\nreusable_policy_blocks:\n  b:\n    description: \"issue #12\"  # kept too\n    actions: {allow: [read]}\n"
    );
    // A `#` inside a value is not a comment; leading comments are kept.
    let clean = "# kept\nreusable_policy_blocks:\n  b:\n    description: \"issue #12\"\n    actions: {allow: [read]}\n";
    let file = write(dir.path(), "d.yaml", clean);
    let out = acp(&["policy", "fmt", "--write", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .starts_with("# kept\n"));

    let dup = write(dir.path(), "dup.yaml", "bindings: []\nbindings: []\n");
    let out = acp(&[
        "sync",
        &dup,
        "--server",
        "http://127.0.0.1:1",
        "--token",
        "svc_pat_x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("duplicate key `bindings`") && text(&out).contains("dup.yaml:2:1"),
        "{}",
        text(&out)
    );
}

// --- the JSON Schema ----------------------------------------------------------------------

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas/policy-spec.schema.json")).unwrap(),
    )
    .unwrap()
}

/// Every spec shipped in `policies/` and every complete spec in the docs' YAML examples.
fn documented_specs() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("policies")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((
                path.display().to_string(),
                serde_yaml_ng::from_str(&text).unwrap(),
            ));
        }
    }
    for doc in [
        "docs/policy-spec.md",
        "README.md",
        "policies/README.md",
        "docs/approvals.md",
    ] {
        let Ok(text) = std::fs::read_to_string(root().join(doc)) else {
            continue;
        };
        for (i, block) in text.split("```yaml\n").skip(1).enumerate() {
            let body = block.split("```").next().unwrap_or("");
            let Ok(value) = serde_yaml_ng::from_str::<Value>(body) else {
                continue;
            };
            let keys = [
                "reusable_policy_blocks",
                "agent_groups",
                "bindings",
                "global_guardrails",
                "tests",
            ];
            let is_spec = value
                .as_object()
                .is_some_and(|o| !o.is_empty() && o.keys().all(|k| keys.contains(&k.as_str())));
            if is_spec {
                out.push((format!("{doc} yaml example {i}"), value));
            }
        }
    }
    out
}

#[test]
fn the_json_schema_accepts_every_shipped_and_documented_spec() {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let specs = documented_specs();
    assert!(
        specs.len() >= 5,
        "{:?}",
        specs.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    for (name, spec) in &specs {
        let errors: Vec<String> = validator
            .iter_errors(spec)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        // And the server's own reading agrees.
        acp::policy::spec::from_value(spec).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    // `approval`, which the server accepts, is in the schema; unknown keys are not.
    let approval = json!({"reusable_policy_blocks": {"b": {"approval": {"approvers": ["a@example.com"], "approver_role": "admin", "ttl_secs": 600}}}});
    assert!(validator.is_valid(&approval));
    assert!(acp::policy::spec::from_value(&approval).is_ok());
    assert!(!validator.is_valid(&json!({"reusable_policy_blocks": {"b": {"aproval": {}}}})));
}

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn the_json_schema_has_exactly_the_keys_of_the_spec_types() {
    use acp::policy::spec::*;
    let schema = schema();
    let defs = &schema["$defs"];
    let full_block = Block {
        approval: Some(ApprovalRules::default()),
        vault: Some(VaultRules::default()),
        ..Block::default()
    };
    let full_guardrails = Guardrails {
        approval: Some(ApprovalRules::default()),
        vault: Some(VaultRules::default()),
        ..Guardrails::default()
    };
    let amount = AmountRules {
        field: "amount".into(),
        currency_field: "currency".into(),
        limits: Default::default(),
        actions: None,
    };
    let spec = PolicySpec {
        tests: vec![TestCase::default()],
        ..PolicySpec::default()
    };
    let pairs: Vec<(&str, Value)> = vec![
        ("", serde_json::to_value(&spec).unwrap()),
        ("Block", serde_json::to_value(&full_block).unwrap()),
        (
            "Guardrails",
            serde_json::to_value(&full_guardrails).unwrap(),
        ),
        (
            "ApprovalRules",
            serde_json::to_value(ApprovalRules::default()).unwrap(),
        ),
        (
            "EmailRules",
            serde_json::to_value(EmailRules::default()).unwrap(),
        ),
        (
            "VaultRules",
            serde_json::to_value(VaultRules::default()).unwrap(),
        ),
        (
            "VaultApproval",
            serde_json::to_value(VaultApproval::default()).unwrap(),
        ),
        ("AmountRules", serde_json::to_value(&amount).unwrap()),
        (
            "Threshold",
            serde_json::to_value(Threshold {
                allow_up_to: 0.0,
                challenge_up_to: None,
            })
            .unwrap(),
        ),
        (
            "ActionRules",
            serde_json::to_value(ActionRules::default()).unwrap(),
        ),
        (
            "StatusRules",
            serde_json::to_value(StatusRules::default()).unwrap(),
        ),
        (
            "ReputationRules",
            serde_json::to_value(ReputationRules::default()).unwrap(),
        ),
        (
            "CedarRule",
            serde_json::to_value(CedarRule {
                name: String::new(),
                when: String::new(),
                outcome: Outcome::Deny,
                reason_code: String::new(),
                reason: String::new(),
            })
            .unwrap(),
        ),
        (
            "AgentGroup",
            serde_json::to_value(AgentGroup::default()).unwrap(),
        ),
        (
            "Selector",
            serde_json::to_value(Selector::default()).unwrap(),
        ),
        ("Binding", serde_json::to_value(Binding::default()).unwrap()),
        (
            "TestCase",
            serde_json::to_value(TestCase::default()).unwrap(),
        ),
        (
            "TestAgent",
            serde_json::to_value(acp::policy::spec::TestAgent::default()).unwrap(),
        ),
        (
            "TestExpectation",
            serde_json::to_value(TestExpectation::default()).unwrap(),
        ),
    ];
    for (def, value) in pairs {
        let properties = if def.is_empty() {
            &schema["properties"]
        } else {
            &defs[def]["properties"]
        };
        assert_eq!(
            keys(properties),
            keys(&value),
            "schema `{def}` against the Rust type"
        );
    }
}

#[test]
fn the_strict_reader_reads_every_shipped_spec_as_before() {
    // Same values as the YAML library the specs were written against: the same hashes.
    for entry in std::fs::read_dir(root().join("policies")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let strict = acp::policy::source::parse_yaml(&text).unwrap().to_value();
            let loose: Value = serde_yaml_ng::from_str(&text).unwrap();
            assert_eq!(strict, loose, "{}", path.display());
        }
    }
}
