//! Each built-in block and each outcome, evaluated through compiled Cedar.

use std::sync::Arc;

use serde_json::{json, Value};

use super::compile::tag_value;
use super::evaluate::{
    evaluate, evaluate_with, prepare_agent, Attachment, ContextFields, DecisionCache, EmailFacts,
    Facts, PreparedAgent,
};
use super::spec::{parse, Format, Outcome};
use super::{compile, CompiledPolicy, Decision};

// Each test runs on a thread of its own, with a decision cache of its own: what it finds kept
// was kept by its own checks.
thread_local! {
    static KEPT: DecisionCache = DecisionCache::default();
}

/// `evaluate_prepared` with this test's decision cache, as the check path evaluates.
fn evaluate_prepared(
    p: &CompiledPolicy,
    prepared: &PreparedAgent,
    facts: &Facts<'_>,
) -> Result<Decision, String> {
    KEPT.with(|kept| super::evaluate::evaluate_prepared(p, prepared, facts, kept))
}

fn clear_decision_cache() {
    KEPT.with(DecisionCache::clear_decisions);
}

fn clear_context_cache() {
    KEPT.with(DecisionCache::clear_contexts);
}

fn decision_cache_len() -> usize {
    KEPT.with(DecisionCache::decisions_kept)
}

const AGENT: &str = "agt_0123456789abcdef0123456789abcdef";

fn policy(yaml: &str) -> CompiledPolicy {
    compile(&parse(yaml, Format::Yaml).unwrap()).unwrap()
}

struct Check {
    status: &'static str,
    risk: &'static str,
    metadata: Value,
    labels: Value,
    action: &'static str,
    context: Value,
    email: Option<EmailFacts>,
    sent: (u64, u64),
}

impl Default for Check {
    fn default() -> Self {
        Check {
            status: "active",
            risk: "low",
            metadata: json!({}),
            labels: json!({}),
            action: "read",
            context: json!({}),
            email: None,
            sent: (0, 0),
        }
    }
}

/// Evaluates through the action index, and checks that every rule of the set agrees.
fn run(p: &CompiledPolicy, c: &Check) -> Decision {
    let facts = Facts {
        agent_id: AGENT,
        status: c.status,
        risk_tier: c.risk,
        metadata: &c.metadata,
        labels: &c.labels,
        action: c.action,
        context: ContextFields::new(&c.context),
        email: c.email.as_ref(),
        emails_sent_last_minute: c.sent.0,
        emails_sent_last_day: c.sent.1,
    };
    let decision = evaluate(p, &facts).unwrap();
    assert_eq!(
        decision,
        evaluate_with(p, &facts, false).unwrap(),
        "the action index changed the decision of {}",
        c.action
    );
    // The check path prepares the agent once and reuses it for every check.
    let prepared = prepare_agent(p, &facts).unwrap();
    for _ in 0..2 {
        assert_eq!(decision, evaluate_prepared(p, &prepared, &facts).unwrap());
    }
    // The context may have come from this thread's cache (an earlier check with the same action
    // and fields): a fresh one decides the same.
    clear_context_cache();
    assert_eq!(decision, evaluate(p, &facts).unwrap(), "a cached context");
    // The second `evaluate_prepared` above was answered from this thread's decision cache; with
    // the cache empty, Cedar decides the same.
    clear_decision_cache();
    assert_eq!(
        decision,
        evaluate_prepared(p, &prepared, &facts).unwrap(),
        "a cached decision"
    );
    decision
}

fn outcome(p: &CompiledPolicy, c: Check) -> (Outcome, Vec<String>) {
    let d = run(p, &c);
    (d.outcome, d.reason_codes)
}

