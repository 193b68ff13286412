//! Evaluation: the facts of one check against a compiled policy. Pure: no I/O, no parsing of
//! policies, no thread-locals; the compiled sets are only read. What checks like earlier ones
//! reuse (their decisions and Cedar contexts) is kept in a [`DecisionCache`] that the caller
//! owns and passes in.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{
    Authorizer, Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, Request,
    RestrictedExpression,
};
use serde::ser::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::compile::{tag_value, CompiledPolicy, GroupRules, Picked, RuleMeta, RuleSet};
use super::memo::Memo;
use super::spec::{Outcome, Selector};
use acp_domain::agent::selector_text;
use acp_domain::RiskTier;

/// Metadata of an attachment (never its content).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Attachment {
    pub filename: String,
    pub content_type: String,
    pub size_bytes: u64,
}

/// A warning about a check's request, answered beside its decision.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// A stable snake_case code: `field_type_mismatch` (a context field the policy reads as a
    /// number holds another JSON type).
    pub code: String,
    /// What is wrong and how to send it instead.
    pub message: String,
    /// The context field it is about.
    pub field: String,
}

/// The email facts of a `send_email` check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmailFacts {
    /// to + cc + bcc.
    pub recipients: Vec<String>,
    pub attachments: Vec<Attachment>,
}

/// Reads the address out of one recipient entry as written: `jane@example.com`, or
/// `Jane Doe <jane@example.com>` (as `/v1/email/send` takes them). The service passes its mail
/// layer's reader, which parses with the parser the message is sent with, so that a rule judges
/// the address the message goes to: the engine reads no mailbox syntax of its own. An entry the
/// reader does not read as one mailbox (a list in one entry, say) comes back as written, to be
/// refused by the one-address check.
pub type ReadAddress = fn(&str) -> String;

/// The reader of entries that are bare addresses, as the semantic model writes them: the entry,
/// trimmed (a `Name <address>` form is kept as written, and so refused).
pub fn bare_address(entry: &str) -> String {
    entry.trim().to_owned()
}

impl EmailFacts {
    /// Reads `{to, cc, bcc, attachments: [{filename, content_type, size_bytes}]}`; the error
    /// names the offending field.
    /// Recipients may be written `jane@example.com` or `Jane Doe <jane@example.com>` (as
    /// `/v1/email/send` takes them); `read` finds the address, which rules read.
    pub fn from_json(email: &Value, read: ReadAddress) -> Result<EmailFacts, &'static str> {
        let Some(obj) = email.as_object() else {
            return Err("email");
        };
        let mut recipients = Vec::new();
        for (field, name) in [("to", "email.to"), ("cc", "email.cc"), ("bcc", "email.bcc")] {
            match obj.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(one)) => recipients.push(read(one)),
                Some(Value::Array(list)) => {
                    for r in list {
                        recipients.push(read(r.as_str().ok_or(name)?));
                    }
                }
                Some(_) => return Err(name),
            }
        }
        // One address per entry: a list smuggled into one string ("a@x, b@y") would be
        // judged by its last domain only.
        if recipients.iter().any(|r| {
            r.is_empty()
                || r.len() > 320
                || r.matches('@').count() != 1
                || r.chars().any(|c| {
                    c.is_whitespace() || matches!(c, ',' | ';' | '<' | '>' | '"' | '(' | ')')
                })
        }) {
            return Err("email.to");
        }
        let mut attachments = Vec::new();
        match obj.get("attachments") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for a in list {
                    let a = a.as_object().ok_or("email.attachments")?;
                    let text = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                    let size_bytes = match a.get("size_bytes") {
                        None | Some(Value::Null) => 0,
                        Some(v) => v.as_u64().ok_or("email.attachments")?,
                    };
                    attachments.push(Attachment {
                        filename: text("filename"),
                        content_type: text("content_type"),
                        size_bytes,
                    });
                }
            }
            Some(_) => return Err("email.attachments"),
        }
        Ok(EmailFacts {
            recipients,
            attachments,
        })
    }
}

/// The facts as JSON that [`EmailFacts::from_json`] reads back (the recipients as `to`): what
/// a decision event records for replay, never a subject or content.
impl Serialize for EmailFacts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("to", &self.recipients)?;
        map.serialize_entry("attachments", &self.attachments)?;
        map.end()
    }
}

