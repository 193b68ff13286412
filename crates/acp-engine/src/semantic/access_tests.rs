//! Effective permissions, cross-checked: every cell's example is decided by the compiled
//! policy as the cell says (the model agrees with it: nothing is dropped where no raw Cedar
//! rule is placed), no request tried is decided better than the first cell of its action, and
//! every outcome a request tried gets is one of its action's cells.

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use super::super::tests::{agents, mutate, random_request, shipped, spec, SHIPPED};
use super::*;
use crate::compile::compile;
use crate::evaluate::{bare_address, evaluate, EmailFacts};

fn agent(id: &str, labels: serde_json::Value) -> TestAgent {
    TestAgent {
        id: id.into(),
        status: "active".into(),
        risk_tier: "low".into(),
        metadata: json!({}),
        labels,
    }
}

fn rows(cells: &[AccessCell]) -> Vec<(String, Outcome)> {
    cells
        .iter()
        .map(|c| (c.condition.clone(), c.outcome))
        .collect()
}

#[test]
fn a_finance_agent_may_refund_within_the_limits() {
    let s = shipped("finance-refunds.yaml");
    let compiled = compile(&s).unwrap();
    let reach = Reach::of(&s);
    let a = reach.agent_access(
        &compiled,
        &agent(
            "agt_00000000000000000000000000000001",
            json!({"dept": "finance"}),
        ),
    );
    assert_eq!(a.groups, ["finance"]);
    assert!(a.not_analysed.is_empty(), "{:?}", a.not_analysed);
    let actions: Vec<&str> = a.actions.iter().map(|x| x.action.as_str()).collect();
    assert_eq!(actions, ["refund", OTHER_ACTIONS]);
    let refund = &a.actions[0];
    assert_eq!(
        rows(&refund.cells),
        [
            ("amount.EUR in [0, 450] or amount.USD in [0, 500]".to_owned(), Outcome::Allow),
            (
                "amount.EUR in (450, 4500] or amount.USD in (500, 5000]".to_owned(),
                Outcome::Challenge
            ),
            (
                "no amount or amount.EUR < 0 or > 4500 or amount.USD < 0 or > 5000 or amount.XXX (a currency not listed)".to_owned(),
                Outcome::Deny
            ),
        ]
    );
    assert_eq!(
        refund.cells[0].decided_by,
        ["finance-refunds/refund-limits"]
    );
    assert_eq!(refund.cells[0].example.context["currency"], "EUR");
    assert_eq!(
        rows(&a.actions[1].cells),
        [("any request".to_owned(), Outcome::Deny)]
    );
    assert_eq!(a.actions[1].cells[0].reason_codes, ["no_matching_rule"]);

    // A medium-risk agent is challenged at best; an agent in no group may do nothing.
    let mut medium = agent(
        "agt_00000000000000000000000000000002",
        json!({"dept": "finance"}),
    );
    medium.risk_tier = "medium".into();
    let m = reach.agent_access(&compiled, &medium);
    assert_eq!(m.actions[0].cells[0].outcome, Outcome::Challenge);
    let stranger = reach.agent_access(
        &compiled,
        &agent("agt_00000000000000000000000000000003", json!({})),
    );
    assert!(stranger.groups.is_empty());
    assert_eq!(stranger.actions.len(), 1);
    assert_eq!(stranger.actions[0].cells[0].outcome, Outcome::Deny);
}

#[test]
fn who_may_refund() {
    let s = shipped("finance-refunds.yaml");
    let compiled = compile(&s).unwrap();
    let h = Reach::of(&s).action_holders(&compiled, "refund");
    let kinds: Vec<(&[String], &[String])> = h
        .principals
        .iter()
        .map(|p| (p.groups.as_slice(), p.principals.as_slice()))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                &["(no group)".to_owned()][..],
                &["agents in no group".to_owned()][..]
            ),
            (
                &["finance".to_owned()][..],
                &["agents with labels dept=finance".to_owned()][..]
            ),
        ]
    );
    let finance = &h.principals[1];
    assert_eq!(finance.cells[0].outcome, Outcome::Allow);
    assert_eq!(
        finance.cells[0].condition,
        "status = active, risk_tier = low, amount.EUR in [0, 450] or amount.USD in [0, 500]"
    );
    let by_status: Vec<(String, Outcome)> = rows(&finance.cells)
        .into_iter()
        .skip(1)
        .filter(|(c, _)| c.starts_with("status") || c.starts_with("risk_tier"))
        .collect();
    assert_eq!(
        by_status,
        [
            ("status = pending".to_owned(), Outcome::Challenge),
            ("status in {suspended, revoked}".to_owned(), Outcome::Deny),
            ("risk_tier = medium".to_owned(), Outcome::Challenge),
            ("risk_tier = high".to_owned(), Outcome::Deny),
        ]
    );
    // Agents in no group: denied, but a pending one is challenged (to be approved first).
    assert_eq!(h.principals[0].cells[0].outcome, Outcome::Challenge);
    assert_eq!(
        h.principals[0].cells[0].condition,
        "status = pending, risk_tier in {low, medium}"
    );
}