fn codes(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const ACTIONS: &str = r#"
reusable_policy_blocks:
  ops: { actions: { allow: [read, write], challenge: [deploy], deny: [drop_db] } }
agent_groups: [{ name: team, members: [agt_0123456789abcdef0123456789abcdef] }]
bindings: [{ name: team-ops, group: team, blocks: [ops] }]
"#;

#[test]
fn actions_allow_challenge_deny_and_default_deny() {
    let p = policy(ACTIONS);
    let d = run(
        &p,
        &Check {
            action: "read",
            ..Check::default()
        },
    );
    assert_eq!(d.outcome, Outcome::Allow);
    assert!(d.reasons.is_empty());
    assert_eq!(d.determining_policies, vec!["team-ops/ops".to_string()]);
    assert_eq!(
        outcome(
            &p,
            Check {
                action: "deploy",
                ..Check::default()
            }
        ),
        (Outcome::Challenge, codes(&["action_requires_approval"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                action: "drop_db",
                ..Check::default()
            }
        ),
        (Outcome::Deny, codes(&["action_denied"]))
    );
    let none = run(
        &p,
        &Check {
            action: "fly",
            ..Check::default()
        },
    );
    assert_eq!(
        (none.outcome, none.reason_codes),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );
}

#[test]
fn a_prepared_agent_serves_only_its_agent_and_policy() {
    let team = policy(ACTIONS);
    let other = policy(&ACTIONS.replace("drop_db", "drop_table"));
    let (metadata, labels, context) = (json!({}), json!({}), json!({}));
    let facts = |agent_id| Facts {
        agent_id,
        status: "active",
        risk_tier: "low",
        metadata: &metadata,
        labels: &labels,
        action: "read",
        context: ContextFields::new(&context),
        email: None,
        emails_sent_last_minute: 0,
        emails_sent_last_day: 0,
    };
    let prepared = prepare_agent(&team, &facts(AGENT)).unwrap();
    assert_eq!(
        evaluate_prepared(&team, &prepared, &facts(AGENT))
            .unwrap()
            .outcome,
        Outcome::Allow
    );
    // The member's groups must not decide for another agent, nor under another policy.
    let stranger = "agt_ffffffffffffffffffffffffffffffff";
    assert!(evaluate_prepared(&team, &prepared, &facts(stranger)).is_err());
    assert!(evaluate_prepared(&other, &prepared, &facts(AGENT)).is_err());
    assert_eq!(
        evaluate(&team, &facts(stranger)).unwrap().outcome,
        Outcome::Deny
    );
}

#[test]
fn status_rules() {
    let p = policy(ACTIONS);
    assert_eq!(
        outcome(
            &p,
            Check {
                status: "revoked",
                ..Check::default()
            }
        ),
        (Outcome::Deny, codes(&["agent_revoked"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                status: "suspended",
                ..Check::default()
            }
        ),
        (Outcome::Deny, codes(&["agent_suspended"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                status: "pending",
                ..Check::default()
            }
        ),
        (Outcome::Challenge, codes(&["agent_pending"]))
    );
    let relaxed = policy(&format!(
        "{ACTIONS}global_guardrails: {{ status: {{ allow_pending: true }} }}\n"
    ));
    assert_eq!(
        outcome(
            &relaxed,
            Check {
                status: "pending",
                ..Check::default()
            }
        )
        .0,
        Outcome::Allow
    );
    let strict = policy(&format!("{ACTIONS}global_guardrails: {{ status: {{ allow_pending: true, require_active: true }} }}\n"));
    assert_eq!(
        outcome(
            &strict,
            Check {
                status: "pending",
                ..Check::default()
            }
        ),
        (Outcome::Deny, codes(&["agent_not_active"]))
    );
}

#[test]
fn guardrails_beat_bindings() {
    let p = policy(&format!("{ACTIONS}global_guardrails: {{ actions: {{ deny: [write] }}, reputation: {{ challenge_at: medium }} }}\n"));
    let d = run(
        &p,
        &Check {
            action: "write",
            ..Check::default()
        },
    );
    assert_eq!(
        (d.outcome, d.determining_policies),
        (Outcome::Deny, vec!["global_guardrails".to_string()])
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                risk: "medium",
                ..Check::default()
            }
        ),
        (Outcome::Challenge, codes(&["risk_tier_too_high"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                risk: "low",
                ..Check::default()
            }
        )
        .0,
        Outcome::Allow
    );
}

const EMAIL: &str = r#"
reusable_policy_blocks:
  mail:
    email:
      allowed_domains: [Example.com, partner.org]
      max_recipients: 2
      blocked_attachments: [.exe, application/zip]
      max_attachment_bytes: 1000
      rate_limit_per_minute: 3
      rate_limit_per_day: 100
agent_groups: [{ name: support, selectors: [{ metadata: { team: support } }] }]
bindings: [{ group: support, blocks: [mail], actions: [send_email] }]
"#;

fn mail(to: &[&str], attachments: Vec<Attachment>) -> Option<EmailFacts> {
    Some(EmailFacts {
        recipients: to.iter().map(|s| s.to_string()).collect(),
        attachments,
    })
}

#[test]
fn the_email_block() {
    let p = policy(EMAIL);
    let support = || Check {
        action: "send_email",
        metadata: json!({"team": "support"}),
        ..Check::default()
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@EXAMPLE.com", "b@partner.org"], vec![]),
                ..support()
            }
        )
        .0,
        Outcome::Allow
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@evil.com"], vec![]),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["recipient_domain_not_allowed"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com", "b@example.com", "c@example.com"], vec![]),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["too_many_recipients"]))
    );
    let exe = Attachment {
        filename: "run.EXE".into(),
        content_type: "application/octet-stream".into(),
        size_bytes: 10,
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![exe]),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["attachment_blocked"]))
    );
    let zip = Attachment {
        filename: "a.bin".into(),
        content_type: "Application/Zip".into(),
        size_bytes: 10,
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![zip]),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["attachment_blocked"]))
    );
    let big = Attachment {
        filename: "a.pdf".into(),
        content_type: "application/pdf".into(),
        size_bytes: 5000,
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![big]),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["attachment_too_large"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![]),
                sent: (3, 3),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["rate_limit_exceeded"]))
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![]),
                sent: (0, 100),
                ..support()
            }
        ),
        (Outcome::Deny, codes(&["rate_limit_exceeded"]))
    );
    // Not in the group (selector does not match): nothing allows it.
    assert_eq!(
        outcome(
            &p,
            Check {
                action: "send_email",
                email: mail(&["a@example.com"], vec![]),
                ..Check::default()
            }
        )
        .1,
        codes(&["no_matching_rule"])
    );
}

#[test]
fn amount_thresholds_per_currency() {
    let p = policy(
        r#"
reusable_policy_blocks:
  refunds: { amount: { limits: { USD: { allow_up_to: 100, challenge_up_to: 1000 }, EUR: { allow_up_to: 50 } } } }
agent_groups: [{ name: finance, selectors: [{ labels: { dept: finance } }] }]
bindings: [{ group: finance, blocks: [refunds], actions: [refund] }]
"#,
    );
    let refund = |amount: f64, currency: &str| Check {
        action: "refund",
        labels: json!({"dept": "finance"}),
        context: json!({"amount": amount, "currency": currency}),
        ..Check::default()
    };
    assert_eq!(
        outcome(&p, refund(100.0, "USD")),
        (Outcome::Allow, codes(&["amount_within_limit"]))
    );
    assert_eq!(
        outcome(&p, refund(100.01, "USD")),
        (Outcome::Challenge, codes(&["amount_requires_approval"]))
    );
    assert_eq!(
        outcome(&p, refund(1000.5, "USD")),
        (Outcome::Deny, codes(&["amount_over_limit"]))
    );
    assert_eq!(outcome(&p, refund(50.0, "EUR")).0, Outcome::Allow);
    assert_eq!(
        outcome(&p, refund(51.0, "EUR")),
        (Outcome::Deny, codes(&["amount_over_limit"]))
    );
    assert_eq!(
        outcome(&p, refund(5.0, "GBP")),
        (Outcome::Deny, codes(&["currency_not_allowed"]))
    );
}

#[test]
fn an_amount_exactly_at_a_limit_is_within_it() {
    // `1.11 * 10000` is `11100.000000000002` in floating point: still exactly the limit.
    let p = policy(
        r#"
reusable_policy_blocks:
  refunds: { amount: { limits: { USD: { allow_up_to: 1.11, challenge_up_to: 2.22 } } } }
agent_groups: [{ name: finance, members: [agt_0123456789abcdef0123456789abcdef] }]
bindings: [{ group: finance, blocks: [refunds], actions: [refund] }]
"#,
    );
    let refund = |amount: f64| Check {
        action: "refund",
        context: json!({"amount": amount, "currency": "USD"}),
        ..Check::default()
    };
    assert_eq!(outcome(&p, refund(1.11)).0, Outcome::Allow);
    assert_eq!(outcome(&p, refund(1.1101)).0, Outcome::Challenge);
    assert_eq!(outcome(&p, refund(1.11001)).0, Outcome::Challenge);
    assert_eq!(outcome(&p, refund(2.22)).0, Outcome::Challenge);
    assert_eq!(outcome(&p, refund(2.22001)).0, Outcome::Deny);
    assert_eq!(tag_value(1.11), Some(11_100));
    assert_eq!(tag_value(0.29), Some(2_900));
    assert_eq!(tag_value(1.11001), Some(11_101));
    assert_eq!(tag_value(-0.00001), Some(0));
    assert_eq!(tag_value(-0.0001), Some(-1));
    assert_eq!(tag_value(f64::NAN), None);
    assert_eq!(tag_value(1e15), None);
}

