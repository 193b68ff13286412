//! The policy spec: what platform teams keep in Git (YAML or JSON). Parsing gives every error
//! with its path into the spec; the canonical form (sorted keys, defaults filled in, test cases
//! left out) is what the policy hash covers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use acp_domain::RiskTier;

pub use super::error::SpecError;
use super::source::{parse_json, parse_yaml, Located};

/// Gives every error without a place the place of its path in `source`.
pub fn place(errors: &mut [SpecError], source: &Located) {
    for e in errors.iter_mut().filter(|e| e.line.is_none()) {
        let pos = source.locate(&e.path);
        e.line = Some(pos.line);
        e.column = Some(pos.column);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    #[default]
    Deny,
    Challenge,
    Allow,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Challenge => "challenge",
            Self::Deny => "deny",
        }
    }
}

/// The whole spec: the four keys of the interface, plus optional test cases for
/// `acp policy test` (not part of the policy, nor of its hash).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default)]
    pub reusable_policy_blocks: BTreeMap<String, Block>,
    #[serde(default)]
    pub agent_groups: Vec<AgentGroup>,
    #[serde(default)]
    pub bindings: Vec<Binding>,
    #[serde(default)]
    pub global_guardrails: Guardrails,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestCase>,
}

/// A reusable block of rules. Every part is optional; a block may hold several.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Block {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub email: Option<EmailRules>,
    #[serde(default)]
    pub amount: Option<AmountRules>,
    #[serde(default)]
    pub actions: Option<ActionRules>,
    /// Rules for the vault's actions. Left out of the canonical form when absent, so the
    /// hashes of specs written before it existed stay what they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<VaultRules>,
    #[serde(default)]
    pub status: Option<StatusRules>,
    #[serde(default)]
    pub reputation: Option<ReputationRules>,
    #[serde(default)]
    pub cedar: Vec<CedarRule>,
    /// Who is asked when a rule of this block challenges, and for how long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRules>,
}

/// Approvers of the challenges a block produces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRules {
    /// Addresses that receive the approval link.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// Also mail every member of the workspace with at least this role (`owner`, `admin`,
    /// `approver`, `member`).
    #[serde(default)]
    pub approver_role: Option<String>,
    /// Lifetime of the approval link, 30 to 86400 seconds (default 300).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

/// Global guardrails: rules (and referenced blocks) that hold for every agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guardrails {
    /// Reusable blocks applied to every agent.
    #[serde(default)]
    pub blocks: Vec<String>,
    #[serde(default)]
    pub email: Option<EmailRules>,
    #[serde(default)]
    pub amount: Option<AmountRules>,
    #[serde(default)]
    pub actions: Option<ActionRules>,
    /// Rules for the vault's actions. Left out of the canonical form when absent, so the
    /// hashes of specs written before it existed stay what they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<VaultRules>,
    #[serde(default)]
    pub status: Option<StatusRules>,
    #[serde(default)]
    pub reputation: Option<ReputationRules>,
    #[serde(default)]
    pub cedar: Vec<CedarRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRules>,
}

