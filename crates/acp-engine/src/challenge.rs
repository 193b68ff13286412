//! What an approver is shown of a challenged request: the summary a check stores with the
//! challenge it opens, and the lines, label and mail text made from it.

use serde_json::{json, Map, Value};

use super::evaluate::{ContextFields, EmailFacts};

/// At most this many elements of an array are shown; a longer array is not shown at all
/// (like a string over 200 bytes), rather than cut short where the approver cannot see it.
const MAX_SHOWN_ELEMENTS: usize = 100;

/// What an approver is shown of a challenged request (stored with the challenge): the agent's
/// name, the values the deciding rules read (`values`: amount and currency, environment, the
/// vault's keys, ...; `recipients` when they read the email) and, as before, the context's
/// field names and the email's counts. Values the deciding rules did not read are not kept.
pub fn request_summary(
    agent_name: &str,
    reads: &[String],
    context: ContextFields<'_>,
    email: Option<&EmailFacts>,
) -> Value {
    let mut values = Map::new();
    for field in reads {
        if let Some(v) = context.get(field).and_then(shown_value) {
            values.insert(field.clone(), v);
        }
    }
    let reads_email = reads.iter().any(|r| r == "email");
    let mut fields: Vec<&String> = context.iter().map(|(k, _)| k).collect();
    fields.sort();
    json!({
        "agent_name": agent_name,
        "values": values,
        "recipients": email.filter(|_| reads_email).map(|e| e.recipients.clone()),
        "attachments": email.filter(|_| reads_email).map(|e| {
            e.attachments.iter().map(|a| json!({"filename": a.filename, "content_type": a.content_type, "size_bytes": a.size_bytes})).collect::<Vec<_>>()
        }),
        "context_fields": fields,
        "email_recipients": email.map(|e| e.recipients.len()),
        "email_attachments": email.map(|e| e.attachments.len()),
    })
}

/// A string of at most 200 bytes.
fn short_text(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.len() <= 200)
}

/// A context value as an approver is shown it: a number, a boolean, a short string, or the
/// strings and booleans of an array (what rules read of it; its other elements are left out).
fn shown_value(v: &Value) -> Option<Value> {
    match v {
        Value::Number(_) | Value::Bool(_) => Some(v.clone()),
        Value::String(_) => short_text(v).then(|| v.clone()),
        Value::Array(items) => {
            let read: Vec<&Value> = items
                .iter()
                .filter(|i| i.is_string() || i.is_boolean())
                .collect();
            let fits = read.len() <= MAX_SHOWN_ELEMENTS
                && read.iter().all(|i| i.is_boolean() || short_text(i));
            fits.then(|| Value::Array(read.into_iter().cloned().collect()))
        }
        _ => None,
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // An array's elements, as a list (`keys: STRIPE_SECRET_KEY, ACCOUNT`).
        Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The request as `label: value` lines, for the approval page and email: the values the
/// deciding rules read, the recipients and attachments.
pub fn summary_lines(summary: &Value) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = summary["values"]
        .as_object()
        .map(|values| values.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
        .unwrap_or_default();
    if let Some(to) = summary["recipients"].as_array() {
        let list: Vec<String> = to.iter().map(scalar).collect();
        lines.push(("recipients".into(), list.join(", ")));
    }
    if let Some(files) = summary["attachments"].as_array().filter(|a| !a.is_empty()) {
        let list: Vec<String> = files
            .iter()
            .map(|f| {
                format!(
                    "{} ({}, {} bytes)",
                    scalar(&f["filename"]),
                    scalar(&f["content_type"]),
                    f["size_bytes"]
                )
            })
            .collect();
        lines.push(("attachments".into(), list.join(", ")));
    }
    lines
}

/// The agent as an approver reads it: `name (agt_...)`, or the id of an unnamed agent.
pub fn agent_label(summary: &Value, agent_id: &str) -> String {
    match summary["agent_name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => format!("{name} ({agent_id})"),
        None => agent_id.to_owned(),
    }
}

/// The text of the mail that asks the approvers.
pub fn approval_email_text(
    agent_id: &str,
    action: &str,
    reasons: &[String],
    summary: &Value,
    approval_link: &str,
    expires_at: i64,
) -> String {
    let mut text = format!(
        "Agent {} asks to `{action}`, which needs a human's approval:\n\n",
        agent_label(summary, agent_id)
    );
    for r in reasons {
        text.push_str(&format!("- {r}\n"));
    }
    let lines = summary_lines(summary);
    if !lines.is_empty() {
        text.push_str("\nThe request:\n\n");
        for (label, value) in lines {
            text.push_str(&format!("  {label}: {value}\n"));
        }
    }
    text.push_str(&format!(
        "\nApprove or deny (the link works once, until {}; log in as an approver of the \
         workspace if the page asks):\n\n{approval_link}\n",
        acp_domain::time::iso(expires_at)
    ));
    text
}
