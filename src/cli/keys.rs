//! `acp admin keys rotate|list`: the JWT issuer's signing keys, in the database every replica shares.

use clap::Subcommand;
use serde_json::json;

use crate::config::{Config, SecretSetting, Settings};
use crate::enforce::jwt;
use crate::store::CredentialStore;
use crate::time::{iso, now_ms};

use super::output::{line, OutputArg};
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a new signing key; the current one stays published until its tokens have expired
    Rotate {
        /// The servers' master key (32 bytes, standard base64) [default with SQLite: the key
        /// file `acp-master.key` next to the database]
        #[arg(long, env = "ACP_MASTER_KEY", hide_env_values = true)]
        master_key: Option<SecretSetting>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Print the published keys, newest first (the first unretired one signs)
    List {
        #[command(flatten)]
        output: OutputArg,
    },
}

impl KeysCommand {
    /// The subcommand's name, for the note of a deprecated spelling.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Rotate { .. } => "rotate",
            Self::List { .. } => "list",
        }
    }
}

pub async fn run(args: &KeysArgs) -> anyhow::Result<i32> {
    match &args.command {
        KeysCommand::Rotate { master_key, output } => {
            let config = args.db.resolve(Settings {
                master_key: master_key.clone(),
                ..Settings::default()
            })?;
            rotate(&config, *output).await
        }
        KeysCommand::List { output } => {
            let config = args.db.resolve(Settings::default())?;
            list(&config, *output).await
        }
    }
}

/// Only rotating needs the master key (listing shows public parts).
async fn rotate(config: &Config, output: OutputArg) -> anyhow::Result<i32> {
    let store = DatabaseArgs::open(config).await?;
    let master = match crate::app::existing_master_key(config) {
        Ok(master) => master,
        Err(err) => {
            store.close().await;
            return Err(err);
        }
    };
    let rotated = jwt::rotate(store.as_ref(), &master).await;
    store.close().await;
    let kid = rotated?;
    if output.json() {
        line(json!({"ok": true, "kid": kid}))?;
    } else {
        line(format!("New signing key {kid}, published now. Servers sign with it one minute from now (once every cached JWKS has it); the previous key stays in /.well-known/jwks.json until its tokens have expired."))?;
    }
    Ok(0)
}

async fn list(config: &Config, output: OutputArg) -> anyhow::Result<i32> {
    let store = DatabaseArgs::open(config).await?;
    let keys = store.signing_keys(now_ms()).await;
    store.close().await;
    let keys = keys?;
    if output.json() {
        let items: Vec<_> = keys
            .iter()
            .map(|k| json!({"kid": k.kid, "created_at": iso(k.created_at), "retired_at": k.retired_at.map(iso), "published_until": k.publish_until.map(iso)}))
            .collect();
        line(json!({"ok": true, "keys": items}))?;
        return Ok(0);
    }
    if keys.is_empty() {
        line("No signing key yet: the server makes one when it starts.")?;
    }
    for k in &keys {
        match k.publish_until {
            None => line(format!(
                "{}  current   created {}",
                k.kid,
                iso(k.created_at)
            ))?,
            Some(until) => line(format!(
                "{}  retired   created {}, published until {}",
                k.kid,
                iso(k.created_at),
                iso(until)
            ))?,
        }
    }
    Ok(0)
}