impl Guardrails {
    /// The inline rules as a block.
    pub fn inline_block(&self) -> Block {
        // Written out field by field (no `..`): a part added to both types must be added here.
        let Guardrails {
            blocks: _,
            email,
            amount,
            actions,
            status,
            reputation,
            cedar,
            approval,
            vault,
        } = self;
        Block {
            description: None,
            email: email.clone(),
            amount: amount.clone(),
            actions: actions.clone(),
            status: status.clone(),
            reputation: reputation.clone(),
            cedar: cedar.clone(),
            approval: approval.clone(),
            vault: vault.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailRules {
    /// Every recipient (to, cc, bcc) must be at one of these domains (case-insensitive).
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    /// At most this many recipients in to + cc + bcc.
    #[serde(default)]
    pub max_recipients: Option<u32>,
    /// `.ext` entries match the attachment's file extension, others its content type.
    #[serde(default)]
    pub blocked_attachments: Vec<String>,
    #[serde(default)]
    pub max_attachment_bytes: Option<u64>,
    /// Emails actually sent per agent.
    #[serde(default)]
    pub rate_limit_per_minute: Option<u32>,
    #[serde(default)]
    pub rate_limit_per_day: Option<u32>,
    /// What a violation of the rules above produces: `deny` (default) or `challenge`.
    #[serde(default)]
    pub on_violation: Outcome,
}

/// Rules for the vault's actions (`vault.read`, `vault.proxy`, `vault.mint_lease`), which the
/// vault decides as ordinary checks with the secret set, its environment, the keys and (for a
/// proxied request) the target host in the context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultRules {
    /// The vault actions allowed: `read`, `proxy`, `mint_lease` (or their `vault.` names), or
    /// `*` alone for all three. Not emitted in guardrails, like `email`'s allow.
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    /// Vault actions only on these secret sets (by name).
    #[serde(default)]
    pub secret_sets: Option<Vec<String>>,
    /// Vault actions only on secret sets of these environments.
    #[serde(default)]
    pub environments: Option<Vec<String>>,
    /// `vault.proxy` only to these hosts: `api.example.com`, or `*.example.com` for any host
    /// below it.
    #[serde(default)]
    pub proxy_hosts: Option<Vec<String>>,
    /// Vault actions that need a human's approval.
    #[serde(default)]
    pub require_approval: Option<VaultApproval>,
    /// What a violation of `secret_sets`, `environments` or `proxy_hosts` produces: `deny`
    /// (default) or `challenge`.
    #[serde(default)]
    pub on_violation: Outcome,
}

/// Which vault actions need a human's approval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultApproval {
    /// These actions (short or `vault.` names, or `*`); default every vault action.
    #[serde(default)]
    pub actions: Option<Vec<String>>,
    /// Only on secret sets of these environments; default every environment.
    #[serde(default)]
    pub environments: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmountRules {
    /// The numeric context field, default `amount`.
    #[serde(default = "default_amount_field")]
    pub field: String,
    /// The context field naming the currency, default `currency`.
    #[serde(default = "default_currency_field")]
    pub currency_field: String,
    /// Thresholds per currency code; `*` for any other currency. A currency without an entry
    /// (and no `*`) is denied.
    pub limits: BTreeMap<String, Threshold>,
    /// Only for these actions (default: any action whose context has the field).
    #[serde(default)]
    pub actions: Option<Vec<String>>,
}

fn default_amount_field() -> String {
    "amount".into()
}

fn default_currency_field() -> String {
    "currency".into()
}

/// Up to `allow_up_to`: allow; up to `challenge_up_to`: challenge; above: deny.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    #[serde(default)]
    pub allow_up_to: f64,
    #[serde(default)]
    pub challenge_up_to: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRules {
    /// `*` allows every action.
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub challenge: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRules {
    /// Pending (not yet attested) agents are challenged unless this is true. Only in
    /// `global_guardrails`: a binding cannot relax it.
    #[serde(default)]
    pub allow_pending: bool,
    /// Deny every agent that is not `active`.
    #[serde(default)]
    pub require_active: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReputationRules {
    /// Challenge agents at or above this risk tier.
    #[serde(default)]
    pub challenge_at: Option<RiskTier>,
    /// Deny agents at or above this risk tier.
    #[serde(default)]
    pub deny_at: Option<RiskTier>,
}

/// Raw Cedar for anything else: a condition over `principal`, `context` and `resource`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CedarRule {
    pub name: String,
    /// A Cedar boolean expression, e.g. `context.fields.contains("region=eu")`.
    pub when: String,
    pub outcome: Outcome,
    pub reason_code: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentGroup {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Agent ids (`agt_...`).
    #[serde(default)]
    pub members: Vec<String>,
    /// An agent matching any selector is a member.
    #[serde(default)]
    pub selectors: Vec<Selector>,
}

/// Matches agents whose metadata and inventory labels hold every listed key with that value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// Default `<group>:<first block>`.
    #[serde(default)]
    pub name: Option<String>,
    pub group: String,
    pub blocks: Vec<String>,
    /// Narrow every rule of the binding to these actions.
    #[serde(default)]
    pub actions: Option<Vec<String>>,
}

impl Binding {
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                self.group,
                self.blocks.first().map(String::as_str).unwrap_or("")
            )
        })
    }
}

/// A test case for `acp policy test`: a request and the decision it must get.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub name: String,
    pub agent: TestAgent,
    pub action: String,
    #[serde(default)]
    pub context: Value,
    #[serde(default)]
    pub email: Option<Value>,
    #[serde(default)]
    pub emails_sent_last_minute: u64,
    #[serde(default)]
    pub emails_sent_last_day: u64,
    pub expect: TestExpectation,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestAgent {
    #[serde(default = "default_test_agent_id")]
    pub id: String,
    #[serde(default = "default_test_status")]
    pub status: String,
    #[serde(default = "default_test_risk")]
    pub risk_tier: String,
    #[serde(default)]
    pub metadata: Value,
    #[serde(default)]
    pub labels: Value,
}

