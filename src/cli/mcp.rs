//! `acp mcp servers ...`: the MCP gateway's registered servers on a server, as the stored
//! login or `--token` (owners and admins change them, members list them).

use clap::Subcommand;
use serde_json::{json, Value};

use crate::domain::ids::McpServerId;
use crate::domain::mcp::ServerName;

use super::client::{cell, fields, finish, print_json, show_rows, Client, ClientArgs, YesArg};
use super::operate::named;
use super::output::line;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// The servers agents reach through the gateway (`/mcp/{name}`)
    #[command(subcommand)]
    Servers(ServerCommand),
}

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// The registered servers, by name
    List,
    /// Register a server: agents reach it at `<server>/mcp/<name>`, its tools are the actions
    /// `mcp.<name>.<tool>`
    #[command(
        after_help = "Example:\n  acp mcp servers add github --url https://mcp.github.example/mcp \
--secret-set github-prod --profile mcp"
    )]
    Add {
        /// 1 to 64 of a-z, 0-9 and -
        name: String,
        /// The upstream's Streamable HTTP endpoint (https://)
        #[arg(long)]
        url: String,
        /// The vault secret set whose profile authenticates the gateway to the upstream: its
        /// name, id (`ss_...`) or number
        #[arg(long, requires = "profile")]
        secret_set: Option<String>,
        /// The profile of that set (its hosts must cover the URL)
        #[arg(long, requires = "secret_set")]
        profile: Option<String>,
        /// Record tool calls' argument values in the audit trail (names and types always are)
        #[arg(long)]
        record_arguments: bool,
    },
    /// One server in full: by name or id (`mcp_...`)
    Show {
        #[arg(value_name = "SERVER")]
        target: String,
    },
    /// Remove a server: its path answers `unknown_mcp_server` from then on
    Remove {
        /// The server's name or id (`mcp_...`)
        #[arg(value_name = "SERVER")]
        target: String,
        #[command(flatten)]
        yes: YesArg,
    },
}

const FIELDS: &[&str] = &[
    "server_id",
    "name",
    "url",
    "endpoint",
    "auth",
    "record_arguments",
    "created_at",
    "created_by",
    "updated_at",
];

/// A server named on the command line, checked before it goes into a path: a name or an id.
fn server_path(server: &str, tail: &str) -> anyhow::Result<String> {
    if ServerName::parse(server).is_err() && McpServerId::parse(server).is_none() {
        return Err(super::client::Failure::local(
            1,
            format!("`{server}` is neither a server name nor an id"),
        )
        .into());
    }
    Ok(format!("/v1/mcp/servers/{server}{tail}"))
}

/// `{secret_set_id, profile}` as one line.
fn auth_cell(auth: &Value) -> String {
    if auth.is_null() {
        return "-".into();
    }
    format!(
        "{} profile {}",
        cell(&auth["secret_set_id"]),
        cell(&auth["profile"])
    )
}

fn show(answer: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(answer);
    }
    let mut server = answer["server"].clone();
    server["created_by"] = json!(named(&server["created_by_name"], &server["created_by"]));
    server["auth"] = json!(auth_cell(&server["auth"]));
    fields(&server, FIELDS)
}

pub async fn run(args: &McpArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let json = args.client.json();
        match &args.command {
            McpCommand::Servers(command) => servers(&client, command, json).await,
        }
    }
    .await;
    finish(result, args.client.json())
}

async fn servers(client: &Client, command: &ServerCommand, json: bool) -> anyhow::Result<i32> {
    match command {
        ServerCommand::List => {
            let listed = client.get("/v1/mcp/servers").await?;
            show_rows(
                json,
                &listed,
                &[
                    "NAME",
                    "SERVER",
                    "URL",
                    "AUTH",
                    "RECORDS ARGUMENTS",
                    "ENDPOINT",
                ],
                |s| {
                    vec![
                        cell(&s["name"]),
                        cell(&s["server_id"]),
                        cell(&s["url"]),
                        auth_cell(&s["auth"]),
                        cell(&s["record_arguments"]),
                        cell(&s["endpoint"]),
                    ]
                },
            )?;
        }
        ServerCommand::Add {
            name,
            url,
            secret_set,
            profile,
            record_arguments,
        } => {
            let mut body = json!({"name": name, "url": url, "record_arguments": record_arguments});
            if let (Some(set), Some(profile)) = (secret_set, profile) {
                let set = super::vault_remote::set_ref(client, set).await?;
                let set = set.parse::<i64>().map_or_else(|_| json!(set), |n| json!(n));
                body["auth"] = json!({"secret_set_id": set, "profile": profile});
            }
            show(&client.post("/v1/mcp/servers", &body).await?, json)?;
        }
        ServerCommand::Show { target } => {
            show(&client.get(&server_path(target, "")?).await?, json)?;
        }
        ServerCommand::Remove { target, yes } => {
            let path = server_path(target, "/delete")?;
            yes.confirm(&format!("remove MCP server {target}"))?;
            let done = client.post(&path, &json!({})).await?;
            if json {
                print_json(&done)?;
            } else {
                line(format!("removed {target}"))?;
            }
        }
    }
    Ok(0)
}
