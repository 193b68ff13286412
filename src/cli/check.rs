//! `acp check --agent NAME|ID --action A [--context JSON|@FILE] [--policy P]`: the question a
//! backend asks before it acts (`POST /v1/check`, with the workspace API key), from a
//! terminal. The decision is the exit code, so scripts can branch on it: 0 allow, 8 deny,
//! 9 challenge.

use serde_json::{json, Value};

use super::client::{cell, finish, normalize, print_json, Client, ClientArgs, Failure};
use super::credentials::Credentials;

/// The exit code of a `deny` answer.
pub const EXIT_DENY: i32 = 8;
/// The exit code of a `challenge` answer.
pub const EXIT_CHALLENGE: i32 = 9;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 allow, 8 deny, 9 challenge (an approver decides: `acp challenges show|approve|deny ID`); 1 any error (bad input, the server unreachable), 4 the API key is not valid, 5 refused by its scopes, 6 unknown agent or policy.\n`--output json` prints the server's answer (the Decision) as it is."
)]
pub struct CheckArgs {
    /// The agent that wants to act: its name (when no other agent of the workspace has it) or
    /// its id (`agt_...`)
    #[arg(long, value_name = "ID")]
    pub agent: String,
    /// What it wants to do, e.g. `refund`
    #[arg(long)]
    pub action: String,
    /// The action's data: a JSON object, e.g. '{"amount": 250, "currency": "USD"}', or
    /// @FILE to read it from a file
    #[arg(long, value_name = "JSON|@FILE")]
    pub context: Option<String>,
    /// The policy to decide with [default: pol_default]
    #[arg(long, value_name = "ID")]
    pub policy: Option<String>,
    /// The workspace API key [default: --token]
    #[arg(long, env = "ACP_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The server and credential of a command that takes a workspace API key (`--api-key` /
/// `ACP_API_KEY`) before the usual `--token` or stored login: with a key, the server is
/// `--server` or the one of the last `acp login`.
pub fn connect_with_key(client: &ClientArgs, api_key: Option<&str>) -> anyhow::Result<Client> {
    let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) else {
        return client.connect();
    };
    if client.csv() {
        return Err(Failure::local(1, "`--output csv` is for `acp access` only").into());
    }
    keyed(client, key)
}

/// [`connect_with_key`] for a command that prints `--output csv`.
pub fn connect_with_key_csv(client: &ClientArgs, api_key: Option<&str>) -> anyhow::Result<Client> {
    match api_key.map(str::trim).filter(|k| !k.is_empty()) {
        Some(key) => keyed(client, key),
        None => client.connect_csv(),
    }
}

fn keyed(client: &ClientArgs, key: &str) -> anyhow::Result<Client> {
    let server = match &client.server {
        Some(s) => normalize(s),
        None => Credentials::load(&client.credentials_path()?)?
            .current
            .ok_or_else(|| {
                Failure::local(1, "which server? pass --server URL (or set ACP_SERVER)")
            })?,
    };
    Ok(Client::new(server, key.to_owned(), None))
}

/// The context of `--context`: a JSON object, inline or in the file after `@`.
pub(super) fn context_of(text: &str) -> anyhow::Result<Value> {
    let (text, from) = match text.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| Failure::local(1, format!("--context: cannot read `{path}`: {e}")))?,
            format!("`{path}`"),
        ),
        None => (text.to_owned(), "--context".to_owned()),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::local(1, format!("{from} is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(Failure::local(1, format!("{from} must be a JSON object")).into());
    }
    Ok(value)
}

/// The exit code of a decision.
pub fn exit_of(decision: &str) -> i32 {
    match decision {
        "allow" => 0,
        "challenge" => EXIT_CHALLENGE,
        _ => EXIT_DENY,
    }
}

/// A decision as lines for people.
fn decision_text(d: &Value) -> String {
    let list = |key: &str| {
        d[key]
            .as_array()
            .filter(|items| !items.is_empty())
            .map(|items| {
                items
                    .iter()
                    .map(cell)
                    .collect::<Vec<_>>()
                    .join(if key == "reasons" { "; " } else { ", " })
            })
            .unwrap_or_else(|| "-".into())
    };
    let mut rows = vec![
        ("decision", cell(&d["decision"])),
        ("reason codes", list("reason_codes")),
        ("reasons", list("reasons")),
        ("decided by", list("determining_policies")),
        (
            "policy",
            format!(
                "{} version {} ({})",
                cell(&d["policy_id"]),
                cell(&d["policy_version"]),
                cell(&d["policy_hash"])
            ),
        ),
        ("trace", cell(&d["trace_id"])),
    ];
    if let Some(id) = d["challenge_id"].as_str() {
        let c = &d["challenge"];
        rows.push((
            "challenge",
            format!(
                "{id}, expires {} (in {} s)",
                cell(&c["expires_at"]),
                cell(&c["expires_in"])
            ),
        ));
        rows.push(("approval link", cell(&c["url"])));
        rows.push((
            "decide",
            format!("acp challenges show {id}, then acp challenges approve|deny {id}"),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

pub async fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let result = async {
        let context = args.context.as_deref().map(context_of).transpose()?;
        let client = connect_with_key(&args.client, args.api_key.as_deref())?;
        let agent = super::resolve::agent(&client, &args.agent).await?;
        let mut body = json!({ "agent_id": agent, "action": args.action });
        if let Some(context) = context {
            body["context"] = context;
        }
        if let Some(policy) = &args.policy {
            body["policy_id"] = json!(policy);
        }
        let decision = client.post("/v1/check", &body).await?;
        if args.client.json() {
            print_json(&decision)?;
        } else {
            super::output::print(&decision_text(&decision))?;
        }
        Ok(exit_of(decision["decision"].as_str().unwrap_or("")))
    }
    .await;
    finish(result, args.client.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_exit_codes_and_lines() {
        assert_eq!(
            (exit_of("allow"), exit_of("deny"), exit_of("challenge")),
            (0, 8, 9)
        );
        let text = decision_text(&json!({
            "decision": "challenge", "reason_codes": ["amount_requires_approval"],
            "reasons": ["amounts over 100 USD need approval"], "determining_policies": ["refunds/refunds"],
            "policy_id": "pol_default", "policy_version": 1, "policy_hash": "sha256:ab", "trace_id": "trc_1",
            "challenge_id": "pch_1", "challenge": {"url": "http://h/v1/approval-links/apr_x", "expires_at": "t", "expires_in": 300},
        }));
        assert!(text.starts_with("decision       challenge\n"), "{text}");
        assert!(text.contains("acp challenges approve|deny pch_1"), "{text}");
        assert!(context_of("[1]").is_err() && context_of("{").is_err());
        assert_eq!(context_of(r#"{"amount": 5}"#).unwrap()["amount"], 5);
    }
}
