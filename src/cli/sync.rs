//! `acp sync FILE --server URL --token TOKEN [--dry-run | --apply]`: the CI side of policy as
//! code. Prints the diff (coloured on a terminal, see `output`) or JSON, and exits as every
//! command does: 0 (no change, or applied), 2 (a dry run found changes), 3 (conflict), 4 (not
//! logged in, or the credential is not valid), 5 (refused by role or scope), 6 (no such policy),
//! 7 (a dry run whose impact or semantic diff matches `--fail-on-impact` / `--fail-on`) or 1
//! (anything else).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::policy::spec::{self, parse_located, Format, SpecError};

use anstyle::{AnsiColor, Style};

use super::client::{error_text as failure_text, exit_for_status, ClientArgs, Failure};
use super::output::{colours_on, eline, line, paint, print};
use super::policy::{error_text, Source};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 no change or applied, 2 a dry run found changes, 3 conflict (the policy is not at --expect-hash, or another apply won), 4 not logged in or the credential is not valid, 5 refused by role or scope, 6 not found, 7 a dry run whose impact matches --fail-on-impact or whose semantic diff matches --fail-on, 1 any other error.\nThe dry run prints the policy's current hash; apply with --expect-hash set to it so that a policy changed since the review fails instead of being overwritten."
)]
pub struct SyncArgs {
    /// The spec file (YAML, or JSON when it ends in .json); `-` reads it from stdin
    pub file: String,
    /// Only compute and show the difference (the default)
    #[arg(long, conflicts_with = "apply")]
    pub dry_run: bool,
    /// Apply the spec
    #[arg(long)]
    pub apply: bool,
    /// Refuse (exit 3) unless the policy's current hash on the server is this `sha256:...`
    #[arg(long, value_name = "HASH")]
    pub expect_hash: Option<String>,
    /// Make a retried apply safe: the server answers a retry with the first answer
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// The policy to sync [default: pol_default]
    #[arg(long, value_name = "ID")]
    pub policy_id: Option<String>,
    /// The policy's display name [default: its current name, or the id without `pol_`]
    #[arg(long, value_name = "NAME")]
    pub policy_name: Option<String>,
    /// Dry run: how many recorded checks to replay (0: none) [default: 10000]
    #[arg(long, value_name = "N", conflicts_with = "apply")]
    pub impact_checks: Option<u32>,
    /// Dry run: exit 7 when a replayed decision moves towards allow, or changes at all
    #[arg(long, value_enum, value_name = "WHEN", conflicts_with = "apply")]
    pub fail_on_impact: Option<FailOnImpact>,
    /// Dry run: exit 7 when the semantic diff finds a cell that becomes more permissive
    #[arg(long, value_enum, value_name = "WHEN", conflicts_with = "apply")]
    pub fail_on: Option<FailOn>,
    /// Also print the unified diff of the compiled Cedar (text output; JSON always has it)
    #[arg(long)]
    pub cedar: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The exit code of a gate of `--fail-on-impact` / `--fail-on` that tripped.
pub const GATE_TRIPPED: i32 = 7;

/// When the replayed impact fails a CI run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOnImpact {
    // A decision moves towards allow (deny→challenge, deny→allow, challenge→allow).
    MorePermissive,
    // Any decision changes.
    Any,
}

/// When the semantic diff fails a CI run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    // A cell (group, action, condition) becomes more permissive.
    MorePermissive,
}

/// Whether a dry run's answer fails the CI gates asked for.
fn gates_fail(args: &SyncArgs, answer: &Value) -> bool {
    let impact = &answer["diff"]["impact"];
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    let impact_fails = match args.fail_on_impact {
        None => false,
        Some(FailOnImpact::MorePermissive) => count(&impact["more_permissive"]) > 0,
        Some(FailOnImpact::Any) => count(&impact["changed"]) > 0,
    };
    let semantic = &answer["diff"]["semantic"];
    let semantic_fails = match args.fail_on {
        None => false,
        Some(FailOn::MorePermissive) => count(&semantic["more_permissive_total"]) > 0,
    };
    impact_fails || semantic_fails
}

