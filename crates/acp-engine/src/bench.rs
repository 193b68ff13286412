//! The test bench: one hand-written request evaluated against a compiled policy, as a case of
//! `acp policy test` is, and nothing recorded. Pure: the checks of the request's fields and
//! [`evaluate`].

use serde_json::Value;

use super::compile::CompiledPolicy;
use super::evaluate::{evaluate, ContextFields, Decision, EmailFacts, Facts, ReadAddress};

/// The agent statuses and risk tiers a request may name.
pub const STATUSES: [&str; 4] = ["pending", "active", "suspended", "revoked"];
pub const RISK_TIERS: [&str; 3] = ["low", "medium", "high"];

/// A request as written on the bench.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    pub agent_id: String,
    pub status: String,
    pub risk_tier: String,
    /// The agent's metadata and inventory labels (objects, or null for none).
    pub metadata: Value,
    pub labels: Value,
    pub action: String,
    /// The check's context (an object, or null for none).
    pub context: Value,
    /// `{to, cc, bcc, attachments}` of a `send_email` check.
    pub email: Option<Value>,
}

/// The decision on `request`, or what is wrong with the request (naming the field); `read`
/// finds each recipient's address, as the service's checks find it.
pub fn run(
    policy: &CompiledPolicy,
    request: &BenchRequest,
    read: ReadAddress,
) -> Result<Decision, String> {
    if !STATUSES.contains(&request.status.as_str()) {
        return Err(format!(
            "`agent.status` must be one of {}",
            STATUSES.join(", ")
        ));
    }
    if !RISK_TIERS.contains(&request.risk_tier.as_str()) {
        return Err(format!(
            "`agent.risk_tier` must be one of {}",
            RISK_TIERS.join(", ")
        ));
    }
    if request.action.trim().is_empty() {
        return Err("`action` is required".into());
    }
    for (name, value) in [
        ("agent.metadata", &request.metadata),
        ("agent.labels", &request.labels),
        ("context", &request.context),
    ] {
        if !(value.is_object() || value.is_null()) {
            return Err(format!("`{name}` must be an object"));
        }
    }
    let email = match &request.email {
        None => None,
        Some(v) => Some(
            EmailFacts::from_json(v, read)
                .map_err(|field| format!("`{field}` is not valid email input"))?,
        ),
    };
    let facts = Facts {
        agent_id: &request.agent_id,
        status: &request.status,
        risk_tier: &request.risk_tier,
        metadata: &request.metadata,
        labels: &request.labels,
        action: &request.action,
        context: ContextFields::new(&request.context),
        email: email.as_ref(),
        emails_sent_last_minute: 0,
        emails_sent_last_day: 0,
    };
    evaluate(policy, &facts).map_err(|e| format!("cannot evaluate: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::bare_address;
    use crate::spec::{parse, Format};
    use crate::{compile, Outcome};
    use serde_json::json;

    fn request(action: &str) -> BenchRequest {
        BenchRequest {
            agent_id: "agt_0123456789abcdef0123456789abcdef".into(),
            status: "active".into(),
            risk_tier: "low".into(),
            metadata: Value::Null,
            labels: json!({"env": "prod"}),
            action: action.into(),
            context: json!({}),
            email: None,
        }
    }

    #[test]
    fn the_bench_decides_as_the_policy_does_and_names_bad_fields() {
        let spec = parse(
            "reusable_policy_blocks: {read: {actions: {allow: [read]}}}\nagent_groups: [{name: ops, members: [agt_0123456789abcdef0123456789abcdef]}]\nbindings: [{name: ops-read, group: ops, blocks: [read]}]\n",
            Format::Yaml,
        )
        .unwrap();
        let policy = compile(&spec).unwrap();
        let allowed = run(&policy, &request("read"), bare_address).unwrap();
        assert_eq!(allowed.outcome, Outcome::Allow);
        assert_eq!(
            allowed.determining_policies,
            vec!["ops-read/read".to_string()]
        );
        let denied = run(&policy, &request("write"), bare_address).unwrap();
        assert_eq!(denied.outcome, Outcome::Deny);
        assert!(!denied.reason_codes.is_empty());

        let mut bad = request("read");
        bad.status = "asleep".into();
        assert!(run(&policy, &bad, bare_address)
            .unwrap_err()
            .contains("agent.status"));
        let mut bad = request("read");
        bad.context = json!([1]);
        assert!(run(&policy, &bad, bare_address)
            .unwrap_err()
            .contains("`context`"));
        let mut bad = request("read");
        bad.email = Some(json!("nope"));
        assert!(run(&policy, &bad, bare_address)
            .unwrap_err()
            .contains("email"));
    }
}
