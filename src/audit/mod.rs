//! The audit trail: building events, reading them back, exporting them. Events are written by
//! the group-commit writer together with the change they record (see [`crate::store`]).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

pub mod delivery;
pub mod names;
pub mod retention;
pub mod sinks;
pub mod summary;
pub mod tail;

use crate::api;
use crate::domain::ids;
use crate::store::{AuditRecord, Cursor};
use crate::time::{iso, now_ms};

/// Who caused an event.
#[derive(Debug, Clone)]
pub enum Actor {
    ApiKey(String),
    Agent(String),
    User(String),
    /// Someone holding a one-time approval link, not logged in.
    ApprovalLink,
    Cli,
    System,
}

impl Actor {
    pub fn label(&self) -> String {
        match self {
            Actor::ApiKey(id) => ["api_key:", id].concat(),
            Actor::Agent(id) => ["agent:", id].concat(),
            Actor::User(id) => ["user:", id].concat(),
            Actor::ApprovalLink => crate::domain::challenge::DECIDED_BY_LINK.into(),
            Actor::Cli => "cli".into(),
            Actor::System => "system".into(),
        }
    }
}

/// A state-change event: `event_type` such as `agent.registered`, `action` the verb.
pub fn state_change(
    event_type: &str,
    action: &str,
    workspace_id: Option<&str>,
    agent_id: Option<&str>,
    actor: &Actor,
    details: Value,
) -> AuditRecord {
    AuditRecord {
        id: ids::new_id(ids::EVENT),
        workspace_id: workspace_id.map(str::to_owned),
        created_at: now_ms(),
        event_type: event_type.to_owned(),
        agent_id: agent_id.map(str::to_owned),
        action: Some(action.to_owned()),
        actor: actor.label(),
        details: details.into(),
        ..AuditRecord::default()
    }
}

pub fn to_wire(e: AuditRecord) -> api::AuditEvent {
    api::AuditEvent {
        event_id: e.id,
        created_at: iso(e.created_at),
        event_type: e.event_type,
        agent_id: e.agent_id,
        action: e.action,
        decision: e.decision,
        policy_id: e.policy_id,
        policy_hash: e.policy_hash,
        trace_id: e.trace_id,
        reasons: e.reasons,
        reason_codes: e.reason_codes,
        actor: e.actor,
        actor_name: None,
        details: e.details.into_value(),
    }
}

/// The events with the names of their actors (see [`names`]), looked up at once.
pub async fn with_actor_names(
    store: &dyn crate::store::AccountStore,
    workspace_id: &str,
    mut events: Vec<api::AuditEvent>,
) -> Result<Vec<api::AuditEvent>, crate::store::StoreError> {
    let names =
        names::ActorNames::lookup(store, workspace_id, events.iter().map(|e| e.actor.as_str()))
            .await?;
    for e in &mut events {
        e.actor_name = names.get(&e.actor);
    }
    Ok(events)
}

/// Opaque page cursor: base64url of `created_at:id` of the last item returned.
pub fn encode_cursor(created_at: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{created_at}:{id}"))
}

pub fn decode_cursor(text: &str) -> Option<Cursor> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(text).ok()?).ok()?;
    let (at, id) = raw.split_once(':')?;
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return None;
    }
    Some(Cursor {
        created_at: at.parse().ok()?,
        id: id.to_owned(),
    })
}

const CSV_COLUMNS: [&str; 14] = [
    "event_id",
    "created_at",
    "event_type",
    "agent_id",
    "action",
    "decision",
    "policy_id",
    "policy_hash",
    "trace_id",
    "reasons",
    "reason_codes",
    "actor",
    "details",
    "actor_name",
];

/// A leading `=`, `+`, `-` or `@` is prefixed with `'` so that spreadsheets do not run the
/// field as a formula; quoting (RFC 4180) is the csv writer's.
pub fn defuse_formula(value: String) -> String {
    if value.starts_with(['=', '+', '-', '@']) {
        format!("'{value}")
    } else {
        value
    }
}

/// The events as CSV (CRLF line ends) with a header row; list fields joined by `;`, details
/// as JSON.
pub fn to_csv(events: &[api::AuditEvent]) -> Result<String, csv::Error> {
    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    out.write_record(CSV_COLUMNS)?;
    for e in events {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let row = [
            e.event_id.clone(),
            e.created_at.clone(),
            e.event_type.clone(),
            opt(&e.agent_id),
            opt(&e.action),
            opt(&e.decision),
            opt(&e.policy_id),
            opt(&e.policy_hash),
            opt(&e.trace_id),
            e.reasons.join(";"),
            e.reason_codes.join(";"),
            e.actor.clone(),
            e.details.to_string(),
            opt(&e.actor_name),
        ];
        out.write_record(row.map(defuse_formula))?;
    }
    let bytes = out.into_inner().map_err(|e| e.into_error())?;
    // Every field was a `String`, so the bytes are UTF-8.
    String::from_utf8(bytes).map_err(|e| csv::Error::from(std::io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(1_700_000_000_000, "evt_abc");
        assert_eq!(
            decode_cursor(&c),
            Some(Cursor {
                created_at: 1_700_000_000_000,
                id: "evt_abc".into()
            })
        );
        assert_eq!(decode_cursor("!!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("nocolon")), None);
    }

    #[test]
    fn csv_quotes_and_defuses_formulas() {
        let event = |action: &str| api::AuditEvent {
            event_id: "evt_1".into(),
            created_at: "2024-01-01T00:00:00Z".into(),
            event_type: "agent.suspended".into(),
            agent_id: None,
            action: Some(action.into()),
            decision: None,
            policy_id: None,
            policy_hash: None,
            trace_id: None,
            reasons: vec!["a".into(), "b".into()],
            reason_codes: Vec::new(),
            actor: "cli".into(),
            actor_name: None,
            details: serde_json::json!({"k": 1}),
        };
        let field = |action: &str| {
            let csv = to_csv(&[event(action)]).unwrap();
            let row = csv.split("\r\n").nth(1).unwrap().to_owned();
            row.split_once("agent.suspended,,").unwrap().1.to_owned()
        };
        let header = to_csv(&[]).unwrap();
        assert_eq!(header, format!("{}\r\n", CSV_COLUMNS.join(",")));
        assert!(field("plain").starts_with("plain,,,,,a;b,,cli,\"{\"\"k\"\":1}\""));
        assert!(field("a,b").starts_with("\"a,b\","));
        assert!(field("say \"hi\"").starts_with("\"say \"\"hi\"\"\","));
        assert!(field("=cmd()").starts_with("'=cmd(),"));
        assert!(field("-1,2").starts_with("\"'-1,2\","));
    }
}
