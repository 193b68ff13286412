//! Who may do what under one policy: the semantic model's cells (see the parent module) for
//! one spec instead of two. For an agent, every action its rules name (and one they do not),
//! each with the conditions under which it is allowed, challenged or denied; for an action,
//! every kind of agent (the agents in no group, each selector's, each explicit member's) with
//! the same cells.
//!
//! # Method
//!
//! The dimensions of a request are the semantic diff's. For each action a baseline request is
//! chosen that the rules treat best (each dimension set, in turn, to the value deciding best),
//! and it is the first cell: its condition names, per dimension, the values that decide as it
//! does. Each dimension is then varied from it, and its values that decide otherwise make the
//! next cells, merged by outcome (`amount.USD in (500, 1000]`); the rest of such a request is
//! the baseline's, which the cell's example shows whole. For an agent, its status and risk tier
//! are its own and not varied.
//!
//! Every cell's example is evaluated against the compiled policy, as `/v1/check` evaluates it:
//! the cell carries that evaluation's `determining_policies` (the guardrails, or the
//! `binding/block`, that decide it) and reason codes, and a cell whose example the policy
//! decides otherwise than the model (a raw Cedar rule decides it) is dropped and named in
//! `not_analysed`, as every raw Cedar rule that can decide the agent or the action is.

use serde::Serialize;

use acp_domain::RiskTier;

use super::{
    axes, classes, decide, describe, named_and_other, Class, Example, Label, Notes, Outcome, Probe,
    Reach, Rule, Test, AGENT_AXES, OTHER_ACTIONS, STATUSES,
};
use crate::compile::CompiledPolicy;
use crate::evaluate::{groups_of, ContextFields, Facts};
use crate::spec::TestAgent;

/// One cell: the requests of an action that a policy decides one way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessCell {
    /// The requests of the cell, e.g. `amount.USD in (500, 1000]`, `status = suspended`,
    /// `any request`.
    pub condition: String,
    pub outcome: Outcome,
    /// The guardrails or `binding/block` whose rules decide the cell's example.
    pub decided_by: Vec<String>,
    /// The reason codes of the example's decision (empty on allow).
    pub reason_codes: Vec<String>,
    /// One request of the cell, which the policy decides `outcome`.
    pub example: Example,
}

/// An action and its cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionAccess {
    /// The action, or `(any other action)` for every action the rules do not name.
    pub action: String,
    pub cells: Vec<AccessCell>,
}

/// An agent's effective permissions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentAccess {
    /// The policy's groups the agent is in (explicit member or selected).
    pub groups: Vec<String>,
    pub actions: Vec<ActionAccess>,
    /// What the model does not read: raw Cedar rules that can decide the agent, and cells
    /// that such a rule decides.
    pub not_analysed: Vec<String>,
}

/// Agents that one action treats alike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrincipalAccess {
    /// Their groups, as the semantic diff names them (`finance`, `a, b`, `(no group)`), one
    /// entry per kind of agent treated alike.
    pub groups: Vec<String>,
    /// Which agents, one entry per kind: `agents in no group`, `agents with labels
    /// dept=finance`, `agt_… (explicit member)`.
    pub principals: Vec<String>,
    pub cells: Vec<AccessCell>,
}

/// Who may do an action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionHolders {
    pub action: String,
    pub principals: Vec<PrincipalAccess>,
    pub not_analysed: Vec<String>,
}

/// The group × action matrix of a policy: for each kind of agent (those treated alike by
/// every action together) and each action the policy names, the best a request gets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessMatrix {
    /// Every action the policy names, in order.
    pub actions: Vec<String>,
    /// At most the rows asked for.
    pub rows: Vec<MatrixRow>,
    /// How many kinds of agent there are, listed or not.
    pub rows_total: usize,
    pub not_analysed: Vec<String>,
}

/// One kind of agent in the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixRow {
    pub groups: Vec<String>,
    pub principals: Vec<String>,
    /// One per action of [`AccessMatrix::actions`]: the first cell of its cells (the best a
    /// request of it gets, and when); `None` when a raw Cedar rule decides its example
    /// otherwise (named in `not_analysed`).
    pub best: Vec<Option<AccessCell>>,
}

/// A cell before its example is confirmed.
struct Found {
    condition: String,
    outcome: Outcome,
    probe: Probe,
}

