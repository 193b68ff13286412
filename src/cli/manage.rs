//! `acp api-keys`, `acp members` and `acp workspaces`: the workspace's keys and people, and
//! which workspace the stored login acts on. (`acp admin api-key` and `acp admin workspace` are
//! the admin commands that work on the database directly.)

use clap::Subcommand;
use serde_json::json;

use super::client::{
    cell, finish, items, normalize, print_json, table, workspace_table, ClientArgs, Failure, YesArg,
};
use super::credentials::Credentials;
use super::operate::named;
use super::output::{eline, line};
use super::resolve;
use super::values::{self, Role};

#[derive(Debug, clap::Args)]
pub struct ApiKeysArgs {
    #[command(subcommand)]
    pub command: ApiKeysCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum ApiKeysCommand {
    /// The workspace's API keys (never the keys themselves)
    List,
    /// Make an API key (printed once)
    Create {
        /// What it is for, e.g. `gateway`
        #[arg(long)]
        name: String,
        /// Narrow it, e.g. `check,verify` (repeat or separate with commas); see docs/api.md
        #[arg(long = "scope", value_delimiter = ',',
            value_parser = clap::builder::PossibleValuesParser::new(crate::domain::access::KEY_SCOPES))]
        scopes: Vec<String>,
        /// A live key (`svc_live_...`) instead of a test key
        #[arg(long)]
        live: bool,
        /// Its own rate: requests and decisions per second per replica (1 to 1000000)
        /// [default: the server's]
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
        rate_limit: Option<i64>,
    },
    /// Revoke an API key; it stops working at once
    Revoke {
        /// The key: its name (when no other live key has it) or its id (`key_...`)
        #[arg(value_name = "KEY")]
        key: String,
        #[command(flatten)]
        yes: YesArg,
    },
}

