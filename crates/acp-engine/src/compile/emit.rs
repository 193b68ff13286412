//! Emission: each rule of the lowered spec (see `lower`) becomes a Cedar condition, written
//! from its test, with its meaning (outcome, reason code, reason, source) and the index hints
//! its test gives: which actions it can match, the context field it tests, the bounds it puts
//! on a numeric tag, whether it only matches unusual agents. What it reads of a check (the
//! request facts an approver is shown, the agent's email counts, the value of a numeric tag)
//! comes with the lowered rule, so nothing searches the Cedar text for it. The rules are then
//! parsed into Cedar policies (the guardrails) and templates linked per group (the bindings).

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{EntityUid, Policy, PolicyId};

use crate::spec::{ApprovalRules, Outcome, PolicySpec, SpecError};

use super::index::{Compiled, FieldGuard, Placed, RuleMeta, TagRange};
use super::lower::{self, AmountKind, Placement, Test, VAULT_PROXY};
use super::validate::{self, Raw};

/// One rule as the emitter makes it: its Cedar condition, what it means, and what the emitter
/// knows of it (the index hints, and what it reads of a check).
pub(super) struct Rule {
    pub(super) id: String,
    pub(super) group: Option<String>,
    pub(super) meta: RuleMeta,
    pub(super) condition: String,
    /// For a raw rule: what the user wrote (always the end of `condition`, in parentheses).
    pub(super) raw: Option<Raw>,
    /// The actions the rule can match (its condition tests `context.action`); `None` for any.
    /// Only an index: the condition itself still tests the action.
    pub(super) actions: Option<Arc<BTreeSet<String>>>,
    /// The rule can only match an agent that is not active or whose risk tier is above low
    /// (its condition tests just that, besides the action).
    pub(super) unusual: bool,
    /// What its condition requires of the context fields (an index, like `actions`).
    pub(super) guard: Option<FieldGuard>,
    /// What its condition requires of a numeric tag (an index, like `actions`). The decision
    /// cache relies on it being exact: a rule with a range reads that one tag only, and only
    /// against these bounds (a rule reading a second tag, or other bounds, must not have one).
    pub(super) range: Option<TagRange>,
    /// Its condition reads the agent's email counts (`context.email.sent_last_minute` or
    /// `sent_last_day`): a `send_email` check under its policy reads them from the store.
    pub(super) reads_email_counts: bool,
    /// Its condition reads the value of a numeric tag other than through `range` (raw Cedar
    /// calling `getTag`): the decision cache then keeps every number of a check apart.
    pub(super) reads_tag_values: bool,
    /// The numeric tags its raw condition names (`getTag` / `hasTag`); a built-in rule names
    /// its tag in `range`.
    pub(super) raw_tags: Vec<String>,
}

/// A Cedar string literal.
fn lit(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn set_lit<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let inner: Vec<String> = items.into_iter().map(|s| lit(s)).collect();
    format!("[{}]", inner.join(", "))
}

fn actions_condition<'a>(actions: impl IntoIterator<Item = &'a String>) -> String {
    let actions: Vec<&String> = actions.into_iter().collect();
    match actions.as_slice() {
        [one] => format!("context.action == {}", lit(one)),
        all => format!("{}.contains(context.action)", set_lit(all.iter().copied())),
    }
}

