//! The semantic diff, cross-checked: every example request it lists is evaluated against both
//! compiled policies (as `/v1/check` decides) and must get exactly the cell's outcomes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::*;
use crate::spec::{parse, Format, Threshold};
use crate::{compile, evaluate, ContextFields, EmailFacts, Facts};

pub(super) fn spec(yaml: &str) -> PolicySpec {
    parse(yaml, Format::Yaml).unwrap()
}

/// The model's diff, each listed example evaluated against both compiled policies.
fn checked(old: Option<&PolicySpec>, new: &PolicySpec) -> SemanticDiff {
    let d = analyse(old, new);
    let before = compile(old.unwrap_or(&PolicySpec::default())).unwrap();
    let after = compile(new).unwrap();
    cross_check(&d, &before, &after);
    d
}

fn cross_check(d: &SemanticDiff, before: &CompiledPolicy, after: &CompiledPolicy) {
    for (cells, up) in [(&d.more_permissive, true), (&d.less_permissive, false)] {
        for cell in cells {
            assert_eq!(cell.after > cell.before, up, "{cell:?}");
            assert_eq!(
                cell.example.evaluate(before).unwrap(),
                cell.before,
                "before: {cell:#?}"
            );
            assert_eq!(
                cell.example.evaluate(after).unwrap(),
                cell.after,
                "after: {cell:#?}"
            );
        }
    }
    assert_eq!(d.is_more_permissive(), d.more_permissive_total > 0);
    assert!(d.more_permissive.len() <= d.more_permissive_total);
    assert!(d.less_permissive.len() <= d.less_permissive_total);
}

type Row = (String, String, String, Outcome, Outcome);

fn rows(cells: &[Cell]) -> Vec<Row> {
    cells
        .iter()
        .map(|c| {
            (
                c.group.clone(),
                c.action.clone(),
                c.condition.clone(),
                c.before,
                c.after,
            )
        })
        .collect()
}

fn row(group: &str, action: &str, condition: &str, before: Outcome, after: Outcome) -> Row {
    (group.into(), action.into(), condition.into(), before, after)
}

use Outcome::{Allow, Challenge, Deny};

const FINANCE: &str = "
reusable_policy_blocks:
  refund-limits:
    amount:
      limits:
        EUR: {allow_up_to: 450.0, challenge_up_to: 4500.0}
        USD: {allow_up_to: 500.0, challenge_up_to: 5000.0}
agent_groups:
- name: finance
  selectors: [{labels: {dept: finance}}]
bindings:
- {name: finance-refunds, group: finance, blocks: [refund-limits], actions: [refund]}
global_guardrails:
  reputation: {challenge_at: medium, deny_at: high}
";

const SUPPORT: &str = "
reusable_policy_blocks:
  mail:
    email:
      allowed_domains: [example.com]
      max_recipients: 5
      blocked_attachments: [.exe, application/zip]
      max_attachment_bytes: 10485760
agent_groups:
- name: support
  selectors: [{metadata: {team: support}}]
bindings:
- {name: support-email, group: support, blocks: [mail], actions: [send_email]}
";

#[test]
fn thresholds_raised_and_lowered_per_currency() {
    let old = spec(FINANCE);
    let new = spec(
        &FINANCE
            .replace("USD: {allow_up_to: 500.0", "USD: {allow_up_to: 1000.0")
            .replace("challenge_up_to: 4500.0", "challenge_up_to: 3000.0"),
    );
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.more_permissive),
        [row(
            "finance",
            "refund",
            "amount.USD in (500, 1000]",
            Challenge,
            Allow
        )]
    );
    assert_eq!(
        rows(&d.less_permissive),
        [row(
            "finance",
            "refund",
            "amount.EUR in (3000, 4500]",
            Challenge,
            Deny
        )]
    );
    assert!(d.is_more_permissive() && d.complete && !d.truncated);
    assert_eq!(d.principals_analysed, 1);
    let example = &d.more_permissive[0].example;
    assert_eq!(
        example.context,
        json!({"amount": 1000.0, "currency": "USD"})
    );
    assert_eq!(example.agent.labels, json!({"dept": "finance"}));
    assert_eq!(
        d.more_permissive[0].principal,
        "agents with labels dept=finance"
    );
    // The reverse change is the mirror image.
    let back = checked(Some(&new), &old);
    assert_eq!(back.more_permissive_total, 1);
    assert_eq!(back.less_permissive_total, 1);
    assert_eq!(
        back.less_permissive[0].condition,
        "amount.USD in (500, 1000]"
    );
    assert!(back.is_more_permissive());
}

