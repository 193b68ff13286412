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
    let store = open_store(&config).await?;
    let result = match cmd {
        KeysCommand::Rotate => jwt::rotate(store.as_ref()).await.map(|kid| {
            println!("New signing key {kid}. Servers sign with it from their next token on; the previous key stays in /.well-known/jwks.json until its tokens have expired.");
        }),
        KeysCommand::List { json } => store.signing_keys(now_ms()).await.map(|keys| {
            if *json {
                let items: Vec<_> = keys
                    .iter()
                    .map(|k| json!({"kid": k.kid, "created_at": iso(k.created_at), "retired_at": k.retired_at.map(iso), "published_until": k.publish_until.map(iso)}))
                    .collect();
                println!("{}", json!({"ok": true, "keys": items}));
            } else if keys.is_empty() {
                println!("No signing key yet: the server makes one when it starts.");
            } else {
                for k in &keys {
                    match k.publish_until {
                        None => println!("{}  signing   created {}", k.kid, iso(k.created_at)),
                        Some(until) => println!(
                            "{}  retired   created {}, published until {}",
                            k.kid,
                            iso(k.created_at),
                            iso(until)
                        ),
                    }
                }
            }
        }),
    };
    store.close().await;
    result?;
    Ok(0)
}