impl Reach {
    /// `agent`'s effective permissions under `policy` (the policy this reach was made of): its
    /// groups as `/v1/check` finds them, its status and risk tier as they are.
    pub fn agent_access(&self, policy: &CompiledPolicy, agent: &TestAgent) -> AgentAccess {
        let (groups, rules) = self.rules_of_agent(policy, agent);
        let status = STATUSES
            .iter()
            .copied()
            .find(|s| *s == agent.status)
            .unwrap_or("revoked");
        let tier = RiskTier::parse(&agent.risk_tier).unwrap_or(RiskTier::High);
        let mut notes = Notes::default();
        raw_notes(&rules, None, &mut notes);
        let (named, other) = named_and_other(rules.iter().copied());
        let mut actions = Vec::new();
        for action in named.iter().chain(std::iter::once(&other)) {
            let shown = if *action == other {
                OTHER_ACTIONS
            } else {
                action.as_str()
            };
            let of_action = for_action(&rules, action);
            let found = cells(&of_action, action, Some((status, tier)), &mut notes);
            actions.push(ActionAccess {
                action: shown.to_owned(),
                cells: confirm(found, agent, shown, policy, &mut notes),
            });
        }
        AgentAccess {
            groups,
            actions,
            not_analysed: notes.into_list(),
        }
    }

    /// Every kind of agent's cells for `action` under `policy` (the policy this reach was made
    /// of), kinds whose rules for it are the same content listed together.
    pub fn action_holders(&self, policy: &CompiledPolicy, action: &str) -> ActionHolders {
        let mut notes = Notes::default();
        let principals = self
            .kinds()
            .into_iter()
            .map(|kind| {
                let rules = self.model.rules_of(&kind.bound);
                raw_notes(&rules, Some(action), &mut notes);
                let of_action = for_action(&rules, action);
                let found = cells(&of_action, action, None, &mut notes);
                PrincipalAccess {
                    cells: confirm(found, &kind.agent, action, policy, &mut notes),
                    groups: kind.groups,
                    principals: kind.principals,
                }
            })
            .collect();
        ActionHolders {
            action: action.to_owned(),
            principals,
            not_analysed: notes.into_list(),
        }
    }
}

/// The agents that may be granted a check (see [`Reach::grantees`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grantees {
    /// Any agent may be: what grants it is not tied to a group (a guardrail that challenges,
    /// a raw Cedar rule, a binding's group that no agent can be told from).
    Anyone,
    /// Only agents of these groups (the policy's group names) may be.
    Groups(std::collections::BTreeSet<String>),
}

impl Reach {
    /// Who may be granted a check of `action` (allowed, or with `challenged` also challenged):
    /// only an agent in a group some binding of which places a rule that allows (or
    /// challenges) the action, since the guardrails place no rule that grants; any agent when
    /// a guardrail may challenge it (`challenged`) or a raw Cedar rule may allow or challenge
    /// it (not read). A superset: each agent is then decided as a check would decide it.
    pub fn grantees(&self, action: &str, challenged: bool) -> Grantees {
        let grants = |r: &Rule| match r.outcome() {
            Outcome::Allow => true,
            Outcome::Challenge => challenged,
            Outcome::Deny => false,
        };
        let may = |r: &Rule| {
            r.narrow.as_ref().is_none_or(|n| n.contains(action))
                && (matches!(r.test(), Test::Raw(_)) || r.may_match(action))
        };
        if self.model.guardrails.iter().any(|r| grants(r) && may(r)) {
            return Grantees::Anyone;
        }
        let mut groups = std::collections::BTreeSet::new();
        for (group, rules) in &self.model.groups {
            if rules.iter().any(|r| grants(r) && may(r)) {
                groups.insert(group.clone());
            }
        }
        Grantees::Groups(groups)
    }

    /// The actions the rules that can decide `agent` name (its groups' bindings and the
    /// guardrails; in a raw Cedar rule, `context.action == "<action>"`), in order.
    pub fn actions_named(
        &self,
        policy: &CompiledPolicy,
        agent: &TestAgent,
    ) -> std::collections::BTreeSet<String> {
        let rules = self.rules_of_agent(policy, agent).1;
        let mut named = named_and_other(rules.iter().copied()).0;
        for rule in &rules {
            if let Test::Raw(raw) = rule.test() {
                for (i, _) in raw.when.match_indices("context.action == \"") {
                    let rest = &raw.when[i + "context.action == \"".len()..];
                    if let Some((action, _)) = rest.split_once('"') {
                        named.insert(action.to_owned());
                    }
                }
            }
        }
        named
    }