#[test]
fn a_domain_added_to_the_allow_list() {
    let old = spec(SUPPORT);
    let new = spec(&SUPPORT.replace("[example.com]", "[example.com, partner.example]"));
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.more_permissive),
        [row(
            "support",
            "send_email",
            "email recipient domain = partner.example",
            Deny,
            Allow
        )]
    );
    assert!(d.less_permissive.is_empty());
    let email = d.more_permissive[0].example.email.clone().unwrap();
    assert_eq!(email["to"], json!(["user1@partner.example"]));
}

#[test]
fn a_recipient_rule_removed() {
    let old = spec(SUPPORT);
    let new = spec(&SUPPORT.replace("      max_recipients: 5\n", ""));
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.more_permissive),
        [row(
            "support",
            "send_email",
            "email recipients >= 6",
            Deny,
            Allow
        )]
    );
    assert!(d.less_permissive.is_empty());
    let email = d.more_permissive[0].example.email.clone().unwrap();
    assert_eq!(email["to"].as_array().map(Vec::len), Some(6));
}

#[test]
fn an_attachment_size_limit_lowered() {
    let old = spec(SUPPORT);
    let new = spec(&SUPPORT.replace("10485760", "5242880"));
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.less_permissive),
        [row(
            "support",
            "send_email",
            "attachment bytes in [5242881, 10485760]",
            Allow,
            Deny
        )]
    );
    assert!(!d.is_more_permissive());
    let email = d.less_permissive[0].example.email.clone().unwrap();
    assert_eq!(email["attachments"][0]["size_bytes"], json!(5242881));
    // A blocked extension unblocked, and the violation made a challenge.
    let new = spec(
        &SUPPORT
            .replace("[.exe, application/zip]", "[application/zip]")
            .replace(
                "max_attachment_bytes: 10485760",
                "max_attachment_bytes: 10485760\n      on_violation: challenge",
            ),
    );
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.more_permissive),
        [
            row(
                "support",
                "send_email",
                "email recipient domain = unlisted.example (not listed)",
                Deny,
                Challenge
            ),
            row(
                "support",
                "send_email",
                "email recipients >= 6",
                Deny,
                Challenge
            ),
            row(
                "support",
                "send_email",
                "attachment extension = .exe",
                Deny,
                Allow
            ),
            row(
                "support",
                "send_email",
                "attachment type = application/zip or attachment bytes >= 10485761",
                Deny,
                Challenge
            ),
        ]
    );
}

#[test]
fn status_and_reputation_rules_changed() {
    let old = spec(FINANCE);
    let new = spec(
        &FINANCE.replace("deny_at: high", "deny_at: medium").replace(
            "    amount:\n",
            "    status: {require_active: true}\n    amount:\n",
        ),
    );
    let d = checked(Some(&old), &new);
    assert!(d.more_permissive.is_empty());
    assert_eq!(
        rows(&d.less_permissive),
        [
            // A pending agent is challenged as such; at medium risk it is now denied.
            row(
                "(no group)",
                OTHER_ACTIONS,
                "risk_tier = medium (with status = pending)",
                Challenge,
                Deny
            ),
            row("finance", "refund", "status = pending", Challenge, Deny),
            row("finance", "refund", "risk_tier = medium", Challenge, Deny),
            row(
                "finance",
                OTHER_ACTIONS,
                "risk_tier = medium (with status = pending)",
                Challenge,
                Deny
            ),
        ]
    );
    assert_eq!(d.less_permissive[2].example.agent.risk_tier, "medium");
}

