//! `acp workspace create NAME [--owner EMAIL]` and `acp workspace add-member`.

use clap::Subcommand;
use serde_json::json;

use crate::audit::{self, Actor};
use crate::config::Settings;
use crate::domain::ids;
use crate::domain::Role;
use crate::store::{apply_one, AccountOp, AccountStore, Change, Op, Store, Workspace};
use crate::time::{iso, now_ms};

use super::output::{line, OutputArg};
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct WorkspaceArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(subcommand)]
    pub command: WorkspaceCommand,
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Create a workspace in the configured database
    Create {
        /// Display name
        name: String,
        /// Make the user with this email (created if new) the workspace's owner
        #[arg(long)]
        owner: Option<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Give a user (by email, created if new) a role in a workspace
    AddMember {
        /// Workspace id (`ws_...`)
        #[arg(long)]
        workspace: String,
        /// The user's email address
        #[arg(long)]
        email: String,
        /// `owner`, `admin` or `member`
        #[arg(long, default_value = "member")]
        role: String,
        #[command(flatten)]
        output: OutputArg,
    },
}

fn email_of(raw: &str) -> anyhow::Result<String> {
    crate::domain::EmailAddress::from_field("email", raw)
        .map(crate::domain::EmailAddress::into_string)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The operation giving `email` `role` in `workspace_id`.
async fn membership_op(
    store: &dyn Store,
    workspace_id: &str,
    email: &str,
    role: Role,
) -> anyhow::Result<AccountOp> {
    let user_id = store
        .user_by_email(email)
        .await?
        .map_or_else(|| ids::new_id("usr"), |u| u.id);
    Ok(AccountOp::UpsertMembership {
        workspace_id: workspace_id.to_owned(),
        email: email.to_owned(),
        user_id,
        role,
        at: now_ms(),
    })
}

fn granted(workspace_id: &str, email: &str, role: Role) -> crate::store::AuditRecord {
    audit::state_change(
        "membership.granted",
        "grant",
        Some(workspace_id),
        None,
        &Actor::Cli,
        json!({ "email_domain": email.split('@').nth(1), "role": role.as_str() }),
    )
}

pub async fn run(args: &WorkspaceArgs) -> anyhow::Result<i32> {
    let (name, owner, output) = match &args.command {
        WorkspaceCommand::Create {
            name,
            owner,
            output,
        } => (name, owner, output),
        WorkspaceCommand::AddMember {
            workspace,
            email,
            role,
            output,
        } => return add_member(&args.db, workspace, email, role, *output).await,
    };
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        anyhow::bail!("the workspace name must be 1 to 200 characters");
    }
    let owner = owner.as_deref().map(email_of).transpose()?;
    let config = args.db.resolve(Settings::default())?;
    let store = DatabaseArgs::open(&config).await?;
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
    let mut change = Change::new(AccountOp::CreateWorkspace(workspace.clone())).audited(event);
    // The owner's membership is made with the workspace, in the same transaction.
    if let Some(email) = &owner {
        let grant = membership_op(store.as_ref(), &workspace.id, email, Role::Owner).await?;
        change.op = Op::Batch(vec![change.op, grant.into()]);
        change = change.audited(granted(&workspace.id, email, Role::Owner));
    }
    let result = apply_one(store.as_ref(), change).await;
    store.close().await;
    result?;
    if output.json() {
        line(
            json!({"ok": true, "workspace": {"workspace_id": workspace.id, "name": workspace.name, "created_at": iso(workspace.created_at), "owner": owner}}),
        )?;
    } else {
        line(format!(
            "Created workspace {} ({}).",
            workspace.id, workspace.name
        ))?;
        if let Some(email) = &owner {
            line(format!(
                "Owner: {email} (log in at /login with that address)."
            ))?;
        }
        line(format!(
            "Create its first API key with: acp api-key create --workspace {}",
            workspace.id
        ))?;
    }
    Ok(0)
}

async fn add_member(
    db: &DatabaseArgs,
    workspace_id: &str,
    email: &str,
    role: &str,
    output: OutputArg,
) -> anyhow::Result<i32> {
    let email = email_of(email)?;
    let role = Role::parse(role)
        .ok_or_else(|| anyhow::anyhow!("the role must be `owner`, `admin` or `member`"))?;
    let config = db.resolve(Settings::default())?;
    let store = DatabaseArgs::open(&config).await?;
    if store.workspace(workspace_id).await?.is_none() {
        store.close().await;
        anyhow::bail!("no workspace `{workspace_id}` in this database");
    }
    let op = membership_op(store.as_ref(), workspace_id, &email, role).await?;
    let event = granted(workspace_id, &email, role);
    let result = apply_one(store.as_ref(), Change::new(op).audited(event)).await;
    store.close().await;
    result?;
    if output.json() {
        line(
            json!({"ok": true, "membership": {"workspace_id": workspace_id, "email": email, "role": role.as_str()}}),
        )?;
    } else {
        line(format!(
            "{email} is now {} of {workspace_id}; log in at /login with that address.",
            role.as_str()
        ))?;
    }
    Ok(0)
}