    /// The resource ids that the raw Cedar rules which can decide `agent`'s checks of `action`
    /// name (`"resource_id=<id>"`, the context field as a rule reads it), in order.
    pub fn resource_ids_named(
        &self,
        policy: &CompiledPolicy,
        agent: &TestAgent,
        action: &str,
    ) -> std::collections::BTreeSet<String> {
        let mut ids = std::collections::BTreeSet::new();
        for rule in self.rules_of_agent(policy, agent).1 {
            let Test::Raw(raw) = rule.test() else {
                continue;
            };
            if !rule.narrow.as_ref().is_none_or(|n| n.contains(action)) {
                continue;
            }
            for literal in raw.when.split('"').skip(1).step_by(2) {
                if let Some(id) = literal.strip_prefix("resource_id=") {
                    ids.insert(id.to_owned());
                }
            }
        }
        ids
    }

    /// `agent`'s groups as `/v1/check` finds them, and the rules that can decide it.
    fn rules_of_agent(
        &self,
        policy: &CompiledPolicy,
        agent: &TestAgent,
    ) -> (Vec<String>, Vec<&Rule>) {
        let facts = Facts::of_test(
            agent,
            "",
            ContextFields::new(&serde_json::Value::Null),
            None,
            (0, 0),
        );
        let groups = groups_of(policy, &facts);
        let bound = self.model.bound(groups.iter().cloned());
        (groups, self.model.rules_of(&bound))
    }
}

impl Reach {
    /// The policy's matrix (see [`AccessMatrix`]), at most `limit` rows.
    pub fn matrix(&self, policy: &CompiledPolicy, limit: usize) -> AccessMatrix {
        let rules = self
            .model
            .guardrails
            .iter()
            .chain(self.model.groups.values().flatten());
        let actions: Vec<String> = named_and_other(rules).0.into_iter().collect();
        let mut notes = Notes::default();
        let kinds = self.kinds();
        let rows_total = kinds.len();
        let rows = kinds
            .into_iter()
            .take(limit)
            .map(|kind| {
                let rules = self.model.rules_of(&kind.bound);
                raw_notes(&rules, None, &mut notes);
                let best = actions
                    .iter()
                    .map(|action| {
                        let of_action = for_action(&rules, action);
                        let first: Vec<Found> = cells(&of_action, action, None, &mut notes)
                            .into_iter()
                            .take(1)
                            .collect();
                        confirm(first, &kind.agent, action, policy, &mut notes)
                            .into_iter()
                            .next()
                    })
                    .collect();
                MatrixRow {
                    groups: kind.groups,
                    principals: kind.principals,
                    best,
                }
            })
            .collect();
        AccessMatrix {
            actions,
            rows,
            rows_total,
            not_analysed: notes.into_list(),
        }
    }

    /// The kinds of agent (see the parent module's principals), those whose rules are the same
    /// in content together, in the order first met.
    fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        // Content key → place in `kinds`.
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for class in classes(&self.model, &self.model) {
            let Class {
                before: bound,
                shown_before,
                agent,
                principal,
                ..
            } = class;
            let key = self.model.content(&bound);
            let label = if shown_before.is_empty() {
                "(no group)".to_owned()
            } else {
                shown_before.join(", ")
            };
            match seen.get(&key).and_then(|&i| kinds.get_mut(i)) {
                Some(kind) => {
                    kind.groups.push(label);
                    kind.principals.push(principal);
                }
                None => {
                    seen.insert(key, kinds.len());
                    kinds.push(Kind {
                        bound,
                        agent,
                        groups: vec![label],
                        principals: vec![principal],
                    });
                }
            }
        }
        kinds
    }
}

/// Agents whose rules are the same in content: their bound groups, one of them (whose
/// examples the cells show), and how each kind of them is named.
struct Kind {
    bound: Vec<String>,
    agent: TestAgent,
    groups: Vec<String>,
    principals: Vec<String>,
}

/// Of `rules`, those that can decide a check of `action` (raw Cedar aside: it is named in
/// `not_analysed`).
fn for_action<'a>(rules: &[&'a Rule], action: &str) -> Vec<&'a Rule> {
    rules
        .iter()
        .copied()
        .filter(|r| r.may_match(action))
        .collect()
}

