//! `acp audit search` (the audit trail with filters) and `acp audit tail [--follow]` (the newest
//! events, then new ones as they are committed, from the server's event stream); `acp audit
//! sinks` and `acp audit retention` are in `sinks.rs`.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;

use super::client::{cell, finish, items, print_json, table, Client, ClientArgs, Failure};
use super::operate::{list_all, named};
use super::output::line;
use super::resolve;
use super::values::{self, Decision};
use crate::time::{now_ms, parse_iso};

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The filters both commands take.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditFilterArgs {
    /// Only this agent's events (its name or id)
    #[arg(long)]
    pub agent: Option<String>,
    /// Only this action (e.g. `refund`, `suspend`)
    #[arg(long)]
    pub action: Option<String>,
    /// Only this decision
    #[arg(long, value_enum)]
    pub decision: Option<Decision>,
    /// Only this event type (e.g. `decision.check`, `agent.suspended`)
    #[arg(long)]
    pub event_type: Option<String>,
    /// Only this trace id
    #[arg(long)]
    pub trace: Option<String>,
}

impl AuditFilterArgs {
    /// The query of the API (an agent's name looked up).
    async fn query(&self, client: &Client) -> anyhow::Result<Vec<(&'static str, Option<String>)>> {
        let agent = match &self.agent {
            Some(agent) => Some(resolve::agent(client, agent).await?),
            None => None,
        };
        Ok(vec![
            ("agent_id", agent),
            ("action", self.action.clone()),
            ("decision", self.decision.map(values::name)),
            ("event_type", self.event_type.clone()),
            ("trace_id", self.trace.clone()),
        ])
    }
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Events, newest first
    Search {
        #[command(flatten)]
        filters: AuditFilterArgs,
        /// From this time: RFC 3339 (`2026-11-24T10:00:00Z`) or a time ago (`30m`, `2h`, `7d`)
        #[arg(long, value_parser = parse_when)]
        since: Option<i64>,
        /// Before this time (as `--since`)
        #[arg(long, value_parser = parse_when)]
        until: Option<i64>,
        /// How many (1 to 10000)
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        limit: i64,
    },
    /// Outbound audit sinks: list, create, show, pause, resume, rotate-secret, delete
    #[command(subcommand)]
    Sinks(super::sinks::SinkCommand),
    /// How long audit events and heartbeats are kept: shown, or set with the flags
    Retention {
        /// Days to keep audit events, or `keep` for all
        #[arg(long, value_parser = super::sinks::parse_days)]
        events: Option<super::sinks::Days>,
        /// Days to keep heartbeats, or `keep` for all
        #[arg(long, value_parser = super::sinks::parse_days)]
        heartbeats: Option<super::sinks::Days>,
    },
    /// The newest events, oldest first; with --follow, then each new event as it is committed
    Tail {
        #[command(flatten)]
        filters: AuditFilterArgs,
        /// How many of the newest events first (0 to 1000)
        #[arg(long, short = 'n', default_value_t = 10, value_parser = clap::value_parser!(i64).range(0..=1000))]
        lines: i64,
        /// Keep printing new events until interrupted
        #[arg(long, short = 'f')]
        follow: bool,
    },
}

/// RFC 3339, or a duration before now (`90s`, `30m`, `2h`, `7d`), as epoch milliseconds.
pub fn parse_when(text: &str) -> Result<i64, String> {
    if let Some(ms) = parse_iso(text) {
        return Ok(ms);
    }
    let ago = humantime::parse_duration(text.trim()).map_err(|_| {
        format!("`{text}` is neither an RFC 3339 time nor a duration like `30m` or `7d`")
    })?;
    Ok(now_ms() - i64::try_from(ago.as_millis()).unwrap_or(i64::MAX / 2))
}

const COLUMNS: &[&str] = &["created_at", "event_type", "agent_id", "action", "decision"];
const HEADERS: &[&str] = &["TIME", "EVENT", "AGENT", "ACTION", "DECISION", "ACTOR"];

/// An event's cells; the actor by its name (an email, a key's or an agent's name) when the
/// server gave one.
fn row(event: &Value) -> Vec<String> {
    let mut cells: Vec<String> = COLUMNS.iter().map(|k| cell(&event[*k])).collect();
    cells.push(named(&event["actor_name"], &event["actor"]));
    cells
}

/// One event as a line of `tail`: JSON lines, or the table's columns.
fn event_line(event: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        line(serde_json::to_string(event)?)
    } else {
        line(row(event).join("  "))
    }
}