/// A check's context fields: its own object, over fields it shares with the other checks of
/// one request (AuthZEN's top-level `context`, kept once for all of them rather than copied
/// into each). A field of its own hides a shared one of the same name; read through this,
/// the two are one object, in the order merging them would give (the shared fields first).
#[derive(Debug, Clone, Copy)]
pub struct ContextFields<'a> {
    own: &'a Value,
    shared: Option<&'a Map<String, Value>>,
}

impl<'a> ContextFields<'a> {
    /// The fields of one object (a value that is not an object has none).
    pub fn new(own: &'a Value) -> Self {
        Self { own, shared: None }
    }

    /// `own` over `shared`.
    pub fn layered(own: &'a Value, shared: Option<&'a Map<String, Value>>) -> Self {
        Self { own, shared }
    }

    /// Every field once: the shared ones (with the value of an own field of the same name),
    /// then the own ones the shared ones do not name.
    pub fn iter(self) -> impl Iterator<Item = (&'a String, &'a Value)> {
        let own = self.own.as_object();
        let shared = self.shared;
        let under = shared
            .into_iter()
            .flatten()
            .map(move |(k, v)| (k, own.and_then(|o| o.get(k)).unwrap_or(v)));
        let over = own
            .into_iter()
            .flatten()
            .filter(move |(k, _)| !shared.is_some_and(|s| s.contains_key(*k)));
        under.chain(over)
    }

    pub fn get(self, name: &str) -> Option<&'a Value> {
        self.own
            .get(name)
            .or_else(|| self.shared.and_then(|s| s.get(name)))
    }

    /// The fields as one object (a copy).
    pub fn to_value(self) -> Value {
        match self.shared {
            None if self.own.is_object() => self.own.clone(),
            _ => Value::Object(self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        }
    }
}

impl Serialize for ContextFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// The code of a warning about a context field whose JSON type is not the one the policy's
/// rules read it as.
pub const FIELD_TYPE_MISMATCH: &str = "field_type_mismatch";

/// The JSON type of a value, in the words the messages use.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The warnings (the Decision's `warnings`) about the context fields of a check of `action` that some rule of the policy reads as numbers but
/// that hold another JSON type (`{"amount": "150"}`): the rules that compare them do not see
/// them. Only the fields the compiled policy lists are looked up (no parsing, nothing built):
/// when every one is a number, or absent, or null, nothing is allocated.
pub fn field_warnings(
    policy: &CompiledPolicy,
    action: &str,
    context: ContextFields<'_>,
) -> Vec<Warning> {
    let mut warnings = Vec::new();
    for field in &policy.number_fields {
        let Some(value) = context.get(&field.name) else {
            continue;
        };
        if matches!(value, Value::Number(_) | Value::Null) || !field.read_for(action) {
            continue;
        }
        warnings.push(type_mismatch(&field.name, value));
    }
    warnings
}

fn type_mismatch(name: &str, value: &Value) -> Warning {
    let found = match value {
        Value::String(text) => {
            let shown: String = text.chars().take(40).collect();
            let more = if shown.len() < text.len() { "..." } else { "" };
            format!("the string {:?}{more}", shown)
        }
        other => json_type(other).to_owned(),
    };
    let send = match value
        .as_str()
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|n| n.is_finite())
    {
        Some(n) => format!("send it as the JSON number {n}"),
        None => "send it as a JSON number".to_owned(),
    };
    Warning {
        code: FIELD_TYPE_MISMATCH.to_owned(),
        message: format!(
            "the context field `{name}` is {found}, but the policy reads it as a number: the rules that compare it did not apply; {send}"
        ),
        field: name.to_owned(),
    }
}

/// The reason code of a deny because no rule matched.
pub const NO_MATCHING_RULE: &str = "no_matching_rule";
/// The reason codes of a check a human already answered: approved (an allow) or denied.
pub const APPROVED: &str = "approved";
pub const APPROVAL_DENIED: &str = "approval_denied";
/// The reason codes a decision may carry beside those of a policy's rules.
pub const FIXED_REASON_CODES: [&str; 3] = [NO_MATCHING_RULE, APPROVED, APPROVAL_DENIED];

