//! `acp admin workspace create NAME [--owner EMAIL]`, `acp admin workspace list` and `acp admin
//! add-member`, on the server's database.

use clap::Subcommand;
use serde_json::json;

use crate::audit::{self, Actor};
use crate::config::Settings;
use crate::domain::ids;
use crate::domain::Role;
use crate::store::{apply_one, AccountOp, AccountStore, Change, Op, Store, Workspace};
use crate::time::{iso, now_ms};

use super::client::table;
use super::output::{line, OutputArg};
use super::values::Role as RoleArg;
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
    /// The workspaces in the database, oldest first
    List {
        #[command(flatten)]
        output: OutputArg,
    },
    /// Deprecated spelling of `acp admin add-member`
    #[command(hide = true)]
    AddMember(MemberFields),
}

impl WorkspaceCommand {
    /// The subcommand's name, for the note of a deprecated spelling.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::List { .. } => "list",
            Self::AddMember(_) => "add-member",
        }
    }
}

/// `acp admin add-member`.
#[derive(Debug, clap::Args)]
pub struct AddMemberArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub member: MemberFields,
}

/// Who gets which role where.
#[derive(Debug, clap::Args)]
pub struct MemberFields {
    /// Workspace id (`ws_...`)
    #[arg(long)]
    pub workspace: String,
    /// The person's email address
    #[arg(long)]
    pub email: String,
    /// Their role
    #[arg(long, value_enum, default_value_t = RoleArg::Member)]
    pub role: RoleArg,
    #[command(flatten)]
    pub output: OutputArg,
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
        WorkspaceCommand::List { output } => return list(&args.db, *output).await,
        WorkspaceCommand::AddMember(member) => return grant(&args.db, member).await,
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
            "Create its first API key with: acp admin api-key create --workspace {}",
            workspace.id
        ))?;
    }
    Ok(0)
}

/// `acp admin add-member`.
pub async fn add_member(args: &AddMemberArgs) -> anyhow::Result<i32> {
    grant(&args.db, &args.member).await
}

async fn list(db: &DatabaseArgs, output: OutputArg) -> anyhow::Result<i32> {
    let config = db.resolve(Settings::default())?;
    let store = DatabaseArgs::open(&config).await?;
    let workspaces = store.all_workspaces().await;
    store.close().await;
    let workspaces = workspaces?;
    if output.json() {
        let items: Vec<_> = workspaces
            .iter()
            .map(|w| json!({"workspace_id": w.id, "name": w.name, "created_at": iso(w.created_at)}))
            .collect();
        line(json!({"ok": true, "items": items}))?;
    } else {
        let rows: Vec<Vec<String>> = workspaces
            .iter()
            .map(|w| vec![w.id.clone(), w.name.clone(), iso(w.created_at)])
            .collect();
        table(&["WORKSPACE", "NAME", "CREATED"], &rows)?;
    }
    Ok(0)
}

async fn grant(db: &DatabaseArgs, member: &MemberFields) -> anyhow::Result<i32> {
    let (workspace_id, output) = (member.workspace.as_str(), member.output);
    let email = email_of(&member.email)?;
    let role = member.role.domain();
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