#[test]
fn a_guardrail_removed() {
    let old = spec(
        "
reusable_policy_blocks:
  tickets: {actions: {allow: [reply_ticket, delete_customer]}}
agent_groups:
- name: support
  selectors: [{metadata: {team: support}}]
bindings:
- {group: support, blocks: [tickets]}
global_guardrails:
  actions: {deny: [delete_customer]}
  reputation: {deny_at: high}
",
    );
    let mut new = old.clone();
    new.global_guardrails = Default::default();
    let d = checked(Some(&old), &new);
    assert_eq!(
        rows(&d.more_permissive),
        [
            // Pending agents were denied `delete_customer`, and high-risk pending agents
            // everything, by the guardrails; now they are challenged as pending.
            row(
                "(no group)",
                "delete_customer",
                "status = pending",
                Deny,
                Challenge
            ),
            row(
                "(no group)",
                OTHER_ACTIONS,
                "risk_tier = high (with status = pending)",
                Deny,
                Challenge
            ),
            row("support", "delete_customer", "status = active", Deny, Allow),
            row(
                "support",
                "delete_customer",
                "status = pending",
                Deny,
                Challenge
            ),
            row("support", "reply_ticket", "risk_tier = high", Deny, Allow),
            row(
                "support",
                OTHER_ACTIONS,
                "risk_tier = high (with status = pending)",
                Deny,
                Challenge
            ),
        ]
    );
    assert!(d.less_permissive.is_empty());
}

#[test]
fn a_binding_added_and_a_membership_moved() {
    let a = "agt_0123456789abcdef0123456789abcdef";
    let base = format!(
        "
reusable_policy_blocks:
  read: {{actions: {{allow: [read]}}}}
  write: {{actions: {{allow: [write]}}}}
agent_groups:
- {{name: a, members: [{a}]}}
- {{name: b, members: []}}
bindings:
- {{group: a, blocks: [read]}}
"
    );
    let old = spec(&base);
    let bound = spec(&format!("{base}- {{group: b, blocks: [write]}}\n"));
    // b has no member yet: no agent is affected.
    let d = checked(Some(&old), &bound);
    assert!(d.is_empty(), "{d:#?}");
    // The binding of a group with a member.
    let d = checked(
        Some(&old),
        &spec(&format!("{base}- {{group: a, blocks: [write]}}\n")),
    );
    assert_eq!(
        rows(&d.more_permissive),
        [row("a", "write", "status = active", Deny, Allow)]
    );
    assert_eq!(d.more_permissive[0].example.agent.id, a);
    assert_eq!(
        d.more_permissive[0].principal,
        format!("{a} (explicit member)")
    );
    // The member moves from a to b.
    let moved = spec(
        &format!("{base}- {{group: b, blocks: [write]}}\n")
            .replace(&format!("members: [{a}]"), "members: []")
            .replace(
                "{name: b, members: []}",
                &format!("{{name: b, members: [{a}]}}"),
            ),
    );
    let d = checked(Some(&bound), &moved);
    assert_eq!(
        rows(&d.more_permissive),
        [row("a → b", "write", "status = active", Deny, Allow)]
    );
    assert_eq!(
        rows(&d.less_permissive),
        [row("a → b", "read", "status = active", Allow, Deny)]
    );
    assert_eq!(d.less_permissive[0].example.agent.id, a);
}

#[test]
fn raw_cedar_is_listed_as_not_analysed() {
    let text = "
reusable_policy_blocks:
  b:
    actions: {allow: [deploy]}
    cedar:
    - {name: prod, when: 'context.fields.contains(\"environment=production\")', outcome: challenge, reason_code: prod, reason: r}
agent_groups:
- {name: g, members: [agt_0123456789abcdef0123456789abcdef]}
bindings:
- {group: g, blocks: [b]}
";
    let old = spec(text);
    let new = spec(&text.replace("outcome: challenge", "outcome: deny"));
    let d = checked(Some(&old), &new);
    assert!(d.is_empty() && d.complete, "{d:#?}");
    assert_eq!(
        d.not_analysed,
        ["raw Cedar rule `prod` of block `b` (changed): raw Cedar is not analysed"]
    );
    let same = checked(Some(&old), &old);
    assert_eq!(
        same.not_analysed,
        ["raw Cedar rule `prod` of block `b` (unchanged): raw Cedar is not analysed"]
    );
}

pub(super) fn shipped(name: &str) -> PolicySpec {
    let path = format!("{}/../../policies/{name}", env!("CARGO_MANIFEST_DIR"));
    spec(&std::fs::read_to_string(path).unwrap())
}