/// The semantic diff's lines: the cells that become more (`+`) or less (`-`) permissive, and
/// what was not analysed.
fn semantic_lines(semantic: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if semantic.is_null() {
        return out;
    }
    let n = |k: &str| semantic[k].as_u64().unwrap_or(0);
    out.push(format!(
        "semantic: {} cell(s) more permissive, {} less{}",
        n("more_permissive_total"),
        n("less_permissive_total"),
        if semantic["complete"] == json!(false) {
            " (incomplete: see not analysed)"
        } else {
            ""
        }
    ));
    for (list, sign) in [("more_permissive", "+"), ("less_permissive", "-")] {
        let cells = semantic[list].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for cell in cells.iter().take(10) {
            let text = |k: &str| cell[k].as_str().unwrap_or("").to_owned();
            out.push(format!(
                "  {sign} {} {} when {}: {} -> {}",
                text("group"),
                text("action"),
                text("condition"),
                text("before"),
                text("after")
            ));
        }
        if cells.len() > 10 {
            out.push(format!(
                "  {sign} ... {} more (--output json lists them)",
                cells.len() - 10
            ));
        }
    }
    for note in semantic["not_analysed"]
        .as_array()
        .into_iter()
        .flatten()
        .take(5)
    {
        out.push(format!("  not analysed: {}", note.as_str().unwrap_or("")));
    }
    out
}