const AMOUNTS: &str = r#"
reusable_policy_blocks:
  refunds: { amount: { limits: { USD: { allow_up_to: 100, challenge_up_to: 1000 }, EUR: { allow_up_to: 50 } }, actions: [refund] } }
  payouts: { amount: { field: total, currency_field: ccy, limits: { GBP: { allow_up_to: 10 }, "*": { allow_up_to: 5, challenge_up_to: 7 } } } }
  reads: { actions: { allow: [read] } }
agent_groups: [{ name: finance, members: [agt_0123456789abcdef0123456789abcdef] }]
bindings: [{ group: finance, blocks: [refunds, payouts, reads] }]
global_guardrails:
  amount: { limits: { USD: { allow_up_to: 5000 }, EUR: { allow_up_to: 4000 }, JPY: { allow_up_to: 1 } }, actions: [refund] }
"#;

#[test]
fn the_currency_index_agrees_with_every_rule() {
    // Two amount blocks on different currency fields, one with a `*` limit, plus a guardrail
    // amount block: every combination of fields must decide as evaluating every rule does
    // (`run` checks that), and a USD check must skip the other currencies' rules.
    let p = policy(AMOUNTS);
    let currencies = [
        json!(null),
        json!("USD"),
        json!("EUR"),
        json!("GBP"),
        json!("JPY"),
        json!("usd"),
        json!(true),
        json!(7),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for action in ["refund", "payout", "read"] {
        for currency in &currencies {
            for ccy in &currencies {
                for amount in [
                    json!(null),
                    json!(-1),
                    json!(3),
                    json!(6),
                    json!(60),
                    json!(600),
                    json!(4500),
                    json!(9000),
                    // On and just beside every bound (the amount index cuts there), values
                    // that round to a bound, and values that are not a tag at all.
                    json!(0),
                    json!(-0.00001),
                    json!(-0.0001),
                    json!(5),
                    json!(5.00001),
                    json!(7),
                    json!(10),
                    json!(50),
                    json!(100),
                    json!(100.0001),
                    json!(1000),
                    json!(4000.00001),
                    json!(5000),
                    json!(1e15),
                    json!("60"),
                ] {
                    let mut context = serde_json::Map::new();
                    for (name, value) in [
                        ("currency", currency),
                        ("ccy", ccy),
                        ("amount", &amount),
                        ("total", &amount),
                    ] {
                        if !value.is_null() {
                            context.insert(name.into(), value.clone());
                        }
                    }
                    let d = run(
                        &p,
                        &Check {
                            action,
                            context: Value::Object(context),
                            ..Check::default()
                        },
                    );
                    seen.insert((d.outcome, d.reason_codes));
                }
            }
        }
    }
    // The combinations reach every kind of answer the blocks give.
    for code in [
        "amount_within_limit",
        "amount_requires_approval",
        "amount_over_limit",
        "amount_invalid",
        "currency_not_allowed",
        "no_matching_rule",
    ] {
        assert!(
            seen.iter()
                .any(|(_, codes)| codes.iter().any(|c| c == code)),
            "no check answered {code}: {seen:?}"
        );
    }
    let set = &p.groups["finance"].set;
    let ids = |fields: &[&str], amount: Option<i64>| -> Vec<String> {
        let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        let numbers: Vec<(String, i64)> = amount
            .map(|a| ("amount".to_owned(), a))
            .into_iter()
            .collect();
        set.for_action("refund")
            .pick(&fields, &numbers)
            .policies()
            .map(|p| p.id().to_string())
            .collect()
    };
    let named = |ids: &[String], part: &str| ids.iter().any(|id| id.contains(part));
    // 50 USD (in ten-thousandths): the USD allowance, not its challenge or deny, nor the rules
    // of other currencies or of negative amounts. (The payouts block bounds another tag, so
    // its rules are in every interval.)
    let usd = ids(&["currency=USD"], Some(500_000));
    assert!(named(&usd, "refunds#amount/USD/allow"), "{usd:?}");
    for other in [
        "refunds#amount/USD/challenge",
        "refunds#amount/USD/deny",
        "/EUR/",
        "unknown_currency",
        "refunds#amount/negative",
    ] {
        assert!(!named(&usd, other), "{other} in {usd:?}");
    }
    // 600 USD: the challenge only; exactly 100 USD is still the allowance.
    let usd = ids(&["currency=USD"], Some(6_000_000));
    assert!(named(&usd, "refunds#amount/USD/challenge"), "{usd:?}");
    assert!(!named(&usd, "refunds#amount/USD/allow"), "{usd:?}");
    let usd = ids(&["currency=USD"], Some(1_000_000));
    assert!(named(&usd, "refunds#amount/USD/allow"), "{usd:?}");
    assert!(!named(&usd, "refunds#amount/USD/challenge"), "{usd:?}");
    // A negative amount reaches the negative rule; no amount reaches no amount rule.
    assert!(named(
        &ids(&["currency=USD"], Some(-1)),
        "refunds#amount/negative"
    ));
    assert!(!named(&ids(&["currency=USD"], None), "refunds#amount/"));
    let unknown = ids(&["currency=CHF"], Some(500_000));
    assert!(named(&unknown, "unknown_currency"), "{unknown:?}");
    assert!(
        !named(&unknown, "/USD/") && !named(&unknown, "/EUR/"),
        "{unknown:?}"
    );
}

#[test]
fn raw_cedar_rules_decide_with_their_own_codes() {
    let p = policy(
        r#"
global_guardrails:
  cedar:
    - { name: eu, when: 'context.fields.contains("region=eu") && principal.tags.contains("gdpr=false")', outcome: deny, reason_code: gdpr_required, reason: "EU data needs a GDPR-cleared agent" }
  actions: { allow: ["*"] }
"#,
    );
    let d = run(
        &p,
        &Check {
            metadata: json!({"gdpr": false}),
            context: json!({"region": "eu"}),
            ..Check::default()
        },
    );
    assert_eq!(
        (d.outcome, d.reason_codes.clone()),
        (Outcome::Deny, codes(&["gdpr_required"]))
    );
    assert_eq!(
        d.reasons,
        vec!["EU data needs a GDPR-cleared agent".to_string()]
    );
    assert_eq!(
        outcome(
            &p,
            Check {
                context: json!({"region": "us"}),
                ..Check::default()
            }
        )
        .0,
        Outcome::Allow
    );
}

#[test]
fn review_edge_cases_are_closed() {
    let p = policy(EMAIL);
    let support = || Check {
        action: "send_email",
        metadata: json!({"team": "support"}),
        ..Check::default()
    };
    let dotted = Attachment {
        filename: "run.exe. ".into(),
        content_type: "application/octet-stream".into(),
        size_bytes: 1,
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![dotted]),
                ..support()
            }
        )
        .1,
        codes(&["attachment_blocked"])
    );
    let zip = Attachment {
        filename: "a".into(),
        content_type: "application/zip; name=a".into(),
        size_bytes: 1,
    };
    assert_eq!(
        outcome(
            &p,
            Check {
                email: mail(&["a@example.com"], vec![zip]),
                ..support()
            }
        )
        .1,
        codes(&["attachment_blocked"])
    );
    // One address per entry: a list in one entry (kept as written by the reader) is refused.
    for list in [
        "x@evil.test, y@example.com",
        "Jane <x@evil.test>, y@example.com",
    ] {
        assert_eq!(
            EmailFacts::from_json(&json!({"to": [list]}), crate::evaluate::bare_address).err(),
            Some("email.to"),
            "{list}"
        );
    }
    assert!(EmailFacts::from_json(
        &json!({"to": ["a@example.com"], "cc": "b@example.com"}),
        crate::evaluate::bare_address
    )
    .is_ok());

    let refunds = policy(
        "reusable_policy_blocks: {r: {amount: {limits: {USD: {allow_up_to: 500}}}}}\nagent_groups: [{name: g, members: [agt_0123456789abcdef0123456789abcdef]}]\nbindings: [{group: g, blocks: [r]}]\n",
    );
    let amount = |a: f64| Check {
        action: "refund",
        context: json!({"amount": a, "currency": "USD"}),
        ..Check::default()
    };
    assert_eq!(outcome(&refunds, amount(500.0)).0, Outcome::Allow);
    assert_eq!(
        outcome(&refunds, amount(500.00004)).1,
        codes(&["amount_over_limit"])
    );
    assert_eq!(
        outcome(&refunds, amount(-5.0)).1,
        codes(&["amount_invalid"])
    );

    let pending_ok = policy(
        "reusable_policy_blocks:\n  ops: { actions: { allow: [read] } }\n  relax: { status: { allow_pending: true } }\nagent_groups: [{ name: team, members: [agt_0123456789abcdef0123456789abcdef] }]\nbindings: [{ group: team, blocks: [ops] }]\nglobal_guardrails: { blocks: [relax] }\n",
    );
    assert_eq!(
        outcome(
            &pending_ok,
            Check {
                status: "pending",
                ..Check::default()
            }
        )
        .0,
        Outcome::Allow
    );
    let empty_selector = "agent_groups: [{name: g, selectors: [{}]}]\n";
    assert!(compile(&parse(empty_selector, Format::Yaml).unwrap()).is_err());
}