#[test]
fn raw_cedar_is_named_and_its_cells_dropped() {
    let s = shipped("devops-deploys.yaml");
    let compiled = compile(&s).unwrap();
    let reach = Reach::of(&s);
    let h = reach.action_holders(&compiled, "deploy");
    assert!(
        h.not_analysed
            .iter()
            .any(|n| n.starts_with("raw Cedar rule `")),
        "{:?}",
        h.not_analysed
    );
    for p in &h.principals {
        for c in &p.cells {
            assert_eq!(c.example.evaluate(&compiled).unwrap(), c.outcome);
        }
    }
}

/// Random mutations of the shipped specs: the model agrees with the compiled policy on every
/// cell, the first cell is the best any request gets, and every outcome met is a cell's.
#[test]
fn random_specs_agree_with_their_compiled_policy() {
    let mut rng = StdRng::seed_from_u64(38);
    let mut cells_seen = 0;
    for name in SHIPPED {
        let original = shipped(name);
        for round in 0..8 {
            let mut s = original.clone();
            if round > 0 {
                mutate(&mut s, &mut rng);
            }
            let Ok(compiled) = compile(&s) else {
                continue;
            };
            let reach = Reach::of(&s);
            for (id, metadata, labels) in agents(&[&s]) {
                for (status, tier) in [("active", "low"), ("active", "medium"), ("pending", "low")]
                {
                    let a = reach.agent_access(
                        &compiled,
                        &TestAgent {
                            id: id.clone(),
                            status: status.into(),
                            risk_tier: tier.into(),
                            metadata: metadata.clone(),
                            labels: labels.clone(),
                        },
                    );
                    // Where a raw Cedar rule is placed, cells it decides are dropped (and named);
                    // elsewhere the model and the compiled policy agree on every cell.
                    let raw = a
                        .not_analysed
                        .iter()
                        .any(|n| n.starts_with("raw Cedar rule"));
                    if !raw {
                        assert!(a.not_analysed.is_empty(), "{name}: {:?}", a.not_analysed);
                    }
                    for action in &a.actions {
                        for c in &action.cells {
                            cells_seen += 1;
                            assert_eq!(
                                c.example.evaluate(&compiled).unwrap(),
                                c.outcome,
                                "{name} {id} {}: {}",
                                action.action,
                                c.condition
                            );
                        }
                    }
                    if raw {
                        continue;
                    }
                    for _ in 0..40 {
                        let (_, _, act, context, email, sent) = random_request(&mut rng);
                        let cells = a
                            .actions
                            .iter()
                            .find(|x| x.action == act)
                            .or_else(|| a.actions.iter().find(|x| x.action == OTHER_ACTIONS))
                            .map(|x| &x.cells)
                            .unwrap();
                        let facts_email = email
                            .as_ref()
                            .map(|e| EmailFacts::from_json(e, bare_address).unwrap());
                        let facts = Facts {
                            agent_id: &id,
                            status,
                            risk_tier: tier,
                            metadata: &metadata,
                            labels: &labels,
                            action: &act,
                            context: ContextFields::new(&context),
                            email: facts_email.as_ref(),
                            emails_sent_last_minute: sent,
                            emails_sent_last_day: sent * 50,
                        };
                        let got = evaluate(&compiled, &facts).unwrap().outcome;
                        assert!(
                            got <= cells[0].outcome,
                            "{name} {id} {act} {context} {email:?}: {got:?} beats the first cell {:?}",
                            cells[0].condition
                        );
                        assert!(
                            cells.iter().any(|c| c.outcome == got),
                            "{name} {id} {act} {context} {email:?}: {got:?} is no cell's outcome"
                        );
                    }
                }
            }
            let h = reach.action_holders(&compiled, "refund");
            for p in &h.principals {
                for c in &p.cells {
                    assert_eq!(c.example.evaluate(&compiled).unwrap(), c.outcome);
                }
            }
        }
    }
    assert!(cells_seen > 200, "too few cells: {cells_seen}");
}

