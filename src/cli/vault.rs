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
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct VaultArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(subcommand)]
    pub command: VaultCommand,
}

#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// Seal every secret set's data key again with the new master key
    Rewrap {
        /// The previous master key (32 bytes, standard base64)
        #[arg(long, env = "ACP_OLD_MASTER_KEY", hide_env_values = true)]
        from_key: SecretSetting,
        /// The new master key [default with SQLite: the key file `acp-master.key` next to the
        /// database]
        #[arg(long, env = "ACP_MASTER_KEY", hide_env_values = true)]
        master_key: Option<SecretSetting>,
        #[command(flatten)]
        output: OutputArg,
    },
}

pub async fn run(args: &VaultArgs) -> anyhow::Result<i32> {
    let VaultCommand::Rewrap {
        from_key,
        master_key,
        output,
    } = &args.command;
    let old = MasterKey::from_base64(from_key.0.expose()).map_err(anyhow::Error::msg)?;
    let config = args.db.resolve(Settings {
        master_key: master_key.clone(),
        ..Settings::default()
    })?;
    let new = crate::app::existing_master_key(&config)?;
    let store = DatabaseArgs::open(&config).await?;
    let done = crate::enforce::vault::rewrap(store.as_ref(), &old, &new).await;
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
