//! The evaluation index: each compiled rule set keeps its rules indexed by the actions they
//! test, the value of a context field they test (an amount block's currency) and the interval
//! of a numeric tag they bound (an amount block's thresholds), so that a check evaluates only
//! the rules that can match it. The indexes only skip rules that cannot match: every condition
//! still tests its action, status, fields and amounts itself (the policy tests check both ways
//! agree). Also here: how numbers are written as tags, which the emitted bounds, the index's
//! cuts and a check's values share.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cedar_policy::{EntityUid, Policy, PolicyId, PolicySet};

use crate::limits::Budget;
use crate::spec::{ApprovalRules, Outcome, SpecError};

/// What a matching rule means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMeta {
    pub outcome: Outcome,
    pub reason_code: String,
    pub reason: String,
    /// The spec element that produced it: `global_guardrails`, `global_guardrails/<block>`,
    /// `<binding>/<block>`.
    pub source: String,
    /// For challenge rules: who approves, and for how long.
    pub approval: Option<ApprovalRules>,
    /// For challenge rules: the request facts the condition reads (context field names, and
    /// `email` for the email's facts), which an approver is shown (see `Reads`, in `compile::lower`).
    pub reads: Vec<String>,
}

/// A policy set with the meaning of each of its policies, indexed by action: a check
/// evaluates only the rules that can match its action.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Every rule.
    pub policies: PolicySet,
    pub rules: HashMap<PolicyId, RuleMeta>,
    /// Per action that some rule names: the rules naming it and the rules of any action.
    /// Actions named by the same rules share one index (a block allowing 10,000 actions
    /// builds it once, not 10,000 times).
    by_action: HashMap<String, Arc<Indexed>>,
    /// The rules of any action (all that a check of an action no rule names can match).
    any_action: Indexed,
    /// The rules that only match unusual agents (see `RuleSet::for_unusual`); in neither
    /// index above.
    unusual: PolicySet,
}

impl RuleSet {
    /// The rules that can match a check of `action`.
    pub fn for_action(&self, action: &str) -> &Indexed {
        self.by_action
            .get(action)
            .map_or(&self.any_action, |indexed| indexed)
    }

    /// The rules that can match only an agent that is not active or whose risk tier is above
    /// low (status and reputation rules), whatever the action: skipped for everyone else.
    pub fn for_unusual(&self) -> &PolicySet {
        &self.unusual
    }
}

/// A bound group's rules: one rule set, shared by every group whose bound rules decide alike
/// (see `emit::Shape`: groups bound to the same blocks the same way), and what this group's
/// own rules mean.
#[derive(Debug, Clone)]
pub struct GroupRules {
    /// The group's bound rules, linked to `class`, and the guardrails, indexed.
    pub set: Arc<RuleSet>,
    /// The entity the set's bound rules are linked to, of a type no spec can name
    /// (`RuleClass`): an agent of the group is made its child, so that the set matches it.
    pub class: EntityUid,
    /// The meaning of the group's bound rules, by their ids in `set` (their sources name this
    /// group's bindings); the guardrails' is the set's own.
    pub own: HashMap<PolicyId, RuleMeta>,
}

impl GroupRules {
    /// What the rule `id` of the set means for this group.
    pub fn meta(&self, id: &PolicyId) -> Option<&RuleMeta> {
        self.own.get(id).or_else(|| self.set.rules.get(id))
    }
}

/// The rules of one action, indexed by the context fields they test (see `FieldGuard`), then
/// by the interval of the numeric tag they bound (see `TagRange`).
#[derive(Debug, Clone, Default)]
pub struct Indexed {
    /// Every rule of the action.
    all: Ranged,
    /// Per `name=value` field that some rule tests: the rules that can match a check where it
    /// is the only tested field present.
    by_field: HashMap<String, Ranged>,
    /// The rules that can match a check where no tested field is present (empty, and unused,
    /// when no rule tests a field).
    no_field: Ranged,
}

impl Indexed {
    /// The rules that can match a check with these `name=value` context fields and these
    /// numeric tags (`Request` tags, in ten-thousandths, as the check's entity holds them).
    pub fn pick(&self, fields: &[String], numbers: &[(String, i64)]) -> &PolicySet {
        self.pick_in(fields, numbers).0
    }