/// Checks of one prepared agent, as the check path makes them (the agent prepared once).
fn prepared_checks(
    p: &CompiledPolicy,
    status: &str,
    metadata: Value,
    checks: &[(&str, Value)],
) -> Vec<(Decision, Decision)> {
    let (labels, empty) = (json!({}), json!({}));
    let facts = |action, context| Facts {
        agent_id: AGENT,
        status,
        risk_tier: "low",
        metadata: &metadata,
        labels: &labels,
        action,
        context: ContextFields::new(context),
        email: None,
        emails_sent_last_minute: 0,
        emails_sent_last_day: 0,
    };
    let prepared = prepare_agent(p, &facts("read", &empty)).unwrap();
    checks
        .iter()
        .map(|(action, context)| {
            let f = facts(action, context);
            (
                evaluate_prepared(p, &prepared, &f).unwrap(),
                evaluate_with(p, &f, false).unwrap(),
            )
        })
        .collect()
}

#[test]
fn decisions_kept_per_amount_interval_agree_with_every_rule() {
    // One prepared agent, many amounts on and beside every bound, in every currency: checks
    // whose amounts share an interval are answered from the first one's decision, and each
    // answer must be what evaluating every rule of the policy gives.
    let p = policy(AMOUNTS);
    assert!(p.tags_read_by_ranges_only);
    let mut amounts: Vec<Value> = (-8..=48).map(|i| json!(f64::from(i) * 0.25)).collect();
    for bound in [5.0, 7.0, 10.0, 50.0, 100.0, 1000.0, 4000.0, 5000.0] {
        for delta in [-0.0001, 0.0, 0.00001, 0.0001, 0.5] {
            amounts.push(json!(bound + delta));
        }
    }
    amounts.extend([
        json!(-0.0001),
        json!(60),
        json!(600),
        json!(9000),
        json!(1e15),
    ]);
    let mut checks = Vec::new();
    for action in ["refund", "payout", "read"] {
        for currency in ["USD", "EUR", "GBP", "JPY", "CHF"] {
            for amount in &amounts {
                checks.push((
                    action,
                    json!({"currency": currency, "ccy": currency, "amount": amount}),
                ));
                checks.push((action, json!({"currency": currency, "total": amount})));
            }
        }
    }
    clear_decision_cache();
    let mut outcomes = std::collections::BTreeSet::new();
    let answers = prepared_checks(&p, "active", json!({}), &checks);
    for (i, (kept, every_rule)) in answers.into_iter().enumerate() {
        assert_eq!(kept, every_rule, "check {i}: {:?}", checks[i]);
        outcomes.insert(kept.reason_codes);
    }
    assert!(outcomes.len() >= 5, "{outcomes:?}");
    // Amounts are kept by interval: 200 refunds within the USD allowance, (0, 100], share one
    // entry; with amounts in the challenge and deny ranges too, three.
    let within: Vec<(&str, Value)> = (1..=200)
        .map(|i| {
            (
                "refund",
                json!({"currency": "USD", "amount": f64::from(i) / 2.0}),
            )
        })
        .collect();
    clear_decision_cache();
    prepared_checks(&p, "active", json!({}), &within);
    assert_eq!(decision_cache_len(), 1);
    let beyond = [
        ("refund", json!({"currency": "USD", "amount": 600})),
        ("refund", json!({"currency": "USD", "amount": 700})),
        ("refund", json!({"currency": "USD", "amount": 1200})),
        ("refund", json!({"currency": "USD", "amount": 1300})),
    ];
    prepared_checks(&p, "active", json!({}), &beyond);
    assert_eq!(decision_cache_len(), 3);
}