/// What is known about one check.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub agent_id: &'a str,
    pub status: &'a str,
    pub risk_tier: &'a str,
    /// The agent's metadata (an object; other values count as empty).
    pub metadata: &'a Value,
    /// The agent's inventory labels (an object).
    pub labels: &'a Value,
    pub action: &'a str,
    /// The check's context fields.
    pub context: ContextFields<'a>,
    pub email: Option<&'a EmailFacts>,
    pub emails_sent_last_minute: u64,
    pub emails_sent_last_day: u64,
}

impl<'a> Facts<'a> {
    /// A check by a spec test case's agent (`acp policy test`, the semantic model's examples):
    /// `sent` is its emails in the last minute and day.
    pub fn of_test(
        agent: &'a super::spec::TestAgent,
        action: &'a str,
        context: ContextFields<'a>,
        email: Option<&'a EmailFacts>,
        sent: (u64, u64),
    ) -> Self {
        Facts {
            agent_id: &agent.id,
            status: &agent.status,
            risk_tier: &agent.risk_tier,
            metadata: &agent.metadata,
            labels: &agent.labels,
            action,
            context,
            email,
            emails_sent_last_minute: sent.0,
            emails_sent_last_day: sent.1,
        }
    }
}

/// The decision, as `/v1/check` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Outcome,
    /// Human reasons of the deciding rules (empty on allow).
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    /// The spec elements (guardrails, `binding/block`) whose rules decided.
    pub determining_policies: Vec<String>,
    /// For a challenge: the approvers named by the deciding rules (merged), if any.
    pub approval: Option<super::spec::ApprovalRules>,
    /// For a challenge: the request facts the deciding rules read (see `Reads`, in `compile::lower`).
    pub reads: Vec<String>,
}

fn selector_matches(selector: &Selector, facts: &Facts<'_>) -> bool {
    let holds = |source: &Value, key: &str, want: &str| {
        source.get(key).and_then(selector_text).as_deref() == Some(want)
    };
    selector
        .metadata
        .iter()
        .all(|(k, v)| holds(facts.metadata, k, v))
        && selector
            .labels
            .iter()
            .all(|(k, v)| holds(facts.labels, k, v))
}

/// The spec groups the agent belongs to (explicit members and selectors).
pub fn groups_of(policy: &CompiledPolicy, facts: &Facts<'_>) -> Vec<String> {
    let mut groups: BTreeSet<String> = policy
        .members
        .get(facts.agent_id)
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    for (group, selectors) in &policy.selectors {
        if selectors.iter().any(|s| selector_matches(s, facts)) {
            groups.insert(group.clone());
        }
    }
    groups.into_iter().collect()
}

/// The entity types, parsed once (Cedar's parser is far slower than building a uid).
fn type_name(which: usize) -> Result<&'static EntityTypeName, String> {
    static NAMES: OnceLock<Result<[EntityTypeName; 4], String>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            let parse = |n: &str| EntityTypeName::from_str(n).map_err(|e| e.to_string());
            Ok([
                parse("Agent")?,
                parse("Group")?,
                parse("Request")?,
                parse("Action")?,
            ])
        })
        .as_ref()
        .map(|names| &names[which])
        .map_err(Clone::clone)
}

const AGENT: usize = 0;
const GROUP: usize = 1;
const REQUEST: usize = 2;
const ACTION: usize = 3;

fn uid(which: usize, id: &str) -> Result<EntityUid, String> {
    Ok(EntityUid::from_type_name_and_id(
        type_name(which)?.clone(),
        EntityId::new(id),
    ))
}

/// `Request::"current"` and `Action::"check"`, the same for every check: built once.
fn fixed_uids() -> Result<&'static (EntityUid, EntityUid), String> {
    static UIDS: OnceLock<Result<(EntityUid, EntityUid), String>> = OnceLock::new();
    UIDS.get_or_init(|| Ok((uid(REQUEST, "current")?, uid(ACTION, "check")?)))
        .as_ref()
        .map_err(Clone::clone)
}

fn strings(items: impl IntoIterator<Item = String>) -> RestrictedExpression {
    RestrictedExpression::new_set(items.into_iter().map(RestrictedExpression::new_string))
}