pub(super) const SHIPPED: [&str; 5] = [
    "devops-deploys.yaml",
    "finance-refunds.yaml",
    "payments-enforcement.yaml",
    "support-email.yaml",
    "vault.yaml",
];

#[test]
fn a_cell_that_raw_cedar_decides_is_dropped_when_confirmed() {
    // Deploys need an environment (a raw rule); the model does not know it.
    let old = shipped("devops-deploys.yaml");
    let mut new = old.clone();
    if let Some(actions) = new
        .reusable_policy_blocks
        .get_mut("deploys")
        .and_then(|b| b.actions.as_mut())
    {
        actions.allow.retain(|a| a != "deploy");
    }
    let model = analyse(Some(&old), &new);
    assert_eq!(
        rows(&model.less_permissive),
        [row("devops", "deploy", "status = active", Allow, Deny)]
    );
    let confirmed = semantic_diff(Some(&compile(&old).unwrap()), &compile(&new).unwrap());
    assert!(confirmed.less_permissive.is_empty() && confirmed.less_permissive_total == 0);
    assert!(
        confirmed.not_analysed.iter().any(|n| n.starts_with(
            "devops, deploy, status = active: the compiled policies decide its example deny → deny"
        )),
        "{:#?}",
        confirmed.not_analysed
    );
    assert!(confirmed
        .not_analysed
        .contains(&"raw Cedar rule `known-environment` of block `deploys` (unchanged): raw Cedar is not analysed".to_owned()));
}

#[test]
fn identical_specs_differ_in_nothing() {
    for name in SHIPPED {
        let p = shipped(name);
        let d = checked(Some(&p), &p);
        assert!(
            d.is_empty() && d.complete && d.principals_analysed == 0,
            "{name}"
        );
        assert!(
            d.not_analysed.iter().all(|n| n.contains("(unchanged)")),
            "{name}: {:?}",
            d.not_analysed
        );
        let compiled = compile(&p).unwrap();
        assert!(semantic_diff(Some(&compiled), &compiled).is_empty());
    }
}

#[test]
fn a_new_policy_is_compared_with_the_empty_spec() {
    let new = spec(FINANCE);
    let d = checked(None, &new);
    // The group is new: its agents were in no group before.
    assert_eq!(
        rows(&d.more_permissive),
        [
            row(
                "(no group) → finance",
                "refund",
                "status = active, risk_tier = low, amount.EUR in [0, 450] or amount.USD in [0, 500]",
                Deny,
                Allow
            ),
            row(
                "(no group) → finance",
                "refund",
                "risk_tier = medium",
                Deny,
                Challenge
            ),
            row(
                "(no group) → finance",
                "refund",
                "amount.EUR in (450, 4500] or amount.USD in (500, 5000]",
                Deny,
                Challenge
            ),
        ]
    );
    // The new reputation guardrail denies high-risk agents that the empty spec challenged
    // as pending; amounts out of bounds too.
    assert_eq!(
        rows(&d.less_permissive),
        [
            row(
                "(no group)",
                OTHER_ACTIONS,
                "risk_tier = high (with status = pending)",
                Challenge,
                Deny
            ),
            row(
                "(no group) → finance",
                "refund",
                "risk_tier = high (with status = pending)",
                Challenge,
                Deny
            ),
            row(
                "(no group) → finance",
                "refund",
                "amount.EUR < 0 or > 4500 or amount.USD < 0 or > 5000 or amount.XXX (a currency not listed) (with status = pending)",
                Challenge,
                Deny
            ),
            row(
                "(no group) → finance",
                OTHER_ACTIONS,
                "risk_tier = high (with status = pending)",
                Challenge,
                Deny
            ),
        ]
    );
    let confirmed = semantic_diff(None, &compile(&new).unwrap());
    assert_eq!(confirmed.more_permissive, d.more_permissive);
}

