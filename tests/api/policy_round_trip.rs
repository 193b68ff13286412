//! A policy's round trip through a real server, in the spec's own terms: `acp policy get
//! --format yaml|json` prints the spec as `acp policy fmt` writes it, and syncing that back is no
//! change; `acp sync --dry-run` and `acp policy diff` show the spec's diff and the semantic
//! diff, the compiled Cedar only with `--cedar`; a check whose numeric field arrives as a
//! string gets a warning, in `/v1/check`, `/v1/check/batch` and the audit event.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::both_engines;
use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_acp");

/// The binary in `dir`, with none of the caller's `ACP_` variables but `env`.
async fn acp(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ACP_") {
            command.env_remove(&name);
        }
    }
    command
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// A personal access token of the workspace's owner.
async fn owner_token(app: &TestApp) -> String {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let (s, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
    assert_eq!(s, 200, "{pat}");
    pat["token"].as_str().unwrap().to_owned()
}

/// A spec written the way people write them: defaults spelled out, flow and block mixed, keys
/// out of the model's order.
fn spec(agent_id: &str, allow_up_to: u32) -> String {
    format!(
        "bindings:\n- group: team\n  blocks: [refunds, mail]\n  actions:\n  - refund\n  - send_email\nagent_groups:\n  - name: team\n    members: [{agent_id}]\n    selectors: []\nreusable_policy_blocks:\n  refunds:\n    amount:\n      field: amount\n      currency_field: currency\n      limits:\n        USD:\n          allow_up_to: {allow_up_to}\n          challenge_up_to: 1000\n  mail:\n    email: {{on_violation: deny, max_recipients: 3, allowed_domains: [example.com]}}\nglobal_guardrails:\n  status: {{require_active: true, allow_pending: false}}\n  reputation: {{deny_at: high}}\n"
    )
}

both_engines! {
    async fn get_prints_the_spec_as_fmt_writes_it_and_syncing_it_back_is_no_change(app) {
        let agent = app.active_agent("fin").await;
        let token = owner_token(&app).await;
        let env = [("ACP_SERVER", app.base.as_str()), ("ACP_TOKEN", token.as_str())];
        let dir = tempfile::tempdir().unwrap();
        let original = spec(&agent.id, 100);
        std::fs::write(dir.path().join("original.yaml"), &original).unwrap();
        let out = acp(dir.path(), &["sync", "original.yaml", "--apply"], &env).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));

        // YAML: exactly what `fmt` makes of the original, with no nulls and no defaults.
        let got = acp(dir.path(), &["policy", "get", "--format", "yaml"], &env).await;
        assert_eq!(got.status.code(), Some(0), "{}", text(&got));
        let fmt = acp(dir.path(), &["policy", "fmt", "original.yaml"], &[]).await;
        assert_eq!(fmt.status.code(), Some(0), "{}", text(&fmt));
        assert_eq!(stdout(&got), stdout(&fmt));
        for absent in ["null", "selectors", "field:", "on_violation", "allow_pending", "tests"] {
            assert!(!stdout(&got).contains(absent), "`{absent}` in\n{}", stdout(&got));
        }
        assert!(stdout(&got).contains("limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}"), "{}", stdout(&got));

        // Synced back: no change, the same hash.
        std::fs::write(dir.path().join("got.yaml"), stdout(&got)).unwrap();
        let dry = acp(dir.path(), &["sync", "got.yaml", "--dry-run", "--output", "json"], &env).await;
        assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
        let answer: Value = serde_json::from_slice(&dry.stdout).unwrap();
        let response = &answer["response"];
        assert_eq!(response["diff"]["changed"], false, "{answer}");
        assert_eq!(response["current_policy_hash"], response["desired_policy_hash"], "{answer}");
        assert_eq!(response["diff"]["spec_diff"], "", "{answer}");
        let dry = acp(dir.path(), &["sync", "got.yaml", "--dry-run"], &env).await;
        assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
        assert!(stdout(&dry).contains("dry run: no change"), "{}", text(&dry));
        let validated = acp(dir.path(), &["policy", "validate", "got.yaml"], &[]).await;
        assert_eq!(
            stdout(&validated).trim(),
            format!("ok {}", response["current_policy_hash"].as_str().unwrap())
        );

        // JSON likewise: what `fmt` makes of the same spec written as JSON.
        let got = acp(dir.path(), &["policy", "get", "--format", "json"], &env).await;
        assert_eq!(got.status.code(), Some(0), "{}", text(&got));
        let as_json: Value = serde_yaml_ng::from_str(&original).unwrap();
        std::fs::write(dir.path().join("original.json"), as_json.to_string()).unwrap();
        let fmt = acp(dir.path(), &["policy", "fmt", "original.json"], &[]).await;
        assert_eq!(stdout(&got), stdout(&fmt));
        assert!(!stdout(&got).contains("null"), "{}", stdout(&got));
        std::fs::write(dir.path().join("got.json"), stdout(&got)).unwrap();
        let dry = acp(dir.path(), &["sync", "got.json", "--dry-run"], &env).await;
        assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
        assert!(stdout(&dry).contains("dry run: no change"), "{}", text(&dry));

        // The plain `get` shows the spec in the same words.
        let plain = acp(dir.path(), &["policy", "get"], &env).await;
        assert!(stdout(&plain).contains("spec:\nreusable_policy_blocks:\n"), "{}", text(&plain));
        assert!(!stdout(&plain).contains("null"), "{}", text(&plain));
    }
}