fn long(n: u64) -> RestrictedExpression {
    RestrictedExpression::new_long(i64::try_from(n).unwrap_or(i64::MAX))
}

fn pairs(source: &Value) -> Vec<String> {
    source
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| selector_text(v).map(|t| format!("{k}={t}")))
                .collect()
        })
        .unwrap_or_default()
}

/// A string or boolean context value as its `context.fields` entry, `name=value`.
fn field(name: &str, value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(format!("{name}={s}")),
        Value::Bool(b) => Some(format!("{name}={b}")),
        _ => None,
    }
}

fn authorizer() -> &'static Authorizer {
    static AUTHORIZER: OnceLock<Authorizer> = OnceLock::new();
    AUTHORIZER.get_or_init(Authorizer::new)
}

/// Evaluates a check, its agent prepared afresh; nothing is kept. Errors are facts that cannot
/// be expressed (they should not happen for facts built from validated input) and are answered
/// as a deny by the caller.
pub fn evaluate(policy: &CompiledPolicy, facts: &Facts<'_>) -> Result<Decision, String> {
    evaluate_in(
        policy,
        &prepare_agent(policy, facts)?,
        facts,
        true,
        Keep::Nothing,
    )
}

/// [`evaluate`], with the check's Cedar context from, and kept in, `kept`. Its decision is not
/// kept: a fresh preparation never finds it again.
pub fn evaluate_with_contexts(
    policy: &CompiledPolicy,
    facts: &Facts<'_>,
    kept: &DecisionCache,
) -> Result<Decision, String> {
    let prepared = prepare_agent(policy, facts)?;
    evaluate_in(policy, &prepared, facts, true, Keep::Contexts(kept))
}

/// `indexed`: evaluate only the rules indexed under the action (what `evaluate` does), or
/// every rule (what the index must agree with).
#[cfg(test)]
pub(crate) fn evaluate_with(
    policy: &CompiledPolicy,
    facts: &Facts<'_>,
    indexed: bool,
) -> Result<Decision, String> {
    evaluate_in(
        policy,
        &prepare_agent(policy, facts)?,
        facts,
        indexed,
        Keep::Nothing,
    )
}

/// The agent's part of a check under one compiled policy: its groups, and Cedar entity stores
/// holding its entity (with those groups as parents). It depends only on the agent's facts and
/// on the compiled policy, so the check path keeps it with the cached agent; each check then
/// adds only its own request entity.
pub struct PreparedAgent {
    /// Unique to this preparation: the decision cache's entries of an agent whose facts or
    /// policy changed are never found again.
    serial: u64,
    agent_id: String,
    /// The hash of the compiled policy it was made for.
    policy_hash: String,
    groups: Vec<String>,
    /// Not active, or above low risk: the status and reputation rules apply.
    unusual: bool,
    agent_uid: EntityUid,
    /// The agent's entity alone.
    agent_only: Entities,
    /// The agent's entity and a request entity without tags (for a check without numbers).
    with_plain_request: Entities,
}

impl std::fmt::Debug for PreparedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedAgent")
            .field("agent_id", &self.agent_id)
            .field("policy_hash", &self.policy_hash)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl PreparedAgent {
    /// Made for this agent under this compiled policy.
    pub fn fits(&self, policy: &CompiledPolicy, agent_id: &str) -> bool {
        self.policy_hash == policy.hash && self.agent_id == agent_id
    }
}

