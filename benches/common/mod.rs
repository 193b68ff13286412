//! What the benches (and `examples/seed_policy.rs`) share: the large policy specs, and their
//! installation straight into a database.
#![allow(
    dead_code,
    clippy::expect_used,
    reason = "shared by the benchmarks, each using a part; a benchmark stops at the first failure"
)]

use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde_json::{json, Value};

use acp::policy::spec::{from_value, PolicySpec};

pub fn agent_id(n: usize) -> String {
    format!("agt_{n:032x}")
}

/// 1,000 groups × 10 members, 1,000 bindings over 10 blocks.
pub fn large_spec() -> PolicySpec {
    sized_spec(1000)
}

/// 10,000 groups × 10 members (100,000 member ids), 10,000 bindings over 10 blocks: the largest
/// spec the limits allow in groups, bindings and members. Its blocks have no email rules: with
/// them, 10,000 bindings compile to 220,006 rules, over the 200,000 the limits allow. As JSON
/// it is about 4 MB, over the 1 MiB a spec's text may be, so it is compiled in process (and
/// installed directly by the load bench), never sent.
pub fn huge_spec() -> PolicySpec {
    sized_spec_of(10_000, false, agent_id)
}

/// `groups` groups × 10 members, one binding per group over 10 blocks.
pub fn sized_spec(groups: usize) -> PolicySpec {
    sized_spec_of(groups, true, agent_id)
}

/// `groups` groups × 10 members (member `n` is `member(n)`), one binding per group over 10
/// blocks (with `email` rules or not).
pub fn sized_spec_of(groups: usize, email: bool, member: impl Fn(usize) -> String) -> PolicySpec {
    let mut blocks = serde_json::Map::new();
    for b in 0..10 {
        blocks.insert(
            format!("block_{b}"),
            {
                let mut block = json!({
                    "actions": {"allow": [format!("read_{b}"), "list"], "challenge": [format!("deploy_{b}")], "deny": [format!("drop_{b}")]},
                    "amount": {"limits": {"USD": {"allow_up_to": 100 + b, "challenge_up_to": 1000}, "EUR": {"allow_up_to": 90}}, "actions": ["refund"]},
                });
                if email {
                    block["email"] = json!({"allowed_domains": ["example.com"], "max_recipients": 5, "blocked_attachments": [".exe"]});
                }
                block
            },
        );
    }
    let count = groups;
    let groups: Vec<Value> = (0..count)
        .map(|g| json!({"name": format!("group_{g}"), "members": (0..10).map(|m| member(g * 10 + m)).collect::<Vec<_>>()}))
        .collect();
    let bindings: Vec<Value> = (0..count)
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
    with_member(large_spec(), agent)
}

/// `spec` with `agent` as the first member of `group_0` (bound to `block_0`).
pub fn with_member(mut spec: PolicySpec, agent: &str) -> PolicySpec {
    spec.agent_groups[0].members[0] = agent.to_owned();
    spec
}

/// Compiles `spec` and writes it as the next version of `pol_default` of `workspace_id`
/// straight into the database, members and bindings included, as a sync would (a spec whose
/// text is over the 1 MiB a sync takes can be installed only so). Answers the version and the
/// compile's duration. A running server picks the version up as it would another replica's.
pub async fn install_policy(
    database_url: &str,
    workspace_id: &str,
    spec: &PolicySpec,
) -> anyhow::Result<(i64, Duration)> {
    use acp::store::{
        apply_one, Change, PolicyApply, PolicyOp, PolicyStore, PolicyVersion, SqlStore,
    };
    let started = Instant::now();
    let compiled =
        acp::policy::compile(spec).map_err(|e| anyhow!("the spec does not compile: {e:?}"))?;
    let compile_time = started.elapsed();
    let store = SqlStore::open(database_url, &Default::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let current = store
        .policy(workspace_id, "pol_default")
        .await
        .map_err(|e| anyhow!("{e}"))?
        .map_or(0, |p| p.current_version);
    let version = current + 1;
    let apply = PolicyApply {
        name: "bench".into(),
        expected_version: current,
        version: PolicyVersion {
            workspace_id: workspace_id.to_owned(),
            policy_id: "pol_default".into(),
            version,
            hash: compiled.hash.clone(),
            spec: serde_json::to_value(spec)?,
            cedar: compiled.cedar.clone(),
            author: "bench".into(),
            created_at: acp::time::now_ms(),
        },
        members: acp::policy::sync::memberships(spec),
        bindings: acp::policy::sync::binding_rows(spec),
    };
    let applied = apply_one(&store, Change::new(PolicyOp::Apply(Box::new(apply)))).await;
    store.close().await;
    applied.map_err(|e| anyhow!("{e}"))?;
    Ok((version, compile_time))
}
