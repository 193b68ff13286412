//! What the benches share: the large policy spec.
#![allow(dead_code, clippy::expect_used)]

use serde_json::{json, Value};

use acp::policy::spec::{from_value, PolicySpec};

pub fn agent_id(n: usize) -> String {
    format!("agt_{n:032x}")
}

/// 1,000 groups × 10 members, 1,000 bindings over 10 blocks.
pub fn large_spec() -> PolicySpec {
    let mut blocks = serde_json::Map::new();
    for b in 0..10 {
        blocks.insert(
            format!("block_{b}"),
            json!({
                "actions": {"allow": [format!("read_{b}"), "list"], "challenge": [format!("deploy_{b}")], "deny": [format!("drop_{b}")]},
                "amount": {"limits": {"USD": {"allow_up_to": 100 + b, "challenge_up_to": 1000}, "EUR": {"allow_up_to": 90}}, "actions": ["refund"]},
                "email": {"allowed_domains": ["example.com"], "max_recipients": 5, "blocked_attachments": [".exe"]}
            }),
        );
    }
    let groups: Vec<Value> = (0..1000)
        .map(|g| json!({"name": format!("group_{g}"), "members": (0..10).map(|m| agent_id(g * 10 + m)).collect::<Vec<_>>()}))
        .collect();
    let bindings: Vec<Value> = (0..1000)
        .map(|g| json!({"name": format!("binding_{g}"), "group": format!("group_{g}"), "blocks": [format!("block_{}", g % 10)]}))
        .collect();
    from_value(&json!({
        "reusable_policy_blocks": blocks,
        "agent_groups": groups,
        "bindings": bindings,
        "global_guardrails": {"actions": {"deny": ["wire_transfer"]}, "reputation": {"deny_at": "high"}}
    }))
    .expect("spec")
}

/// The large spec with `agent` as the first member of `group_0` (bound to `block_0`).
pub fn large_spec_with_member(agent: &str) -> PolicySpec {
    let mut spec = large_spec();
    spec.agent_groups[0].members[0] = agent.to_owned();
    spec
}
