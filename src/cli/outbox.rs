//! `acp outbox list [--limit N] [--json]`: the mail the `outbox` provider stored, newest first,
//! with its attachments (named in text; in JSON with their content in base64).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
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
            .map(|m| {
                let attachments: Vec<_> = m
                    .attachments
                    .iter()
                    .map(|a| json!({"filename": a.filename, "content_type": a.content_type,
                        "size_bytes": a.content.len(), "content": STANDARD.encode(&a.content)}))
                    .collect();
                json!({"id": m.id, "to": m.recipients, "subject": m.subject, "text": m.text_body,
                    "html": m.html_body, "attachments": attachments, "created_at": iso(m.created_at)})
            })
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
        for a in &m.attachments {
            println!(
                "Attachment: {} ({}, {} bytes)",
                a.filename,
                a.content_type,
                a.content.len()
            );
        }
        println!();
        println!("{}", m.text_body.or(m.html_body).unwrap_or_default());
    }
    Ok(0)
}
