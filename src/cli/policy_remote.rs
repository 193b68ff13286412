//! `acp policy get|versions|diff|rollback`: the policies on a server (the offline commands,
//! validate, fmt, compile and test, are in `policy.rs`).

use serde_json::{json, Value};

use super::client::{cell, fields, finish, print_json, table, Client, ClientArgs, YesArg};
use super::operate::named;
use super::output::{colours_on, line, print};
use super::sync::diff_text;
use crate::policy::diff::diff;
use crate::policy::spec::PolicySpec;

#[derive(Debug, clap::Args)]
pub struct PolicyGetArgs {
    /// The policy [default: pol_default]
    #[arg(long, default_value = "pol_default")]
    pub policy: String,
    /// An earlier version [default: the current one]
    #[arg(long)]
    pub version: Option<i64>,
    /// Print only the compiled Cedar
    #[arg(long)]
    pub cedar: bool,
    #[command(flatten)]
    pub client: ClientArgs,
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
        if args.client.json() {
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
            line(serde_json::to_string_pretty(&detail["spec"])?)?;
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
        let rows: Vec<Vec<String>> = listed["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
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
        let spec_of = |v: &Value| -> anyhow::Result<PolicySpec> {
            Ok(serde_json::from_value(v["spec"].clone())?)
        };
        let (from_spec, to_spec) = (spec_of(&from)?, spec_of(&to)?);
        let d = diff(
            Some((&from_spec, from["cedar"].as_str().unwrap_or(""))),
            &to_spec,
            to["cedar"].as_str().unwrap_or(""),
        );
        let summary = serde_json::to_value(&d.summary)?;
        if args.client.json() {
            print_json(&json!({
                "ok": true, "policy_id": args.policy, "from": args.from, "to": args.to,
                "from_hash": from["policy_hash"], "to_hash": to["policy_hash"],
                "changed": d.changed, "cedar_diff": d.cedar_diff, "summary": summary,
            }))?;
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
                    &summary,
                    &d.cedar_diff,
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
            &answer["diff"]["summary"],
            answer["diff"]["cedar_diff"].as_str().unwrap_or(""),
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