/// Names each raw Cedar rule of `rules` (placed for `action`, when given).
fn raw_notes(rules: &[&Rule], action: Option<&str>, notes: &mut Notes) {
    for rule in rules {
        if !matches!(rule.test(), Test::Raw(_)) {
            continue;
        }
        if let (Some(action), Some(narrow)) = (action, &rule.narrow) {
            if !narrow.contains(action) {
                continue;
            }
        }
        let name = rule
            .rule
            .kind
            .strip_prefix("cedar/")
            .unwrap_or(&rule.rule.kind);
        notes.add(format!(
            "raw Cedar rule `{name}` of {}: raw Cedar is not analysed",
            rule.source
        ));
    }
}

/// The cells of `action` under `rules`; `agent`: the status and risk tier, fixed (else they
/// are dimensions like the others).
fn cells(
    rules: &[&Rule],
    action: &str,
    agent: Option<(&'static str, RiskTier)>,
    notes: &mut Notes,
) -> Vec<Found> {
    let (axes, mut probe) = axes(rules, action, notes);
    let first = match agent {
        Some((status, tier)) => {
            probe.status = status;
            probe.tier = tier;
            AGENT_AXES
        }
        None => 0,
    };
    let decided = |p: &Probe| decide(rules, &p.req());
    // The baseline: each dimension's best value in turn, the request's own dimensions first,
    // then (when not fixed) the agent's status and risk tier.
    let order: Vec<usize> = (AGENT_AXES..axes.len()).chain(first..AGENT_AXES).collect();
    for _ in 0..2 {
        for &i in &order {
            let Some(axis) = axes.get(i) else {
                continue;
            };
            let mut best = (decided(&probe), None);
            for value in &axis.values {
                let outcome = decided(&probe.with(&value.set));
                if outcome > best.0 {
                    best = (outcome, Some(&value.set));
                }
            }
            if let Some(set) = best.1 {
                probe = probe.with(set);
            }
        }
    }
    let base = decided(&probe);
    let rows: Vec<Vec<Outcome>> = axes
        .iter()
        .map(|a| {
            a.values
                .iter()
                .map(|v| decided(&probe.with(&v.set)))
                .collect()
        })
        .collect();
    let mut parts = Vec::new();
    for (axis, row) in axes.iter().zip(&rows).skip(first) {
        let like: Vec<&Label> = axis
            .values
            .iter()
            .zip(row)
            .filter(|(_, o)| **o == base)
            .map(|(v, _)| &v.label)
            .collect();
        if like.len() < axis.values.len() {
            parts.push(describe(&like));
        }
    }
    let mut out = vec![Found {
        condition: if parts.is_empty() {
            "any request".to_owned()
        } else {
            parts.join(", ")
        },
        outcome: base,
        probe: probe.clone(),
    }];
    for (axis, row) in axes.iter().zip(&rows).skip(first) {
        // Values that decide otherwise, merged by outcome, in the dimension's order.
        let mut by: Vec<(Outcome, Vec<&super::Point>)> = Vec::new();
        for (value, outcome) in axis.values.iter().zip(row) {
            if *outcome == base {
                continue;
            }
            match by.iter_mut().find(|(o, _)| o == outcome) {
                Some((_, list)) => list.push(value),
                None => by.push((*outcome, vec![value])),
            }
        }
        // Better outcomes first.
        by.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
        for (outcome, values) in by {
            let Some(one) = values.first() else {
                continue;
            };
            let labels: Vec<&Label> = values.iter().map(|v| &v.label).collect();
            out.push(Found {
                condition: describe(&labels),
                outcome,
                probe: probe.with(&one.set),
            });
        }
    }
    out
}

/// The cells whose example `policy` decides as the model does, with what decides them; the
/// others named in `notes`.
fn confirm(
    found: Vec<Found>,
    agent: &TestAgent,
    action: &str,
    policy: &CompiledPolicy,
    notes: &mut Notes,
) -> Vec<AccessCell> {
    let mut out = Vec::with_capacity(found.len());
    for cell in found {
        let example = cell.probe.example(agent);
        match example.decide(policy) {
            Ok(d) if d.outcome == cell.outcome => out.push(AccessCell {
                condition: cell.condition,
                outcome: cell.outcome,
                decided_by: d.determining_policies,
                reason_codes: d.reason_codes,
                example,
            }),
            Ok(d) => notes.add(format!(
                "{action}, {}: the compiled policy decides its example {}, not {} (a raw Cedar rule decides it)",
                cell.condition,
                d.outcome.as_str(),
                cell.outcome.as_str()
            )),
            Err(e) => notes.add(format!(
                "{action}, {}: its example could not be evaluated ({e})",
                cell.condition
            )),
        }
    }
    out
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