    /// `pick`, and the interval that chose the rules: the indexed tag and the interval's
    /// number. Every check whose value of that tag falls in the same interval gets the same
    /// rules, and each of their bounds on the tag holds for all of the interval or for none.
    pub fn pick_in(&self, fields: &[String], numbers: &[(String, i64)]) -> Picked<'_> {
        self.pick_fields(fields).pick(numbers)
    }

    fn pick_fields(&self, fields: &[String]) -> &Ranged {
        if self.by_field.is_empty() {
            return &self.all;
        }
        let mut hit = None;
        for field in fields {
            if let Some(set) = self.by_field.get(field) {
                if hit.is_some() {
                    // Two tested fields at once (two blocks with different currency fields):
                    // rare, and every rule is right.
                    return &self.all;
                }
                hit = Some(set);
            }
        }
        hit.unwrap_or(&self.no_field)
    }
}

/// Rules indexed by the interval in which they bound one numeric tag (the amount of an amount
/// block): a check evaluates only the rules whose bounds admit its value.
#[derive(Debug, Clone, Default)]
struct Ranged {
    /// Every rule (all a check gets when no rule bounds a tag).
    all: PolicySet,
    by_tag: Option<Box<TagIndex>>,
}

#[derive(Debug, Clone)]
struct TagIndex {
    tag: String,
    /// Ascending: interval `i` is `(cuts[i - 1], cuts[i]]`, the first is `(-inf, cuts[0]]` and
    /// the last `(cuts[n - 1], +inf)`. Every bound of a rule is a cut, so each interval lies
    /// wholly inside or outside each rule's bounds.
    cuts: Vec<i64>,
    /// Per interval (`cuts.len() + 1`), the rules that can match a value in it.
    by_interval: Vec<PolicySet>,
    /// The rules that can match a check without the tag (no rule bounding it).
    no_tag: PolicySet,
}

/// The rules a check can match, and the interval of the numeric tag that chose them (`None`
/// when no interval did).
pub type Picked<'a> = (&'a PolicySet, Option<(&'a str, usize)>);

impl Ranged {
    fn pick(&self, numbers: &[(String, i64)]) -> Picked<'_> {
        let Some(index) = &self.by_tag else {
            return (&self.all, None);
        };
        match numbers.iter().find(|(name, _)| *name == index.tag) {
            None => (&index.no_tag, None),
            Some((_, value)) => {
                let interval = index.cuts.partition_point(|cut| cut < value);
                match index.by_interval.get(interval) {
                    Some(set) => (set, Some((index.tag.as_str(), interval))),
                    None => (&self.all, None),
                }
            }
        }
    }
}

/// What a rule's condition requires of one numeric tag of the check's `Request` entity:
/// `resource.hasTag(tag)` and `above < value <= up_to` (`None`: unbounded). Only an index, like
/// `FieldGuard`: the condition itself still tests everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TagRange {
    tag: String,
    above: Option<i64>,
    up_to: Option<i64>,
}

impl TagRange {
    /// The tag (the context field) the range bounds.
    pub(super) fn tag(&self) -> &str {
        &self.tag
    }

    pub(super) fn new(tag: &str, above: Option<i64>, up_to: Option<i64>) -> Self {
        Self {
            tag: tag.to_owned(),
            above,
            up_to,
        }
    }

    /// Whether some value in `(low, high]` (`None`: unbounded) lies within the range.
    fn meets(&self, low: Option<i64>, high: Option<i64>) -> bool {
        // `None` sorts first, as an unbounded lower end should.
        let from = self.above.max(low);
        let to = match (self.up_to, high) {
            (Some(a), Some(h)) => Some(a.min(h)),
            (a, h) => a.or(h),
        };
        match (from, to) {
            (Some(f), Some(t)) => f < t,
            _ => true,
        }
    }
}

/// What a rule's condition requires of the check's `context.fields` (the `name=value` pairs of
/// its string and boolean values, and of the string and boolean elements of its arrays: a
/// check may then hold several values of one name), besides everything else it tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldGuard {
    /// `context.fields.contains(f)`.
    Has(String),
    /// `!context.fields.containsAny(fs)`.
    HasNone(BTreeSet<String>),
}

impl FieldGuard {
    fn fields(&self) -> Vec<&String> {
        match self {
            FieldGuard::Has(f) => vec![f],
            FieldGuard::HasNone(fs) => fs.iter().collect(),
        }
    }