/// Every rule of a spec: the status guardrails, then the guardrails' blocks, then each
/// binding's. Problems in the blocks' values are added to `errors` as they are met.
pub(super) fn rules(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Rule> {
    emitted(&lower::spec(spec, errors))
}

/// The rules of the blocks that no binding and no guardrail names, emitted as a binding
/// would emit them, only for their errors: they never reach a compiled policy.
pub(super) fn unused_block_rules(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Rule> {
    emitted(&lower::unused_blocks(spec, errors))
}

/// The rules of each placed block, in order.
fn emitted(placements: &[Placement]) -> Vec<Rule> {
    let mut out = Vec::new();
    for place in placements {
        let narrow = place
            .narrow
            .as_deref()
            .map(|n| (actions_condition(&n.written), n.scope()));
        out.extend(place.rules().map(|rule| emit(place, narrow.as_ref(), rule)));
    }
    out
}

/// One lowered rule as `place` holds it, narrowed to the binding's actions (their condition
/// and their set, `None` for any) when it has some.
fn emit(
    place: &Placement,
    narrow: Option<&(String, Option<Arc<BTreeSet<String>>>)>,
    rule: &lower::Rule,
) -> Rule {
    let test = &rule.test;
    let condition = match narrow {
        Some((narrow, _)) => format!("({narrow}) && ({})", condition(test)),
        None => condition(test),
    };
    let actions = match (
        test.actions().scope(),
        narrow.and_then(|(_, set)| set.clone()),
    ) {
        (Some(a), Some(b)) => Some(Arc::new(a.intersection(&b).cloned().collect())),
        (a, b) => a.or(b),
    };
    let challenges = rule.outcome == Outcome::Challenge;
    Rule {
        id: format!("{}#{}", place.source, rule.kind),
        group: place.group.clone(),
        meta: RuleMeta {
            outcome: rule.outcome,
            reason_code: rule.reason_code.clone(),
            reason: rule.reason.clone(),
            source: place.source.clone(),
            approval: place.approval_of(rule).cloned(),
            reads: if challenges {
                rule.reads.fields.iter().cloned().collect()
            } else {
                Vec::new()
            },
        },
        condition,
        raw: match test {
            Test::Raw(raw) => Some(raw.clone()),
            _ => None,
        },
        actions,
        unusual: match test {
            Test::Status(_) | Test::NotActive => true,
            Test::RiskAtLeast(tier) => tier.level() > 0,
            _ => false,
        },
        guard: guard(test),
        range: match test {
            Test::Amount {
                kind, above, up_to, ..
            } => Some(TagRange::new(&kind.field, *above, *up_to)),
            Test::Negative(kind) => Some(TagRange::new(&kind.field, None, Some(-1))),
            _ => None,
        },
        reads_email_counts: rule.reads.email_counts,
        reads_tag_values: rule.reads.tag_values,
        raw_tags: rule.reads.tags.iter().cloned().collect(),
    }
}

/// `context.action == "send_email"`.
const IS_EMAIL: &str = "context.action == \"send_email\"";

/// The Cedar condition of a test.
fn condition(test: &Test) -> String {
    let none_of =
        |fields: &BTreeSet<String>| format!("!context.fields.containsAny({})", set_lit(fields));
    match test {
        Test::Status(status) => format!("principal.status == {}", lit(status)),
        Test::NotActive => "principal.status != \"active\"".into(),
        Test::RiskAtLeast(tier) => format!("principal.risk_level >= {}", tier.level()),
        Test::AnyAction => "true".into(),
        Test::Actions(list) => actions_condition(&list.written),
        Test::SendEmail => IS_EMAIL.into(),
        Test::Domains(domains) => format!(
            "{IS_EMAIL} && !{}.containsAll(context.email.recipient_domains)",
            set_lit(domains)
        ),
        Test::MaxRecipients(max) => {
            format!("{IS_EMAIL} && context.email.recipient_count > {max}")
        }
        Test::Extensions(exts) => format!(
            "{IS_EMAIL} && context.email.attachment_extensions.containsAny({})",
            set_lit(exts)
        ),
        Test::Types(types) => format!(
            "{IS_EMAIL} && context.email.attachment_types.containsAny({})",
            set_lit(types)
        ),
        Test::MaxBytes(max) => {
            format!("{IS_EMAIL} && context.email.max_attachment_bytes > {max}")
        }
        Test::PerMinute(n) => format!("{IS_EMAIL} && context.email.sent_last_minute >= {n}"),
        Test::PerDay(n) => format!("{IS_EMAIL} && context.email.sent_last_day >= {n}"),
        Test::Amount {
            kind,
            which,
            above,
            up_to,
        } => {
            let which = match which {
                None => "true".to_owned(),
                Some(FieldGuard::Has(field)) => format!("context.fields.contains({})", lit(field)),
                Some(FieldGuard::HasNone(fields)) => none_of(fields),
            };
            let value = amount_value(kind);
            let mut condition = format!("{} && {which}", amount_base(kind));
            if let Some(above) = above {
                condition.push_str(&format!(" && {value} > {above}"));
            }
            if let Some(up_to) = up_to {
                condition.push_str(&format!(" && {value} <= {up_to}"));
            }
            condition
        }
        Test::Negative(kind) => format!("{} && {} < 0", amount_base(kind), amount_value(kind)),
        Test::UnknownCurrency(kind) => {
            format!("{} && {}", amount_base(kind), none_of(&kind.explicit()))
        }
        Test::VaultAllow(actions) => actions_condition(actions),
        Test::VaultNone(fields) => format!(
            "{} && {}",
            actions_condition(&lower::vault_actions()),
            none_of(fields)
        ),
        Test::ProxyNone(fields) => format!(
            "{} && {}",
            actions_condition([&VAULT_PROXY.to_owned()]),
            none_of(fields)
        ),
        Test::VaultApproval {
            actions,
            environments,
        } => match environments {
            Some(envs) => format!(
                "{} && context.fields.containsAny({})",
                actions_condition(actions),
                set_lit(envs)
            ),
            None => actions_condition(actions),
        },
        Test::Raw(raw) => format!("({})", raw.when),
    }
}

/// What every rule of an amount block tests first: its actions, and that the check has its
/// field.
fn amount_base(kind: &AmountKind) -> String {
    let has = format!("resource.hasTag({})", lit(&kind.field));
    match &kind.actions {
        Some(actions) => format!("{} && {has}", actions_condition(&actions.written)),
        None => has,
    }
}

fn amount_value(kind: &AmountKind) -> String {
    format!("resource.getTag({})", lit(&kind.field))
}

/// What a test requires of the context fields, for the index.
fn guard(test: &Test) -> Option<FieldGuard> {
    match test {
        Test::Amount { which, .. } => which.clone(),
        Test::UnknownCurrency(kind) => Some(FieldGuard::HasNone(kind.explicit())),
        Test::VaultNone(fields) | Test::ProxyNone(fields) => {
            Some(FieldGuard::HasNone(fields.clone()))
        }
        Test::VaultApproval {
            environments: Some(envs),
            ..
        } if envs.len() == 1 => envs.first().cloned().map(FieldGuard::Has),
        _ => None,
    }
}

/// A rule's Cedar text: one `permit` on the action `check`, its meaning in annotations.
pub(super) fn cedar_text(rule: &Rule) -> String {
    let principal = match &rule.group {
        Some(group) => format!("principal in Group::{}", lit(group)),
        None => "principal".to_owned(),
    };
    format!(
        "@id({})\n@outcome(\"{}\")\n@reason_code({})\n@reason({})\n@source({})\npermit ({principal}, action == Action::\"check\", resource)\nwhen {{ {} }};\n",
        lit(&rule.id),
        rule.meta.outcome.as_str(),
        lit(&rule.meta.reason_code),
        lit(&rule.meta.reason),
        lit(&rule.meta.source),
        rule.condition
    )
}

/// The guardrail rules, parsed.
pub(super) fn static_rules(rules: &[&Rule], errors: &mut Vec<SpecError>) -> Vec<Placed> {
    let mut placed = Vec::new();
    for rule in rules {
        let text = cedar_text(rule);
        let text_len = text.len();
        match Policy::parse(Some(PolicyId::new(&rule.id)), text) {
            Ok(policy) => placed.push(Placed {
                text_len,
                compiled: Compiled::Static(Box::new(policy)),
                meta: rule.meta.clone(),
                actions: rule.actions.clone(),
                unusual: rule.unusual,
                guard: rule.guard.clone(),
                range: rule.range.clone(),
            }),
            Err(e) => errors.push(SpecError::new(
                rule.meta.source.clone(),
                format!(
                    "rule `{}` is not valid Cedar: {}",
                    rule.id,
                    validate::first_line(&e.to_string())
                ),
            )),
        }
    }
    placed
}

/// Binding rules as Cedar templates: each distinct condition is parsed once as
/// `permit (principal in ?principal, ...) when { ... }` and linked to every group that has it,
/// which keeps compiling a spec with thousands of bindings cheap. (The annotations that the
/// `cedar` text shows for each rule live in `RuleSet::rules`, not in the template.)
#[derive(Default)]
pub(super) struct Templates {
    /// Per condition: the template, and the length of its text.
    pub(super) by_condition: HashMap<String, (cedar_policy::Template, usize)>,
    /// Template id → the first rule that used it, and the template's text (for error
    /// messages).
    pub(super) origin: HashMap<PolicyId, (String, String, Option<Raw>, String)>,
}

impl Templates {
    fn get(
        &mut self,
        rule: &Rule,
        errors: &mut Vec<SpecError>,
    ) -> Option<(cedar_policy::Template, usize)> {
        if let Some(t) = self.by_condition.get(&rule.condition) {
            return Some(t.clone());
        }
        let id = PolicyId::new(format!("template#{}", self.by_condition.len()));
        let text = format!(
            "permit (principal in ?principal, action == Action::\"check\", resource)\nwhen {{ {} }};\n",
            rule.condition
        );
        let text_len = text.len();
        match cedar_policy::Template::parse(Some(id), &text) {
            Ok(t) => {
                self.by_condition
                    .insert(rule.condition.clone(), (t.clone(), text_len));
                self.origin.insert(
                    t.id().clone(),
                    (
                        rule.id.clone(),
                        rule.meta.source.clone(),
                        rule.raw.clone(),
                        text,
                    ),
                );
                Some((t, text_len))
            }
            Err(e) => {
                errors.push(SpecError::new(
                    rule.meta.source.clone(),
                    format!(
                        "rule `{}` is not valid Cedar: {}",
                        rule.id,
                        validate::first_line(&e.to_string())
                    ),
                ));
                None
            }
        }
    }
}

/// The Cedar entity a group's name makes, or an error naming it.
pub(super) fn group_uid(group: &str, errors: &mut Vec<SpecError>) -> Option<EntityUid> {
    match EntityUid::from_str(&format!("Group::{}", lit(group))) {
        Ok(uid) => Some(uid),
        Err(_) => {
            errors.push(SpecError::new(
                "agent_groups",
                format!("`{group}` cannot name a Cedar entity"),
            ));
            None
        }
    }
}

/// Bound rules linked from the shared templates to `class`: the entity every agent judged by
/// them is a child of (see `compile::GroupRules`).
pub(super) fn group_rules(
    class: &EntityUid,
    rules: &[&Rule],
    templates: &mut Templates,
    errors: &mut Vec<SpecError>,
) -> Vec<Placed> {
    rules
        .iter()
        .filter_map(|rule| {
            let (template, text_len) = templates.get(rule, errors)?;
            Some(Placed {
                text_len,
                compiled: Compiled::Linked {
                    template: Box::new(template),
                    id: PolicyId::new(&rule.id),
                    group: class.clone(),
                },
                meta: rule.meta.clone(),
                actions: rule.actions.clone(),
                unusual: rule.unusual,
                guard: rule.guard.clone(),
                range: rule.range.clone(),
            })
        })
        .collect()
}

/// What makes two groups' bound rules decide alike: each rule's condition, meaning (but for its
/// source, which names the binding) and index entries, in order. Groups bound to the same
/// blocks the same way have equal shapes and share one compiled rule set.
#[derive(PartialEq)]
pub(super) struct Shape<'a>(Vec<RuleShape<'a>>);

#[derive(PartialEq)]
struct RuleShape<'a> {
    condition: &'a str,
    outcome: Outcome,
    reason_code: &'a str,
    reason: &'a str,
    approval: &'a Option<ApprovalRules>,
    reads: &'a [String],
    actions: &'a Option<Arc<BTreeSet<String>>>,
    unusual: bool,
    guard: &'a Option<FieldGuard>,
    range: &'a Option<TagRange>,
}

impl<'a> Shape<'a> {
    pub(super) fn of(rules: &[&'a Rule]) -> Self {
        Shape(
            rules
                .iter()
                .map(|r| RuleShape {
                    condition: &r.condition,
                    outcome: r.meta.outcome,
                    reason_code: &r.meta.reason_code,
                    reason: &r.meta.reason,
                    approval: &r.meta.approval,
                    reads: &r.meta.reads,
                    actions: &r.actions,
                    unusual: r.unusual,
                    guard: &r.guard,
                    range: &r.range,
                })
                .collect(),
        )
    }

    /// The conditions with their reason codes and reasons, in order: what shapes are first
    /// looked up by (groups whose rules differ only in their meaning fall apart here, not in
    /// a linear search of alike shapes).
    pub(super) fn key(&self) -> Vec<[&'a str; 3]> {
        self.0
            .iter()
            .map(|r| [r.condition, r.reason_code, r.reason])
            .collect()
    }
}
