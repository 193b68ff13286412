//! `acp policy get|versions|diff|rollback`: the policies on a server (the offline commands,
//! validate, fmt, compile and test, are in `policy.rs`).

use serde_json::{json, Value};

use super::client::{cell, fields, finish, items, print_json, table, Client, ClientArgs, YesArg};
use super::operate::named;
use super::output::{colours_on, line, print};
use super::sync::diff_text;
use crate::policy::compile;
use crate::policy::diff::{diff, spec_diff};
use crate::policy::layout;
use crate::policy::semantic::{analyse, semantic_diff, SemanticDiff};
use crate::policy::spec::{self, PolicySpec, SpecError};

#[derive(Debug, clap::Args)]
pub struct PolicyGetArgs {
    /// The policy [default: pol_default]
    #[arg(long, default_value = "pol_default")]
    pub policy: String,
    /// An earlier version [default: the current one]
    #[arg(long)]
    pub version: Option<i64>,
    /// Print only the compiled Cedar
    #[arg(long, conflicts_with = "format")]
    pub cedar: bool,
    /// Print only the spec, as `acp policy fmt` writes it: `yaml` or `json`. Syncing this
    /// text back is no change.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<SpecFormat>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The text format of a spec printed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SpecFormat {
    Yaml,
    Json,
}

/// A policy version's spec (as the server answers it) in its canonical text.
fn spec_text(detail: &Value, format: SpecFormat) -> anyhow::Result<String> {
    let spec = spec_of(detail)?;
    match format {
        SpecFormat::Yaml => layout::yaml(&spec),
        SpecFormat::Json => layout::json(&spec),
    }
    .map_err(|e| anyhow::anyhow!("cannot write the spec: {e}"))
}

/// The semantic diff of two versions, its examples confirmed against both compiled (from the
/// specs alone when one does not compile here, which a version the server holds always did).
fn semantic(from: &PolicySpec, to: &PolicySpec) -> SemanticDiff {
    match (compile(from), compile(to)) {
        (Ok(from), Ok(to)) => semantic_diff(Some(&from), &to),
        _ => analyse(Some(from), to),
    }
}

/// The spec of a policy version, as the server answers it.
fn spec_of(detail: &Value) -> anyhow::Result<PolicySpec> {
    spec::from_value(&detail["spec"]).map_err(|errors| {
        anyhow::anyhow!(
            "the server's spec does not read as a spec: {}",
            SpecError::list(&errors)
        )
    })
}

#[derive(Debug, clap::Args)]
pub struct PolicyVersionsArgs {
    /// The policy [default: pol_default]
    #[arg(long, default_value = "pol_default")]
    pub policy: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct PolicyDiffArgs {
    /// The version to compare from
    pub from: i64,
    /// The version to compare to
    pub to: i64,
    /// The policy [default: pol_default]
    #[arg(long, default_value = "pol_default")]
    pub policy: String,
    /// Also print the unified diff of the compiled Cedar (text output; JSON always has it)
    #[arg(long)]
    pub cedar: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 rolled back (or no change), 2 a dry run found changes, 3 conflict (not at --expect-hash), 4 not logged in, 5 not an owner or admin, 6 no such version, 1 any other error."
)]
pub struct PolicyRollbackArgs {
    /// The earlier version whose spec becomes the new version
    pub version: i64,
    /// The policy [default: pol_default]
    #[arg(long, default_value = "pol_default")]
    pub policy: String,
    /// Only show what would change
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse (exit 3) unless the policy's current hash is this `sha256:...`
    #[arg(long, value_name = "HASH")]
    pub expect_hash: Option<String>,
    /// Make a retried rollback safe: the server answers a retry with the first answer
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Also print the unified diff of the compiled Cedar (text output; JSON always has it)
    #[arg(long)]
    pub cedar: bool,
    #[command(flatten)]
    pub yes: YesArg,
    #[command(flatten)]
    pub client: ClientArgs,
}

async fn version(client: &Client, policy: &str, version: Option<i64>) -> anyhow::Result<Value> {
    match version {
        Some(v) => {
            client
                .get(&format!("/v1/policies/{policy}/versions/{v}"))
                .await
        }
        None => client.get(&format!("/v1/policies/{policy}")).await,
    }
}

