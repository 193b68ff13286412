//! `acp policy validate|fmt|compile|test FILE`: policy specs as code, offline. These commands
//! read one spec file (YAML, or JSON when the name ends in `.json`) and never open the database
//! or resolve the server configuration.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::policy::compile::unused_block_errors;
use crate::policy::evaluate::{evaluate, field_warnings, ContextFields, EmailFacts, Facts};
use crate::policy::layout::{self, FmtError};
use crate::policy::lint;
use crate::policy::source::Located;
use crate::policy::spec::{self, Format, PolicySpec, TestCase};
use crate::policy::{compile, CompiledPolicy, SpecError};

use super::output::Output;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Parse and compile a spec; print `ok <hash>` and any warnings, or every error (exit 1)
    Validate {
        /// The spec file (YAML, or JSON when it ends in .json)
        file: PathBuf,
        /// Fail (exit 1) when there are warnings too (an unused block or group)
        #[arg(long)]
        deny_warnings: bool,
        /// `text`, or `json` for tools
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print the spec in canonical form, or rewrite it (--write), or check it (--check)
    Fmt {
        /// The spec file (YAML, or JSON when it ends in .json)
        file: PathBuf,
        /// Rewrite the file in place
        #[arg(long, conflicts_with = "check")]
        write: bool,
        /// Exit 1 when the file is not formatted (prints a diff)
        #[arg(long)]
        check: bool,
    },
    /// Print the compiled Cedar policy set and the policy hash
    Compile {
        /// The spec file (YAML, or JSON when it ends in .json)
        file: PathBuf,
        /// `text`, or `json` for tools
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run the spec's `tests` cases against the compiled policy (exit 1 if any fails)
    Test {
        /// The spec file (YAML, or JSON when it ends in .json)
        file: PathBuf,
        /// `text`, or `json` for tools
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// Runs a policy command; answers the exit code (0 success, 1 any failure).
pub fn run(cmd: &PolicyCommand) -> anyhow::Result<i32> {
    let mut p = Printed::default();
    let code = match cmd {
        PolicyCommand::Validate {
            file,
            output,
            deny_warnings,
        } => validate(&mut p, file, *output, *deny_warnings),
        PolicyCommand::Fmt { file, write, check } => fmt(&mut p, file, *write, *check),
        PolicyCommand::Compile { file, output } => compile_cmd(&mut p, file, *output),
        PolicyCommand::Test { file, output } => test(&mut p, file, *output),
    }?;
    p.flush()?;
    Ok(code)
}

/// What a command prints, written at the end so that a closed pipe (`| head`) is not an error.
#[derive(Default)]
struct Printed {
    out: String,
    err: String,
}

impl Printed {
    fn out(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn line(&mut self, text: impl std::fmt::Display) {
        self.out.push_str(&text.to_string());
        self.out.push('\n');
    }

    /// An error on stderr, as every command prints one: `error: ...`.
    fn eline(&mut self, text: impl std::fmt::Display) {
        self.err.push_str("error: ");
        self.err.push_str(&text.to_string());
        self.err.push('\n');
    }

    fn flush(&self) -> anyhow::Result<()> {
        use std::io::{ErrorKind, Write};
        let write = |mut w: Box<dyn Write>, text: &str| match w
            .write_all(text.as_bytes())
            .and_then(|()| w.flush())
        {
            Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(e),
            _ => Ok(()),
        };
        write(Box::new(std::io::stderr().lock()), &self.err).context("cannot write to stderr")?;
        write(Box::new(std::io::stdout().lock()), &self.out).context("cannot write to stdout")
    }
}

fn format_of(file: &Path) -> Format {
    Format::of_path(&file.to_string_lossy())
}

fn read(file: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read `{}`", file.display()))
}

/// A spec file's text, for errors that quote it.
pub(super) struct Source {
    pub(super) name: String,
    pub(super) text: String,
}

/// The spec in a file and where each part of it is written; errors carry lines and columns.
/// A parsed spec and where its parts are written, or its errors.
type Parsed = Result<(PolicySpec, Located), Vec<SpecError>>;

fn load(file: &Path) -> anyhow::Result<(Source, Parsed)> {
    let text = read(file)?;
    let parsed = spec::parse_located(&text, format_of(file));
    let source = Source {
        name: file.display().to_string(),
        text,
    };
    Ok((source, parsed))
}

fn load_compiled(file: &Path) -> anyhow::Result<(Source, Result<CompiledPolicy, Vec<SpecError>>)> {
    let (source, parsed) = load(file)?;
    let compiled = parsed.and_then(|(spec, located)| compiled_located(&spec, &located));
    Ok((source, compiled))
}

/// Compiles, and checks the blocks nothing uses as if something did; errors get the line and
/// column of their path.
fn compiled_located(
    spec: &PolicySpec,
    located: &Located,
) -> Result<CompiledPolicy, Vec<SpecError>> {
    let compiled = compile(spec).and_then(|compiled| {
        let unused = unused_block_errors(spec);
        if unused.is_empty() {
            Ok(compiled)
        } else {
            Err(unused)
        }
    });
    compiled.map_err(|mut errors| {
        spec::place(&mut errors, located);
        errors
    })
}

/// An error as a compiler prints it: the path and message, then where it is written, with the
/// line quoted and the column marked.
pub(super) fn error_text(e: &SpecError, source: &Source) -> String {
    let mut out = e.to_string();
    if let (Some(line), Some(column)) = (e.line, e.column) {
        out.push_str(&format!("\n  --> {}:{line}:{column}", source.name));
        if let Some(text) = source.text.lines().nth(line.saturating_sub(1)) {
            let number = line.to_string();
            let pad = " ".repeat(number.len());
            let shown: String = text.chars().take(200).collect();
            let marker: String = text
                .chars()
                .take(column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            out.push_str(&format!("\n{pad} |\n{number} | {shown}\n{pad} | {marker}^"));
        }
    }
    out
}

fn print_errors(p: &mut Printed, errors: &[SpecError], source: &Source, to_stderr: bool) {
    for e in errors {
        let text = error_text(e, source);
        if to_stderr {
            p.eline(text);
        } else {
            p.line(text);
        }
    }
}

fn errors_json(errors: &[SpecError]) -> Value {
    json!({"ok": false, "errors": errors})
}

fn validate(
    p: &mut Printed,
    file: &Path,
    output: Output,
    deny_warnings: bool,
) -> anyhow::Result<i32> {
    let (source, parsed) = load(file)?;
    let compiled = parsed.and_then(|(spec, located)| {
        compiled_located(&spec, &located).map(|compiled| (compiled, located))
    });
    match compiled {
        Ok((compiled, located)) => {
            let mut warnings = lint::warnings(&compiled.spec);
            spec::place(&mut warnings, &located);
            let failed = deny_warnings && !warnings.is_empty();
            match output {
                Output::Text => {
                    for w in &warnings {
                        p.line(format!("warning: {}", error_text(w, &source)));
                    }
                    if failed {
                        p.line(format!(
                            "{} warning(s), and --deny-warnings: not ok",
                            warnings.len()
                        ));
                    } else {
                        p.line(format!("ok {}", compiled.hash));
                    }
                }
                Output::Json => p.line(json!({
                    "ok": !failed,
                    "policy_hash": compiled.hash,
                    "warnings": warnings,
                })),
            }
            Ok(if failed { 1 } else { 0 })
        }
        Err(errors) => {
            match output {
                Output::Text => print_errors(p, &errors, &source, false),
                Output::Json => p.line(errors_json(&errors)),
            }
            Ok(1)
        }
    }
}

fn compile_cmd(p: &mut Printed, file: &Path, output: Output) -> anyhow::Result<i32> {
    let (source, compiled) = load_compiled(file)?;
    let compiled = match compiled {
        Ok(compiled) => compiled,
        Err(errors) => {
            match output {
                Output::Json => p.line(errors_json(&errors)),
                Output::Text => print_errors(p, &errors, &source, true),
            }
            return Ok(1);
        }
    };
    match output {
        Output::Json => {
            p.line(json!({"ok": true, "policy_hash": compiled.hash, "cedar": compiled.cedar}))
        }
        Output::Text => {
            p.line(format!("// policy_hash: {}", compiled.hash));
            p.out(&compiled.cedar);
        }
    }
    Ok(0)
}

// --- fmt ----------------------------------------------------------------------------------

fn fmt(p: &mut Printed, file: &Path, write: bool, check: bool) -> anyhow::Result<i32> {
    let text = read(file)?;
    let name = file.display().to_string();
    let source = Source {
        name: name.clone(),
        text: text.clone(),
    };
    let out = match layout::format(&text, format_of(file)) {
        Ok(out) => out,
        Err(FmtError::Spec(errors)) => {
            print_errors(p, &errors, &source, true);
            return Ok(1);
        }
        Err(FmtError::Comments { line, why }) => {
            p.eline(format!(
                "fmt cannot keep the comments of `{name}` (line {line}: {why}); nothing changed"
            ));
            return Ok(1);
        }
    };
    if check {
        if out == text {
            return Ok(0);
        }
        let diff = similar::TextDiff::from_lines(&text, &out);
        p.out(
            &diff
                .unified_diff()
                .header(&name, &format!("{name} (formatted)"))
                .to_string(),
        );
        p.eline(format!(
            "`{name}` is not formatted; run `acp policy fmt --write {name}`"
        ));
        return Ok(1);
    }
    if write {
        if out != text {
            std::fs::write(file, &out).with_context(|| format!("cannot write `{name}`"))?;
            p.line(format!("formatted {name}"));
        }
        return Ok(0);
    }
    p.out(&out);
    Ok(0)
}

// --- test ---------------------------------------------------------------------------------

const STATUSES: [&str; 4] = ["pending", "active", "suspended", "revoked"];
const RISK_TIERS: [&str; 3] = ["low", "medium", "high"];

/// The result of one test case.
struct CaseResult {
    name: String,
    /// What differed, or why the case could not run; `None` when it passed.
    failure: Option<String>,
    got: Option<crate::policy::Decision>,
    /// What a check with this input would be warned of (a number sent as a string).
    warnings: Vec<String>,
}

fn run_case(policy: &CompiledPolicy, case: &TestCase) -> CaseResult {
    let fail = |failure: String| CaseResult {
        name: case.name.clone(),
        failure: Some(failure),
        got: None,
        warnings: Vec::new(),
    };
    let agent = &case.agent;
    if !STATUSES.contains(&agent.status.as_str()) {
        return fail(format!(
            "agent.status `{}` is not one of {}",
            agent.status,
            STATUSES.join(", ")
        ));
    }
    if !RISK_TIERS.contains(&agent.risk_tier.as_str()) {
        return fail(format!(
            "agent.risk_tier `{}` is not one of {}",
            agent.risk_tier,
            RISK_TIERS.join(", ")
        ));
    }
    for (name, value) in [
        ("agent.metadata", &agent.metadata),
        ("agent.labels", &agent.labels),
        ("context", &case.context),
    ] {
        if !(value.is_object() || value.is_null()) {
            return fail(format!("`{name}` must be an object"));
        }
    }
    let email = match &case.email {
        None => None,
        Some(v) => match EmailFacts::from_json(v, crate::mail::address_of) {
            Ok(email) => Some(email),
            Err(field) => return fail(format!("`{field}` is not valid email input")),
        },
    };
    let facts = Facts::of_test(
        agent,
        &case.action,
        ContextFields::new(&case.context),
        email.as_ref(),
        (case.emails_sent_last_minute, case.emails_sent_last_day),
    );
    let decision = match evaluate(policy, &facts) {
        Ok(d) => d,
        Err(e) => return fail(format!("cannot evaluate: {e}")),
    };
    let want_codes: Option<BTreeSet<&String>> = case
        .expect
        .reason_codes
        .as_ref()
        .map(|c| c.iter().collect());
    let got_codes: BTreeSet<&String> = decision.reason_codes.iter().collect();
    let differs = decision.outcome != case.expect.decision
        || want_codes.as_ref().is_some_and(|want| *want != got_codes);
    let failure = differs.then(|| {
        let expected = match &want_codes {
            Some(want) => format!(
                "{} [{}]",
                case.expect.decision.as_str(),
                want.iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => case.expect.decision.as_str().to_owned(),
        };
        let by = if decision.determining_policies.is_empty() {
            String::new()
        } else {
            format!(" by {}", decision.determining_policies.join(", "))
        };
        format!(
            "expected {expected}, got {} [{}]{by}",
            decision.outcome.as_str(),
            decision.reason_codes.join(", ")
        )
    });
    let warnings = field_warnings(policy, &case.action, ContextFields::new(&case.context))
        .into_iter()
        .map(|w| w.message)
        .collect();
    CaseResult {
        name: case.name.clone(),
        failure,
        got: Some(decision),
        warnings,
    }
}

fn test(p: &mut Printed, file: &Path, output: Output) -> anyhow::Result<i32> {
    let name = file.display().to_string();
    let (source, parsed) = load(file)?;
    let (spec, located) = match parsed {
        Ok(parsed) => parsed,
        Err(errors) => return Ok(report_errors(p, &errors, &source, output)),
    };
    if spec.tests.is_empty() {
        let message = format!("`{name}` has no test cases; add them under `tests`");
        match output {
            Output::Json => p.line(errors_json(&[SpecError::new("tests", message.clone())])),
            Output::Text => p.eline(message),
        }
        return Ok(1);
    }
    let policy = match compiled_located(&spec, &located) {
        Ok(policy) => policy,
        Err(errors) => return Ok(report_errors(p, &errors, &source, output)),
    };
    let results: Vec<CaseResult> = spec.tests.iter().map(|c| run_case(&policy, c)).collect();
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    let passed = results.len() - failed;
    match output {
        Output::Json => {
            let cases: Vec<Value> = results
                .iter()
                .zip(&spec.tests)
                .map(|(r, case)| {
                    json!({
                        "name": r.name,
                        "ok": r.failure.is_none(),
                        "failure": r.failure,
                        "warnings": r.warnings,
                        "expected": {
                            "decision": case.expect.decision.as_str(),
                            "reason_codes": case.expect.reason_codes,
                        },
                        "got": r.got.as_ref().map(|d| json!({
                            "decision": d.outcome.as_str(),
                            "reason_codes": d.reason_codes,
                            "reasons": d.reasons,
                            "determining_policies": d.determining_policies,
                        })),
                    })
                })
                .collect();
            p.line(json!({
                "ok": failed == 0,
                "policy_hash": policy.hash,
                "passed": passed,
                "failed": failed,
                "cases": cases,
            }));
        }
        Output::Text => {
            for r in &results {
                match &r.failure {
                    None => p.line(format!("ok   {}", r.name)),
                    Some(why) => p.line(format!("FAIL {}: {why}", r.name)),
                }
                for w in &r.warnings {
                    p.line(format!("     warning: {w}"));
                }
            }
            p.line(format!("{passed} passed, {failed} failed"));
        }
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

fn report_errors(p: &mut Printed, errors: &[SpecError], source: &Source, output: Output) -> i32 {
    match output {
        Output::Json => p.line(errors_json(errors)),
        Output::Text => print_errors(p, errors, source, true),
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "# header\n\nreusable_policy_blocks:\n  b:\n    actions: {allow: [read]}\n    email: {on_violation: deny, max_recipients: 2}\n    status: {require_active: false}\n    amount: {field: amount, limits: {USD: {allow_up_to: 0, challenge_up_to: 5}}}\nagent_groups:\n  - {name: g, members: [agt_0123456789abcdef0123456789abcdef]}\nbindings:\n  - {group: g, blocks: [b]}\ntests:\n  - name: t\n    agent: {}\n    action: read\n    context: {}\n    expect: {decision: allow}\n";

    #[test]
    fn fmt_drops_only_defaults_and_keeps_the_meaning() {
        let out = layout::format(SPEC, Format::Yaml).unwrap();
        assert!(
            out.starts_with("# header\n\nreusable_policy_blocks:\n"),
            "{out}"
        );
        for gone in [
            "on_violation",
            "field:",
            "allow_up_to",
            "require_active",
            "null",
        ] {
            assert!(!out.contains(gone), "`{gone}` in {out}");
        }
        // `status: {}` differs from no status, `context: {}` from no context, `agent` is required.
        for kept in ["status: {}", "context: {}", "agent: {}", "tests:"] {
            assert!(out.contains(kept), "`{kept}` not in {out}");
        }
        let before = spec::parse(SPEC, Format::Yaml).unwrap();
        let after = spec::parse(&out, Format::Yaml).unwrap();
        assert_eq!(before, after);
        assert_eq!(before.hash(), after.hash());
        assert_eq!(layout::format(&out, Format::Yaml).unwrap(), out);
    }

    #[test]
    fn fmt_keeps_json_as_json_in_model_order() {
        let json = r#"{"bindings":[{"blocks":["b"],"group":"g"}],"agent_groups":[{"members":[],"name":"g"}],"reusable_policy_blocks":{"b":{"actions":{"allow":["x"]}}}}"#;
        let out = layout::format(json, Format::Json).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["bindings"][0]["group"], "g");
        let order: Vec<usize> = ["reusable_policy_blocks", "agent_groups", "bindings"]
            .iter()
            .map(|k| out.find(k).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
        assert!(!out.contains("members"), "{out}");
        assert_eq!(layout::format(&out, Format::Json).unwrap(), out);
    }

    #[test]
    fn a_case_whose_number_is_a_string_is_warned_of() {
        let spec = spec::parse(
            "reusable_policy_blocks: {r: {amount: {limits: {USD: {allow_up_to: 10}}}}}\nagent_groups: [{name: g, members: [agt_00000000000000000000000000000000]}]\nbindings: [{group: g, blocks: [r]}]\ntests:\n  - {name: t, agent: {}, action: refund, context: {amount: \"5\", currency: USD}, expect: {decision: deny}}\n",
            Format::Yaml,
        )
        .unwrap();
        let policy = compile(&spec).unwrap();
        let r = run_case(&policy, &spec.tests[0]);
        assert!(r.failure.is_none());
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].contains("`amount` is the string \"5\""),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn a_case_with_a_bad_status_fails_instead_of_passing_silently() {
        let spec = spec::parse(
            "tests:\n  - {name: t, agent: {status: suspend}, action: a, expect: {decision: deny}}\n",
            Format::Yaml,
        )
        .unwrap();
        let policy = compile(&spec).unwrap();
        let r = run_case(&policy, &spec.tests[0]);
        assert!(r.failure.unwrap().contains("`suspend`"));
    }
}