fn default_test_agent_id() -> String {
    "agt_00000000000000000000000000000000".into()
}

fn default_test_status() -> String {
    "active".into()
}

fn default_test_risk() -> String {
    "low".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestExpectation {
    pub decision: Outcome,
    /// When given, the decision's reason codes must be exactly these (any order).
    #[serde(default)]
    pub reason_codes: Option<Vec<String>>,
}

/// The value with every object's keys in sorted order.
pub fn sort_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// The text format of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// By file extension; YAML unless `.json`.
    pub fn of_path(path: &str) -> Self {
        if path.to_ascii_lowercase().ends_with(".json") {
            Self::Json
        } else {
            Self::Yaml
        }
    }
}

fn path_text(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            serde_path_to_error::Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(variant);
            }
            serde_path_to_error::Segment::Unknown => out.push_str(".?"),
        }
    }
    out
}

/// Reads a spec from a JSON value (as received by the sync endpoint).
pub fn from_value(value: &Value) -> Result<PolicySpec, Vec<SpecError>> {
    if !value.is_object() {
        return Err(vec![SpecError::new("", "the spec must be a mapping")]);
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.inner().to_string();
        let mut path = path_text(err.path());
        // An unknown key is reported at the key itself, not at its mapping.
        if let Some(key) = unknown_key(&inner) {
            if !path.ends_with(key) {
                path = if path.is_empty() {
                    key.to_owned()
                } else {
                    format!("{path}.{key}")
                };
            }
        }
        vec![SpecError::new(path, humanize(&inner))]
    })
}

/// Reads a spec from YAML or JSON text.
pub fn parse(text: &str, format: Format) -> Result<PolicySpec, Vec<SpecError>> {
    parse_located(text, format).map(|(spec, _)| spec)
}

/// Reads a spec from YAML or JSON text, strictly (see `source`), with the tree that knows
/// where each part is written; every error carries its line and column.
pub fn parse_located(text: &str, format: Format) -> Result<(PolicySpec, Located), Vec<SpecError>> {
    let source = match format {
        Format::Json => parse_json(text),
        Format::Yaml => parse_yaml(text),
    }
    .map_err(|e| vec![e])?;
    match from_value(&source.to_value()) {
        Ok(spec) => Ok((spec, source)),
        Err(mut errors) => {
            place(&mut errors, &source);
            Err(errors)
        }
    }
}

/// The key a serde "unknown field" message names.
fn unknown_key(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
}

/// The names listed after "expected one of" / "expected" in a serde message.
fn expected_names(message: &str) -> Vec<&str> {
    let Some((_, list)) = message.split_once("expected ") else {
        return Vec::new();
    };
    list.split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty())
        .collect()
}

/// The closest of `names` to `word`, when close enough to be a likely typo.
pub fn nearest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (strsim::jaro_winkler(word, n), *n))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

/// The spec's name for what serde calls a Rust type.
fn spec_type(expected: &str) -> String {
    let expected = expected.trim();
    let named = match expected {
        "f64" | "f32" => "a number",
        "u64" | "u32" | "u16" | "u8" | "usize" => "a whole number, 0 or more",
        "i64" | "i32" => "a whole number",
        "a boolean" | "bool" => "`true` or `false`",
        "a string" | "a borrowed string" | "a character" => "a string",
        "a sequence" => "a list",
        "a map" => "a mapping",
        "any valid JSON value" => "a value",
        other if other.starts_with("struct ") || other.starts_with("a map") => "a mapping",
        other if other.starts_with("enum ") => "one of the allowed names",
        other if other.starts_with("a sequence") || other.starts_with("a list") => "a list",
        _ => "",
    };
    if named.is_empty() {
        expected.to_owned()
    } else {
        named.to_owned()
    }
}

/// What serde found, in the spec's words (`string "x"` → `the string "x"`).
fn found_text(found: &str) -> String {
    let found = found.trim();
    for (prefix, name) in [
        ("string ", "the string "),
        ("integer ", "the number "),
        ("floating point ", "the number "),
        ("boolean ", ""),
    ] {
        if let Some(rest) = found.strip_prefix(prefix) {
            return format!("{name}{}", rest.trim_matches('`'));
        }
    }
    match found {
        "null" | "unit value" => "nothing (null)".to_owned(),
        "sequence" => "a list".to_owned(),
        "map" => "a mapping".to_owned(),
        other => other.to_owned(),
    }
}

