//! The impact of a policy change on real traffic: the workspace's recorded checks, replayed
//! against the current and the desired policy, and the decisions that would change, by kind
//! (`allow→deny`, `deny→allow`, ...), with examples.
//!
//! Every decision event (`decision.check`) records in `details.input` what its evaluation read
//! ([`replay_input`]): the agent's facts (status, risk tier, metadata, inventory labels), the
//! context, the email facts (recipient addresses and attachment metadata: never a subject,
//! body or content) and the email counts when the policy read them. An input larger than
//! [`INPUT_CAP_BYTES`] is not recorded (`{"omitted": "too_large", "bytes": n}`), and such
//! events (and those written before inputs were recorded) are counted as `skipped`.
//!
//! Both policies decide the same recorded input, so what changes is the change's doing alone
//! (not the agent's since, nor a human's answer). Pure: the events are read by the caller.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::compile::CompiledPolicy;
use super::evaluate::{
    evaluate_prepared, prepare_agent, ContextFields, DecisionCache, EmailFacts, Facts,
    PreparedAgent,
};
use super::spec::Outcome;
use crate::store::AuditRecord;
use crate::time::iso;

/// How many recorded checks a dry run replays unless told otherwise.
pub const DEFAULT_REPLAY_CHECKS: usize = 10_000;
/// The most a dry run may ask for.
pub const MAX_REPLAY_CHECKS: usize = 100_000;
/// Examples kept per kind of change.
pub const EXAMPLES_PER_KIND: usize = 20;
/// The largest input a decision event records (its JSON, in bytes).
pub const INPUT_CAP_BYTES: usize = 16 * 1024;

/// What a check's evaluation read, for [`replay`], as the compact JSON text the event records:
/// written once, straight from the check's own values (no tree is built per check): the
/// agent's facts as the cached agent keeps them written, the context, the email facts, and
/// `counts`, the agent's emails in the last minute and day when the policy read them.
pub fn replay_input(
    agent_facts: &RawValue,
    context: ContextFields<'_>,
    email: Option<&EmailFacts>,
    counts: Option<(i64, i64)>,
) -> Box<RawValue> {
    #[derive(Serialize)]
    struct Input<'a> {
        agent: &'a RawValue,
        context: ContextFields<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        email: Option<&'a EmailFacts>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sent: Option<[i64; 2]>,
    }
    let input = Input {
        agent: agent_facts,
        context,
        email,
        sent: counts.map(|(minute, day)| [minute, day]),
    };
    // Written straight into a `RawValue` (not read back to be checked); writing string-keyed
    // maps and plain values cannot fail.
    let input = raw(&input);
    let bytes = input.get().len();
    if bytes > INPUT_CAP_BYTES {
        return raw(&json!({"omitted": "too_large", "bytes": bytes}));
    }
    input
}

/// `value` written as JSON text into a `RawValue` at once (serde_json's own writer: the text
/// is not parsed again). Writing string-keyed maps and plain values cannot fail; the fallback,
/// `null`, is never taken.
pub fn raw<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_default()
}