both_engines! {
    async fn diffs_speak_in_the_specs_terms_and_show_cedar_only_when_asked(app) {
        let agent = app.active_agent("fin").await;
        let token = owner_token(&app).await;
        let env = [("ACP_SERVER", app.base.as_str()), ("ACP_TOKEN", token.as_str())];
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("v1.yaml"), spec(&agent.id, 100)).unwrap();
        std::fs::write(dir.path().join("v2.yaml"), spec(&agent.id, 600)).unwrap();
        let out = acp(dir.path(), &["sync", "v1.yaml", "--apply"], &env).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));

        let spec_lines = [
            "spec:\n--- current\n+++ desired\n",
            "-      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n",
            "+      limits: {USD: {allow_up_to: 600, challenge_up_to: 1000}}\n",
            "  ~ blocks: refunds\n",
            "semantic: ",
            "+ team refund when amount.USD in (100, 600]: challenge -> allow",
            "+ team send_email when amount.USD in (100, 600]: challenge -> allow",
        ];
        let dry = acp(dir.path(), &["sync", "v2.yaml", "--dry-run", "--impact-checks", "0"], &env).await;
        assert_eq!(dry.status.code(), Some(2), "{}", text(&dry));
        let shown = stdout(&dry);
        for line in spec_lines {
            assert!(shown.contains(line), "`{line}` not in\n{shown}");
        }
        // The compiled Cedar only behind `--cedar`; a line says so.
        assert!(!shown.contains("resource.getTag"), "{shown}");
        assert!(shown.contains("(--cedar shows them)"), "{shown}");
        // The spec's diff and the semantic diff come before anything else.
        assert!(shown.find("spec:").unwrap() < shown.find("semantic: ").unwrap());
        let with_cedar = acp(dir.path(), &["sync", "v2.yaml", "--dry-run", "--impact-checks", "0", "--cedar"], &env).await;
        assert_eq!(with_cedar.status.code(), Some(2), "{}", text(&with_cedar));
        let shown_cedar = stdout(&with_cedar);
        assert!(shown_cedar.contains("resource.getTag(\"amount\") <= 6000000"), "{shown_cedar}");
        assert!(shown_cedar.find("semantic: ").unwrap() < shown_cedar.find("resource.getTag").unwrap());
        // JSON keeps everything.
        let json_out = acp(dir.path(), &["sync", "v2.yaml", "--dry-run", "--output", "json"], &env).await;
        let answer: Value = serde_json::from_slice(&json_out.stdout).unwrap();
        let diff = &answer["response"]["diff"];
        assert!(diff["cedar_diff"].as_str().unwrap().contains("6000000"), "{answer}");
        assert!(diff["spec_diff"].as_str().unwrap().contains("allow_up_to: 600"), "{answer}");
        assert_eq!(diff["semantic"]["more_permissive_total"], 2, "{answer}");

        // Between two versions: the same, computed from the versions the server holds.
        let out = acp(dir.path(), &["sync", "v2.yaml", "--apply"], &env).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let versions = acp(dir.path(), &["policy", "diff", "1", "2"], &env).await;
        assert_eq!(versions.status.code(), Some(0), "{}", text(&versions));
        let shown = stdout(&versions);
        for line in spec_lines {
            assert!(shown.contains(line), "`{line}` not in\n{shown}");
        }
        assert!(!shown.contains("resource.getTag"), "{shown}");
        let with_cedar = acp(dir.path(), &["policy", "diff", "1", "2", "--cedar"], &env).await;
        assert!(stdout(&with_cedar).contains("resource.getTag(\"amount\") <= 6000000"), "{}", text(&with_cedar));
        let json_out = acp(dir.path(), &["policy", "diff", "1", "2", "--output", "json"], &env).await;
        let answer: Value = serde_json::from_slice(&json_out.stdout).unwrap();
        assert!(answer["cedar_diff"].as_str().unwrap().contains("6000000"), "{answer}");
        assert!(answer["spec_diff"].as_str().unwrap().contains("allow_up_to: 600"), "{answer}");
        assert_eq!(answer["semantic"]["more_permissive_total"], 2, "{answer}");

        // A rollback's dry run reads the same way.
        let back = acp(dir.path(), &["policy", "rollback", "1", "--dry-run"], &env).await;
        assert_eq!(back.status.code(), Some(2), "{}", text(&back));
        assert!(stdout(&back).contains("+      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n"), "{}", text(&back));
        assert!(!stdout(&back).contains("resource.getTag"), "{}", text(&back));
    }
}

