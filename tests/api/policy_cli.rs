//! `acp policy ...` through the real binary: the shipped specs in `policies/` validate, pass
//! their own test cases and are formatted; broken specs and failing cases exit 1; YAML and JSON
//! give the same hash. These commands are offline: no server, no database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn acp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_acp"))
        .args(args)
        .current_dir(root())
        // Pure commands: a database URL that cannot be opened must not matter.
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

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)))
}

fn shipped_specs() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .map(|p| format!("policies/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    files.sort();
    for expected in [
        "policies/devops-deploys.yaml",
        "policies/finance-refunds.yaml",
        "policies/support-email.yaml",
    ] {
        assert!(files.iter().any(|f| f == expected), "{expected} missing");
    }
    files
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn shipped_specs_validate_and_pass_their_tests() {
    for file in shipped_specs() {
        let out = acp(&["policy", "validate", &file]);
        assert!(out.status.success(), "{file}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.starts_with("ok sha256:"), "{file}: {stdout}");

        let out = acp(&["policy", "test", &file]);
        assert!(out.status.success(), "{file}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let last = stdout.lines().last().unwrap();
        assert!(last.ends_with(" passed, 0 failed"), "{file}: {stdout}");
        assert!(!stdout.contains("FAIL"), "{file}: {stdout}");

        // At least five cases, covering every outcome, all passing.
        let report = stdout_json(&acp(&["policy", "test", &file, "--output", "json"]));
        assert_eq!(report["ok"], true, "{file}: {report}");
        assert_eq!(report["failed"], 0);
        let cases = report["cases"].as_array().unwrap();
        assert!(cases.len() >= 5, "{file}: only {} cases", cases.len());
        assert_eq!(report["passed"].as_u64().unwrap() as usize, cases.len());
        for decision in ["allow", "challenge", "deny"] {
            assert!(
                cases.iter().any(|c| c["got"]["decision"] == decision),
                "{file}: no case decides {decision}"
            );
        }
        assert!(
            cases
                .iter()
                .any(|c| c["got"]["reason_codes"] == serde_json::json!(["no_matching_rule"])),
            "{file}: no case covers the default deny"
        );
    }
}

#[test]
fn a_broken_spec_fails_validation_with_the_error_paths() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "broken.yaml",
        "reusable_policy_blocks:\n  mail:\n    email: {on_violation: allow}\nagent_groups:\n  - {name: support, members: [bob]}\nbindings:\n  - {group: sales, blocks: [mail]}\n",
    );
    let out = acp(&["policy", "validate", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let all = text(&out);
    for expected in [
        "agent_groups[0].members[0]: `bob` is not an agent id",
        "bindings[0].group: no group `sales`",
        "reusable_policy_blocks.mail.email.on_violation:",
    ] {
        assert!(all.contains(expected), "`{expected}` not in {all}");
    }
    assert!(!all.contains("ok sha256"));

    // A parse error (unknown key) carries its path too; JSON files are read as JSON.
    let file = write(
        dir.path(),
        "typo.json",
        r#"{"agent_groups": [{"name": "a", "memberz": []}]}"#,
    );
    let out = acp(&["policy", "validate", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("agent_groups[0].memberz"),
        "{}",
        text(&out)
    );

    // compile and test refuse it as well.
    let out = acp(&["policy", "compile", &file, "--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let body = stdout_json(&out);
    assert_eq!(body["ok"], false);
    assert_eq!(body["errors"][0]["path"], "agent_groups[0].memberz");

    // A missing file is an error, not a panic.
    let out = acp(&["policy", "validate", "policies/does-not-exist.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("cannot read `policies/does-not-exist.yaml`"));
}

#[test]
fn failing_cases_and_missing_cases_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "reusable_policy_blocks:\n  ops: {actions: {allow: [read], challenge: [deploy]}}\nagent_groups:\n  - {name: team, members: [agt_0123456789abcdef0123456789abcdef]}\nbindings:\n  - {group: team, blocks: [ops]}\n";
    let file = write(
        dir.path(),
        "cases.yaml",
        &format!(
            "{spec}tests:\n  - {{name: reads, agent: {{id: agt_0123456789abcdef0123456789abcdef}}, action: read, expect: {{decision: allow}}}}\n  - {{name: wrong, agent: {{id: agt_0123456789abcdef0123456789abcdef}}, action: deploy, expect: {{decision: allow, reason_codes: [action_allowed]}}}}\n"
        ),
    );
    let out = acp(&["policy", "test", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "ok   reads");
    assert!(
        lines[1].starts_with(
            "FAIL wrong: expected allow [action_allowed], got challenge [action_requires_approval]"
        ),
        "{stdout}"
    );
    assert_eq!(lines.last(), Some(&"1 passed, 1 failed"));

    let file = write(dir.path(), "none.yaml", spec);
    let out = acp(&["policy", "test", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("has no test cases"), "{}", text(&out));
}

#[test]
fn fmt_check_passes_on_shipped_specs_and_fails_on_a_messy_copy() {
    for file in shipped_specs() {
        let out = acp(&["policy", "fmt", "--check", &file]);
        assert!(
            out.status.success(),
            "{file} is not formatted (run `acp policy fmt --write {file}`): {}",
            text(&out)
        );
        // Printing gives exactly the file.
        let out = acp(&["policy", "fmt", &file]);
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(root().join(&file)).unwrap()
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(root().join("policies/finance-refunds.yaml")).unwrap();
    let hash_of = |file: &str| {
        let out = acp(&["policy", "validate", file]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // Same spec, other layout: flow style, explicit defaults, keys out of order.
    let messy = original
        .replace("      limits:\n", "      field: amount\n      limits:\n")
        .replace(
            "  reputation: {challenge_at: medium, deny_at: high}\n",
            "  email: null\n  reputation:\n    deny_at: high\n    challenge_at: medium\n",
        );
    assert_ne!(messy, original);
    let file = write(dir.path(), "messy.yaml", &messy);
    assert_eq!(hash_of(&file), hash_of("policies/finance-refunds.yaml"));
    let out = acp(&["policy", "fmt", "--check", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is not formatted"), "{}", text(&out));
    assert!(
        text(&out).contains("-      field: amount"),
        "{}",
        text(&out)
    );

    let out = acp(&["policy", "fmt", "--write", &file]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original);
    assert!(acp(&["policy", "fmt", "--check", &file]).status.success());
}

/// Reverses the key order of every object.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reversed(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

#[test]
fn yaml_and_json_compile_to_the_same_hash() {
    let dir = tempfile::tempdir().unwrap();
    for file in shipped_specs() {
        let yaml = std::fs::read_to_string(root().join(&file)).unwrap();
        let value: Value = serde_yaml_ng::from_str(&yaml).unwrap();
        let mut without_tests = reversed(&value);
        without_tests.as_object_mut().unwrap().remove("tests");
        let json_file = write(
            dir.path(),
            "spec.json",
            &serde_json::to_string(&without_tests).unwrap(),
        );

        let from_yaml = stdout_json(&acp(&["policy", "compile", &file, "--output", "json"]));
        let from_json = stdout_json(&acp(&["policy", "compile", &json_file, "--output", "json"]));
        assert_eq!(from_yaml["ok"], true, "{from_yaml}");
        assert!(from_yaml["policy_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        // Key order, format and test cases do not change the policy.
        assert_eq!(from_yaml["policy_hash"], from_json["policy_hash"], "{file}");
        assert_eq!(from_yaml["cedar"], from_json["cedar"], "{file}");
        assert!(from_yaml["cedar"].as_str().unwrap().contains("permit ("));

        // The text form carries the same hash and Cedar.
        let out = acp(&["policy", "compile", &file]);
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(stdout.starts_with(&format!(
            "// policy_hash: {}\n",
            from_yaml["policy_hash"].as_str().unwrap()
        )));
        assert!(stdout.ends_with(from_yaml["cedar"].as_str().unwrap()));

        // A JSON spec formats as JSON.
        let out = acp(&["policy", "fmt", &json_file]);
        assert!(out.status.success(), "{}", text(&out));
        let formatted: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(formatted.get("reusable_policy_blocks").is_some());
    }
}

#[test]
fn fmt_keeps_comments_and_short_flow_mappings() {
    let dir = tempfile::tempdir().unwrap();
    let written = "# Refunds, as finance wants them.\n\nbindings:\n  # Refunds only: the block has an email part too.\n  - {group: finance, blocks: [refunds], actions: [refund]}  # see the runbook\nreusable_policy_blocks:\n  refunds:\n    amount:\n      field: amount  # the default, said anyway\n      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n    actions:\n      allow: [read]\n      # deny: [drop_db]\nagent_groups:\n  - name: finance\n    selectors:\n      - labels: {dept: finance}  # the inventory's label\n# the end\n";
    let file = write(dir.path(), "commented.yaml", written);
    let out = acp(&["policy", "fmt", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let formatted = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        formatted,
        "# Refunds, as finance wants them.\n\nreusable_policy_blocks:\n  refunds:\n    amount:\n      field: amount  # the default, said anyway\n      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n    actions:\n      allow: [read]\n      # deny: [drop_db]\nagent_groups:\n  - name: finance\n    selectors:\n      - {labels: {dept: finance}}  # the inventory's label\nbindings:\n  # Refunds only: the block has an email part too.\n  - {group: finance, blocks: [refunds], actions: [refund]}  # see the runbook\n# the end\n"
    );
    // Written back, then checked: formatted, and the same policy.
    let out = acp(&["policy", "fmt", "--write", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), formatted);
    assert!(acp(&["policy", "fmt", "--check", &file]).status.success());
    let original = write(dir.path(), "original.yaml", written);
    let hash =
        |f: &str| String::from_utf8_lossy(&acp(&["policy", "validate", f]).stdout).into_owned();
    assert_eq!(hash(&file), hash(&original));
}

#[test]
fn fmt_that_cannot_keep_a_comment_says_so_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The item's comment and its first entry's comment would have to share one line.
    let written = "agent_groups: [{name: g}]\nreusable_policy_blocks: {b: {}}\nbindings:\n  - {  # the binding\n     group: g,  # the group\n     blocks: [b]}\n";
    let file = write(dir.path(), "two.yaml", written);
    for args in [
        vec!["policy", "fmt"],
        vec!["policy", "fmt", "--write"],
        vec!["policy", "fmt", "--check"],
    ] {
        let out = acp(&[args.as_slice(), &[file.as_str()]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("fmt cannot keep the comments of") && err.contains("nothing changed"),
            "{args:?}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    }
}

#[test]
fn validate_warns_of_unused_blocks_and_groups_and_checks_them_like_used_ones() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "reusable_policy_blocks:\n  used: {actions: {allow: [read]}}\n  spare: {actions: {allow: [write]}}\nagent_groups:\n  - {name: team}\n  - {name: idle}\nbindings:\n  - {group: team, blocks: [used]}\n";
    let file = write(dir.path(), "warn.yaml", spec);
    let out = acp(&["policy", "validate", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("warning: reusable_policy_blocks.spare: block `spare` is not used"),
        "{shown}"
    );
    assert!(
        shown.contains("warning: agent_groups[1].name: group `idle` is not used"),
        "{shown}"
    );
    assert!(shown.contains(&format!("--> {file}:3:3")), "{shown}");
    assert!(
        shown.lines().last().unwrap().starts_with("ok sha256:"),
        "{shown}"
    );
    let report = stdout_json(&acp(&["policy", "validate", &file, "--output", "json"]));
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["warnings"].as_array().unwrap().len(), 2, "{report}");
    // Warnings fail only when asked to.
    let out = acp(&["policy", "validate", &file, "--deny-warnings"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = stdout_json(&acp(&[
        "policy",
        "validate",
        &file,
        "--deny-warnings",
        "--output",
        "json",
    ]));
    assert_eq!(report["ok"], false, "{report}");

    // An unused block has the errors a used one would have.
    let broken = "reusable_policy_blocks:\n  spare:\n    amount: {limits: {USD: {allow_up_to: 10, challenge_up_to: 5}}}\n    cedar:\n      - {name: big, when: 'context.amount > 5', outcome: deny, reason_code: too_big, reason: too big}\n";
    let file = write(dir.path(), "broken.yaml", broken);
    let out = acp(&["policy", "validate", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("reusable_policy_blocks.spare.amount.limits.USD"),
        "{shown}"
    );
    let used = write(
        dir.path(),
        "used.yaml",
        &format!(
            "{broken}agent_groups: [{{name: g}}]\nbindings: [{{group: g, blocks: [spare]}}]\n"
        ),
    );
    let used_out = text(&acp(&["policy", "validate", &used]));
    let first_error = |t: &str| {
        t.lines()
            .find(|l| l.contains("limits.USD"))
            .unwrap()
            .to_owned()
    };
    assert_eq!(first_error(&shown), first_error(&used_out));

    // A raw rule reading `context.amount` is told how fields and numbers are read.
    let raw = "reusable_policy_blocks:\n  b:\n    cedar:\n      - {name: big, when: 'context.amount > 5', outcome: deny, reason_code: too_big, reason: too big}\nagent_groups: [{name: g}]\nbindings: [{group: g, blocks: [b]}]\n";
    let file = write(dir.path(), "raw.yaml", raw);
    let shown = text(&acp(&["policy", "validate", &file]));
    assert!(
        shown.contains("read a string or boolean field as `context.fields.contains(\"amount=value\")`, and a number as `resource.hasTag(\"amount\") && resource.getTag(\"amount\") > N`, where N is in ten-thousandths (12.5 is 125000)"),
        "{shown}"
    );
    assert!(!shown.contains("did you mean `action`"), "{shown}");

    // A reference to a group or block that is not there: the nearest name.
    let typo = "reusable_policy_blocks:\n  refunds: {actions: {allow: [refund]}}\nagent_groups: [{name: finance}]\nbindings: [{group: finanse, blocks: [refund]}]\nglobal_guardrails: {blocks: [refundz]}\n";
    let file = write(dir.path(), "typo.yaml", typo);
    let shown = text(&acp(&["policy", "validate", &file]));
    assert!(
        shown.contains("bindings[0].group: no group `finanse`; did you mean `finance`?"),
        "{shown}"
    );
    assert!(
        shown.contains("bindings[0].blocks[0]: no block `refund`; did you mean `refunds`?"),
        "{shown}"
    );
    assert!(
        shown.contains("global_guardrails.blocks[0]: no block `refundz`; did you mean `refunds`?"),
        "{shown}"
    );
}