#[test]
fn the_json_shape() {
    let d = analyse(
        Some(&spec(SUPPORT)),
        &spec(&SUPPORT.replace("max_recipients: 5", "max_recipients: 3")),
    );
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["less_permissive_total"], json!(1));
    assert_eq!(v["more_permissive_total"], json!(0));
    assert_eq!(v["complete"], json!(true));
    let cell = &v["less_permissive"][0];
    assert_eq!(cell["group"], json!("support"));
    assert_eq!(cell["action"], json!("send_email"));
    assert_eq!(cell["condition"], json!("email recipients in [4, 5]"));
    assert_eq!(cell["before"], json!("allow"));
    assert_eq!(cell["after"], json!("deny"));
    assert_eq!(
        cell["example"]["agent"]["metadata"],
        json!({"team": "support"})
    );
    assert_eq!(cell["example"]["action"], json!("send_email"));
    assert_eq!(cell["example"]["emails_sent_last_minute"], json!(0));
}

#[test]
fn many_cells_are_counted_and_capped() {
    // 300 groups, each with a member, whose shared block is denied by a new guardrail.
    let mut text =
        String::from("reusable_policy_blocks:\n  b: {actions: {allow: [read]}}\nagent_groups:\n");
    for i in 0..300 {
        text.push_str(&format!(
            "- {{name: g{i}, members: [agt_{i:032x}], selectors: [{{metadata: {{n: '{i}'}}}}]}}\n"
        ));
    }
    text.push_str("bindings:\n");
    for i in 0..300 {
        text.push_str(&format!("- {{group: g{i}, blocks: [b]}}\n"));
    }
    let old = spec(&text);
    let mut new = old.clone();
    new.global_guardrails.actions = Some(crate::spec::ActionRules {
        deny: vec!["read".into()],
        ..Default::default()
    });
    let d = analyse(Some(&old), &new);
    // Per group, one principal (its member and its selector share the same groups) with two
    // cells, and the agents of no group, whose pending ones were challenged for `read` and
    // are now denied.
    assert_eq!(d.principals_analysed, 301);
    assert_eq!(d.less_permissive_total, 601);
    assert_eq!(
        rows(&d.less_permissive[..3]),
        [
            row("(no group)", "read", "status = pending", Challenge, Deny),
            row("g0", "read", "status = active", Allow, Deny),
            row("g0", "read", "status = pending", Challenge, Deny),
        ]
    );
    assert_eq!(d.less_permissive.len(), MAX_LISTED);
    assert!(d.truncated && d.complete);
    cross_check(&d, &compile(&old).unwrap(), &compile(&new).unwrap());
    // Out of budget: named, not complete.
    let short = analyse_within(Some(&old), &new, 5);
    assert!(!short.complete && short.is_empty() && short.principals_analysed == 0);
    assert!(
        short
            .not_analysed
            .iter()
            .any(|n| n.starts_with("301 principal(s) not analysed") && n.contains("work budget")),
        "{:?}",
        short.not_analysed
    );
}

// ---------------------------------------------------------------------------------------------
// Random mutations of the shipped specs.