/// The impact's lines: how many replayed, how many would change and how, a few examples.
fn impact_lines(impact: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if impact.is_null() {
        return out;
    }
    let n = |k: &str| impact[k].as_u64().unwrap_or(0);
    out.push(format!(
        "impact: {} of the last {} recorded checks replayed ({} skipped): {} would change ({} more permissive, {} less)",
        n("replayed"),
        n("read"),
        n("skipped"),
        n("changed"),
        n("more_permissive"),
        n("less_permissive"),
    ));
    for kind in impact["kinds"].as_array().into_iter().flatten() {
        out.push(format!(
            "  {} -> {}: {}",
            kind["from"].as_str().unwrap_or(""),
            kind["to"].as_str().unwrap_or(""),
            kind["count"]
        ));
        for example in kind["examples"].as_array().into_iter().flatten().take(3) {
            out.push(format!(
                "    e.g. {} {} by {} at {} ({})",
                example["event_id"].as_str().unwrap_or(""),
                example["action"].as_str().unwrap_or(""),
                example["agent_id"].as_str().unwrap_or(""),
                example["at"].as_str().unwrap_or(""),
                example["reason_codes"]
                    .as_array()
                    .map(|codes| codes
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "))
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

fn summary_lines(summary: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for part in ["blocks", "groups", "bindings", "memberships"] {
        for (kind, sign) in [("added", "+"), ("removed", "-"), ("changed", "~")] {
            if let Some(items) = summary[part][kind].as_array() {
                for item in items {
                    out.push(format!("  {sign} {part}: {}", item.as_str().unwrap_or("")));
                }
            }
        }
    }
    out
}

/// A unified diff's lines, coloured when `color`.
fn unified_lines(diff: &str, color: bool, out: &mut String) {
    for line in diff.lines() {
        let painted = if line.starts_with("+++") || line.starts_with("---") {
            paint(line, Style::new().bold(), color)
        } else if line.starts_with('+') {
            paint(line, AnsiColor::Green.on_default(), color)
        } else if line.starts_with('-') {
            paint(line, AnsiColor::Red.on_default(), color)
        } else if line.starts_with("@@") {
            paint(line, AnsiColor::Cyan.on_default(), color)
        } else {
            line.to_owned()
        };
        out.push_str(&painted);
        out.push('\n');
    }
}

/// A diff (`diff` of a sync or rollback answer) as text, in the spec's terms first: the
/// summary (blocks, groups, bindings, memberships), the specs' own unified diff, the semantic
/// diff's cells and the replayed impact; then the compiled Cedar's diff with `cedar`, or one
/// line saying how to see it.
pub fn diff_text(diff: &Value, cedar: bool, color: bool) -> String {
    let mut out = String::new();
    for line in summary_lines(&diff["summary"]) {
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(spec) = diff["spec_diff"].as_str().filter(|d| !d.is_empty()) {
        out.push_str("spec:\n");
        unified_lines(spec, color, &mut out);
    }
    for line in semantic_lines(&diff["semantic"])
        .into_iter()
        .chain(impact_lines(&diff["impact"]))
    {
        out.push_str(&line);
        out.push('\n');
    }
    let cedar_diff = diff["cedar_diff"].as_str().unwrap_or("");
    if cedar {
        unified_lines(cedar_diff, color, &mut out);
    } else if !cedar_diff.is_empty() {
        let changed = cedar_diff
            .lines()
            .filter(|l| {
                (l.starts_with('+') || l.starts_with('-'))
                    && !l.starts_with("+++")
                    && !l.starts_with("---")
            })
            .count();
        out.push_str(&format!(
            "cedar: {changed} line(s) of the compiled policy change (--cedar shows them)\n"
        ));
    }
    out
}

pub async fn run(args: &SyncArgs) -> anyhow::Result<i32> {
    // `-` is the spec on stdin (YAML, or JSON: JSON is YAML too).
    let stdin = args.file == "-";
    let read = if stdin {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(&args.file)
    };
    let text = match read {
        Ok(t) => t,
        Err(e) => {
            eline(format!("error: cannot read `{}`: {e}", args.file))?;
            return Ok(1);
        }
    };
    let format = Format::of_path(&args.file);
    let source = Source {
        name: if stdin {
            "<stdin>".to_owned()
        } else {
            args.file.clone()
        },
        text,
    };
    let (spec, located) = match parse_located(&source.text, format) {
        Ok(parsed) => parsed,
        Err(errors) => {
            for e in errors {
                eline(format!("error: {}", error_text(&e, &source)))?;
            }
            return Ok(1);
        }
    };
    let mut spec_json = serde_json::to_value(&spec)?;
    if let Some(obj) = spec_json.as_object_mut() {
        obj.remove("tests");
    }
    let dry_run = !args.apply;
    let mut body = json!({ "dry_run": dry_run, "spec": spec_json });
    for (key, value) in [
        ("policy_id", &args.policy_id),
        ("policy_name", &args.policy_name),
        ("expected_policy_hash", &args.expect_hash),
    ] {
        if let Some(v) = value {
            body[key] = json!(v);
        }
    }
    if let Some(n) = args.impact_checks {
        body["impact_checks"] = json!(n);
    }
    let client = match args.client.connect() {
        Ok(c) => c,
        Err(e) => {
            // Not logged in (4), or the credentials file cannot be read (1).
            let code = e.downcast_ref::<Failure>().map_or(1, |f| f.exit);
            eline(format!("error: {e:#}"))?;
            return Ok(code);
        }
    };
    let url = client.url("/v1/policies/sync");
    let mut request = client
        .request(reqwest::Method::POST, "/v1/policies/sync")
        .json(&body);
    if let Some(key) = &args.idempotency_key {
        request = request.header("Idempotency-Key", key);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            eline(format!(
                "error: cannot reach the acp server at `{url}`: {e}"
            ))?;
            return Ok(1);
        }
    };
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    let code = match (status, &answer) {
        (200, a) if dry_run && gates_fail(args, a) => GATE_TRIPPED,
        (200, a) if dry_run && a["diff"]["changed"] == json!(true) => 2,
        (200, _) => 0,
        (status, _) => exit_for_status(status),
    };
    if args.client.json() {
        line(json!({ "status": status, "exit_code": code, "response": answer }))?;
        return Ok(code);
    }
    let color = colours_on(&std::io::stdout());
    if status != 200 {
        eline(format!(
            "error: {}",
            failure_text(
                answer["message"].as_str().unwrap_or(""),
                answer["error"].as_str().unwrap_or("unknown"),
                Some(status)
            )
        ))?;
        // The server's spec errors name spec paths: show where each is written in the file.
        if let Ok(mut errors) = Vec::<SpecError>::deserialize(&answer["errors"]) {
            spec::place(&mut errors, &located);
            for e in errors {
                eline(error_text(&e, &source))?;
            }
        }
        if let Some(current) = answer["current_policy_hash"].as_str() {
            eline(format!("  current policy hash: {current}"))?;
        }
        return Ok(code);
    }
    let mut out = String::new();
    out.push_str(&format!(
        "policy {} ({}): {} -> {}\n",
        answer["policy_id"].as_str().unwrap_or(""),
        answer["policy_name"].as_str().unwrap_or(""),
        answer["current_policy_hash"].as_str().unwrap_or("(new)"),
        answer["desired_policy_hash"].as_str().unwrap_or("")
    ));
    out.push_str(&diff_text(&answer["diff"], args.cedar, color));
    if code == GATE_TRIPPED {
        out.push_str("dry run: the change fails --fail-on-impact / --fail-on (exit 7)\n");
    }
    out.push_str(&match (
        dry_run,
        answer["diff"]["changed"].as_bool(),
        answer["applied"].as_bool(),
    ) {
        (true, Some(true), _) => match answer["current_policy_hash"].as_str() {
            // The hash this dry run was computed against: an apply that expects it fails
            // (exit 3) if the policy changed in between, instead of overwriting that change.
            Some(current) => format!(
                "dry run: changes found (exit 2); apply with --apply --expect-hash {current}\n"
            ),
            None => "dry run: changes found (exit 2); apply with --apply\n".to_owned(),
        },
        (true, _, _) => "dry run: no change\n".to_owned(),
        (false, _, Some(true)) => format!(
            "applied: version {} ({})\n",
            answer["version"],
            answer["policy_hash"].as_str().unwrap_or("")
        ),
        _ => "no change: nothing applied\n".to_owned(),
    });
    print(&out)?;
    Ok(code)
}