both_engines! {
    async fn a_number_sent_as_a_string_gets_a_warning_not_a_silent_deny(app) {
        let agent = app.active_agent("fin").await;
        app.apply_policy(json!({
            "reusable_policy_blocks": {
                "refunds": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}}},
                "discounts": {"cedar": [{"name": "big", "when": "resource.hasTag(\"percent\") && resource.getTag(\"percent\") > 300000",
                    "outcome": "challenge", "reason_code": "big_discount", "reason": "big discounts need approval"}],
                    "actions": {"allow": ["discount"]}}},
            "agent_groups": [{"name": "team", "members": [agent.id]}],
            "bindings": [{"group": "team", "blocks": ["refunds"], "actions": ["refund"]},
                         {"group": "team", "blocks": ["discounts"]}]
        })).await;
        let check = |context: Value, action: &str| json!({"agent_id": agent.id, "action": action, "context": context});

        // The string amount: the amount rules do not see it; the decision says why.
        let (s, body) = status_json(app.post("/v1/check", &check(json!({"amount": "150", "currency": "USD"}), "refund")).await).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["decision"], "deny", "{body}");
        assert_eq!(body["reason_codes"], json!(["no_matching_rule"]), "{body}");
        let warnings = body["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{body}");
        assert_eq!(warnings[0]["code"], "field_type_mismatch");
        assert_eq!(warnings[0]["field"], "amount");
        let message = warnings[0]["message"].as_str().unwrap();
        assert!(message.contains("the string \"150\"") && message.contains("JSON number 150"), "{message}");
        let trace_id = body["trace_id"].as_str().unwrap().to_owned();

        // A number: no `warnings` key at all.
        let (_, body) = status_json(app.post("/v1/check", &check(json!({"amount": 150, "currency": "USD"}), "refund")).await).await;
        assert_eq!(body["decision"], "challenge", "{body}");
        assert!(body.get("warnings").is_none(), "{body}");
        // A field read as a number only for another action: no warning here.
        let (_, body) = status_json(app.post("/v1/check", &check(json!({"amount": "150"}), "discount")).await).await;
        assert_eq!(body["decision"], "allow", "{body}");
        assert!(body.get("warnings").is_none(), "{body}");
        // A raw rule's tag, for any action; a list is not a number either.
        let (_, body) = status_json(app.post("/v1/check", &check(json!({"percent": [40]}), "discount")).await).await;
        assert_eq!(body["warnings"][0]["field"], "percent", "{body}");
        assert!(body["warnings"][0]["message"].as_str().unwrap().contains("is a list"), "{body}");
        // Null is absent.
        let (_, body) = status_json(app.post("/v1/check", &check(json!({"amount": null, "currency": "USD"}), "refund")).await).await;
        assert!(body.get("warnings").is_none(), "{body}");

        // The batch: each decision its own.
        let (s, body) = status_json(app.post("/v1/check/batch", &json!({"checks": [
            check(json!({"amount": "150", "currency": "USD"}), "refund"),
            check(json!({"amount": 50, "currency": "USD"}), "refund"),
        ]})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["results"][0]["warnings"][0]["code"], "field_type_mismatch", "{body}");
        assert!(body["results"][1].get("warnings").is_none(), "{body}");
        assert_eq!(body["results"][1]["decision"], "allow", "{body}");

        // The audit event records them with the decision.
        let events = audit_events(&app, "event_type=decision.check&limit=50").await;
        let event = events.iter().find(|e| e["trace_id"] == trace_id.as_str()).unwrap();
        assert_eq!(event["details"]["warnings"][0]["field"], "amount", "{event}");
        let clean = events.iter().find(|e| e["decision"] == "allow").unwrap();
        assert!(clean["details"].get("warnings").is_none(), "{clean}");
    }
}