pub(super) fn mutate(spec: &mut PolicySpec, rng: &mut StdRng) {
    let tiers = [RiskTier::Low, RiskTier::Medium, RiskTier::High];
    let mut blocks: Vec<&mut Block> = spec.reusable_policy_blocks.values_mut().collect();
    for block in blocks.iter_mut() {
        if let Some(amount) = block.amount.as_mut() {
            for t in amount.limits.values_mut() {
                if rng.gen_bool(0.5) {
                    let allow = [0.0, 50.0, 100.0, 450.0, 500.0, 1000.0][rng.gen_range(0..6)];
                    let extra = [0.0, 100.0, 4000.0][rng.gen_range(0..3)];
                    *t = Threshold {
                        allow_up_to: allow,
                        challenge_up_to: rng.gen_bool(0.7).then_some(allow + extra),
                    };
                }
            }
            if rng.gen_bool(0.2) {
                amount.limits.insert(
                    "*".into(),
                    Threshold {
                        allow_up_to: 10.0,
                        challenge_up_to: Some(20.0),
                    },
                );
            }
        }
        if let Some(email) = block.email.as_mut() {
            if rng.gen_bool(0.4) {
                email.max_recipients = [None, Some(1), Some(3), Some(5)][rng.gen_range(0..4)];
            }
            if rng.gen_bool(0.4) {
                email.max_attachment_bytes =
                    [None, Some(1000), Some(10_485_760)][rng.gen_range(0..3)];
            }
            if rng.gen_bool(0.4) {
                if let Some(domains) = email.allowed_domains.as_mut() {
                    if rng.gen_bool(0.5) && domains.len() > 1 {
                        domains.pop();
                    } else {
                        domains.push("partner.example".into());
                    }
                }
            }
            if rng.gen_bool(0.3) {
                email.rate_limit_per_minute = [None, Some(2), Some(5)][rng.gen_range(0..3)];
            }
            if rng.gen_bool(0.3) {
                email.on_violation = [Outcome::Deny, Outcome::Challenge][rng.gen_range(0..2)];
            }
            if rng.gen_bool(0.3) && !email.blocked_attachments.is_empty() {
                let i = rng.gen_range(0..email.blocked_attachments.len());
                email.blocked_attachments.remove(i);
            }
        }
        if let Some(actions) = block.actions.as_mut() {
            if rng.gen_bool(0.4) && !actions.allow.is_empty() {
                let moved = actions.allow.remove(rng.gen_range(0..actions.allow.len()));
                if rng.gen_bool(0.5) {
                    actions.challenge.push(moved);
                }
            }
        }
        if let Some(vault) = block.vault.as_mut() {
            if rng.gen_bool(0.4) {
                if let Some(sets) = vault.secret_sets.as_mut() {
                    if sets.len() > 1 && rng.gen_bool(0.5) {
                        sets.pop();
                    } else {
                        sets.push("other-set".into());
                    }
                }
            }
            if rng.gen_bool(0.3) {
                vault.on_violation = [Outcome::Deny, Outcome::Challenge][rng.gen_range(0..2)];
            }
        }
    }
    if rng.gen_bool(0.3) {
        let g = &mut spec.global_guardrails;
        let tier = |rng: &mut StdRng| rng.gen_bool(0.6).then(|| tiers[rng.gen_range(1..3)]);
        g.reputation = Some(crate::spec::ReputationRules {
            challenge_at: tier(rng),
            deny_at: tier(rng),
        });
    }
    if rng.gen_bool(0.2) {
        spec.global_guardrails.status = Some(crate::spec::StatusRules {
            allow_pending: true,
            require_active: false,
        });
    }
}

/// The agents of a spec's kinds: each selector's, each member, and a stranger.
pub(super) fn agents(specs: &[&PolicySpec]) -> Vec<(String, Value, Value)> {
    let mut out = vec![(
        "agt_ffffffffffffffffffffffffffffffff".to_owned(),
        json!({}),
        json!({}),
    )];
    for s in specs {
        for g in &s.agent_groups {
            for sel in &g.selectors {
                out.push((
                    "agt_fffffffffffffffffffffffffffffffe".into(),
                    json!(sel.metadata),
                    json!(sel.labels),
                ));
            }
            for m in &g.members {
                out.push((m.clone(), json!({}), json!({})));
            }
        }
    }
    out
}

