//! `acp admin ...`: the commands that work on the server's database directly, never through a
//! server: workspaces, members and API keys made on the server's machine, the outbox of the
//! development mailer, the JWT signing keys, the vault's keys after a master-key rotation, and
//! backup and restore. Each opens an existing database (`--database-url`, `ACP_DATABASE_URL` or
//! the `--config` file's) and never creates one.

use clap::Subcommand;

use super::{api_key, backup, keys, outbox, vault, workspace};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "These commands open the server's database directly (--database-url, ACP_DATABASE_URL, or the database_url of --config; default sqlite:./data/acp.db). They never create one: start `acp serve` first."
)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Workspaces in the database: create one, list them
    Workspace(workspace::WorkspaceArgs),
    /// Give a person (by email, created if new) a role in a workspace
    AddMember(workspace::AddMemberArgs),
    /// Make a workspace API key (printed once)
    #[command(name = "api-key")]
    ApiKey(api_key::ApiKeyArgs),
    /// Read the mail stored by the `outbox` email provider
    Outbox(outbox::OutboxArgs),
    /// The JWT issuer's signing keys: rotate, list
    Keys(keys::KeysArgs),
    /// The vault's keys: re-wrap every secret set's data key after a master-key rotation
    Vault(vault::AdminVaultArgs),
    /// Write a consistent copy of the SQLite database while the servers run
    Backup(backup::BackupArgs),
    /// Put a backup in place of the SQLite database (the servers stopped)
    Restore(backup::RestoreArgs),
}

pub async fn run(args: &AdminArgs) -> anyhow::Result<i32> {
    match &args.command {
        AdminCommand::Workspace(args) => {
            if args.command.name() == "add-member" {
                super::deprecated("admin workspace add-member", "admin add-member");
            }
            workspace::run(args).await
        }
        AdminCommand::AddMember(args) => workspace::add_member(args).await,
        AdminCommand::ApiKey(args) => api_key::run(args).await,
        AdminCommand::Outbox(args) => outbox::run(args).await,
        AdminCommand::Keys(args) => keys::run(args).await,
        AdminCommand::Vault(args) => vault::run_admin(args).await,
        AdminCommand::Backup(args) => backup::backup(args).await,
        AdminCommand::Restore(args) => backup::restore(args).await,
    }
}
