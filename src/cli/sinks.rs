//! `acp audit sinks ...` (the workspace's outbound audit sinks) and `acp audit retention`
//! (how long audit events and heartbeats are kept), over the API as the stored login or
//! `--token`.

use clap::Subcommand;
use serde_json::{json, Value};

use super::client::{cell, fields, print_json, show_list, Client, YesArg};
use super::operate::named;
use super::output::{eline, line};

#[derive(Debug, Subcommand)]
pub enum SinkCommand {
    /// The sinks, with their state and how far behind they are
    List,
    /// Make a sink: signed NDJSON batches POSTed to an https:// URL (the secret is printed once)
    Create {
        /// What it is for, e.g. `siem`
        #[arg(long)]
        name: String,
        /// Where batches go (https://)
        #[arg(long)]
        url: String,
        /// Create it paused
        #[arg(long)]
        paused: bool,
    },
    /// One sink in full
    Show { sink_id: String },
    /// Stop delivering (events wait, and are not pruned)
    Pause { sink_id: String },
    /// Deliver again, at once
    Resume { sink_id: String },
    /// A new signing secret (printed once); the old one stops signing at once
    RotateSecret {
        sink_id: String,
        #[command(flatten)]
        yes: YesArg,
    },
    /// Stop and forget a sink
    Delete {
        sink_id: String,
        #[command(flatten)]
        yes: YesArg,
    },
}

const SINK_FIELDS: &[&str] = &[
    "sink_id",
    "name",
    "url",
    "state",
    "enabled",
    "delivered_events",
    "lag_events",
    "lag_seconds",
    "last_delivered_at",
    "last_attempt_at",
    "last_error",
    "consecutive_failures",
    "next_attempt_at",
    "created_at",
    "created_by",
];

fn path(sink_id: &str, tail: &str) -> String {
    format!("/v1/workspace/audit/sinks/{sink_id}{tail}")
}

/// Prints a sink answer: JSON, or its fields (and a secret answered once on stdout, alone).
fn show(answer: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(answer);
    }
    if let Some(secret) = answer["secret"].as_str() {
        line(secret)?;
        eline(format!(
            "the signing secret of {}; it is shown only this once (docs/operations.md shows how to verify a batch)",
            cell(&answer["sink"]["sink_id"])
        ))?;
        return Ok(());
    }
    let mut sink = answer["sink"].clone();
    sink["created_by"] = json!(named(&sink["created_by_name"], &sink["created_by"]));
    fields(&sink, SINK_FIELDS)
}

pub async fn sinks(client: &Client, command: &SinkCommand, json: bool) -> anyhow::Result<i32> {
    match command {
        SinkCommand::List => {
            let listed = client.get("/v1/workspace/audit/sinks").await?;
            show_list(
                json,
                &listed,
                &[
                    ("SINK", "sink_id"),
                    ("NAME", "name"),
                    ("STATE", "state"),
                    ("DELIVERED", "delivered_events"),
                    ("BEHIND", "lag_events"),
                    ("LAST ERROR", "last_error"),
                    ("URL", "url"),
                ],
            )?;
        }
        SinkCommand::Create { name, url, paused } => {
            let made = client
                .post(
                    "/v1/workspace/audit/sinks",
                    &json!({"name": name, "url": url, "enabled": !paused}),
                )
                .await?;
            show(&made, json)?;
        }
        SinkCommand::Show { sink_id } => show(&client.get(&path(sink_id, "")).await?, json)?,
        SinkCommand::Pause { sink_id } => show(
            &client
                .post(&path(sink_id, ""), &json!({"enabled": false}))
                .await?,
            json,
        )?,
        SinkCommand::Resume { sink_id } => show(
            &client
                .post(&path(sink_id, ""), &json!({"enabled": true}))
                .await?,
            json,
        )?,
        SinkCommand::RotateSecret { sink_id, yes } => {
            yes.confirm(&format!(
                "replace the signing secret of audit sink {sink_id}"
            ))?;
            show(
                &client
                    .post(&path(sink_id, "/rotate-secret"), &json!({}))
                    .await?,
                json,
            )?
        }
        SinkCommand::Delete { sink_id, yes } => {
            yes.confirm(&format!("delete audit sink {sink_id}"))?;
            let done = client.post(&path(sink_id, "/delete"), &json!({})).await?;
            if json {
                print_json(&done)?;
            } else {
                line(format!("deleted {sink_id}"))?;
            }
        }
    }
    Ok(0)
}

/// A retention: a number of days, or `None` to keep everything.
#[derive(Debug, Clone, Copy)]
pub struct Days(pub Option<i64>);

/// `keep` (everything) or a number of days, for `acp audit retention`.
pub fn parse_days(text: &str) -> Result<Days, String> {
    match text.trim() {
        "keep" | "all" => Ok(Days(None)),
        days => days
            .parse::<i64>()
            .map(|d| Days(Some(d)))
            .map_err(|_| format!("`{text}` is neither a number of days nor `keep`")),
    }
}

/// Shows the workspace's retention, or sets what is given.
pub async fn retention(
    client: &Client,
    events: Option<Days>,
    heartbeats: Option<Days>,
    json: bool,
) -> anyhow::Result<i32> {
    let settings = if events.is_none() && heartbeats.is_none() {
        client.get("/v1/workspace/settings").await?
    } else {
        let mut body = serde_json::Map::new();
        if let Some(Days(days)) = events {
            body.insert("audit_retention_days".into(), json!(days));
        }
        if let Some(Days(days)) = heartbeats {
            body.insert("heartbeat_retention_days".into(), json!(days));
        }
        client
            .post("/v1/workspace/settings", &Value::Object(body))
            .await?
    };
    if json {
        print_json(&settings)?;
    } else {
        let days = |v: &Value| {
            v.as_i64()
                .map_or_else(|| "all (kept forever)".to_owned(), |d| format!("{d} days"))
        };
        line(format!(
            "audit events: {}",
            days(&settings["audit_retention_days"])
        ))?;
        line(format!(
            "heartbeats:   {}",
            days(&settings["heartbeat_retention_days"])
        ))?;
    }
    Ok(0)
}