/// A random request of `agent`, from the values the shipped specs use and others.
pub(super) fn random_request(
    rng: &mut StdRng,
) -> (String, String, String, Value, Option<Value>, u64) {
    let pick = |rng: &mut StdRng, items: &[&str]| items[rng.gen_range(0..items.len())].to_owned();
    let status = pick(rng, &["active", "active", "active", "pending", "suspended"]);
    let tier = pick(rng, &["low", "low", "medium", "high"]);
    let action = pick(
        rng,
        &[
            "refund",
            "send_email",
            "mint_credential",
            "reply_ticket",
            "close_ticket",
            "deploy",
            "read_logs",
            "vault.read",
            "vault.proxy",
            "vault.mint_lease",
            "anything",
        ],
    );
    let mut context = json!({});
    if rng.gen_bool(0.7) {
        let amounts = [
            -5.0, 0.0, 10.0, 20.0, 49.99, 100.0, 450.0, 480.0, 500.0, 700.0, 1000.0, 4000.0,
            4500.0, 5000.01, 1e6,
        ];
        context["amount"] = json!(amounts[rng.gen_range(0..amounts.len())]);
        if rng.gen_bool(0.9) {
            context["currency"] = json!(pick(rng, &["USD", "EUR", "GBP"]));
        }
    }
    if action.starts_with("vault.") {
        context["secret_set"] = json!(pick(
            rng,
            &[
                "stripe-prod",
                "stripe-test",
                "zendesk-prod",
                "zendesk-staging",
                "other-set",
                "x"
            ]
        ));
        context["environment"] = json!(pick(rng, &["staging", "production", "dev"]));
        let host = pick(
            rng,
            &["api.stripe.com", "eu.files.stripe.com", "evil.example"],
        );
        let labels: Vec<&str> = host.split('.').collect();
        let mut patterns = vec![host.clone()];
        patterns.extend((1..labels.len()).map(|i| format!("*.{}", labels[i..].join("."))));
        context["target_host"] = json!(host);
        context["target_host_patterns"] = json!(patterns);
    }
    let email = (action == "send_email").then(|| {
        let n = rng.gen_range(0..8);
        let to: Vec<String> = (0..n)
            .map(|i| {
                let d = pick(
                    rng,
                    &["example.com", "example.org", "partner.example", "gmail.com"],
                );
                format!("u{i}@{d}")
            })
            .collect();
        let attachments: Vec<Value> = (0..rng.gen_range(0..2))
            .map(|_| {
                let size = [10u64, 999, 5000, 20_000_000][rng.gen_range(0..4)];
                json!({
                    "filename": pick(rng, &["a.pdf", "b.exe", "c.zip", "d.txt"]),
                    "content_type": pick(rng, &["application/pdf", "application/zip", "text/plain"]),
                    "size_bytes": size,
                })
            })
            .collect();
        json!({"to": to, "attachments": attachments})
    });
    let sent = [0u64, 1, 4, 5, 9, 10][rng.gen_range(0..6)];
    (status, tier, action, context, email, sent)
}

#[test]
fn random_mutations_of_the_shipped_specs_are_cross_checked() {
    let mut rng = StdRng::seed_from_u64(24);
    let mut cells_seen = 0;
    for name in SHIPPED {
        let original = shipped(name);
        for _ in 0..12 {
            let mut old = original.clone();
            let mut new = original.clone();
            if rng.gen_bool(0.5) {
                mutate(&mut old, &mut rng);
            }
            mutate(&mut new, &mut rng);
            let (Ok(before), Ok(after)) = (compile(&old), compile(&new)) else {
                continue;
            };
            // The model's examples, against the compiled policies (the devops spec's raw
            // rules decide some of its examples: there, the confirmed diff).
            let d = if name == "devops-deploys.yaml" {
                semantic_diff(Some(&before), &after)
            } else {
                analyse(Some(&old), &new)
            };
            cross_check(&d, &before, &after);
            cells_seen += d.more_permissive.len() + d.less_permissive.len();
            // Any request that the policies decide differently shows up in the direction it
            // goes (raw rules aside: the devops spec is left out here).
            if name == "devops-deploys.yaml" {
                continue;
            }
            let people = agents(&[&old, &new]);
            for _ in 0..60 {
                let (id, metadata, labels) = &people[rng.gen_range(0..people.len())];
                let (status, tier, action, context, email, sent) = random_request(&mut rng);
                let facts_email = email
                    .as_ref()
                    .map(|e| EmailFacts::from_json(e, crate::evaluate::bare_address).unwrap());
                let facts = Facts {
                    agent_id: id,
                    status: &status,
                    risk_tier: &tier,
                    metadata,
                    labels,
                    action: &action,
                    context: ContextFields::new(&context),
                    email: facts_email.as_ref(),
                    emails_sent_last_minute: sent,
                    emails_sent_last_day: sent * 50,
                };
                let b = evaluate(&before, &facts).unwrap().outcome;
                let a = evaluate(&after, &facts).unwrap().outcome;
                if a > b {
                    assert!(
                        d.is_more_permissive(),
                        "{name}: {action} {context} {email:?} {status}/{tier} went {b:?} → {a:?}, unreported"
                    );
                }
                if a < b {
                    assert!(
                        d.less_permissive_total > 0,
                        "{name}: {action} {context} {email:?} {status}/{tier} went {b:?} → {a:?}, unreported"
                    );
                }
            }
        }
    }
    assert!(
        cells_seen > 20,
        "the mutations changed too little: {cells_seen}"
    );
}

