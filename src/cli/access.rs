//! `acp access what-can AGENT` and `acp access who-can ACTION [--context JSON]`: who may do
//! what under a policy, from a terminal (`GET /v1/access/...`; with `--context`, the AuthZEN
//! subject search with the workspace API key). `--output text|json|csv`.

use serde_json::{json, Value};

use super::check::connect_with_key_csv;
use super::client::{cell, finish, print_json, table, ClientArgs, Failure};
use crate::api;
use crate::policy::access::{action_csv, agent_csv};

#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    #[command(subcommand)]
    pub command: AccessCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AccessCommand {
    /// What an agent may do: every action its policy names, with the conditions under which
    /// it is allowed, challenged or denied, and what decides each
    #[command(name = "what-can")]
    WhatCan {
        /// The agent: its name (when no other agent of the workspace has it) or its id
        agent: String,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Who may do an action: every kind of agent with its conditions; with --context, the
    /// agents the policy allows for that request (in order of their ids)
    #[command(name = "who-can")]
    WhoCan {
        /// The action, e.g. `refund`
        action: String,
        /// The request's data: a JSON object, e.g. '{"amount": 250, "currency": "USD"}', or
        /// @FILE; lists the agents allowed (needs the workspace API key)
        #[arg(long, value_name = "JSON|@FILE")]
        context: Option<String>,
        /// With --context: the agents challenged too
        #[arg(long)]
        include_challenge: bool,
        #[command(flatten)]
        policy: PolicyArgs,
        /// The workspace API key (for --context) [default: --token]
        #[arg(long, env = "ACP_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    /// The policy [default: pol_default]
    #[arg(long, value_name = "ID")]
    pub policy: Option<String>,
    /// One of its versions [default: the current one]
    #[arg(long, value_name = "N")]
    pub version: Option<i64>,
}

impl PolicyArgs {
    fn query(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.policy {
            parts.push(format!("policy_id={}", enc(p)));
        }
        if let Some(v) = self.version {
            parts.push(format!("version={v}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// The subject search's pages, at most this many agents in all.
const MAX_LISTED: usize = 10_000;

pub async fn run(args: &AccessArgs) -> anyhow::Result<i32> {
    match &args.command {
        AccessCommand::WhatCan {
            agent,
            policy,
            client,
        } => {
            let result = async {
                let c = client.connect_csv()?;
                let agent = super::resolve::agent(&c, agent).await?;
                let answer = c
                    .get(&format!(
                        "/v1/access/agents/{}{}",
                        enc(&agent),
                        policy.query()
                    ))
                    .await?;
                if client.json() {
                    return print_json(&answer).map(|()| 0);
                }
                let body: api::AgentAccessResponse = read(answer)?;
                if client.csv() {
                    super::output::print(&agent_csv(&body)?)?;
                    return Ok(0);
                }
                super::output::line(format!(
                    "{} under {} version {}; groups: {}",
                    body.agent_id,
                    body.policy_id,
                    body.version,
                    list(&body.groups)
                ))?;
                let rows = body
                    .actions
                    .iter()
                    .flat_map(|a| a.cells.iter().map(move |c| cell_row(&a.action, c)))
                    .collect::<Vec<_>>();
                table(&["ACTION", "WHEN", "OUTCOME", "DECIDED BY"], &rows)?;
                notes(&body.not_analysed)?;
                Ok(0)
            }
            .await;
            finish(result, client.json())
        }
        AccessCommand::WhoCan {
            action,
            context,
            include_challenge,
            policy,
            api_key,
            client,
        } => {
            let result = async {
                match context {
                    None => who_can(action, policy, client).await,
                    Some(context) => {
                        let context = super::check::context_of(context)?;
                        allowed_agents(action, context, *include_challenge, policy, api_key, client)
                            .await
                    }
                }
            }
            .await;
            finish(result, client.json())
        }
    }
}

/// `text` as one path segment or query value.
fn enc(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn read<T: serde::de::DeserializeOwned>(answer: Value) -> anyhow::Result<T> {
    serde_json::from_value(answer)
        .map_err(|e| Failure::local(1, format!("the server's answer does not read: {e}")).into())
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

fn cell_row(action: &str, c: &api::AccessCellBody) -> Vec<String> {
    vec![
        action.to_owned(),
        c.condition.clone(),
        c.outcome.clone(),
        list(&c.decided_by),
    ]
}

fn notes(not_analysed: &[String]) -> anyhow::Result<()> {
    for note in not_analysed {
        super::output::eline(format!("not analysed: {note}"))?;
    }
    Ok(())
}

async fn who_can(action: &str, policy: &PolicyArgs, client: &ClientArgs) -> anyhow::Result<i32> {
    let c = client.connect_csv()?;
    let answer = c
        .get(&format!(
            "/v1/access/actions/{}{}",
            enc(action),
            policy.query()
        ))
        .await?;
    if client.json() {
        return print_json(&answer).map(|()| 0);
    }
    let body: api::ActionAccessResponse = read(answer)?;
    if client.csv() {
        super::output::print(&action_csv(&body)?)?;
        return Ok(0);
    }
    super::output::line(format!(
        "{} under {} version {}",
        body.action, body.policy_id, body.version
    ))?;
    let rows = body
        .principals
        .iter()
        .flat_map(|p| {
            let who = p.principals.join("; ");
            p.cells.iter().map(move |c| {
                vec![
                    who.clone(),
                    c.condition.clone(),
                    c.outcome.clone(),
                    list(&c.decided_by),
                ]
            })
        })
        .collect::<Vec<_>>();
    table(&["AGENTS", "WHEN", "OUTCOME", "DECIDED BY"], &rows)?;
    notes(&body.not_analysed)?;
    Ok(0)
}

/// The agents the policy allows (and challenges, when asked) for the request: every page of
/// the subject search.
async fn allowed_agents(
    action: &str,
    context: Value,
    include_challenge: bool,
    policy: &PolicyArgs,
    api_key: &Option<String>,
    client: &ClientArgs,
) -> anyhow::Result<i32> {
    if policy.version.is_some() {
        return Err(Failure::local(
            1,
            "--version is not taken with --context: a search decides under the current version",
        )
        .into());
    }
    let c = connect_with_key_csv(client, api_key.as_deref())?;
    let mut query = Vec::new();
    if let Some(p) = &policy.policy {
        query.push(format!("policy_id={}", enc(p)));
    }
    if include_challenge {
        query.push("include=challenge".to_owned());
    }
    let path = if query.is_empty() {
        "/access/v1/search/subject".to_owned()
    } else {
        format!("/access/v1/search/subject?{}", query.join("&"))
    };
    let mut found: Vec<(String, String)> = Vec::new();
    let mut token = String::new();
    loop {
        let body = json!({
            "subject": {"type": "agent"},
            "action": {"name": action},
            "context": context,
            "page": {"token": token, "limit": 1000},
        });
        let answer = c.post(&path, &body).await?;
        for r in answer["results"].as_array().into_iter().flatten() {
            let decision = r["properties"]["decision"].as_str().unwrap_or("allow");
            found.push((cell(&r["id"]), decision.to_owned()));
        }
        token = answer["page"]["next_token"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if token.is_empty() || found.len() >= MAX_LISTED {
            break;
        }
    }
    if client.json() {
        let agents: Vec<Value> = found
            .iter()
            .map(|(id, d)| json!({"agent_id": id, "decision": d}))
            .collect();
        print_json(&json!({"action": action, "agents": agents, "truncated": !token.is_empty()}))?;
    } else if client.csv() {
        let mut out = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .from_writer(Vec::new());
        out.write_record(["agent_id", "decision"])?;
        for (id, d) in &found {
            out.write_record([id, d])?;
        }
        let bytes = out.into_inner().map_err(|e| e.into_error())?;
        super::output::print(&String::from_utf8_lossy(&bytes))?;
    } else {
        let rows: Vec<Vec<String>> = found
            .iter()
            .map(|(id, d)| vec![id.clone(), d.clone()])
            .collect();
        table(&["AGENT", "DECISION"], &rows)?;
        if !token.is_empty() {
            super::output::eline(format!("… the first {MAX_LISTED} agents only"))?;
        }
    }
    Ok(0)
}