/// The bytes `value` takes in serde_json's compact form, counted as it is written, without
/// keeping the text.
pub fn json_len(value: &Value) -> usize {
    /// A writer that only counts what it is given (std has none; this is all of one).
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` cannot fail, and `Count` never does.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// What changes, over the checks replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Impact {
    /// Checks asked for.
    pub requested: usize,
    /// Decision events read (the workspace's newest, under this policy).
    pub read: usize,
    /// Events replayed against both policies.
    pub replayed: usize,
    /// Events without a recorded input (too large, or recorded before inputs were).
    pub skipped: usize,
    /// The oldest and newest event read (RFC 3339), when any was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newest: Option<String>,
    /// Decisions that would change.
    pub changed: usize,
    /// Of those, towards allow (deny→challenge, deny→allow, challenge→allow).
    pub more_permissive: usize,
    /// And away from it.
    pub less_permissive: usize,
    /// By kind, largest first.
    pub kinds: Vec<ImpactKind>,
}

/// One kind of change (`from` → `to`) and up to [`EXAMPLES_PER_KIND`] of its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImpactKind {
    pub kind: String,
    pub from: String,
    pub to: String,
    pub count: usize,
    pub examples: Vec<ImpactExample>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImpactExample {
    pub event_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    pub at: String,
    /// The desired policy's reason codes (why it decides otherwise).
    pub reason_codes: Vec<String>,
}

impl Impact {
    /// Whether any decision would move towards allow.
    pub fn is_more_permissive(&self) -> bool {
        self.more_permissive > 0
    }
}

/// The agent of an event, prepared once per distinct agent fact set and policy.
struct Prepared {
    current: Arc<PreparedAgent>,
    desired: Arc<PreparedAgent>,
}

/// Replays `events` (decision events, newest first) against `current` and `desired`.
pub fn replay(
    events: &[AuditRecord],
    requested: usize,
    current: &CompiledPolicy,
    desired: &CompiledPolicy,
) -> Result<Impact, String> {
    let mut impact = Impact {
        requested,
        read: events.len(),
        newest: events.first().map(|e| iso(e.created_at)),
        oldest: events.last().map(|e| iso(e.created_at)),
        ..Impact::default()
    };
    // Each policy's own decision cache: replays reuse their decisions, never the live ones.
    let (current_kept, desired_kept) = (DecisionCache::default(), DecisionCache::default());
    let mut agents: HashMap<String, Prepared> = HashMap::new();
    let mut kinds: BTreeMap<(Outcome, Outcome), ImpactKind> = BTreeMap::new();
    for event in events {
        let Some(input) = Recorded::read(event) else {
            impact.skipped += 1;
            continue;
        };
        let facts = input.facts(event);
        let prepared = match agents.get(&input.agent_key) {
            Some(p) => p,
            None => {
                let made = Prepared {
                    current: Arc::new(prepare_agent(current, &facts)?),
                    desired: Arc::new(prepare_agent(desired, &facts)?),
                };
                agents.entry(input.agent_key.clone()).or_insert(made)
            }
        };
        let before = evaluate_prepared(current, &prepared.current, &facts, &current_kept)?;
        let after = evaluate_prepared(desired, &prepared.desired, &facts, &desired_kept)?;
        impact.replayed += 1;
        if before.outcome == after.outcome {
            continue;
        }
        impact.changed += 1;
        if after.outcome > before.outcome {
            impact.more_permissive += 1;
        } else {
            impact.less_permissive += 1;
        }
        let kind = kinds
            .entry((before.outcome, after.outcome))
            .or_insert_with(|| ImpactKind {
                kind: format!("{}_to_{}", before.outcome.as_str(), after.outcome.as_str()),
                from: before.outcome.as_str().into(),
                to: after.outcome.as_str().into(),
                count: 0,
                examples: Vec::new(),
            });
        kind.count += 1;
        if kind.examples.len() < EXAMPLES_PER_KIND {
            kind.examples.push(ImpactExample {
                event_id: event.id.clone(),
                trace_id: event.trace_id.clone(),
                agent_id: event.agent_id.clone(),
                action: event.action.clone(),
                at: iso(event.created_at),
                reason_codes: after.reason_codes.clone(),
            });
        }
    }
    let mut kinds: Vec<ImpactKind> = kinds.into_values().collect();
    kinds.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.kind.cmp(&b.kind)));
    impact.kinds = kinds;
    Ok(impact)
}

/// An event's recorded input, read back.
struct Recorded<'a> {
    /// The agent's facts as one string: events of one agent in one state share a preparation.
    agent_key: String,
    agent: &'a Value,
    context: &'a Value,
    email: Option<EmailFacts>,
    sent: (u64, u64),
}

impl<'a> Recorded<'a> {
    fn read(event: &'a AuditRecord) -> Option<Self> {
        // Records read back from the store hold their details as a tree.
        let input = event.details.as_tree()?.get("input")?;
        let agent = input.get("agent")?;
        let context = input.get("context").filter(|c| c.is_object())?;
        event.action.as_ref()?;
        let email = match input.get("email") {
            None | Some(Value::Null) => None,
            Some(email) => Some(EmailFacts::from_json(email, crate::mail::address_of).ok()?),
        };
        let sent = input
            .get("sent")
            .and_then(Value::as_array)
            .map_or((0, 0), |s| {
                let n = |i: usize| s.get(i).and_then(Value::as_u64).unwrap_or(0);
                (n(0), n(1))
            });
        let agent_id = event.agent_id.as_deref().unwrap_or("");
        Some(Self {
            agent_key: format!("{agent_id}\n{agent}"),
            agent,
            context,
            email,
            sent,
        })
    }

    fn facts(&'a self, event: &'a AuditRecord) -> Facts<'a> {
        let text = |k: &str| self.agent.get(k).and_then(Value::as_str).unwrap_or("");
        Facts {
            agent_id: event.agent_id.as_deref().unwrap_or(""),
            status: text("status"),
            risk_tier: text("risk_tier"),
            metadata: self.agent.get("metadata").unwrap_or(&Value::Null),
            labels: self.agent.get("labels").unwrap_or(&Value::Null),
            action: event.action.as_deref().unwrap_or(""),
            context: ContextFields::new(self.context),
            email: self.email.as_ref(),
            emails_sent_last_minute: self.sent.0,
            emails_sent_last_day: self.sent.1,
        }
    }
}

#[cfg(test)]
mod json_len_tests {
    use serde_json::json;

    #[test]
    fn counts_the_compact_form_exactly() {
        for value in [
            json!(null),
            json!({"a": [1, 2.5, "é\"\n"], "b": {"c": true}}),
            json!("x".repeat(5000)),
        ] {
            assert_eq!(super::json_len(&value), value.to_string().len());
        }
    }
}
