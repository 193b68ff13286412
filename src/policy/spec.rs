//! The policy spec: what platform teams keep in Git (YAML or JSON). Parsing gives every error
//! with its path into the spec; the canonical form (sorted keys, defaults filled in, test cases
//! left out) is what the policy hash covers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A problem in a spec, located by a path such as `bindings[2].group`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    pub path: String,
    pub message: String,
}

impl SpecError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RiskTier {
    Low,
    Medium,
    High,
}

impl RiskTier {
    pub fn level(self) -> i64 {
        match self {
            Self::Low => 0,
            Self::Medium => 1,
            Self::High => 2,
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
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
    /// `member`).
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
        Block {
            description: None,
            email: self.email.clone(),
            amount: self.amount.clone(),
            actions: self.actions.clone(),
            status: self.status.clone(),
            reputation: self.reputation.clone(),
            cedar: self.cedar.clone(),
            approval: self.approval.clone(),
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
        return Err(vec![SpecError::new("", "the spec must be an object")]);
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        vec![SpecError::new(
            path_text(err.path()),
            err.inner().to_string(),
        )]
    })
}

/// Reads a spec from YAML or JSON text.
pub fn parse(text: &str, format: Format) -> Result<PolicySpec, Vec<SpecError>> {
    let value: Value = match format {
        Format::Json => serde_json::from_str(text)
            .map_err(|e| vec![SpecError::new("", format!("invalid JSON: {e}"))])?,
        Format::Yaml => serde_yaml_ng::from_str(text)
            .map_err(|e| vec![SpecError::new("", format!("invalid YAML: {e}"))])?,
    };
    from_value(&value)
}

impl PolicySpec {
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