/// Prepares the agent part of `facts` (its id, status, risk tier, metadata and labels) for
/// evaluation under `policy`.
pub fn prepare_agent(policy: &CompiledPolicy, facts: &Facts<'_>) -> Result<PreparedAgent, String> {
    let groups = groups_of(policy, facts);
    let risk_level = RiskTier::parse(facts.risk_tier).map_or(2, RiskTier::level);
    let agent_uid = uid(AGENT, facts.agent_id)?;
    // Its groups, and the classes their shared rule sets are linked to.
    let mut parents = groups
        .iter()
        .map(|g| uid(GROUP, g))
        .collect::<Result<Vec<_>, _>>()?;
    parents.extend(
        groups
            .iter()
            .filter_map(|g| policy.groups.get(g))
            .map(|rules| rules.class.clone()),
    );
    let mut tags = pairs(facts.metadata);
    tags.extend(pairs(facts.labels));
    let agent = Entity::new(
        agent_uid.clone(),
        [
            (
                "status".to_owned(),
                RestrictedExpression::new_string(facts.status.to_owned()),
            ),
            (
                "risk_tier".to_owned(),
                RestrictedExpression::new_string(facts.risk_tier.to_owned()),
            ),
            (
                "risk_level".to_owned(),
                RestrictedExpression::new_long(risk_level),
            ),
            ("tags".to_owned(), strings(tags)),
        ]
        .into_iter()
        .collect(),
        parents.into_iter().collect(),
    )
    .map_err(|e| e.to_string())?;
    let (request_uid, _) = fixed_uids()?;
    let plain_request = Entity::new_no_attrs(request_uid.clone(), Default::default());
    let agent_only = Entities::from_entities([agent], None).map_err(|e| e.to_string())?;
    let with_plain_request = agent_only
        .clone()
        .add_entities([plain_request], None)
        .map_err(|e| e.to_string())?;
    static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    Ok(PreparedAgent {
        serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        agent_id: facts.agent_id.to_owned(),
        policy_hash: policy.hash.clone(),
        groups,
        unusual: facts.status != "active" || risk_level > 0,
        agent_uid,
        agent_only,
        with_plain_request,
    })
}

/// Evaluates a check whose agent part was prepared under this policy (see [`PreparedAgent`]).
/// A check like an earlier one of this prepared agent (same action and context fields, amounts
/// in the same interval of the amount rules) gets that check's decision from `kept`, without
/// running Cedar.
pub fn evaluate_prepared(
    policy: &CompiledPolicy,
    prepared: &PreparedAgent,
    facts: &Facts<'_>,
    kept: &DecisionCache,
) -> Result<Decision, String> {
    evaluate_in(policy, prepared, facts, true, Keep::Everything(kept))
}

/// What an evaluation reuses from, and keeps in, a decision cache.
#[derive(Clone, Copy)]
enum Keep<'a> {
    Nothing,
    Contexts(&'a DecisionCache),
    /// Contexts and decisions: only for an agent prepared once and kept, as the check path
    /// does (a fresh preparation never finds a decision).
    Everything(&'a DecisionCache),
}

impl<'a> Keep<'a> {
    fn contexts(self) -> Option<&'a DecisionCache> {
        match self {
            Keep::Nothing => None,
            Keep::Contexts(kept) | Keep::Everything(kept) => Some(kept),
        }
    }
}