#[test]
fn raw_cedar_that_reads_an_amount_keeps_every_amount_apart() {
    // A raw rule that reads the amount at 50 USD, inside the allowance's interval (0, 100]:
    // 40 and 60 must not share a decision.
    let p = policy(
        r#"
reusable_policy_blocks:
  refunds: { amount: { limits: { USD: { allow_up_to: 100 } }, actions: [refund] } }
agent_groups: [{ name: finance, members: [agt_0123456789abcdef0123456789abcdef] }]
bindings: [{ group: finance, blocks: [refunds] }]
global_guardrails:
  cedar:
    - { name: half, when: 'resource.hasTag("amount") && resource.getTag("amount") > 500000', outcome: challenge, reason_code: second_look, reason: "over 50 needs a second look" }
"#,
    );
    assert!(!p.tags_read_by_ranges_only);
    clear_decision_cache();
    let answers = prepared_checks(
        &p,
        "active",
        json!({}),
        &[
            ("refund", json!({"currency": "USD", "amount": 40})),
            ("refund", json!({"currency": "USD", "amount": 60})),
            ("refund", json!({"currency": "USD", "amount": 45})),
        ],
    );
    let outcomes: Vec<Outcome> = answers.iter().map(|(kept, _)| kept.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Allow, Outcome::Challenge, Outcome::Allow]
    );
    for (kept, every_rule) in &answers {
        assert_eq!(kept, every_rule);
    }
    // Nothing was kept for this policy.
    assert_eq!(decision_cache_len(), 0);
}

#[test]
fn a_changed_agent_is_judged_again() {
    // An active agent that leaves its group (a selector on its metadata no longer holds) is
    // prepared again. Under the guardrails alone its refund falls in an interval of the same
    // number as under its group's set, so only the preparation's serial keeps the group's
    // allowance from answering for it.
    let p = policy(
        r#"
reusable_policy_blocks:
  refunds: { amount: { limits: { USD: { allow_up_to: 100 } }, actions: [refund] } }
agent_groups: [{ name: finance, selectors: [{ metadata: { team: finance } }] }]
bindings: [{ group: finance, blocks: [refunds] }]
global_guardrails:
  amount: { limits: { USD: { allow_up_to: 1000 } }, actions: [refund] }
"#,
    );
    clear_decision_cache();
    let check = [("refund", json!({"currency": "USD", "amount": 40}))];
    let member = prepared_checks(&p, "active", json!({"team": "finance"}), &check);
    let former = prepared_checks(&p, "active", json!({"team": "sales"}), &check);
    assert_eq!(member[0].0.outcome, Outcome::Allow);
    assert_eq!(
        (former[0].0.outcome, former[0].0.reason_codes.clone()),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );
    assert_eq!(former[0].0, former[0].1);
    // And one that is suspended is judged again too.
    let suspended = prepared_checks(&p, "suspended", json!({"team": "finance"}), &check);
    assert_eq!(suspended[0].0.outcome, Outcome::Deny);
    assert_eq!(suspended[0].0, suspended[0].1);
}

#[test]
fn the_strings_and_booleans_of_a_context_array_are_fields() {
    let p = policy(
        r#"
global_guardrails:
  actions: { allow: ["*"] }
  cedar:
    - { name: b, when: 'context.fields.contains("keys=B")', outcome: deny, reason_code: key_b, reason: "B is not to be read" }
    - { name: flag, when: 'context.fields.contains("flags=true")', outcome: challenge, reason_code: flagged, reason: "flagged" }
"#,
    );
    let check = |context: Value| {
        outcome(
            &p,
            Check {
                context,
                ..Check::default()
            },
        )
    };
    assert_eq!(
        check(json!({"keys": ["A", "B"]})),
        (Outcome::Deny, codes(&["key_b"]))
    );
    assert_eq!(
        check(json!({"keys": "B"})),
        (Outcome::Deny, codes(&["key_b"]))
    );
    assert_eq!(check(json!({"keys": ["A"]})).0, Outcome::Allow);
    assert_eq!(check(json!({"keys": []})).0, Outcome::Allow);
    assert_eq!(
        check(json!({"flags": [false, true]})),
        (Outcome::Challenge, codes(&["flagged"]))
    );
    // Other elements, and anything nested, stay invisible.
    for invisible in [
        json!({"keys": [["B"]]}),
        json!({"keys": [{"B": true}]}),
        json!({"keys": [1, null]}),
        json!({"keys": {"0": "B"}}),
        json!({"other": ["keys=B"]}),
    ] {
        assert_eq!(check(invisible.clone()).0, Outcome::Allow, "{invisible}");
    }
}

#[test]
fn checks_that_differ_only_in_an_array_do_not_share_a_kept_decision() {
    let p = policy(
        r#"
global_guardrails:
  actions: { allow: ["*"] }
  cedar:
    - { name: b, when: 'context.fields.contains("keys=B")', outcome: deny, reason_code: key_b, reason: "B is not to be read" }
"#,
    );
    clear_decision_cache();
    let checks = [
        ("read", json!({"keys": ["A"]})),
        ("read", json!({"keys": ["A", "B"]})),
        ("read", json!({"keys": ["B"]})),
        ("read", json!({"keys": ["A"]})),
    ];
    let answers = prepared_checks(&p, "active", json!({}), &checks);
    let outcomes: Vec<Outcome> = answers.iter().map(|(kept, _)| kept.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Allow, Outcome::Deny, Outcome::Deny, Outcome::Allow]
    );
    for (kept, every_rule) in &answers {
        assert_eq!(kept, every_rule);
    }
    // Three distinct checks, three entries: the fourth was the first one again.
    assert_eq!(decision_cache_len(), 3);
}