/// What an agent may never do, checked against the compiled policy: every action answered
/// "never" is denied for every request tried, and every other one is allowed or challenged for
/// some request tried.
#[test]
fn never_allowed_is_what_no_request_reaches() {
    let s = spec(
        r#"
reusable_policy_blocks:
  github:
    actions: {allow: [mcp.github.list_issues], deny: [mcp.github.delete_repo]}
  money:
    amount: {limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}}
  raw:
    cedar:
      - name: maybe
        when: context.action == "mcp.github.raw_only" && context.fields.contains("mode=safe")
        outcome: allow
        reason_code: raw_allows
        reason: a raw rule allows it
agent_groups:
  - {name: bots, members: [agt_01933046ffc47d9118edd300589b056e]}
  - {name: others, members: [agt_01933075ef3aec0acdb4c98cc07d8cff]}
bindings:
  - {group: bots, blocks: [github]}
  - {group: bots, blocks: [raw], actions: [mcp.github.raw_only]}
  - {group: bots, blocks: [money], actions: [mcp.github.transfer]}
  - {group: others, blocks: [github]}
"#,
    );
    let compiled = compile(&s).unwrap();
    let reach = Reach::of(&s);
    let agent = json!({});
    let groups_of = |id: &str| {
        let context = json!({});
        evaluate::groups_of(
            &compiled,
            &Facts {
                agent_id: id,
                status: "active",
                risk_tier: "low",
                metadata: &agent,
                labels: &agent,
                action: "",
                context: ContextFields::new(&context),
                email: None,
                emails_sent_last_minute: 0,
                emails_sent_last_day: 0,
            },
        )
    };
    let tried = [
        json!({}),
        json!({"amount": 50, "currency": "USD"}),
        json!({"amount": 500, "currency": "USD"}),
        json!({"amount": 5000, "currency": "USD"}),
        json!({"mode": "safe"}),
    ];
    let reached = |id: &str, tier: &str, action: &str| {
        tried
            .iter()
            .map(|context| {
                let facts = Facts {
                    agent_id: id,
                    status: "active",
                    risk_tier: tier,
                    metadata: &agent,
                    labels: &agent,
                    action,
                    context: ContextFields::new(context),
                    email: None,
                    emails_sent_last_minute: 0,
                    emails_sent_last_day: 0,
                };
                evaluate::evaluate(&compiled, &facts).unwrap().outcome
            })
            .max()
            .unwrap()
    };
    for (id, action, never) in [
        (
            "agt_01933046ffc47d9118edd300589b056e",
            "mcp.github.list_issues",
            false,
        ),
        (
            "agt_01933046ffc47d9118edd300589b056e",
            "mcp.github.delete_repo",
            true,
        ),
        (
            "agt_01933046ffc47d9118edd300589b056e",
            "mcp.github.transfer",
            false,
        ),
        (
            "agt_01933046ffc47d9118edd300589b056e",
            "mcp.github.raw_only",
            false,
        ),
        (
            "agt_01933046ffc47d9118edd300589b056e",
            "mcp.github.unnamed",
            true,
        ),
        (
            "agt_01933075ef3aec0acdb4c98cc07d8cff",
            "mcp.github.transfer",
            true,
        ),
        (
            "agt_01933075ef3aec0acdb4c98cc07d8cff",
            "mcp.github.list_issues",
            false,
        ),
        (
            "agt_01933075ef3aec0acdb4c98cc07d8000",
            "mcp.github.list_issues",
            true,
        ),
    ] {
        let groups = groups_of(id);
        assert_eq!(
            reach.never_allowed(&groups, "active", RiskTier::Low, action),
            never,
            "{id} {action}"
        );
        assert_eq!(
            reached(id, "low", action) == Outcome::Deny,
            never,
            "{id} {action}: the compiled policy"
        );
    }
    // A suspended agent may do nothing.
    assert!(reach.never_allowed(
        &groups_of("agt_01933046ffc47d9118edd300589b056e"),
        "suspended",
        RiskTier::Low,
        "mcp.github.list_issues"
    ));
}