pub async fn get(args: &PolicyGetArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let detail = version(&client, &args.policy, args.version).await?;
        if let Some(format) = args.format {
            print(&spec_text(&detail, format)?)?;
        } else if args.client.json() {
            print_json(&detail)?;
        } else if args.cedar {
            print(detail["cedar"].as_str().unwrap_or(""))?;
        } else {
            let mut shown = detail.clone();
            shown["author"] = serde_json::json!(named(&detail["author_name"], &detail["author"]));
            fields(
                &shown,
                &[
                    "policy_id",
                    "name",
                    "version",
                    "policy_hash",
                    "author",
                    "created_at",
                ],
            )?;
            line("spec:")?;
            print(&spec_text(&detail, SpecFormat::Yaml)?)?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn versions(args: &PolicyVersionsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let listed = client
            .get(&format!("/v1/policies/{}/versions", args.policy))
            .await?;
        if args.client.json() {
            print_json(&listed)?;
            return Ok(0);
        }
        let rows: Vec<Vec<String>> = items(&listed)
            .iter()
            .map(|v| {
                vec![
                    cell(&v["version"]),
                    cell(&v["policy_hash"]),
                    named(&v["author_name"], &v["author"]),
                    cell(&v["created_at"]),
                ]
            })
            .collect();
        table(&["VERSION", "HASH", "AUTHOR", "CREATED"], &rows)?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn diff_versions(args: &PolicyDiffArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let from = version(&client, &args.policy, Some(args.from)).await?;
        let to = version(&client, &args.policy, Some(args.to)).await?;
        let (from_spec, to_spec) = (spec_of(&from)?, spec_of(&to)?);
        let d = diff(
            Some((&from_spec, from["cedar"].as_str().unwrap_or(""))),
            &to_spec,
            to["cedar"].as_str().unwrap_or(""),
        );
        let answer = json!({
            "ok": true, "policy_id": args.policy, "from": args.from, "to": args.to,
            "from_hash": from["policy_hash"], "to_hash": to["policy_hash"],
            "changed": d.changed, "cedar_diff": d.cedar_diff,
            "spec_diff": spec_diff(Some(&from_spec), &to_spec),
            "summary": serde_json::to_value(&d.summary)?,
            "semantic": serde_json::to_value(semantic(&from_spec, &to_spec))?,
        });
        if args.client.json() {
            print_json(&answer)?;
        } else {
            let mut out = format!(
                "policy {} version {} ({}) -> {} ({})\n",
                args.policy,
                args.from,
                cell(&from["policy_hash"]),
                args.to,
                cell(&to["policy_hash"])
            );
            if d.changed {
                out.push_str(&diff_text(
                    &answer,
                    args.cedar,
                    colours_on(&std::io::stdout()),
                ));
            } else {
                out.push_str("no change\n");
            }
            print(&out)?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn rollback(args: &PolicyRollbackArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        if !args.dry_run {
            args.yes.confirm(&format!(
                "apply version {} of {} as its new version",
                args.version, args.policy
            ))?;
        }
        let mut req = client
            .request(
                reqwest::Method::POST,
                &format!("/v1/policies/{}/rollback", args.policy),
            )
            .json(&json!({
                "version": args.version,
                "dry_run": args.dry_run,
                "expected_policy_hash": args.expect_hash,
            }));
        if let Some(key) = &args.idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        let answer = client.send(req).await?;
        let changes = answer["diff"]["changed"] == json!(true);
        let code = if args.dry_run && changes { 2 } else { 0 };
        if args.client.json() {
            print_json(&answer)?;
            return Ok(code);
        }
        let mut out = format!(
            "policy {}: {} -> {} (the spec of version {})\n",
            args.policy,
            cell(&answer["current_policy_hash"]),
            cell(&answer["desired_policy_hash"]),
            args.version
        );
        out.push_str(&diff_text(
            &answer["diff"],
            args.cedar,
            colours_on(&std::io::stdout()),
        ));
        out.push_str(
            &match (args.dry_run, changes, answer["applied"].as_bool()) {
                (true, true, _) => format!(
                    "dry run: changes found (exit 2); roll back with --expect-hash {}\n",
                    cell(&answer["current_policy_hash"])
                ),
                (true, false, _) => "dry run: no change\n".to_owned(),
                (false, _, Some(true)) => format!(
                    "rolled back: version {} ({})\n",
                    answer["version"],
                    cell(&answer["policy_hash"])
                ),
                _ => "no change: nothing applied\n".to_owned(),
            },
        );
        print(&out)?;
        Ok(code)
    }
    .await;
    finish(result, args.client.json())
}