pub async fn run(args: &AuditArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        match &args.command {
            AuditCommand::Search {
                filters,
                since,
                until,
                limit,
            } => {
                let mut query = filters.query(&client).await?;
                query.push(("start_ms", since.map(|v| v.to_string())));
                query.push(("end_ms", until.map(|v| v.to_string())));
                let found = list_all(&client, "/v1/workspace/audit/events", &query, *limit).await?;
                if args.client.json() {
                    print_json(&found)?;
                } else {
                    let rows: Vec<Vec<String>> = items(&found).iter().map(row).collect();
                    table(HEADERS, &rows)?;
                }
                Ok(0)
            }
            AuditCommand::Tail {
                filters,
                lines,
                follow,
            } => tail(&client, filters, *lines, *follow, args.client.json()).await,
            AuditCommand::Sinks(command) => {
                super::sinks::sinks(&client, command, args.client.json()).await
            }
            AuditCommand::Retention { events, heartbeats } => {
                super::sinks::retention(&client, *events, *heartbeats, args.client.json()).await
            }
        }
    }
    .await;
    finish(result, args.client.json())
}

/// The stream's cursor for an event of the list endpoint.
fn cursor_of(event: &Value) -> Option<String> {
    let at = parse_iso(event["created_at"].as_str()?)?;
    Some(crate::audit::encode_cursor(at, event["event_id"].as_str()?))
}

async fn tail(
    client: &Client,
    filters: &AuditFilterArgs,
    lines: i64,
    follow: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let query = filters.query(client).await?;
    let mut newest = Vec::new();
    if lines > 0 {
        let found = list_all(client, "/v1/workspace/audit/events", &query, lines).await?;
        newest = found["items"].as_array().cloned().unwrap_or_default();
        newest.reverse();
    }
    // Ids already printed, so that a resumed stream (which repeats the seconds before its
    // cursor) prints each event once.
    let mut seen = Seen::default();
    for event in &newest {
        event_line(event, json)?;
        seen.insert(event["event_id"].as_str().unwrap_or("").to_owned());
    }
    if !follow {
        return Ok(0);
    }
    let mut cursor = newest.last().and_then(cursor_of);
    if let Some(last) = newest
        .last()
        .and_then(|e| parse_iso(e["created_at"].as_str()?))
    {
        // The stream resumes by reading again the seconds before its cursor: the events of
        // those seconds that exist now are not new (only those committed later are).
        let mut window = query.clone();
        window.push((
            "start_ms",
            Some((last - crate::audit::tail::LAG_MS).to_string()),
        ));
        let known = list_all(client, "/v1/workspace/audit/events", &window, 10_000).await?;
        for event in items(&known) {
            seen.insert(event["event_id"].as_str().unwrap_or("").to_owned());
        }
    }
    let mut failures = 0;
    loop {
        let mut req = client.request(reqwest::Method::GET, "/v1/workspace/audit/stream");
        for (k, v) in &query {
            if let Some(v) = v {
                req = req.query(&[(k, v)]);
            }
        }
        if let Some(c) = &cursor {
            req = req.query(&[("cursor", c)]);
        }
        let res = match req.send().await {
            Ok(res) if res.status().is_success() => {
                failures = 0;
                res
            }
            Ok(res) => {
                super::client::answer(res).await?;
                return Ok(1);
            }
            Err(e) => {
                failures += 1;
                if failures >= 5 {
                    return Err(Failure::local(
                        1,
                        format!("lost the audit stream of {}: {e}", client.server),
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_secs(failures)).await;
                continue;
            }
        };
        read_stream(res, &mut cursor, &mut seen, json).await?;
        // The stream ended (the server restarts, a proxy closed it): resume from the cursor.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Prints the stream's events until it ends; keeps the cursor of the last one.
async fn read_stream(
    mut res: reqwest::Response,
    cursor: &mut Option<String>,
    seen: &mut Seen,
    json: bool,
) -> anyhow::Result<()> {
    let mut buf = String::new();
    while let Ok(Some(chunk)) = res.chunk().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = String::new();
            for l in frame.lines() {
                if let Some(v) = l.strip_prefix("id:") {
                    id = Some(v.trim_start().to_owned());
                } else if let Some(v) = l.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if data.is_empty() {
                continue;
            }
            let Ok(event) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if id.is_some() {
                *cursor = id;
            }
            if seen.insert(event["event_id"].as_str().unwrap_or("").to_owned()) {
                event_line(&event, json)?;
            }
        }
    }
    Ok(())
}

/// The ids printed lately (a bounded window: a resume repeats only seconds of events).
#[derive(Default)]
struct Seen {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Seen {
    /// True when `id` is new.
    fn insert(&mut self, id: String) -> bool {
        if !self.set.insert(id.clone()) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > 10_000 {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}
