//! Criterion benches for policy compilation and evaluation.
//!
//! `cargo bench --bench policy`. The large spec has 1,000 groups with 10 explicit members each
//! (10,000 members), 1,000 bindings over 10 reusable blocks (actions, amounts in two currencies,
//! email), and guardrails; evaluation is measured for an agent of one group and for an agent of
//! no group. Also: compile of the largest spec the limits allow (10,000 groups, 100,000 members,
//! 10,000 bindings), and what a sync's dry run adds: the replay of 10,000 recorded checks against
//! the current and the desired policy, and the semantic diff of the two specs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops at the first failure"
)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

use acp::policy::evaluate::{
    evaluate_prepared, evaluate_with_contexts, prepare_agent, ContextFields, DecisionCache,
    EmailFacts, Facts,
};
use acp::policy::{compile, CompiledPolicy};

/// The server's allocator (src/main.rs), so that what is measured here is what it does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;
use common::{agent_id, huge_spec, large_spec};

/// A check of an agent prepared afresh, its Cedar context kept in `kept` (as the server keeps
/// contexts).
fn check(
    policy: &CompiledPolicy,
    kept: &DecisionCache,
    agent: &str,
    action: &str,
    context: &Value,
    email: Option<&EmailFacts>,
) -> String {
    let metadata = json!({"team": "support"});
    let labels = json!({});
    let decision = evaluate_with_contexts(
        policy,
        &Facts {
            agent_id: agent,
            status: "active",
            risk_tier: "low",
            metadata: &metadata,
            labels: &labels,
            action,
            context: ContextFields::new(context),
            email,
            emails_sent_last_minute: 0,
            emails_sent_last_day: 0,
        },
        kept,
    )
    .expect("evaluate");
    decision.outcome.as_str().to_owned()
}

fn benches(c: &mut Criterion) {
    let spec = large_spec();
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.bench_function("1000 groups, 10000 members, 1000 bindings", |b| {
        b.iter(|| compile(black_box(&spec)).expect("compile"))
    });
    group.finish();

    let policy = compile(&spec).expect("compile");
    // The caches' decision cache, shared by every thread of the server.
    let kept = DecisionCache::default();
    let member = agent_id(4242);
    let refund = json!({"amount": 250, "currency": "USD"});
    assert_eq!(
        check(&policy, &kept, &member, "refund", &refund, None),
        "challenge"
    );
    let email = EmailFacts::from_json(&json!({"to": ["a@example.com"]}), acp::mail::address_of)
        .expect("email");
    // Percentiles of single evaluations (criterion reports means), after a warm-up.
    for _ in 0..5_000 {
        black_box(check(&policy, &kept, &member, "refund", &refund, None));
    }
    let mut samples: Vec<u128> = (0..20_000)
        .map(|_| {
            let started = std::time::Instant::now();
            black_box(check(&policy, &kept, &member, "refund", &refund, None));
            started.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let pct = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)] as f64 / 1000.0
    };
    println!(
        "evaluate refund of a group member, 20000 single runs: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0)
    );
    let mut group = c.benchmark_group("evaluate (1000 bindings)");
    group.bench_function("refund of a group member", |b| {
        b.iter(|| check(&policy, &kept, black_box(&member), "refund", &refund, None))
    });
    // What `/v1/check` does: the agent is prepared once per policy version and kept with the
    // cached agent; each check builds only its request.
    let (metadata, labels) = (json!({"team": "support"}), json!({}));
    let facts = Facts {
        agent_id: &member,
        status: "active",
        risk_tier: "low",
        metadata: &metadata,
        labels: &labels,
        action: "refund",
        context: ContextFields::new(&refund),
        email: None,
        emails_sent_last_minute: 0,
        emails_sent_last_day: 0,
    };
    let prepared = prepare_agent(&policy, &facts).expect("prepare");
    // The same refund again: after the first, the decision comes from the decision cache.
    group.bench_function(
        "refund of a group member, agent prepared, decision kept",
        |b| {
            b.iter(|| {
                evaluate_prepared(&policy, &prepared, black_box(&facts), &kept).expect("evaluate")
            })
        },
    );
    // Each refund with an order reference of its own (4,096 of them, more than the decision
    // cache keeps): Cedar decides every one.
    let orders: Vec<serde_json::Value> = (0..4096)
        .map(|i| json!({"amount": 250, "currency": "USD", "order": format!("ord-{i}")}))
        .collect();
    let mut next = 0;
    group.bench_function(
        "refund of a group member, agent prepared, a context of its own",
        |b| {
            b.iter(|| {
                next = (next + 1) % orders.len();
                let facts = Facts {
                    context: ContextFields::new(&orders[next]),
                    ..facts.clone()
                };
                evaluate_prepared(&policy, &prepared, black_box(&facts), &kept).expect("evaluate")
            })
        },
    );
    group.bench_function("send_email of a group member", |b| {
        b.iter(|| {
            check(
                &policy,
                &kept,
                black_box(&member),
                "send_email",
                &json!({}),
                Some(&email),
            )
        })
    });
    group.bench_function("agent in no group", |b| {
        b.iter(|| {
            check(
                &policy,
                &kept,
                black_box("agt_ffffffffffffffffffffffffffffffff"),
                "read_1",
                &json!({}),
                None,
            )
        })
    });
    group.finish();
}