#[test]
fn a_vault_agent_sees_its_sets_and_hosts() {
    let s = spec(
        r#"
reusable_policy_blocks:
  stripe:
    vault:
      allow: [proxy]
      secret_sets: [stripe-prod]
      environments: [production]
      proxy_hosts: [api.stripe.com]
agent_groups:
  - {name: payers, members: [agt_00000000000000000000000000000001]}
bindings:
  - {group: payers, blocks: [stripe]}
"#,
    );
    let compiled = compile(&s).unwrap();
    let a = Reach::of(&s).agent_access(
        &compiled,
        &agent("agt_00000000000000000000000000000001", json!({})),
    );
    let proxy = a
        .actions
        .iter()
        .find(|x| x.action == "vault.proxy")
        .unwrap();
    assert_eq!(proxy.cells[0].outcome, Outcome::Allow);
    assert_eq!(
        rows(&proxy.cells),
        [
            (
                "secret set = stripe-prod, environment = production, proxy target host = api.stripe.com".to_owned(),
                Outcome::Allow
            ),
            ("secret set = unlisted-set-0 (not listed)".to_owned(), Outcome::Deny),
            ("environment = unlisted-env-0 (not listed)".to_owned(), Outcome::Deny),
            ("proxy target host = host.unlisted0.example (not listed)".to_owned(), Outcome::Deny),
        ]
    );
}

#[test]
fn grantees_are_the_groups_whose_bindings_grant() {
    let s = shipped("finance-refunds.yaml");
    let reach = Reach::of(&s);
    let finance = Grantees::Groups(["finance".to_owned()].into());
    assert_eq!(reach.grantees("refund", false), finance);
    assert_eq!(
        reach.grantees("send_email", false),
        Grantees::Groups(Default::default())
    );
    // A pending agent is challenged by the guardrails, whatever its groups.
    assert_eq!(reach.grantees("refund", true), Grantees::Anyone);
    // Raw Cedar that may allow is not read: anyone of the groups it is placed for.
    let s = shipped("devops-deploys.yaml");
    let reach = Reach::of(&s);
    for action in ["deploy", "read_logs"] {
        let verdict = reach.grantees(action, false);
        assert_ne!(verdict, Grantees::Groups(Default::default()), "{action}");
    }
}

#[test]
fn resource_ids_named_by_raw_cedar() {
    let s = spec(
        r#"
reusable_policy_blocks:
  docs:
    cedar:
      - name: handbook
        when: context.action == "read_doc" && context.fields.contains("resource_id=handbook")
        outcome: allow
        reason_code: handbook
        reason: anyone of the group reads the handbook
agent_groups:
  - {name: readers, members: [agt_00000000000000000000000000000001]}
bindings:
  - {group: readers, blocks: [docs]}
"#,
    );
    let compiled = compile(&s).unwrap();
    let reach = Reach::of(&s);
    let reader = agent("agt_00000000000000000000000000000001", json!({}));
    assert_eq!(
        reach.resource_ids_named(&compiled, &reader, "read_doc"),
        ["handbook".to_owned()].into()
    );
    let stranger = agent("agt_00000000000000000000000000000002", json!({}));
    assert!(reach
        .resource_ids_named(&compiled, &stranger, "read_doc")
        .is_empty());
    assert_eq!(
        reach.actions_named(&compiled, &reader),
        ["read_doc".to_owned()].into()
    );
}

#[test]
fn the_matrix_of_a_shipped_spec() {
    let s = shipped("finance-refunds.yaml");
    let compiled = compile(&s).unwrap();
    let m = Reach::of(&s).matrix(&compiled, 10);
    assert_eq!(m.actions, ["refund"]);
    assert_eq!(m.rows_total, 2);
    let best: Vec<(String, Option<Outcome>)> = m
        .rows
        .iter()
        .map(|r| (r.groups.join("|"), r.best[0].as_ref().map(|c| c.outcome)))
        .collect();
    assert_eq!(
        best,
        [
            ("(no group)".to_owned(), Some(Outcome::Challenge)),
            ("finance".to_owned(), Some(Outcome::Allow)),
        ]
    );
    let cut = Reach::of(&s).matrix(&compiled, 1);
    assert_eq!((cut.rows.len(), cut.rows_total), (1, 2));
}