const VAULT: &str = r#"
reusable_policy_blocks:
  payments-vault:
    vault:
      allow: [mint_lease, read, proxy]
      secret_sets: [stripe-prod, stripe-test]
      environments: [staging, production]
      proxy_hosts: [API.stripe.com, "*.stripe.com"]
      require_approval: { actions: [read], environments: [production] }
  reports-vault:
    vault:
      allow: [vault.read]
      secret_sets: [reports]
      on_violation: challenge
agent_groups:
  - { name: payments, selectors: [{ metadata: { team: payments } }] }
  - { name: reporting, selectors: [{ metadata: { team: reporting } }] }
bindings:
  - { group: payments, blocks: [payments-vault] }
  - { group: reporting, blocks: [reports-vault] }
"#;

/// The context the vault sends with its checks (`host`: a proxied request's target host).
fn vault_context(set: &str, environment: Option<&str>, host: Option<&str>) -> Value {
    let mut context = json!({
        "secret_set": set,
        "secret_set_id": "ss_0123456789abcdef0123456789abcdef",
        "provider": "stripe",
        "keys": ["STRIPE_SECRET_KEY", "ACCOUNT"],
    });
    if let Some(env) = environment {
        context["environment"] = json!(env);
    }
    if let Some(host) = host {
        // The host and each `*.parent` of it.
        let labels: Vec<&str> = host.split('.').collect();
        let mut patterns = vec![host.to_owned()];
        patterns.extend((1..labels.len()).map(|i| format!("*.{}", labels[i..].join("."))));
        context["profile"] = json!("stripe");
        context["method"] = json!("POST");
        context["path"] = json!("/v1/charges");
        context["target_host"] = json!(host);
        context["target_host_patterns"] = json!(patterns);
    }
    context
}

fn vault_check(team: &str, action: &'static str, context: Value) -> Check {
    Check {
        action,
        metadata: json!({ "team": team }),
        context,
        ..Check::default()
    }
}

#[test]
fn the_vault_block() {
    let p = policy(VAULT);
    let pay = |action, context| outcome(&p, vault_check("payments", action, context));
    let prod = || vault_context("stripe-prod", Some("production"), None);
    let test = |env| vault_context("stripe-test", env, None);
    let mut lease = prod();
    lease["lease_action"] = json!("read");
    assert_eq!(
        pay("vault.mint_lease", lease),
        (Outcome::Allow, codes(&["vault_allowed"]))
    );
    assert_eq!(
        pay("vault.read", test(Some("staging"))),
        (Outcome::Allow, codes(&["vault_allowed"]))
    );
    // Reads in production need a human; the approver is shown the set, environment and keys.
    let d = run(&p, &vault_check("payments", "vault.read", prod()));
    assert_eq!(
        (d.outcome, d.reason_codes.clone()),
        (Outcome::Challenge, codes(&["vault_requires_approval"]))
    );
    assert_eq!(d.reads, codes(&["environment", "keys", "secret_set"]));
    assert_eq!(
        d.determining_policies,
        codes(&["payments:payments-vault/payments-vault"])
    );
    // Sets and environments that are not listed (or no environment at all).
    assert_eq!(
        pay(
            "vault.read",
            vault_context("hr-prod", Some("staging"), None)
        ),
        (Outcome::Deny, codes(&["secret_set_not_allowed"]))
    );
    assert_eq!(
        pay("vault.mint_lease", test(Some("dev"))),
        (Outcome::Deny, codes(&["environment_not_allowed"]))
    );
    assert_eq!(
        pay("vault.read", test(None)),
        (Outcome::Deny, codes(&["environment_not_allowed"]))
    );
    // Proxying: exact hosts and `*.parent` patterns (written in any case in the spec).
    let proxy = |host| vault_context("stripe-prod", Some("production"), Some(host));
    assert_eq!(
        pay("vault.proxy", proxy("api.stripe.com")),
        (Outcome::Allow, codes(&["vault_allowed"]))
    );
    assert_eq!(
        pay("vault.proxy", proxy("files.eu.stripe.com")).0,
        Outcome::Allow
    );
    for foreign in ["api.evil.com", "stripe.com", "api.stripe.com.evil.com"] {
        assert_eq!(
            pay("vault.proxy", proxy(foreign)),
            (Outcome::Deny, codes(&["proxy_host_not_allowed"])),
            "{foreign}"
        );
    }
    // Without the host patterns nothing can be proxied.
    assert_eq!(
        pay("vault.proxy", prod()),
        (Outcome::Deny, codes(&["proxy_host_not_allowed"]))
    );
    // Several violations are all reported.
    assert_eq!(
        pay(
            "vault.proxy",
            vault_context("hr-prod", Some("production"), Some("api.evil.com"))
        ),
        (
            Outcome::Deny,
            codes(&["proxy_host_not_allowed", "secret_set_not_allowed"])
        )
    );
    // The block says nothing of other actions.
    assert_eq!(
        pay("read", prod()),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );

    // `on_violation: challenge`, and an allow of one action only.
    let rep = |action, set| {
        run(
            &p,
            &vault_check(
                "reporting",
                action,
                vault_context(set, Some("production"), None),
            ),
        )
    };
    let d = rep("vault.read", "reports");
    assert_eq!(
        (d.outcome, d.reason_codes),
        (Outcome::Allow, codes(&["vault_allowed"]))
    );
    let d = rep("vault.read", "stripe-prod");
    assert_eq!(
        (d.outcome, d.reason_codes),
        (Outcome::Challenge, codes(&["secret_set_not_allowed"]))
    );
    // The set rule holds for proxied requests too, so it reads where they go; a read's
    // context has none of that, and the approver is shown only what the context has.
    assert_eq!(
        d.reads,
        codes(&[
            "environment",
            "keys",
            "method",
            "path",
            "secret_set",
            "target_host"
        ])
    );
    let d = rep("vault.mint_lease", "reports");
    assert_eq!(
        (d.outcome, d.reason_codes),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );
    // A proxy restriction shows the approver where the request goes.
    let d = run(
        &p,
        &vault_check(
            "reporting",
            "vault.proxy",
            vault_context("stripe-prod", Some("production"), Some("api.stripe.com")),
        ),
    );
    assert_eq!(
        (d.outcome, d.reason_codes),
        (Outcome::Challenge, codes(&["secret_set_not_allowed"]))
    );
    assert_eq!(
        d.reads,
        codes(&[
            "environment",
            "keys",
            "method",
            "path",
            "secret_set",
            "target_host"
        ])
    );
}