/// A spec of `n` names: one block allowing nine tenths of them, bound to one group, and the
/// guardrails denying the other tenth.
fn names_spec(n: usize) -> acp::policy::PolicySpec {
    // One name less: the binding's reference to the block counts as a name too.
    let allow: Vec<String> = (0..n - n / 10 - 1)
        .map(|i| format!("action.number.{i}"))
        .collect();
    let deny: Vec<String> = (0..n / 10).map(|i| format!("forbidden.{i}")).collect();
    let spec = json!({
        "reusable_policy_blocks": {"many": {"actions": {"allow": allow}}},
        "agent_groups": [{"name": "g", "members": [agent_id(1)]}],
        "bindings": [{"group": "g", "blocks": ["many"]}],
        "global_guardrails": {"actions": {"deny": deny}},
    });
    acp::policy::spec::from_value(&spec).expect("spec")
}

/// Compile cost against spec size: 1,000 to 100,000 action names (docs/benchmarks.md,
/// "Compile cost against spec size").
fn compile_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile cost against spec size");
    group.sample_size(10);
    for n in [1_000usize, 10_000, 30_000, 100_000] {
        let spec = names_spec(n);
        group.bench_function(format!("{n} action names"), |b| {
            b.iter(|| compile(black_box(&spec)).expect("compile"))
        });
    }
    group.finish();
}

/// 10,000 decision events as `/v1/check` records them (newest first): 1,000 agents of the large
/// spec's groups, each with its recorded input (facts and context), reads, deploys, drops and
/// refunds of varying amounts in two currencies.
fn recorded_checks() -> Vec<acp::store::AuditRecord> {
    let actions = ["read_{b}", "list", "deploy_{b}", "drop_{b}", "refund"];
    (0..10_000usize)
        .map(|i| {
            let member = i % 1000;
            let block = (member / 10) % 10;
            let action = actions[i % actions.len()].replace("{b}", &block.to_string());
            let context = if action == "refund" {
                let currency = if i % 3 == 0 { "EUR" } else { "USD" };
                json!({"amount": (i % 1500) as f64 + 0.5, "currency": currency})
            } else {
                json!({})
            };
            acp::store::AuditRecord {
                id: format!("evt_{i:032x}"),
                workspace_id: Some("wsp_bench".into()),
                created_at: 1_800_000_000_000 - i as i64,
                event_type: "decision.check".into(),
                agent_id: Some(agent_id(member)),
                action: Some(action),
                decision: None,
                policy_id: Some("pol_default".into()),
                policy_hash: None,
                trace_id: Some(format!("trc_{i:032x}")),
                reasons: Vec::new(),
                reason_codes: Vec::new(),
                actor: "service".into(),
                details: json!({"input": {
                    "agent": {"status": "active", "risk_tier": "low", "metadata": {"team": "support"}, "labels": {}},
                    "context": context,
                }})
                .into(),
            }
        })
        .collect()
}

/// What a dry run adds to a sync of the large spec: its change lowers block 0's USD allowance
/// to 50, challenges `list` in block 1 and allows `deploy_2` outright.
fn dry_run(c: &mut Criterion) {
    let current = compile(&large_spec()).expect("compile");
    let mut changed = serde_json::to_value(large_spec()).expect("json");
    let blocks = &mut changed["reusable_policy_blocks"];
    blocks["block_0"]["amount"]["limits"]["USD"]["allow_up_to"] = json!(50);
    blocks["block_1"]["actions"]["allow"] = json!(["read_1"]);
    blocks["block_1"]["actions"]["challenge"] = json!(["deploy_1", "list"]);
    blocks["block_2"]["actions"]["allow"] = json!(["read_2", "list", "deploy_2"]);
    blocks["block_2"]["actions"]["challenge"] = json!([]);
    let desired =
        compile(&acp::policy::spec::from_value(&changed).expect("spec")).expect("compile");
    let events = recorded_checks();
    let impact =
        acp::policy::impact::replay(&events, events.len(), &current, &desired).expect("replay");
    println!(
        "replay of {} recorded checks: {} replayed, {} changed ({} more permissive, {} less)",
        events.len(),
        impact.replayed,
        impact.changed,
        impact.more_permissive,
        impact.less_permissive
    );
    assert_eq!(impact.replayed, events.len());
    assert!(impact.changed > 0 && impact.more_permissive > 0 && impact.less_permissive > 0);
    let mut group = c.benchmark_group("dry run (1000 groups)");
    group.sample_size(10);
    group.bench_function("replay 10000 recorded checks", |b| {
        b.iter(|| {
            acp::policy::impact::replay(black_box(&events), events.len(), &current, &desired)
                .expect("replay")
        })
    });
    group.bench_function("semantic diff", |b| {
        b.iter(|| acp::policy::semantic::semantic_diff(Some(&current), black_box(&desired)))
    });
    group.finish();
}

/// The largest spec the limits allow in groups, members and bindings.
fn compile_huge(c: &mut Criterion) {
    let spec = huge_spec();
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    // The result is dropped outside the measurement: a server drops a policy version when the
    // next one replaces it, not as part of compiling it.
    group.bench_function("10000 groups, 100000 members, 10000 bindings", |b| {
        b.iter_with_large_drop(|| compile(black_box(&spec)).expect("compile"))
    });
    group.finish();
}

criterion_group!(policy_benches, benches, compile_cost, dry_run, compile_huge);
criterion_main!(policy_benches);
