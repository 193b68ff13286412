//! The day-two commands on a running server: `acp agents`, `acp kill-switch`, `acp credentials`
//! and `acp challenges`. Each takes the client flags (`--server`, `--token`, `--workspace`,
//! `--output`); destructive ones ask first on a terminal and take `--yes`. An agent is named by
//! its name or its id (see `resolve.rs`).

use clap::Subcommand;
use serde_json::{json, Value};

use super::client::{
    cell, fields, finish, items, print_json, show_list, table, ClientArgs, YesArg,
};
use super::output::line;
use super::resolve;
use super::values::{self, AgentStatus, ChallengeStatus, RiskTier, Seen};

#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: AgentsCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The filters of `acp agents list`: those of the console's agents page.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentFilters {
    /// Agents whose id is this, or whose name holds it (case-insensitive)
    #[arg(long, value_name = "TEXT")]
    pub search: Option<String>,
    /// Only the agents of this exact name
    #[arg(long)]
    pub name: Option<String>,
    /// Only agents in this status
    #[arg(long, value_enum)]
    pub status: Option<AgentStatus>,
    /// Only agents of this risk tier
    #[arg(long, value_enum)]
    pub risk_tier: Option<RiskTier>,
    /// Only the members of this group of the workspace's policy
    #[arg(long)]
    pub group: Option<String>,
    /// Only agents with an inventory item labelled so, e.g. `payments` or `env=prod`
    #[arg(long)]
    pub label: Option<String>,
    /// Only agents whose last heartbeat is so recent (or old)
    #[arg(long, value_enum)]
    pub seen: Option<Seen>,
}

impl AgentFilters {
    /// The query of `GET /v1/agents`, and the same as flags (for the `more:` line).
    fn query(&self) -> Vec<(&'static str, &'static str, Option<String>)> {
        vec![
            ("q", "--search", self.search.clone()),
            ("name", "--name", self.name.clone()),
            ("status", "--status", self.status.map(values::name)),
            ("risk_tier", "--risk-tier", self.risk_tier.map(values::name)),
            ("group", "--group", self.group.clone()),
            ("label", "--label", self.label.clone()),
            ("seen", "--seen", self.seen.map(values::name)),
        ]
    }
}

/// An agent, by name or id.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArg {
    /// The agent: its name (when no other agent of the workspace has it) or its id
    #[arg(value_name = "AGENT")]
    pub agent: String,
}