pub async fn api_keys(args: &ApiKeysArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        match &args.command {
            ApiKeysCommand::List => {
                let listed = client.get("/v1/workspace/api-keys").await?;
                if args.client.json() {
                    print_json(&listed)?;
                    return Ok(0);
                }
                let rows: Vec<Vec<String>> = items(&listed)
                    .iter()
                    .map(|k| {
                        let mut row: Vec<String> = [
                            "key_id",
                            "name",
                            "mode",
                            "last_four",
                            "scopes",
                            "rate_limit",
                        ]
                        .iter()
                        .map(|f| cell(&k[*f]))
                        .collect();
                        row.push(named(&k["created_by_name"], &k["created_by"]));
                        row.push(cell(&k["last_used_at"]));
                        row.push(cell(&k["revoked_at"]));
                        row
                    })
                    .collect();
                table(
                    &[
                        "KEY",
                        "NAME",
                        "MODE",
                        "LAST FOUR",
                        "SCOPES",
                        "RATE/S",
                        "CREATED BY",
                        "LAST USED",
                        "REVOKED",
                    ],
                    &rows,
                )?;
            }
            ApiKeysCommand::Create {
                name,
                scopes,
                live,
                rate_limit,
            } => {
                let made = client
                    .post(
                        "/v1/workspace/api-keys",
                        &json!({"name": name, "scopes": scopes, "live": live, "rate_limit": rate_limit}),
                    )
                    .await?;
                if args.client.json() {
                    print_json(&made)?;
                } else {
                    line(cell(&made["key"]))?;
                    eline(format!(
                        "API key {} ({name}); it is shown only this once",
                        cell(&made["api_key"]["key_id"])
                    ))?;
                }
            }
            ApiKeysCommand::Revoke { key, yes } => {
                let key_id = resolve::api_key(&client, key).await?;
                let key_id = key_id.as_str();
                let what = if key == key_id {
                    key_id.to_owned()
                } else {
                    format!("{key} ({key_id})")
                };
                yes.confirm(&format!("revoke API key {what}"))?;
                let done = client
                    .post(
                        &format!("/v1/workspace/api-keys/{key_id}/revoke"),
                        &json!({}),
                    )
                    .await?;
                if args.client.json() {
                    print_json(&done)?;
                } else {
                    line(format!("revoked {key_id}"))?;
                }
            }
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

#[derive(Debug, clap::Args)]
pub struct MembersArgs {
    #[command(subcommand)]
    pub command: MembersCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum MembersCommand {
    /// The workspace's members and their roles
    List,
    /// Add a person (or change their role)
    Add {
        /// Their email address
        #[arg(long)]
        email: String,
        /// Their role
        #[arg(long, value_enum, default_value_t = Role::Member)]
        role: Role,
    },
    /// Remove a member
    Remove {
        /// Their email address, or their user id (`usr_...`)
        #[arg(value_name = "MEMBER")]
        member: String,
        #[command(flatten)]
        yes: YesArg,
    },
}

pub async fn members(args: &MembersArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        match &args.command {
            MembersCommand::List => {
                let listed = client.get("/v1/workspace/members").await?;
                super::client::show_list(
                    args.client.json(),
                    &listed,
                    &[("EMAIL", "email"), ("ROLE", "role"), ("USER", "user_id")],
                )?;
            }
            MembersCommand::Add { email, role } => {
                let added = client
                    .post(
                        "/v1/workspace/members",
                        &json!({"email": email, "role": values::name(*role)}),
                    )
                    .await?;
                if args.client.json() {
                    print_json(&added)?;
                } else {
                    line(format!(
                        "{} ({}): {}",
                        cell(&added["member"]["email"]),
                        cell(&added["member"]["user_id"]),
                        cell(&added["member"]["role"])
                    ))?;
                }
            }
            MembersCommand::Remove { member, yes } => {
                let user_id = resolve::member(&client, member).await?;
                yes.confirm(&format!("remove {member} from the workspace"))?;
                let done = client
                    .post(
                        &format!("/v1/workspace/members/{user_id}/remove"),
                        &json!({}),
                    )
                    .await?;
                if args.client.json() {
                    print_json(&done)?;
                } else {
                    line(format!("removed {member}"))?;
                }
            }
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

#[derive(Debug, clap::Args)]
pub struct WorkspacesArgs {
    #[command(subcommand)]
    pub command: WorkspacesCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum WorkspacesCommand {
    /// Your workspaces and your role in each (`*` marks the one commands act on)
    List,
    /// Make a workspace, with you as its owner
    Create { name: String },
    /// Act on this workspace from now on (stored with the login)
    Use { workspace_id: String },
}

pub async fn workspaces(args: &WorkspacesArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        match &args.command {
            WorkspacesCommand::List => {
                let listed = client.get("/v1/workspaces").await?;
                if args.client.json() {
                    print_json(&listed)?;
                } else {
                    workspace_table(&listed["items"], client.workspace.as_deref())?;
                }
            }
            WorkspacesCommand::Create { name } => {
                let made = client
                    .post("/v1/workspaces", &json!({"name": name}))
                    .await?;
                if args.client.json() {
                    print_json(&made)?;
                } else {
                    line(format!(
                        "{} ({}); act on it with `acp workspaces use {}`",
                        cell(&made["workspace"]["workspace_id"]),
                        name,
                        cell(&made["workspace"]["workspace_id"])
                    ))?;
                }
            }
            WorkspacesCommand::Use { workspace_id } => {
                let listed = client.get("/v1/workspaces").await?;
                let known = listed["items"].as_array().is_some_and(|items| {
                    items
                        .iter()
                        .any(|w| w["workspace_id"].as_str() == Some(workspace_id))
                });
                if !known {
                    return Err(Failure::local(
                        6,
                        format!("{workspace_id} is not one of your workspaces"),
                    )
                    .into());
                }
                let path = args.client.credentials_path()?;
                let mut stored = Credentials::load(&path)?;
                let server = normalize(&client.server);
                let Some(login) = stored.servers.get_mut(&server) else {
                    return Err(Failure::local(
                        4,
                        format!("not logged in to {server}: `use` is stored with a login"),
                    )
                    .into());
                };
                login.workspace = Some(workspace_id.clone());
                stored.save(&path)?;
                if args.client.json() {
                    print_json(
                        &json!({"ok": true, "server": server, "workspace_id": workspace_id}),
                    )?;
                } else {
                    line(format!("acting on {workspace_id} on {server}"))?;
                }
            }
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}