/// A serde error message in the spec's words: keys and values, never Rust types.
pub fn humanize(message: &str) -> String {
    if let Some(key) = unknown_key(message) {
        let names = expected_names(message);
        let mut out = format!("unknown key `{key}`");
        match nearest(key, &names) {
            Some(n) => out.push_str(&format!("; did you mean `{n}`?")),
            None if names.is_empty() => out.push_str("; no key is allowed here"),
            None => out.push_str(&format!(
                "; the keys here are {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        return out;
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let value = rest.split('`').next().unwrap_or("");
        let names = expected_names(rest);
        let list = names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut out = format!("`{value}` is not allowed here; use one of {list}");
        if let Some(n) = nearest(value, &names) {
            out.push_str(&format!(" (did you mean `{n}`?)"));
        }
        return out;
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or("");
        return format!("the key `{key}` is required here");
    }
    if let Some(rest) = message.strip_prefix("duplicate field `") {
        let key = rest.split('`').next().unwrap_or("");
        return format!("duplicate key `{key}`");
    }
    for prefix in ["invalid type: ", "invalid value: ", "invalid length "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((found, expected)) = rest.split_once(", expected ") {
                return format!(
                    "expected {}, found {}",
                    spec_type(expected),
                    found_text(found)
                );
            }
        }
    }
    message.to_owned()
}

impl PolicySpec {
    /// The names of the blocks that some binding or the guardrails name.
    pub fn used_blocks(&self) -> std::collections::BTreeSet<&str> {
        self.bindings
            .iter()
            .flat_map(|b| b.blocks.iter())
            .chain(self.global_guardrails.blocks.iter())
            .map(String::as_str)
            .collect()
    }

    /// The canonical JSON of the policy part: sorted keys, defaults written out, no tests.
    pub fn canonical_json(&self) -> String {
        let policy = PolicySpec {
            tests: Vec::new(),
            ..self.clone()
        };
        // Keys sorted explicitly at every level: the form must not depend on whether some
        // dependency switches serde_json to insertion order.
        let value = sort_keys(serde_json::to_value(&policy).unwrap_or(Value::Null));
        serde_json::to_string(&value).unwrap_or_default()
    }

    /// `sha256:` + lowercase hex of the canonical JSON.
    pub fn hash(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
reusable_policy_blocks:
  mail:
    email: { allowed_domains: [example.com], max_recipients: 3 }
agent_groups:
  - name: support
    members: [agt_0123456789abcdef0123456789abcdef]
bindings:
  - group: support
    blocks: [mail]
global_guardrails:
  status: { allow_pending: false }
"#;

    #[test]
    fn the_hash_ignores_format_key_order_and_whitespace() {
        let yaml = parse(YAML, Format::Yaml).unwrap();
        let json = parse(
            r#"{"global_guardrails":{"status":{"allow_pending":false}},
                "bindings":[{"blocks":["mail"],"group":"support"}],
                "agent_groups":[{"members":["agt_0123456789abcdef0123456789abcdef"],"name":"support"}],
                "reusable_policy_blocks":{"mail":{"email":{"max_recipients":3,"allowed_domains":["example.com"]}}}}"#,
            Format::Json,
        )
        .unwrap();
        assert_eq!(yaml, json);
        assert_eq!(yaml.hash(), json.hash());
        assert!(yaml.hash().starts_with("sha256:") && yaml.hash().len() == 71);
        let mut other = yaml.clone();
        other.bindings[0].actions = Some(vec!["send_email".into()]);
        assert_ne!(other.hash(), yaml.hash());
    }

    #[test]
    fn errors_carry_their_path() {
        let err = parse("bindings:\n  - group: 5\n    blocks: x\n", Format::Yaml).unwrap_err();
        assert_eq!(err[0].path, "bindings[0].group");
        let err = parse(
            "{\"agent_groups\": [{\"name\": \"a\", \"memberz\": []}]}",
            Format::Json,
        )
        .unwrap_err();
        assert_eq!(err[0].path, "agent_groups[0].memberz");
        assert!(err[0].message.contains("memberz"));
        assert!(parse("[1]", Format::Json).is_err());
        assert!(parse("a: [", Format::Yaml).is_err());
    }
}