#[derive(Debug, Clone, Subcommand)]
pub enum AgentsCommand {
    /// The workspace's agents, newest first, a page at a time
    List {
        #[command(flatten)]
        filters: AgentFilters,
        /// How many on this page (1 to 200)
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
        /// The next page: the cursor the previous page ended with (`more:`, or `next_cursor`
        /// in JSON)
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One agent
    Show {
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Suspend an agent: it is denied until resumed
    Suspend {
        #[command(flatten)]
        agent: AgentArg,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Resume a suspended agent
    Resume {
        #[command(flatten)]
        agent: AgentArg,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke an agent for good
    Revoke {
        #[command(flatten)]
        agent: AgentArg,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Approve a pending agent
    Approve {
        #[command(flatten)]
        agent: AgentArg,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Follows `next_cursor` until `limit` items (the list endpoints give at most 200 a page).
pub async fn list_all(
    client: &super::client::Client,
    path: &str,
    query: &[(&str, Option<String>)],
    limit: i64,
) -> anyhow::Result<Value> {
    let mut items: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = (limit - items.len() as i64).clamp(1, 200);
        let mut req = client
            .request(reqwest::Method::GET, path)
            .query(&[("limit", page.to_string())]);
        for (k, v) in query {
            if let Some(v) = v {
                req = req.query(&[(k, v)]);
            }
        }
        if let Some(c) = &cursor {
            req = req.query(&[("cursor", c)]);
        }
        let answer = client.send(req).await?;
        items.extend(answer["items"].as_array().cloned().unwrap_or_default());
        cursor = answer["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() || items.len() as i64 >= limit {
            items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            return Ok(json!({"ok": true, "items": items, "next_cursor": cursor}));
        }
    }
}

/// A shell word: as it is when it needs no quotes, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:=/@+".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// One page of `acp agents list`; the text ends with the command of the next page, if any.
async fn list_page(
    args: &AgentsArgs,
    client: &super::client::Client,
    filters: &AgentFilters,
    limit: i64,
    cursor: Option<&str>,
) -> anyhow::Result<i32> {
    let query = filters.query();
    let mut req = client
        .request(reqwest::Method::GET, "/v1/agents")
        .query(&[("limit", limit.to_string())]);
    for (key, _, value) in &query {
        if let Some(value) = value {
            req = req.query(&[(key, value)]);
        }
    }
    if let Some(cursor) = cursor {
        req = req.query(&[("cursor", cursor)]);
    }
    let page = client.send(req).await?;
    if args.client.json() {
        print_json(&page)?;
        return Ok(0);
    }
    show_list(
        false,
        &page,
        &[
            ("AGENT", "agent_id"),
            ("NAME", "name"),
            ("STATUS", "status"),
            ("RISK", "risk_tier"),
            ("LAST SEEN", "last_seen_at"),
            ("CREATED", "created_at"),
        ],
    )?;
    if let Some(next) = page["next_cursor"].as_str() {
        let mut more = String::from("more: acp agents list");
        for (_, flag, value) in &query {
            if let Some(value) = value {
                more.push_str(&format!(" {flag} {}", shell_word(value)));
            }
        }
        if limit != 50 {
            more.push_str(&format!(" --limit {limit}"));
        }
        more.push_str(&format!(" --cursor {next}"));
        line(more)?;
    }
    Ok(0)
}

pub async fn agents(args: &AgentsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let (verb, agent, reason) = match &args.command {
            AgentsCommand::List {
                filters,
                limit,
                cursor,
            } => return list_page(args, &client, filters, *limit, cursor.as_deref()).await,
            AgentsCommand::Show { agent } => {
                let agent_id = resolve::agent(&client, &agent.agent).await?;
                let shown = client.get(&format!("/v1/agents/{agent_id}")).await?;
                if args.client.json() {
                    print_json(&shown)?;
                } else {
                    fields(
                        &shown["agent"],
                        &[
                            "agent_id",
                            "name",
                            "status",
                            "verification_tier",
                            "risk_tier",
                            "key_type",
                            "public_key",
                            "created_at",
                            "attested_at",
                            "last_seen_at",
                            "updated_at",
                        ],
                    )?;
                    line(format!("metadata           {}", shown["agent"]["metadata"]))?;
                }
                return Ok(0);
            }
            AgentsCommand::Suspend { agent, reason, yes } => {
                let agent_id = resolve::agent(&client, &agent.agent).await?;
                yes.confirm(&format!(
                    "suspend agent {}",
                    shown_as(&agent.agent, &agent_id)
                ))?;
                ("suspend", agent_id, reason)
            }
            AgentsCommand::Revoke { agent, reason, yes } => {
                let agent_id = resolve::agent(&client, &agent.agent).await?;
                yes.confirm(&format!(
                    "revoke agent {}",
                    shown_as(&agent.agent, &agent_id)
                ))?;
                ("revoke", agent_id, reason)
            }
            AgentsCommand::Resume { agent, reason } => (
                "resume",
                resolve::agent(&client, &agent.agent).await?,
                reason,
            ),
            AgentsCommand::Approve { agent, reason } => (
                "approve",
                resolve::agent(&client, &agent.agent).await?,
                reason,
            ),
        };
        let changed = client
            .post(
                &format!("/v1/agents/{agent}/{verb}"),
                &json!({ "reason": reason }),
            )
            .await?;
        if args.client.json() {
            print_json(&changed)?;
        } else {
            line(format!("{agent}: {}", cell(&changed["agent"]["status"])))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

/// `name (id)` when the agent was named, else its id.
fn shown_as(given: &str, id: &str) -> String {
    if given == id {
        id.to_owned()
    } else {
        format!("{given} ({id})")
    }
}

#[derive(Debug, clap::Args)]
pub struct KillSwitchArgs {
    #[command(subcommand)]
    pub command: KillSwitchCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum KillSwitchCommand {
    /// Whether minting is paused, and when every credential was last revoked
    Status,
    /// Pause minting: no new credentials until resumed
    Pause {
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Resume minting
    Resume {
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke every credential the workspace has issued
    RevokeAll {
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
}

pub async fn kill_switch(args: &KillSwitchArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let state = match &args.command {
            KillSwitchCommand::Status => client.get("/v1/identity/kill-switch/status").await?,
            KillSwitchCommand::Pause { reason, yes } => {
                yes.confirm("pause minting in this workspace")?;
                client
                    .post(
                        "/v1/identity/kill-switch/minting",
                        &json!({ "paused": true, "reason": reason }),
                    )
                    .await?
            }
            KillSwitchCommand::Resume { reason } => {
                client
                    .post(
                        "/v1/identity/kill-switch/minting",
                        &json!({ "paused": false, "reason": reason }),
                    )
                    .await?
            }
            KillSwitchCommand::RevokeAll { reason, yes } => {
                yes.confirm("revoke every credential of this workspace")?;
                client
                    .post(
                        "/v1/identity/kill-switch/revoke-all",
                        &json!({ "reason": reason }),
                    )
                    .await?
            }
        };
        if args.client.json() {
            print_json(&state)?;
        } else {
            fields(
                &state,
                &[
                    "minting_paused",
                    "minting_paused_reason",
                    "all_credentials_revoked_at",
                ],
            )?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

#[derive(Debug, clap::Args)]
pub struct CredentialsArgs {
    #[command(subcommand)]
    pub command: CredentialsCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum CredentialsCommand {
    /// Revoke one credential, by the credential itself or its id
    Revoke {
        /// The credential itself (opaque or JWT)
        #[arg(long, conflicts_with = "cred_id", required_unless_present = "cred_id")]
        credential: Option<String>,
        /// The credential's id (`crd_...`)
        #[arg(long)]
        cred_id: Option<String>,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Revoke every credential of one agent
    RevokeAgent {
        #[command(flatten)]
        agent: AgentArg,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Whether a credential is active (a one-time credential is spent by this)
    Introspect {
        /// The credential itself (opaque or JWT)
        credential: String,
    },
}

pub async fn credentials(args: &CredentialsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let answer = match &args.command {
            CredentialsCommand::Revoke {
                credential,
                cred_id,
                reason,
                yes,
            } => {
                yes.confirm("revoke the credential")?;
                client
                    .post(
                        "/v1/identity/credentials/revoke",
                        &json!({ "token": credential, "cred_id": cred_id, "reason": reason }),
                    )
                    .await?
            }
            CredentialsCommand::RevokeAgent { agent, reason, yes } => {
                let agent_id = resolve::agent(&client, &agent.agent).await?;
                yes.confirm(&format!(
                    "revoke every credential of agent {}",
                    shown_as(&agent.agent, &agent_id)
                ))?;
                client
                    .post(
                        "/v1/identity/credentials/revoke-by-agent",
                        &json!({ "agent_id": agent_id, "reason": reason }),
                    )
                    .await?
            }
            CredentialsCommand::Introspect { credential } => {
                let seen = client
                    .post("/v1/identity/introspect", &json!({ "token": credential }))
                    .await?;
                if args.client.json() {
                    print_json(&seen)?;
                } else {
                    fields(
                        &seen,
                        &[
                            "active",
                            "reason",
                            "cred_id",
                            "agent_id",
                            "token_type",
                            "scopes",
                            "audience",
                            "expires_at",
                        ],
                    )?;
                }
                return Ok(0);
            }
        };
        if args.client.json() {
            print_json(&answer)?;
        } else {
            line(format!(
                "revoked {} credential(s)",
                cell(&answer["revoked"])
            ))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

#[derive(Debug, clap::Args)]
pub struct ChallengesArgs {
    #[command(subcommand)]
    pub command: ChallengesCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum ChallengesCommand {
    /// Policy challenges, newest first, with the values the deciding rules read
    List {
        /// Only challenges in this status
        #[arg(long, value_enum, default_value_t = ChallengeStatus::Pending)]
        status: ChallengeStatus,
        /// Only this agent's challenges (its name or id)
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
    },
    /// One challenge as the approval page shows it: the agent, the action, the values the
    /// deciding rules read, the reasons, who raised it, the time left, and its decision
    Show { challenge_id: String },
    /// Approve a pending challenge: the agent's next identical request is allowed once
    Approve {
        challenge_id: String,
        /// Why (at most 500 characters; kept with the challenge and in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a pending challenge
    Deny {
        challenge_id: String,
        /// Why (at most 500 characters; kept with the challenge and in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
}

/// The values the deciding rules read, on one line: `amount=250 currency=USD`.
fn values_cell(summary: &Value) -> String {
    let lines = crate::policy::challenge::summary_lines(summary);
    if lines.is_empty() {
        return "-".into();
    }
    lines
        .iter()
        .map(|(label, value)| format!("{label}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What is left of a pending challenge's lifetime, in words.
fn time_left(expires_at: &str) -> String {
    let Some(at) = crate::time::parse_iso(expires_at) else {
        return expires_at.to_owned();
    };
    let secs = (at - crate::time::now_ms()) / 1000;
    match secs {
        s if s <= 0 => "no time left".into(),
        s if s < 120 => format!("{s} s left"),
        s if s < 2 * 3600 => format!("{} min left", s / 60),
        s => format!("{} h {} min left", s / 3600, (s % 3600) / 60),
    }
}

/// A challenge as `key  value` lines (the approval page's facts).
fn challenge_text(c: &Value) -> String {
    let status = cell(&c["status"]);
    let mut rows: Vec<(&str, String)> = vec![
        ("challenge", cell(&c["challenge_id"])),
        (
            "status",
            if status == "pending" {
                format!(
                    "pending ({})",
                    time_left(c["expires_at"].as_str().unwrap_or(""))
                )
            } else {
                status.clone()
            },
        ),
        (
            "agent",
            crate::policy::challenge::agent_label(
                &c["summary"],
                c["agent_id"].as_str().unwrap_or(""),
            ),
        ),
        ("action", cell(&c["action"])),
        ("policy", cell(&c["policy_id"])),
    ];
    let values = crate::policy::challenge::summary_lines(&c["summary"]);
    if values.is_empty() {
        rows.push((
            "request",
            "(the deciding rules read no request values)".into(),
        ));
    }
    for (i, (label, value)) in values.iter().enumerate() {
        rows.push((
            if i == 0 { "request" } else { "" },
            format!("{label}: {value}"),
        ));
    }
    let reasons: Vec<String> = c["reasons"]
        .as_array()
        .map(|r| r.iter().map(cell).collect())
        .unwrap_or_default();
    for (i, reason) in reasons.iter().enumerate() {
        rows.push((if i == 0 { "reasons" } else { "" }, reason.clone()));
    }
    rows.push(("reason codes", cell(&c["reason_codes"])));
    rows.push((
        "raised by",
        match c["raised_by"].as_str() {
            Some("agent") => "the agent itself, in a request it signed".into(),
            Some("backend") => "a backend, with the workspace API key".into(),
            _ => cell(&c["raised_by"]),
        },
    ));
    rows.push(("asked", cell(&c["created_at"])));
    rows.push(("expires", cell(&c["expires_at"])));
    if !c["decided_at"].is_null() {
        rows.push((
            "decided",
            format!(
                "{} by {}",
                cell(&c["decided_at"]),
                named(&c["decided_by_name"], &c["decided_by"])
            ),
        ));
        rows.push(("reason", cell(&c["decision_reason"])));
        if status == "approved" {
            rows.push(("used", cell(&c["used"])));
        }
    }
    rows.push(("trace", cell(&c["trace_id"])));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out: String = rows
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect();
    if status == "pending" {
        out.push_str(&format!(
            "\ndecide: acp challenges approve|deny {} [--reason TEXT]\n",
            cell(&c["challenge_id"])
        ));
    }
    out
}

pub async fn challenges(args: &ChallengesArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let (decision, id, reason) = match &args.command {
            ChallengesCommand::List {
                status,
                agent,
                limit,
            } => {
                let status = (*status != ChallengeStatus::All).then(|| values::name(*status));
                let agent = match agent {
                    Some(agent) => Some(resolve::agent(&client, agent).await?),
                    None => None,
                };
                let listed = list_all(
                    &client,
                    "/v1/policy-challenges",
                    &[("status", status), ("agent_id", agent)],
                    *limit,
                )
                .await?;
                if args.client.json() {
                    print_json(&listed)?;
                    return Ok(0);
                }
                let rows: Vec<Vec<String>> = items(&listed)
                    .iter()
                    .map(|c| {
                        vec![
                            cell(&c["challenge_id"]),
                            cell(&c["status"]),
                            cell(&c["agent_id"]),
                            cell(&c["action"]),
                            values_cell(&c["summary"]),
                            cell(&c["reasons"]),
                            cell(&c["expires_at"]),
                            named(&c["decided_by_name"], &c["decided_by"]),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "CHALLENGE",
                        "STATUS",
                        "AGENT",
                        "ACTION",
                        "VALUES",
                        "REASONS",
                        "EXPIRES",
                        "DECIDED BY",
                    ],
                    &rows,
                )?;
                return Ok(0);
            }
            ChallengesCommand::Show { challenge_id } => {
                let shown = client
                    .get(&format!("/v1/policy-challenges/{challenge_id}"))
                    .await?;
                if args.client.json() {
                    print_json(&shown)?;
                } else {
                    super::output::print(&challenge_text(&shown["challenge"]))?;
                }
                return Ok(0);
            }
            ChallengesCommand::Approve {
                challenge_id,
                reason,
            } => ("approve", challenge_id, reason),
            ChallengesCommand::Deny {
                challenge_id,
                reason,
            } => ("deny", challenge_id, reason),
        };
        let decided = client
            .post(
                &format!("/v1/policy-challenges/{id}/decide"),
                &json!({ "decision": decision, "reason": reason }),
            )
            .await?;
        if args.client.json() {
            print_json(&decided)?;
        } else {
            line(format!("{id}: {}", cell(&decided["challenge"]["status"])))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

/// An actor as people read it: its display name (an email, a key's or an agent's name) when the
/// server gave one, else the actor as recorded.
pub fn named(name: &Value, actor: &Value) -> String {
    match name.as_str().filter(|n| !n.is_empty()) {
        Some(name) => name.to_owned(),
        None => cell(actor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_reads_as_the_approval_page() {
        let c = json!({
            "challenge_id": "pch_1", "status": "approved", "agent_id": "agt_1", "action": "refund",
            "policy_id": "pol_default", "reasons": ["amounts over 100 USD need approval"],
            "reason_codes": ["amount_requires_approval"],
            "summary": {"agent_name": "demo", "values": {"amount": 250, "currency": "USD"}},
            "raised_by": "backend", "created_at": "t0", "expires_at": "t1", "decided_at": "t2",
            "decided_by": "user:usr_1", "decision_reason": "known customer", "used": false,
            "trace_id": "trc_1",
        });
        let text = challenge_text(&c);
        for part in [
            "agent         demo (agt_1)",
            "request       amount: 250\n              currency: USD",
            "raised by     a backend",
            "decided       t2 by user:usr_1",
            "reason        known customer",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert_eq!(values_cell(&c["summary"]), "amount=250 currency=USD");
        assert_eq!(values_cell(&json!({})), "-");
    }
}
