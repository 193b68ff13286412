//! `acp vault`: the vault on a running server (secret sets, their versions, grants, workflow
//! leases; see `vault_remote.rs`); and `acp admin vault rewrap`, which works on the database
//! itself (`acp vault rewrap`, its earlier spelling, still works for one release).
//!
//! `acp admin vault rewrap --from-key OLD`: after the master key is rotated, seals every vault data
//! key, every JWT signing key and every audit sink's secret again with the new master key (the configured one), so that
//! the server starts and the secrets stay readable. The values themselves are not touched: only the per-set data keys,
//! each in one compare-and-set write. Run it with the servers stopped or running (a set whose
//! data key changed meanwhile is reported), then start them with the new key.

use clap::Subcommand;
use serde_json::json;

use crate::config::{SecretSetting, Settings};
use crate::secret::MasterKey;

use super::output::{line, OutputArg};
use super::vault_remote;
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct VaultArgs {
    #[command(subcommand)]
    pub command: VaultCommand,
}

#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// The workspace's secret sets: names, key names, versions (never a value)
    Sets(vault_remote::SetsArgs),
    /// Write secrets into a set as its new version (or create the set): from KEY=VALUE
    /// arguments, a dotenv file or stdin
    Put(vault_remote::PutArgs),
    /// The versions a set keeps, newest first (key names, author, time)
    Versions(vault_remote::VersionsArgs),
    /// Make a kept version's entries and profiles the set's new version
    Rollback(vault_remote::RollbackArgs),
    /// Let an agent or an agent group use a set: `proxy`, `read`, `mint_lease`
    Grant(vault_remote::GrantArgs),
    /// The grants of a set (or of every set), revoked ones included
    Grants(vault_remote::GrantsArgs),
    /// Issue a workflow lease for an agent (its token is printed once)
    Lease(vault_remote::LeaseArgs),
    /// The workspace's leases, newest first (never their tokens)
    Leases(vault_remote::LeasesArgs),
    /// Revoke a lease (`ls_...`, with the request leases minted from it) or a grant
    /// (`grt_...`), or every live lease of an agent or a set
    Revoke(vault_remote::RevokeArgs),
    /// The earlier spelling of `acp admin vault rewrap`
    #[command(hide = true)]
    Rewrap(RewrapArgs),
}

/// `acp admin vault`: the vault's keys, on the database.
#[derive(Debug, clap::Args)]
pub struct AdminVaultArgs {
    #[command(subcommand)]
    pub command: AdminVaultCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminVaultCommand {
    /// Seal every secret set's data key again with the new master key
    Rewrap(RewrapArgs),
}

pub async fn run_admin(args: &AdminVaultArgs) -> anyhow::Result<i32> {
    match &args.command {
        AdminVaultCommand::Rewrap(a) => rewrap(a).await,
    }
}

#[derive(Debug, clap::Args)]
pub struct RewrapArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// The previous master key (32 bytes, standard base64)
    #[arg(long, env = "ACP_OLD_MASTER_KEY", hide_env_values = true)]
    from_key: SecretSetting,
    /// The new master key [default with SQLite: the key file `acp-master.key` next to the
    /// database]
    #[arg(long, env = "ACP_MASTER_KEY", hide_env_values = true)]
    master_key: Option<SecretSetting>,
    #[command(flatten)]
    output: OutputArg,
}

pub async fn run(args: &VaultArgs) -> anyhow::Result<i32> {
    match &args.command {
        VaultCommand::Sets(a) => vault_remote::sets(a).await,
        VaultCommand::Put(a) => vault_remote::put(a).await,
        VaultCommand::Versions(a) => vault_remote::versions(a).await,
        VaultCommand::Rollback(a) => vault_remote::rollback(a).await,
        VaultCommand::Grant(a) => vault_remote::grant(a).await,
        VaultCommand::Grants(a) => vault_remote::grants(a).await,
        VaultCommand::Lease(a) => vault_remote::lease(a).await,
        VaultCommand::Leases(a) => vault_remote::leases(a).await,
        VaultCommand::Revoke(a) => vault_remote::revoke(a).await,
        VaultCommand::Rewrap(a) => {
            super::deprecated("vault rewrap", "admin vault rewrap");
            rewrap(a).await
        }
    }
}

async fn rewrap(args: &RewrapArgs) -> anyhow::Result<i32> {
    let RewrapArgs {
        db,
        from_key,
        master_key,
        output,
    } = args;
    let old = MasterKey::from_base64(from_key.0.expose()).map_err(anyhow::Error::msg)?;
    let config = db.resolve(Settings {
        master_key: master_key.clone(),
        ..Settings::default()
    })?;
    let new = crate::app::existing_master_key(&config)?;
    let store = DatabaseArgs::open(&config).await?;
    let done = crate::vault::sets::rewrap(store.as_ref(), &old, &new).await;
    store.close().await;
    let done = done.map_err(anyhow::Error::msg)?;
    if output.json() {
        line(
            json!({"ok": true, "rewrapped": done.rewrapped, "already_current": done.current, "signing_keys_resealed": done.signing_keys, "sink_secrets_resealed": done.sink_secrets}),
        )?;
    } else {
        line(format!(
            "Re-wrapped {} secret set data key(s) with the new master key ({} already used it), and re-sealed {} JWT signing key(s) and {} audit sink secret(s).",
            done.rewrapped, done.current, done.signing_keys, done.sink_secrets
        ))?;
    }
    Ok(0)
}