#[test]
fn the_vault_block_in_guardrails_and_narrowed_bindings() {
    // In the guardrails the block restricts and never allows.
    let guard = policy(
        r#"
global_guardrails:
  vault: { allow: ["*"], environments: [staging], proxy_hosts: [api.stripe.com] }
"#,
    );
    let check = |p: &CompiledPolicy, action, context| outcome(p, vault_check("x", action, context));
    assert_eq!(
        check(
            &guard,
            "vault.read",
            vault_context("s", Some("staging"), None)
        ),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );
    assert_eq!(
        check(
            &guard,
            "vault.read",
            vault_context("s", Some("production"), None)
        ),
        (Outcome::Deny, codes(&["environment_not_allowed"]))
    );
    assert!(!guard.cedar.contains("vault/allow"));
    let with_allow = policy(
        r#"
global_guardrails:
  actions: { allow: ["*"] }
  vault: { proxy_hosts: ["*.stripe.com"] }
"#,
    );
    assert_eq!(
        check(
            &with_allow,
            "vault.proxy",
            vault_context("s", None, Some("api.stripe.com"))
        ),
        (Outcome::Allow, codes(&["action_allowed"]))
    );
    assert_eq!(
        check(
            &with_allow,
            "vault.proxy",
            vault_context("s", None, Some("api.evil.com"))
        ),
        (Outcome::Deny, codes(&["proxy_host_not_allowed"]))
    );
    // The proxy restriction leaves reads alone.
    assert_eq!(
        check(&with_allow, "vault.read", vault_context("s", None, None)).0,
        Outcome::Allow
    );

    // A binding's `actions` narrow every rule of the vault block, restrictions included.
    let narrowed = policy(
        r#"
reusable_policy_blocks:
  v: { vault: { allow: ["*"], secret_sets: [a], require_approval: {} } }
agent_groups: [{ name: g, selectors: [{ metadata: { team: x } }] }]
bindings: [{ group: g, blocks: [v], actions: [vault.read, vault.mint_lease] }]
"#,
    );
    assert_eq!(
        check(&narrowed, "vault.read", vault_context("a", None, None)),
        (Outcome::Challenge, codes(&["vault_requires_approval"]))
    );
    assert_eq!(
        check(
            &narrowed,
            "vault.mint_lease",
            vault_context("b", None, None)
        ),
        (Outcome::Deny, codes(&["secret_set_not_allowed"]))
    );
    assert_eq!(
        check(
            &narrowed,
            "vault.proxy",
            vault_context("b", None, Some("a.com"))
        ),
        (Outcome::Deny, codes(&["no_matching_rule"]))
    );
    let set = &narrowed.groups["g"].set;
    let ids: Vec<String> = set
        .for_action("vault.proxy")
        .pick(&[], &[])
        .policies()
        .map(|p| p.id().to_string())
        .collect();
    assert!(ids.iter().all(|id| !id.contains("vault/")), "{ids:?}");
}

#[test]
fn the_vault_indexes_agree_with_every_rule() {
    // Every combination of action, set, environment and target host decides as evaluating
    // every rule does (`run` checks that), including a set named twice in one array.
    let p = policy(VAULT);
    let mut seen = std::collections::BTreeSet::new();
    for team in ["payments", "reporting", "none"] {
        for action in ["vault.read", "vault.proxy", "vault.mint_lease", "read"] {
            for set in ["stripe-prod", "stripe-test", "reports", "other"] {
                for env in [Some("staging"), Some("production"), Some("dev"), None] {
                    for host in [
                        None,
                        Some("api.stripe.com"),
                        Some("x.stripe.com"),
                        Some("evil.com"),
                    ] {
                        let d = run(
                            &p,
                            &vault_check(team, action, vault_context(set, env, host)),
                        );
                        seen.insert((d.outcome, d.reason_codes));
                    }
                }
            }
        }
        let mut two_sets = vault_context("stripe-prod", Some("staging"), None);
        two_sets["secret_set"] = json!(["other", "stripe-prod"]);
        run(&p, &vault_check(team, "vault.read", two_sets));
    }
    for code in [
        "vault_allowed",
        "secret_set_not_allowed",
        "environment_not_allowed",
        "proxy_host_not_allowed",
        "vault_requires_approval",
        "no_matching_rule",
    ] {
        assert!(
            seen.iter()
                .any(|(_, codes)| codes.iter().any(|c| c == code)),
            "no check answered {code}: {seen:?}"
        );
    }
    // A check of one set skips the set rule of the block when the set is listed.
    let ids = |fields: &[&str]| -> Vec<String> {
        let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        p.groups["payments"]
            .set
            .for_action("vault.read")
            .pick(&fields, &[])
            .policies()
            .map(|p| p.id().to_string())
            .collect()
    };
    let listed = ids(&["secret_set=stripe-prod"]);
    assert!(
        !listed.iter().any(|id| id.ends_with("#vault/secret_sets")),
        "{listed:?}"
    );
    assert!(
        listed.iter().any(|id| id.ends_with("#vault/allow")),
        "{listed:?}"
    );
    let other = ids(&["secret_set=other"]);
    assert!(
        other.iter().any(|id| id.ends_with("#vault/secret_sets")),
        "{other:?}"
    );
    // And no read reaches the proxy rule.
    assert!(
        !other.iter().any(|id| id.ends_with("#vault/proxy_hosts")),
        "{other:?}"
    );
}

