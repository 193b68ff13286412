//! The day-two commands on a running server: `acp agents`, `acp kill-switch`, `acp credentials`
//! and `acp challenges`. Each takes the client flags (`--server`, `--token`, `--workspace`,
//! `--output`, `--yes`); destructive ones ask first on a terminal.

use clap::Subcommand;
use serde_json::{json, Value};

use super::client::{cell, fields, finish, print_json, show_list, ClientArgs};
use super::output::line;

#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: AgentsCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// The workspace's agents, newest first
    List {
        /// Only agents in this status: pending, active, suspended, revoked
        #[arg(long)]
        status: Option<String>,
        /// Only agents of this exact name
        #[arg(long)]
        name: Option<String>,
        /// How many (1 to 1000)
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
    },
    /// One agent
    Show { agent_id: String },
    /// Suspend an agent: it is denied until resumed
    Suspend {
        agent_id: String,
        /// Why (recorded in the audit event)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume a suspended agent
    Resume {
        agent_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke an agent for good
    Revoke {
        agent_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Approve a pending agent
    Approve {
        agent_id: String,
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

pub async fn agents(args: &AgentsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let (verb, agent_id, reason) = match &args.command {
            AgentsCommand::List {
                status,
                name,
                limit,
            } => {
                let listed = list_all(
                    &client,
                    "/v1/agents",
                    &[("status", status.clone()), ("name", name.clone())],
                    *limit,
                )
                .await?;
                show_list(
                    args.client.json(),
                    &listed,
                    &[
                        ("AGENT", "agent_id"),
                        ("NAME", "name"),
                        ("STATUS", "status"),
                        ("RISK", "risk_tier"),
                        ("LAST SEEN", "last_seen_at"),
                        ("CREATED", "created_at"),
                    ],
                )?;
                return Ok(0);
            }
            AgentsCommand::Show { agent_id } => {
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
            AgentsCommand::Suspend { agent_id, reason } => ("suspend", agent_id, reason),
            AgentsCommand::Resume { agent_id, reason } => ("resume", agent_id, reason),
            AgentsCommand::Revoke { agent_id, reason } => ("revoke", agent_id, reason),
            AgentsCommand::Approve { agent_id, reason } => ("approve", agent_id, reason),
        };
        if matches!(verb, "suspend" | "revoke") {
            args.client.confirm(&format!("{verb} agent {agent_id}"))?;
        }
        let changed = client
            .post(
                &format!("/v1/agents/{agent_id}/{verb}"),
                &json!({ "reason": reason }),
            )
            .await?;
        if args.client.json() {
            print_json(&changed)?;
        } else {
            line(format!("{agent_id}: {}", cell(&changed["agent"]["status"])))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
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
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume minting
    Resume {
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke every credential the workspace has issued
    RevokeAll {
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn kill_switch(args: &KillSwitchArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let state = match &args.command {
            KillSwitchCommand::Status => client.get("/v1/identity/kill-switch/status").await?,
            KillSwitchCommand::Pause { reason } | KillSwitchCommand::Resume { reason } => {
                let paused = matches!(args.command, KillSwitchCommand::Pause { .. });
                if paused {
                    args.client.confirm("pause minting in this workspace")?;
                }
                client
                    .post(
                        "/v1/identity/kill-switch/minting",
                        &json!({ "paused": paused, "reason": reason }),
                    )
                    .await?
            }
            KillSwitchCommand::RevokeAll { reason } => {
                args.client
                    .confirm("revoke every credential of this workspace")?;
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
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke every credential of one agent
    RevokeAgent {
        agent_id: String,
        #[arg(long)]
        reason: Option<String>,
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
            } => {
                args.client.confirm("revoke the credential")?;
                client
                    .post(
                        "/v1/identity/credentials/revoke",
                        &json!({ "token": credential, "cred_id": cred_id, "reason": reason }),
                    )
                    .await?
            }
            CredentialsCommand::RevokeAgent { agent_id, reason } => {
                args.client
                    .confirm(&format!("revoke every credential of agent {agent_id}"))?;
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
    /// Policy challenges, newest first
    List {
        /// pending (default), approved, denied, expired or all
        #[arg(long, default_value = "pending")]
        status: String,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
    },
    /// Approve a pending challenge: the agent's next identical request is allowed once
    Approve { challenge_id: String },
    /// Deny a pending challenge
    Deny { challenge_id: String },
}

pub async fn challenges(args: &ChallengesArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let (decision, id) = match &args.command {
            ChallengesCommand::List {
                status,
                agent,
                limit,
            } => {
                let status = (status != "all").then(|| status.clone());
                let listed = list_all(
                    &client,
                    "/v1/policy-challenges",
                    &[("status", status), ("agent_id", agent.clone())],
                    *limit,
                )
                .await?;
                show_list(
                    args.client.json(),
                    &listed,
                    &[
                        ("CHALLENGE", "challenge_id"),
                        ("STATUS", "status"),
                        ("AGENT", "agent_id"),
                        ("ACTION", "action"),
                        ("REASONS", "reasons"),
                        ("EXPIRES", "expires_at"),
                    ],
                )?;
                return Ok(0);
            }
            ChallengesCommand::Approve { challenge_id } => ("approve", challenge_id),
            ChallengesCommand::Deny { challenge_id } => ("deny", challenge_id),
        };
        let decided = client
            .post(
                &format!("/v1/policy-challenges/{id}/decide"),
                &json!({ "decision": decision }),
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