    /// Whether a rule with this guard can match a check whose only tested field present is
    /// `present` (`None`: no tested field present).
    fn admits(&self, present: Option<&str>) -> bool {
        match (self, present) {
            (FieldGuard::Has(f), Some(p)) => f == p,
            (FieldGuard::Has(_), None) => false,
            (FieldGuard::HasNone(fs), Some(p)) => !fs.contains(p),
            (FieldGuard::HasNone(_), None) => true,
        }
    }
}

/// One compiled rule, before it is placed in a set.
#[derive(Clone)]
pub(super) enum Compiled {
    Static(Box<Policy>),
    /// A binding rule: a template linked to a group.
    Linked {
        template: Box<cedar_policy::Template>,
        id: PolicyId,
        group: cedar_policy::EntityUid,
    },
}

impl Compiled {
    pub(super) fn id(&self) -> PolicyId {
        match self {
            Compiled::Static(p) => p.id().clone(),
            Compiled::Linked { id, .. } => id.clone(),
        }
    }

    pub(super) fn add_to(&self, set: &mut PolicySet) -> Result<(), String> {
        match self {
            Compiled::Static(p) => set.add(Policy::clone(p)).map_err(|e| e.to_string()),
            Compiled::Linked {
                template,
                id,
                group,
            } => {
                if set.template(template.id()).is_none() {
                    set.add_template(cedar_policy::Template::clone(template))
                        .map_err(|e| e.to_string())?;
                }
                let slots = HashMap::from([(cedar_policy::SlotId::principal(), group.clone())]);
                set.link(template.id().clone(), id.clone(), slots)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// A rule ready to be placed: what Cedar evaluates, what it means, which actions it can match.
#[derive(Clone)]
pub(super) struct Placed {
    pub(super) compiled: Compiled,
    pub(super) meta: RuleMeta,
    pub(super) actions: Option<Arc<BTreeSet<String>>>,
    pub(super) guard: Option<FieldGuard>,
    pub(super) range: Option<TagRange>,
    pub(super) unusual: bool,
    /// The length of its Cedar text: what a copy of it costs (Cedar keeps the text of every
    /// policy, and of every link to a template).
    pub(super) text_len: usize,
}

/// A policy set of these rules (every one was accepted into the rule set's whole policy set
/// already, so none is refused here).
fn set_of<'a>(rules: impl IntoIterator<Item = &'a &'a Placed>, budget: &Budget) -> PolicySet {
    let mut set = PolicySet::new();
    for p in rules {
        budget.charge(p.text_len);
        let _ = p.compiled.add_to(&mut set);
    }
    set
}

/// The rules of one action, and their field index.
fn indexed(rules: &[&Placed], budget: &Budget) -> Indexed {
    let mut out = Indexed {
        all: ranged(rules, budget),
        ..Indexed::default()
    };
    let tested: BTreeSet<&String> = rules
        .iter()
        .filter_map(|p| p.guard.as_ref())
        .flat_map(FieldGuard::fields)
        .collect();
    if tested.is_empty() {
        return out;
    }
    let admitted = |present: Option<&str>| -> Vec<&Placed> {
        rules
            .iter()
            .copied()
            .filter(|p| p.guard.as_ref().is_none_or(|g| g.admits(present)))
            .collect()
    };
    for field in tested {
        out.by_field
            .insert(field.clone(), ranged(&admitted(Some(field)), budget));
    }
    out.no_field = ranged(&admitted(None), budget);
    out
}

/// These rules, indexed by the interval of the tag most of them bound (rules bounding another
/// tag are kept in every interval).
fn ranged(rules: &[&Placed], budget: &Budget) -> Ranged {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rules.iter().filter_map(|p| p.range.as_ref()) {
        *counts.entry(r.tag.as_str()).or_default() += 1;
    }
    let all = set_of(rules, budget);
    let Some(tag) = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(tag, _)| (*tag).to_owned())
    else {
        return Ranged { all, by_tag: None };
    };
    let bound = |p: &Placed| p.range.as_ref().filter(|r| r.tag == tag).cloned();
    let cuts: Vec<i64> = rules
        .iter()
        .filter_map(|p| bound(p))
        .flat_map(|r| [r.above, r.up_to])
        .flatten()
        .collect::<BTreeSet<i64>>()
        .into_iter()
        .collect();
    let by_interval = (0..=cuts.len())
        .map(|i| {
            let low = i.checked_sub(1).and_then(|j| cuts.get(j)).copied();
            let high = cuts.get(i).copied();
            set_of(
                rules
                    .iter()
                    .filter(|p| bound(p).is_none_or(|r| r.meets(low, high))),
                budget,
            )
        })
        .collect();
    let no_tag = set_of(rules.iter().filter(|p| bound(p).is_none()), budget);
    Ranged {
        all,
        by_tag: Some(Box::new(TagIndex {
            tag,
            cuts,
            by_interval,
            no_tag,
        })),
    }
}

/// Builds a rule set and its action and field indexes; errors name the rule. Stops early (with
/// an incomplete set) when the budget runs out; the caller checks the budget.
pub(super) fn index(placed: &[Placed], errors: &mut Vec<SpecError>, budget: &Budget) -> RuleSet {
    let mut set = RuleSet::default();
    let mut accepted = Vec::new();
    for p in placed {
        budget.charge(p.text_len);
        if let Err(e) = p.compiled.add_to(&mut set.policies) {
            errors.push(SpecError::new(
                p.meta.source.clone(),
                format!("rule `{}`: {e}", p.compiled.id()),
            ));
            continue;
        }
        set.rules.insert(p.compiled.id(), p.meta.clone());
        accepted.push(p);
    }
    let (unusual, usual): (Vec<&Placed>, Vec<&Placed>) =
        accepted.into_iter().partition(|p| p.unusual);
    for p in unusual {
        // The same rule was just accepted by `policies`; the index sets cannot refuse it.
        budget.charge(p.text_len);
        let _ = p.compiled.add_to(&mut set.unusual);
    }
    // Per action, the rules (by their place in `usual`) that name it, in order; actions named
    // by the same rules share one index, so the work is linear in the number of names.
    let mut naming: HashMap<&String, Vec<usize>> = HashMap::new();
    for (i, p) in usual.iter().enumerate() {
        for action in p.actions.iter().flat_map(|a| a.iter()) {
            naming.entry(action).or_default().push(i);
        }
    }
    let any_at: Vec<usize> = (0..usual.len())
        .filter(|&i| usual.get(i).is_some_and(|p| p.actions.is_none()))
        .collect();
    let mut shared: HashMap<Vec<usize>, Arc<Indexed>> = HashMap::new();
    for (action, named_by) in naming {
        let index = match shared.get(&named_by) {
            Some(index) => index.clone(),
            None => {
                if budget.check().is_err() {
                    return set;
                }
                let mut at: Vec<usize> = any_at.iter().chain(&named_by).copied().collect();
                at.sort_unstable();
                let rules: Vec<&Placed> =
                    at.iter().filter_map(|&i| usual.get(i).copied()).collect();
                let index = Arc::new(indexed(&rules, budget));
                shared.insert(named_by, index.clone());
                index
            }
        };
        // An entry per action and group: charged, so that many groups times many names
        // stay within the budget.
        budget.charge(action.len() + 64);
        set.by_action.insert(action.clone(), index);
    }
    let any: Vec<&Placed> = usual
        .iter()
        .copied()
        .filter(|p| p.actions.is_none())
        .collect();
    set.any_action = indexed(&any, budget);
    set
}

/// Numeric context fields are Cedar `Long` tags in ten-thousandths (4 decimal places), so that
/// rules compare integers instead of calling the `decimal` extension on every check. Answers the
/// value in ten-thousandths (not yet rounded), or `None` beyond the range of the tags.
fn ten_thousandths(value: f64) -> Option<f64> {
    (value.is_finite() && value.abs() < 900_000_000_000_000.0).then_some(value * 10_000.0)
}

/// A threshold of the spec as the literal its rules compare with (rounded).
pub fn scaled(value: f64) -> Option<i64> {
    ten_thousandths(value).map(|v| v.round() as i64)
}

/// A number of a check's context as its `Request` tag: rounded up, so a value just over a limit
/// never rounds down onto it; a product that is an integer but for floating-point noise
/// (`1.11 * 10000` is `11100.000000000002`) is that integer.
pub fn tag_value(value: f64) -> Option<i64> {
    ten_thousandths(value).map(|scaled| {
        let nearest = scaled.round();
        if (scaled - nearest).abs() < 1e-6 {
            nearest as i64
        } else {
            scaled.ceil() as i64
        }
    })
}