/// `indexed`: evaluate only the rules the indexes pick, or every rule.
fn evaluate_in(
    policy: &CompiledPolicy,
    prepared: &PreparedAgent,
    facts: &Facts<'_>,
    indexed: bool,
    keep: Keep<'_>,
) -> Result<Decision, String> {
    if !prepared.fits(policy, facts.agent_id) {
        return Err("the agent was prepared for another agent or policy".into());
    }
    let mut numbers = Vec::new();
    let mut fields = Vec::new();
    for (k, v) in facts.context.iter() {
        match v {
            Value::Number(n) => {
                if let Some(value) = n.as_f64().and_then(tag_value) {
                    numbers.push((k.clone(), value));
                }
            }
            // Each string or boolean of an array is a field of its own (`keys=A`,
            // `keys=B`), so rules can test membership; other elements stay invisible.
            Value::Array(items) => {
                fields.extend(items.iter().filter_map(|item| field(k, item)));
            }
            other => fields.extend(field(k, other)),
        }
    }
    // The rule sets that apply: each group's set carries the guardrails too, so an agent of one
    // group costs one authorisation; an agent of none is judged by the guardrails alone. Of
    // each, the policies to evaluate: through the indexes (by action, whether the agent is
    // unusual, i.e. not active or above low risk, context fields and numbers), or every rule.
    // Chosen here, before `fields` moves into the context and `numbers` into the entity.
    let mut sets: Vec<(&RuleSet, Option<&GroupRules>)> = prepared
        .groups
        .iter()
        .filter_map(|g| policy.groups.get(g))
        .map(|rules| (&*rules.set, Some(rules)))
        .collect();
    if sets.is_empty() {
        sets.push((&policy.guardrails, None));
    }
    // With each, the interval of a numeric tag that chose its rules, if one did.
    let chosen: Vec<Chosen<'_>> = sets
        .into_iter()
        .flat_map(|(set, group)| {
            let usual = if indexed {
                set.for_action(facts.action).pick_in(&fields, &numbers)
            } else {
                (&set.policies, None)
            };
            let extra = (indexed && prepared.unusual).then(|| (set.for_unusual(), None));
            std::iter::once(usual)
                .chain(extra)
                .map(move |picked| Chosen { set, group, picked })
        })
        .collect();
    // Checks without email facts are found in the decision cache by their action and fields:
    // the contexts by that alone, the decisions by that, the agent and the numbers.
    let plain = keep.contexts().and_then(|_| plain_key(facts, &fields));
    let key = match (&plain, keep) {
        (Some(plain), Keep::Everything(kept)) if indexed && policy.tags_read_by_ranges_only => {
            decision_key(plain, prepared, &numbers, &chosen).map(|key| (key, kept))
        }
        _ => None,
    };
    if let Some(hit) = key.as_ref().and_then(|(k, kept)| kept.decisions.get(k)) {
        return Ok(hit);
    }
    let (request_uid, action) = fixed_uids()?;
    let entities = if numbers.is_empty() {
        prepared.with_plain_request.clone()
    } else {
        let tags = numbers
            .into_iter()
            .map(|(name, value)| (name, RestrictedExpression::new_long(value)));
        let resource =
            Entity::new_with_tags(request_uid.clone(), [], [], tags).map_err(|e| e.to_string())?;
        prepared
            .agent_only
            .clone()
            .add_entities([resource], None)
            .map_err(|e| e.to_string())?
    };
    let context = match (plain, keep.contexts()) {
        (Some(plain), Some(kept)) => kept.context(plain, facts, fields)?,
        _ => build_context(facts, fields)?,
    };
    let request = Request::new(
        prepared.agent_uid.clone(),
        action.clone(),
        request_uid.clone(),
        context,
        None,
    )
    .map_err(|e| e.to_string())?;

    let mut matched = Vec::new();
    for Chosen { set, group, picked } in chosen {
        let response = authorizer().is_authorized(&request, picked.0, &entities);
        matched.extend(
            response
                .diagnostics()
                .reason()
                .filter_map(|id| match group {
                    Some(group) => group.meta(id),
                    None => set.rules.get(id),
                }),
        );
    }
    let decision = decide(&matched);
    if let Some((key, kept)) = key {
        kept.decisions.insert(key, decision.clone());
    }
    Ok(decision)
}

/// Decisions of checks without email facts, and the Cedar contexts of such checks: one per
/// replica, held by its caches and shared by every thread (see [`Memo`]: a lookup takes a read
/// lock of one of sixteen shards).
///
/// A check's decision is a pure function of its prepared agent (facts and groups under one
/// compiled policy), its action, its context fields and its numbers. Of a number, only the
/// interval its value falls in counts when that number is the indexed tag of the amount index
/// that chose the rules of every set the check is judged by (see `Indexed::pick_in`) and no raw
/// Cedar of the policy reads tags; otherwise (another tag, an agent that is not active or above
/// low risk, whose status rules are not indexed by amount) it counts by value. So an active
/// agent's refunds of 12.50 and 48.10 under a 100 allowance share one entry, and Cedar runs
/// once for both.
///
/// Contexts are kept by action and context fields alone: few distinct ones recur (the numbers
/// of a check are tags of its request entity, not context), and building one costs more than
/// the rest of a check's request.
pub struct DecisionCache {
    decisions: Memo<Decision>,
    contexts: Memo<Context>,
}

/// At most this many decisions are kept (then a shard is cleared).
const DECISION_CACHE_SIZE: usize = 1024;
/// At most this many contexts are kept.
const CONTEXT_CACHE_SIZE: usize = 256;

impl Default for DecisionCache {
    fn default() -> Self {
        Self {
            decisions: Memo::new(DECISION_CACHE_SIZE),
            contexts: Memo::new(CONTEXT_CACHE_SIZE),
        }
    }
}

