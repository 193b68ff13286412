//! `acp admin api-key create --workspace ID [--name NAME] [--live]`.

use clap::Subcommand;
use serde_json::json;

use crate::audit::{self, Actor};
use crate::config::Settings;
use crate::domain::ids;
use crate::identity::api_keys::NewApiKey;
use crate::store::{apply_one, AccountOp, AccountStore, ApiKeyRecord, Change};
use crate::time::{iso, now_ms};

use super::output::{line, OutputArg};
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct ApiKeyArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(subcommand)]
    pub command: ApiKeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum ApiKeyCommand {
    /// Create an API key for a workspace; the key is printed once
    Create {
        /// Workspace id (`ws_...`)
        #[arg(long)]
        workspace: String,
        /// What it is for, e.g. `gateway` (shown in key lists and as the actor of what it does)
        #[arg(long)]
        name: Option<String>,
        /// A `svc_live_` key instead of `svc_test_`
        #[arg(long)]
        live: bool,
        /// The key's own rate: requests and decisions per second per replica (1 to 1000000)
        /// [default: the server's `api_key_rate_limit`]
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=crate::identity::api_keys::MAX_RATE_LIMIT))]
        rate_limit: Option<i64>,
        #[command(flatten)]
        output: OutputArg,
    },
}

pub async fn run(args: &ApiKeyArgs) -> anyhow::Result<i32> {
    let ApiKeyCommand::Create {
        workspace,
        name,
        live,
        rate_limit,
        output,
    } = &args.command;
    let name = match name.as_deref() {
        Some(raw) => {
            crate::identity::accounts::bounded_name(raw, 100).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => None,
    };
    let config = args.db.resolve(Settings::default())?;
    let store = DatabaseArgs::open(&config).await?;
    if store.workspace(workspace).await?.is_none() {
        store.close().await;
        anyhow::bail!("no workspace `{workspace}` in this database");
    }
    let key = NewApiKey::generate(*live);
    let record = ApiKeyRecord {
        id: ids::new_id(ids::API_KEY),
        workspace_id: workspace.clone(),
        key_hash: key.hash.clone(),
        mode: key.mode.into(),
        last_four: key.last_four.clone(),
        created_at: now_ms(),
        revoked_at: None,
        name: name.clone(),
        created_by: None,
        last_used_at: None,
        scopes: None,
        rate_limit: *rate_limit,
    };
    let event = audit::state_change(
        "api_key.created",
        "create",
        Some(workspace),
        None,
        &Actor::Cli,
        json!({ "key_id": record.id, "mode": record.mode, "name": record.name, "rate_limit": record.rate_limit }),
    );
    apply_one(
        store.as_ref(),
        Change::new(AccountOp::CreateApiKey(record.clone())).audited(event),
    )
    .await?;
    store.close().await;
    if output.json() {
        line(
            json!({"ok": true, "api_key": {"key_id": record.id, "workspace_id": record.workspace_id, "key": key.secret.expose(), "name": record.name, "mode": record.mode, "rate_limit": record.rate_limit, "created_at": iso(record.created_at)}}),
        )?;
    } else {
        line(format!(
            "Created API key {} for {} (shown once, store it now):",
            record.id, record.workspace_id
        ))?;
        line("")?;
        line(format!("    {}", key.secret.expose()))?;
    }
    Ok(0)
}