#[test]
fn vault_block_mistakes_are_errors_with_their_paths() {
    let errors = |yaml: &str| -> Vec<(String, String)> {
        compile(&parse(yaml, Format::Yaml).unwrap())
            .unwrap_err()
            .into_iter()
            .map(|e| (e.path, e.message))
            .collect()
    };
    let found = errors(
        r#"
reusable_policy_blocks:
  v:
    vault:
      allow: [read, "*"]
      secret_sets: []
      environments: ["  ", staging]
      proxy_hosts: ["api stripe.com", "*.", ok.example.com, "a..b"]
      require_approval: { actions: [reed, vault.proxy], environments: [] }
      on_violation: allow
agent_groups: [{ name: g, members: [agt_0123456789abcdef0123456789abcdef] }]
bindings: [{ group: g, blocks: [v] }]
"#,
    );
    let at = |path: &str, words: &str| {
        assert!(
            found.iter().any(|(p, m)| p == path && m.contains(words)),
            "no `{words}` at {path}: {found:?}"
        );
    };
    let v = "reusable_policy_blocks.v.vault";
    at(&format!("{v}.allow"), "`*` stands for every vault action");
    at(&format!("{v}.secret_sets"), "list one or more");
    at(&format!("{v}.environments[0]"), "1-64 printable characters");
    at(
        &format!("{v}.proxy_hosts[0]"),
        "`api stripe.com` is not a host name",
    );
    at(&format!("{v}.proxy_hosts[1]"), "`*.domain` pattern");
    at(&format!("{v}.proxy_hosts[3]"), "`a..b`");
    at(
        &format!("{v}.require_approval.actions[0]"),
        "did you mean `read`?",
    );
    at(
        &format!("{v}.require_approval.environments"),
        "list one or more",
    );
    at(
        &format!("{v}.on_violation"),
        "must be `deny` or `challenge`",
    );
    assert_eq!(found.len(), 9, "{found:?}");
    let found = errors("global_guardrails:\n  vault: { allow: [delete], proxy_hosts: [] }\n");
    assert_eq!(
        found,
        [
            (
                "global_guardrails.vault.allow[0]".to_owned(),
                "`delete` is not a vault action; use `read`, `proxy` or `mint_lease`".to_owned()
            ),
            (
                "global_guardrails.vault.proxy_hosts".to_owned(),
                "list one or more hosts (leave the key out for any)".to_owned()
            ),
        ]
    );
    // Unknown keys are caught when the spec is read.
    let err = parse(
        "reusable_policy_blocks:\n  v:\n    vault: { hosts: [a.com] }\n",
        Format::Yaml,
    )
    .unwrap_err();
    assert_eq!(err[0].path, "reusable_policy_blocks.v.vault.hosts");
    assert!(err[0].message.contains("proxy_hosts"), "{}", err[0].message);
}

#[test]
fn a_vault_spec_keeps_the_hashes_of_specs_without_one() {
    // The vault block is left out of the canonical form when absent: specs written before it
    // existed keep their hash.
    let spec = parse(ACTIONS, Format::Yaml).unwrap();
    assert!(!spec.canonical_json().contains("vault"));
    // The hash docs/policy-spec.md shows for this shipped spec, made before the block existed.
    let shipped = include_str!("../../../policies/devops-deploys.yaml");
    assert_eq!(
        parse(shipped, Format::Yaml).unwrap().hash(),
        "sha256:0e322f332e4a678a03bb7f684a55bd447da3a3d660e4a0094feca9f7fbbea6ad"
    );
    let with = parse(VAULT, Format::Yaml).unwrap();
    assert!(with
        .canonical_json()
        .contains("\"vault\":{\"allow\":[\"mint_lease\""));
}

#[test]
fn an_approver_is_shown_the_values_of_an_array() {
    let context = json!({
        "secret_set": "stripe-prod",
        "environment": "production",
        "keys": ["STRIPE_SECRET_KEY", "ACCOUNT", 7, ["nested"]],
        "target_host_patterns": ["api.stripe.com", "*.stripe.com", "*.com"],
        "long": ["x".repeat(201)],
        "many": vec!["k"; 101],
    });
    let reads = codes(&["environment", "keys", "long", "many", "secret_set"]);
    let summary =
        super::challenge::request_summary("pay-bot", &reads, ContextFields::new(&context), None);
    assert_eq!(
        summary["values"]["keys"],
        json!(["STRIPE_SECRET_KEY", "ACCOUNT"])
    );
    // A value the rules did not read is not kept; nor one too long to show whole.
    for absent in ["target_host_patterns", "long", "many"] {
        assert!(
            summary["values"].get(absent).is_none(),
            "{absent}: {summary}"
        );
    }
    let lines = super::challenge::summary_lines(&summary);
    assert!(
        lines.contains(&("keys".to_owned(), "STRIPE_SECRET_KEY, ACCOUNT".to_owned())),
        "{lines:?}"
    );
    assert!(
        lines.contains(&("environment".to_owned(), "production".to_owned())),
        "{lines:?}"
    );
}

#[test]
fn groups_bound_alike_share_one_rule_set_and_keep_their_own_sources() {
    let p = policy(
        r#"
reusable_policy_blocks:
  ops: { actions: { allow: [read], challenge: [deploy] } }
  other: { actions: { allow: [write] } }
  spy: { cedar: [{ name: red, when: 'principal in Group::"red"', outcome: deny, reason_code: red_team, reason: "red" }] }
agent_groups:
  - { name: red, selectors: [{ metadata: { team: red } }] }
  - { name: blue, selectors: [{ metadata: { team: blue } }] }
  - { name: green, selectors: [{ metadata: { team: green } }] }
  - { name: both, selectors: [{ metadata: { team: blue } }] }
bindings:
  - { name: red-ops, group: red, blocks: [ops] }
  - { name: blue-ops, group: blue, blocks: [ops] }
  - { name: green-other, group: green, blocks: [other] }
  - { name: both-spy, group: both, blocks: [ops, spy] }
"#,
    );
    // Red and blue are bound to the same block the same way: one set between them.
    let set = |g: &str| &p.groups[g].set;
    assert!(Arc::ptr_eq(set("red"), set("blue")));
    assert!(!Arc::ptr_eq(set("red"), set("green")));
    assert!(!Arc::ptr_eq(set("red"), set("both")));
    // Each group's decisions name its own binding.
    let judged = |team: &str, action: &'static str| {
        run(
            &p,
            &Check {
                metadata: json!({ "team": team }),
                action,
                ..Check::default()
            },
        )
    };
    let red = judged("red", "read");
    assert_eq!(red.outcome, Outcome::Allow);
    assert_eq!(red.determining_policies, ["red-ops/ops"]);
    let blue = judged("blue", "deploy");
    assert_eq!(blue.outcome, Outcome::Challenge);
    assert!(
        blue.determining_policies
            .iter()
            .all(|s| s == "blue-ops/ops" || s == "both-spy/ops"),
        "{blue:?}"
    );
    // A set is matched only by its own groups' agents: green's agent gets nothing of ops.
    assert_eq!(judged("green", "read").outcome, Outcome::Deny);
    assert_eq!(judged("green", "write").outcome, Outcome::Allow);
    // Raw Cedar naming a group still sees the agent's real groups only (blue's agent is not in
    // red, though it shares red's set).
    assert_eq!(judged("blue", "read").outcome, Outcome::Allow);
}
