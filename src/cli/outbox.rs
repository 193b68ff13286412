//! `acp admin outbox list [--limit N]`: the mail the `outbox` provider stored, newest first, with its
//! attachments (named in text; in JSON with their content in base64).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use clap::Subcommand;
use serde_json::json;

use crate::config::Settings;
use crate::store::EmailStore;
use crate::time::iso;

use super::output::{line, OutputArg};
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
pub struct OutboxArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(subcommand)]
    pub command: OutboxCommand,
}

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Print stored messages, newest first
    List {
        /// How many messages (1 to 1000)
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
        #[command(flatten)]
        output: OutputArg,
    },
}

pub async fn run(args: &OutboxArgs) -> anyhow::Result<i32> {
    let OutboxCommand::List { limit, output } = &args.command;
    let config = args.db.resolve(Settings::default())?;
    let store = DatabaseArgs::open(&config).await?;
    let messages = store.outbox(*limit).await;
    store.close().await;
    let messages = messages?;
    if output.json() {
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
        line(json!({"ok": true, "items": items}))?;
        return Ok(0);
    }
    if messages.is_empty() {
        line("The outbox is empty.")?;
    }
    for m in messages {
        line(format!(
            "--- {} · {} · to {}",
            m.id,
            iso(m.created_at),
            m.recipients.join(", ")
        ))?;
        line(format!("Subject: {}", m.subject))?;
        for a in &m.attachments {
            line(format!(
                "Attachment: {} ({}, {} bytes)",
                a.filename,
                a.content_type,
                a.content.len()
            ))?;
        }
        line("")?;
        line(m.text_body.or(m.html_body).unwrap_or_default())?;
    }
    Ok(0)
}
