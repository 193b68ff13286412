//! `acp keys rotate|list`: the JWT issuer's signing keys, in the database every replica shares.

use clap::Subcommand;
use serde_json::json;

use crate::app::open_store;
use crate::enforce::jwt;
use crate::store::Store;
use crate::time::{iso, now_ms};

use super::Cli;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a new signing key; the current one stays published until its tokens have expired
    Rotate,
    /// Print the published keys, newest first (the first unretired one signs)
    List {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cli: &Cli, cmd: &KeysCommand) -> anyhow::Result<i32> {
    let config = cli.resolve_config()?;
    match cmd {
        KeysCommand::Rotate => rotate(&config).await,
        KeysCommand::List { json } => list(&config, *json).await,
    }
}

/// Only rotating needs the master key (listing shows public parts).
async fn rotate(config: &crate::config::Config) -> anyhow::Result<i32> {
    let master = crate::app::master_key(config)?;
    let store = open_store(config).await?;
    let rotated = jwt::rotate(store.as_ref(), &master).await;
    store.close().await;
    let kid = rotated?;
    println!("New signing key {kid}, published now. Servers sign with it one minute from now (once every cached JWKS has it); the previous key stays in /.well-known/jwks.json until its tokens have expired.");
    Ok(0)
}

async fn list(config: &crate::config::Config, json: bool) -> anyhow::Result<i32> {
    let store = open_store(config).await?;
    let keys = store.signing_keys(now_ms()).await;
    store.close().await;
    let keys = keys?;
    if json {
        let items: Vec<_> = keys
            .iter()
            .map(|k| json!({"kid": k.kid, "created_at": iso(k.created_at), "retired_at": k.retired_at.map(iso), "published_until": k.publish_until.map(iso)}))
            .collect();
        println!("{}", json!({"ok": true, "keys": items}));
        return Ok(0);
    }
    if keys.is_empty() {
        println!("No signing key yet: the server makes one when it starts.");
    }
    for k in &keys {
        match k.publish_until {
            None => println!("{}  current   created {}", k.kid, iso(k.created_at)),
            Some(until) => println!(
                "{}  retired   created {}, published until {}",
                k.kid,
                iso(k.created_at),
                iso(until)
            ),
        }
    }
    Ok(0)
}
