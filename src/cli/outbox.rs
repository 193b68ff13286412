//! `acp outbox list [--limit N] [--json]`: the mail the `outbox` provider stored, newest first.

use clap::Subcommand;
use serde_json::json;

use crate::app::open_store;
use crate::store::Store;
use crate::time::iso;

use super::Cli;

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Print stored messages, newest first
    List {
        #[arg(long, default_value_t = 10)]
        limit: i64,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cli: &Cli, cmd: &OutboxCommand) -> anyhow::Result<i32> {
    let OutboxCommand::List { limit, json } = cmd;
    let config = cli.resolve_config()?;
    let store = open_store(&config).await?;
    let messages = store.outbox((*limit).clamp(1, 1000)).await;
    store.close().await;
    let messages = messages?;
    if *json {
        let items: Vec<_> = messages
            .iter()
            .map(|m| json!({"id": m.id, "to": m.recipients, "subject": m.subject, "text": m.text_body, "html": m.html_body, "created_at": iso(m.created_at)}))
            .collect();
        println!("{}", json!({"ok": true, "items": items}));
        return Ok(0);
    }
    if messages.is_empty() {
        println!("The outbox is empty.");
    }
    for m in messages {
        println!(
            "--- {} · {} · to {}",
            m.id,
            iso(m.created_at),
            m.recipients.join(", ")
        );
        println!("Subject: {}", m.subject);
        println!();
        println!("{}", m.text_body.or(m.html_body).unwrap_or_default());
    }
    Ok(0)
}