impl DecisionCache {
    /// How many decisions are kept.
    pub fn decisions_kept(&self) -> usize {
        self.decisions.len()
    }

    /// Forgets every decision (tests compare kept decisions with fresh ones).
    pub fn clear_decisions(&self) {
        self.decisions.clear();
    }

    /// Forgets every context (tests compare kept contexts with fresh ones).
    pub fn clear_contexts(&self) {
        self.contexts.clear();
    }

    /// The Cedar context of a check without email facts, kept by its plain key.
    fn context(
        &self,
        plain: String,
        facts: &Facts<'_>,
        fields: Vec<String>,
    ) -> Result<Context, String> {
        if let Some(hit) = self.contexts.get(&plain) {
            return Ok(hit);
        }
        let context = build_context(facts, fields)?;
        self.contexts.insert(plain, context.clone());
        Ok(context)
    }
}

/// A rule set a check is judged by: the group it is judged as (`None`: the guardrails alone),
/// the policies its indexes picked and the interval of a numeric tag that chose them.
struct Chosen<'a> {
    set: &'a RuleSet,
    group: Option<&'a GroupRules>,
    picked: Picked<'a>,
}

/// The decision cache's key for a check: its plain key (action and fields), its prepared agent
/// and its numbers; `None` when too long to keep.
fn decision_key(
    plain: &str,
    prepared: &PreparedAgent,
    numbers: &[(String, i64)],
    chosen: &[Chosen<'_>],
) -> Option<String> {
    // Every part with its length (or an end marker) first, so that no two checks share a key.
    // The numbers come from one JSON object: each name appears once.
    let mut key = String::with_capacity(plain.len() + 24 + 16 * numbers.len());
    key.push_str(plain);
    let _ = write!(key, "@{}", prepared.serial);
    for (name, value) in numbers {
        let _ = write!(key, "#{}:{name}", name.len());
        // Only the interval counts when it chose the rules of every set the check is judged
        // by: then each rule that reads this tag bounds it at the interval's ends (a rule
        // bounding it elsewhere would have made a cut there).
        let by_interval = !chosen.is_empty()
            && chosen
                .iter()
                .all(|c| c.picked.1.is_some_and(|(tag, _)| tag == name));
        if by_interval {
            for c in chosen {
                if let Some((_, i)) = c.picked.1 {
                    let _ = write!(key, "~{i}");
                }
            }
        } else {
            let _ = write!(key, "={value}");
        }
    }
    (key.len() <= CONTEXT_KEY_MAX).then_some(key)
}

/// Longer keys (large or many string fields) are not kept: 256 of them could hold megabytes.
const CONTEXT_KEY_MAX: usize = 512;

/// The key of a check without email facts (nor email counts) in the decision cache: its
/// action and its context fields (every element of an array among them, so two checks that
/// differ only in an array's elements never share a key), each with its length first so that
/// no two checks share a key. `None` for other checks, and for keys too long to keep.
fn plain_key(facts: &Facts<'_>, fields: &[String]) -> Option<String> {
    let plain = facts.email.is_none()
        && facts.emails_sent_last_minute == 0
        && facts.emails_sent_last_day == 0;
    if !plain {
        return None;
    }
    let mut key = String::with_capacity(
        facts.action.len() + fields.iter().map(|f| f.len() + 8).sum::<usize>() + 8,
    );
    for part in std::iter::once(facts.action).chain(fields.iter().map(String::as_str)) {
        let _ = write!(key, "{}:{part}", part.len());
    }
    (key.len() <= CONTEXT_KEY_MAX).then_some(key)
}

/// The Cedar context of a check: its action, its context fields (`name=value`, one per string
/// or boolean value and per string or boolean element of an array) and its email facts.
fn build_context(facts: &Facts<'_>, fields: Vec<String>) -> Result<Context, String> {
    let empty = EmailFacts::default();
    let email = facts.email.unwrap_or(&empty);
    let domains: BTreeSet<String> = email
        .recipients
        .iter()
        .map(|r| {
            r.rsplit('@')
                .next()
                .unwrap_or("")
                .trim_end_matches('>')
                .to_ascii_lowercase()
        })
        .collect();
    let extensions: BTreeSet<String> = email
        .attachments
        .iter()
        // Trailing dots and spaces are ignored by common file systems: `run.exe.` is an .exe.
        .filter_map(|a| {
            a.filename
                .trim_end_matches(['.', ' '])
                .rsplit_once('.')
                .map(|(_, ext)| format!(".{}", ext.to_ascii_lowercase()))
        })
        .collect();
    let types: BTreeSet<String> = email
        .attachments
        .iter()
        // The media type without parameters (`application/zip; name=x` is `application/zip`).
        .map(|a| {
            a.content_type
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let largest = email
        .attachments
        .iter()
        .map(|a| a.size_bytes)
        .max()
        .unwrap_or(0);
    let email_record = RestrictedExpression::new_record([
        (
            "recipient_count".to_owned(),
            long(email.recipients.len() as u64),
        ),
        ("recipient_domains".to_owned(), strings(domains)),
        ("attachment_extensions".to_owned(), strings(extensions)),
        ("attachment_types".to_owned(), strings(types)),
        ("max_attachment_bytes".to_owned(), long(largest)),
        (
            "sent_last_minute".to_owned(),
            long(facts.emails_sent_last_minute),
        ),
        ("sent_last_day".to_owned(), long(facts.emails_sent_last_day)),
    ])
    .map_err(|e| e.to_string())?;
    Context::from_pairs([
        (
            "action".to_owned(),
            RestrictedExpression::new_string(facts.action.to_owned()),
        ),
        ("fields".to_owned(), strings(fields)),
        ("email".to_owned(), email_record),
    ])
    .map_err(|e| e.to_string())
}

/// deny > challenge > allow; nothing matched is a deny with `no_matching_rule`.
pub fn decide(matched: &[&RuleMeta]) -> Decision {
    let winner = [Outcome::Deny, Outcome::Challenge, Outcome::Allow]
        .into_iter()
        .find(|o| matched.iter().any(|m| m.outcome == *o));
    let Some(outcome) = winner else {
        return Decision {
            outcome: Outcome::Deny,
            reasons: vec!["no rule of the policy allows this action".into()],
            reason_codes: vec![NO_MATCHING_RULE.into()],
            determining_policies: Vec::new(),
            approval: None,
            reads: Vec::new(),
        };
    };
    let deciding: Vec<&&RuleMeta> = matched.iter().filter(|m| m.outcome == outcome).collect();
    let sorted = |items: Vec<String>| -> Vec<String> {
        let set: BTreeSet<String> = items.into_iter().collect();
        set.into_iter().collect()
    };
    Decision {
        outcome,
        reasons: if outcome == Outcome::Allow {
            Vec::new()
        } else {
            sorted(deciding.iter().map(|m| m.reason.clone()).collect())
        },
        reason_codes: sorted(deciding.iter().map(|m| m.reason_code.clone()).collect()),
        determining_policies: sorted(deciding.iter().map(|m| m.source.clone()).collect()),
        approval: merge_approvals(deciding.iter().filter_map(|m| m.approval.as_ref())),
        reads: if outcome == Outcome::Challenge {
            sorted(deciding.iter().flat_map(|m| m.reads.clone()).collect())
        } else {
            Vec::new()
        },
    }
}

/// Every named approver; the most inclusive role; the shortest lifetime.
fn merge_approvals<'a>(
    all: impl Iterator<Item = &'a super::spec::ApprovalRules>,
) -> Option<super::spec::ApprovalRules> {
    let mut merged: Option<super::spec::ApprovalRules> = None;
    for a in all {
        let m = merged.get_or_insert_with(Default::default);
        m.approvers.extend(a.approvers.iter().cloned());
        m.approver_role = match (m.approver_role.take(), &a.approver_role) {
            (None, r) => r.clone(),
            (Some(x), None) => Some(x),
            (Some(x), Some(y)) => {
                let rank = |r: &str| acp_domain::Role::parse(r).map_or(3, |r| r as u8);
                Some(if rank(y) < rank(&x) { y.clone() } else { x })
            }
        };
        m.ttl_secs = match (m.ttl_secs, a.ttl_secs) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
    }
    if let Some(m) = merged.as_mut() {
        m.approvers.sort();
        m.approvers.dedup();
    }
    merged
}
