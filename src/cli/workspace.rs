//! `acp workspace create NAME [--json]`.

use clap::Subcommand;
use serde_json::json;

use crate::app::open_store;
use crate::audit::{self, Actor};
use crate::ids;
use crate::store::{apply_one, Change, Op, Workspace};
use crate::time::{iso, now_ms};

use super::Cli;

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Create a workspace in the configured database
    Create {
        /// Display name
        name: String,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cli: &Cli, cmd: &WorkspaceCommand) -> anyhow::Result<i32> {
    let WorkspaceCommand::Create { name, json } = cmd;
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        anyhow::bail!("the workspace name must be 1 to 200 characters");
    }
    let config = cli.resolve_config()?;
    let store = open_store(&config).await?;
    let workspace = Workspace {
        id: ids::new_id(ids::WORKSPACE),
        name: name.to_owned(),
        created_at: now_ms(),
    };
    let event = audit::state_change(
        "workspace.created",
        "create",
        Some(&workspace.id),
        None,
        &Actor::Cli,
        json!({ "name": workspace.name }),
    );
    apply_one(
        store.as_ref(),
        Change::new(Op::CreateWorkspace(workspace.clone())).audited(event),
    )
    .await?;
    store.close().await;
    if *json {
        println!(
            "{}",
            json!({"ok": true, "workspace": {"workspace_id": workspace.id, "name": workspace.name, "created_at": iso(workspace.created_at)}})
        );
    } else {
        println!("Created workspace {} ({}).", workspace.id, workspace.name);
        println!(
            "Create its first API key with: acp api-key create --workspace {}",
            workspace.id
        );
    }
    Ok(0)
}
