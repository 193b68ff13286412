//! Compilation: a spec becomes a Cedar policy set, validated in strict mode against
//! `schemas/acp.cedarschema`, with deterministic text. Pure: no I/O.
//!
//! Every rule of the spec compiles to one Cedar `permit` that means "this rule matches"; its
//! outcome (allow, challenge, deny), reason code, reason and source ride along as annotations.
//! Evaluation collects the matching rules and applies deny > challenge > allow, with default
//! deny. Guardrail rules are unscoped; binding rules are scoped to `principal in Group::"..."`.
//! The compiled form keeps one Cedar policy set for the guardrails and one per bound group, so a
//! check evaluates only the rules that can apply to its agent; each set is indexed by the actions
//! its rules test, and status and reputation rules sit apart, evaluated only for agents that are
//! not active or above low risk. Within an action, rules that test one value of a context field
//! (an amount block's currency) are indexed by that value too, and rules that bound a numeric tag
//! (an amount block's thresholds) by the interval of the tag's value. The indexes only skip rules
//! that cannot match: every condition still tests its action, status, fields and amounts itself
//! (the policy tests check both ways agree).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use cedar_policy::{Policy, PolicyId, PolicySet, Schema, ValidationMode, Validator};

use super::limits::{self, Budget};
use super::spec::*;

const SCHEMA_TEXT: &str = include_str!("../../schemas/acp.cedarschema");

/// The Cedar schema, parsed once.
pub fn schema() -> Result<&'static Schema, SpecError> {
    static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Schema::from_cedarschema_str(SCHEMA_TEXT)
                .map(|(schema, _warnings)| schema)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| SpecError::new("", format!("the embedded Cedar schema does not parse: {e}")))
}

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
    /// `email` for the email's facts), which an approver is shown (see `fields_read`).
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
struct TagRange {
    tag: String,
    above: Option<i64>,
    up_to: Option<i64>,
}

impl TagRange {
    fn new(tag: &str, above: Option<i64>, up_to: Option<i64>) -> Self {
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
/// its string and boolean values), besides everything else it tests.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FieldGuard {
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
enum Compiled {
    Static(Box<Policy>),
    /// A binding rule: a template linked to a group.
    Linked {
        template: Box<cedar_policy::Template>,
        id: PolicyId,
        group: cedar_policy::EntityUid,
    },
}

impl Compiled {
    fn id(&self) -> PolicyId {
        match self {
            Compiled::Static(p) => p.id().clone(),
            Compiled::Linked { id, .. } => id.clone(),
        }
    }

    fn add_to(&self, set: &mut PolicySet) -> Result<(), String> {
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
struct Placed {
    compiled: Compiled,
    meta: RuleMeta,
    actions: Option<Arc<BTreeSet<String>>>,
    guard: Option<FieldGuard>,
    range: Option<TagRange>,
    unusual: bool,
    /// The length of its Cedar text: what a copy of it costs (Cedar keeps the text of every
    /// policy, and of every link to a template).
    text_len: usize,
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
fn index(placed: &[Placed], errors: &mut Vec<SpecError>, budget: &Budget) -> RuleSet {
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

/// A compiled spec: what checks evaluate. Built once per policy version; never rebuilt on the
/// request path.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub spec: PolicySpec,
    /// `sha256:...` of the spec's canonical form.
    pub hash: String,
    /// The whole policy set as Cedar text (deterministic).
    pub cedar: String,
    pub guardrails: RuleSet,
    /// Per group that some binding names.
    pub groups: BTreeMap<String, RuleSet>,
    /// Explicit members: agent id → groups.
    pub members: HashMap<String, Vec<String>>,
    /// Groups with selectors.
    pub selectors: Vec<(String, Vec<Selector>)>,
    /// Some rule reads the agent's email counts (an email rate limit, or raw Cedar that names
    /// `sent_last_minute` / `sent_last_day`).
    pub counts_emails: bool,
    /// Every rule that reads a numeric tag's value has a `range` on that tag (no raw Cedar
    /// condition mentions `getTag`): a check's decision then depends on the tag an interval
    /// index is built on only through the interval its value falls in (see `evaluate`'s
    /// decision cache; other tags count by value there).
    pub tags_read_by_ranges_only: bool,
}

/// A raw `cedar` rule as the user wrote it, for errors that point at it.
#[derive(Clone)]
struct Raw {
    /// Its spec path, e.g. `reusable_policy_blocks.b.cedar[0].when`.
    path: String,
    name: String,
    when: String,
}

struct Rule {
    id: String,
    group: Option<String>,
    meta: RuleMeta,
    condition: String,
    /// For a raw rule: what the user wrote (always the end of `condition`, in parentheses).
    raw: Option<Raw>,
    /// The actions the rule can match (its condition tests `context.action`); `None` for any.
    /// Only an index: the condition itself still tests the action.
    actions: Option<Arc<BTreeSet<String>>>,
    /// The rule can only match an agent that is not active or whose risk tier is above low
    /// (its condition tests just that, besides the action).
    unusual: bool,
    /// What its condition requires of the context fields (an index, like `actions`).
    guard: Option<FieldGuard>,
    /// What its condition requires of a numeric tag (an index, like `actions`). The decision
    /// cache relies on it being exact: a rule with a range reads that one tag only, and only
    /// against these bounds (a rule reading a second tag, or other bounds, must not have one).
    range: Option<TagRange>,
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

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

fn is_code(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn is_action(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .all(|c| !c.is_control() && c != '"' && c != '\\')
}

fn actions_condition(actions: &[String]) -> String {
    if actions.len() == 1 {
        format!("context.action == {}", lit(&actions[0]))
    } else {
        format!("{}.contains(context.action)", set_lit(actions))
    }
}

/// Collects a block's rules. `allows` is false for guardrails: there the email and amount
/// blocks only restrict; they do not grant email sending or amounts to every agent (an explicit
/// `actions.allow` or raw Cedar `allow` rule still does).
struct Emitter<'a> {
    rules: &'a mut Vec<Rule>,
    errors: &'a mut Vec<SpecError>,
    group: Option<String>,
    source: String,
    narrow: Option<String>,
    /// The actions of `narrow`.
    narrow_actions: Option<Arc<BTreeSet<String>>>,
    /// The actions the rules being emitted test (`None`: any).
    scope: Option<Arc<BTreeSet<String>>>,
    /// The rules being emitted match only unusual agents (see `Rule::unusual`).
    unusual: bool,
    /// What the rules being emitted require of the context fields (see `Rule::guard`).
    guard: Option<FieldGuard>,
    allows: bool,
    approval: Option<ApprovalRules>,
}

/// The actions of an action list (`None` when it names every action with `*`).
fn action_scope(actions: &[String]) -> Option<Arc<BTreeSet<String>>> {
    if actions.iter().any(|a| a == "*") {
        None
    } else {
        Some(Arc::new(actions.iter().cloned().collect()))
    }
}

impl Emitter<'_> {
    fn rule(
        &mut self,
        kind: &str,
        outcome: Outcome,
        code: &str,
        reason: String,
        condition: String,
    ) -> &mut Rule {
        let condition = match &self.narrow {
            Some(narrow) => format!("({narrow}) && ({condition})"),
            None => condition,
        };
        let actions = match (&self.scope, &self.narrow_actions) {
            (Some(a), Some(b)) => Some(Arc::new(a.intersection(b).cloned().collect())),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        self.rules.push(Rule {
            actions,
            unusual: self.unusual,
            guard: self.guard.clone(),
            range: None,
            id: format!("{}#{kind}", self.source),
            group: self.group.clone(),
            meta: RuleMeta {
                outcome,
                reason_code: code.into(),
                reason,
                source: self.source.clone(),
                approval: if outcome == Outcome::Challenge {
                    self.approval.clone()
                } else {
                    None
                },
                reads: if outcome == Outcome::Challenge {
                    fields_read(&condition)
                } else {
                    Vec::new()
                },
            },
            condition,
            raw: None,
        });
        let last = self.rules.len() - 1;
        &mut self.rules[last]
    }

    fn block(&mut self, block: &Block, path: &str, in_guardrails: bool) {
        self.approval = block.approval.clone();
        self.scope = None;
        self.guard = None;
        if let Some(a) = &block.approval {
            for (i, email) in a.approvers.iter().enumerate() {
                if crate::identity::accounts::normalize_email("email", email).is_err() {
                    self.errors.push(SpecError::new(
                        format!("{path}.approval.approvers[{i}]"),
                        format!("`{email}` is not an email address"),
                    ));
                }
            }
            if a.approver_role
                .as_deref()
                .is_some_and(|r| crate::store::Role::parse(r).is_none())
            {
                self.errors.push(SpecError::new(
                    format!("{path}.approval.approver_role"),
                    "must be `owner`, `admin` or `member`",
                ));
            }
            if a.ttl_secs.is_some_and(|t| !(30..=86_400).contains(&t)) {
                self.errors.push(SpecError::new(
                    format!("{path}.approval.ttl_secs"),
                    "must be between 30 and 86400",
                ));
            }
        }
        if let Some(email) = &block.email {
            self.email(email, &format!("{path}.email"));
        }
        if let Some(amount) = &block.amount {
            self.amount(amount, &format!("{path}.amount"));
        }
        if let Some(actions) = &block.actions {
            self.actions(actions, &format!("{path}.actions"));
        }
        self.scope = None;
        if let Some(status) = &block.status {
            if status.allow_pending && !in_guardrails {
                self.errors.push(SpecError::new(
                    format!("{path}.status.allow_pending"),
                    "`allow_pending` can only be set in `global_guardrails` (a binding cannot relax it)",
                ));
            }
            if status.require_active {
                self.unusual = true;
                self.rule(
                    "status/require_active",
                    Outcome::Deny,
                    "agent_not_active",
                    "only active agents may do this".into(),
                    "principal.status != \"active\"".into(),
                );
                self.unusual = false;
            }
        }
        if let Some(rep) = &block.reputation {
            // A threshold of `low` matches every agent.
            self.unusual = rep
                .challenge_at
                .into_iter()
                .chain(rep.deny_at)
                .all(|tier| tier.level() > 0);
            if let Some(tier) = rep.challenge_at {
                self.rule(
                    "reputation/challenge",
                    Outcome::Challenge,
                    "risk_tier_too_high",
                    format!("the agent's risk tier is {} or higher", tier_name(tier)),
                    format!("principal.risk_level >= {}", tier.level()),
                );
            }
            if let Some(tier) = rep.deny_at {
                self.rule(
                    "reputation/deny",
                    Outcome::Deny,
                    "risk_tier_too_high",
                    format!("the agent's risk tier is {} or higher", tier_name(tier)),
                    format!("principal.risk_level >= {}", tier.level()),
                );
            }
            self.unusual = false;
        }
        for (i, raw) in block.cedar.iter().enumerate() {
            let rpath = format!("{path}.cedar[{i}]");
            if !is_name(&raw.name) {
                self.errors.push(SpecError::new(
                    format!("{rpath}.name"),
                    "use 1-64 letters, digits, `_ - . :`",
                ));
            }
            if !is_code(&raw.reason_code) {
                self.errors.push(SpecError::new(
                    format!("{rpath}.reason_code"),
                    "use snake_case (a-z, 0-9, _)",
                ));
            }
            if raw.when.trim().is_empty() {
                self.errors.push(SpecError::new(
                    format!("{rpath}.when"),
                    "a Cedar condition is required",
                ));
                continue;
            }
            // Parsed alone first: errors then point into the user's own text, and a condition
            // cannot close the policy it is put in.
            if let Err(e) = cedar_policy::Expression::from_str(&raw.when) {
                self.errors.push(SpecError::new(
                    format!("{rpath}.when"),
                    format!(
                        "rule `{}`: {}{}",
                        raw.name,
                        first_line(&e.to_string()),
                        quote(&raw.when, first_span(&e))
                    ),
                ));
                continue;
            }
            let kind = format!("cedar/{}", raw.name);
            self.rule(
                &kind,
                raw.outcome,
                &raw.reason_code,
                raw.reason.clone(),
                format!("({})", raw.when),
            )
            .raw = Some(Raw {
                path: format!("{rpath}.when"),
                name: raw.name.clone(),
                when: raw.when.clone(),
            });
        }
    }

    fn email(&mut self, e: &EmailRules, path: &str) {
        let is_email = "context.action == \"send_email\"".to_string();
        self.scope = Some(Arc::new(BTreeSet::from(["send_email".to_owned()])));
        let bad = e.on_violation;
        if bad == Outcome::Allow {
            self.errors.push(SpecError::new(
                format!("{path}.on_violation"),
                "must be `deny` or `challenge`",
            ));
        }
        if self.allows {
            self.rule(
                "email/allow",
                Outcome::Allow,
                "email_allowed",
                "the email is within policy".into(),
                is_email.clone(),
            );
        }
        if let Some(domains) = &e.allowed_domains {
            let mut lower: Vec<String> = domains
                .iter()
                .map(|d| d.trim().to_ascii_lowercase())
                .collect();
            lower.sort();
            lower.dedup();
            if lower
                .iter()
                .any(|d| d.is_empty() || !d.contains('.') && d != "localhost" || !is_action(d))
            {
                self.errors.push(SpecError::new(
                    format!("{path}.allowed_domains"),
                    "each entry must be a domain name",
                ));
            }
            self.rule(
                "email/allowed_domains",
                bad,
                "recipient_domain_not_allowed",
                format!("every recipient must be at {}", lower.join(", ")),
                format!(
                    "{is_email} && !{}.containsAll(context.email.recipient_domains)",
                    set_lit(&lower)
                ),
            );
        }
        if let Some(max) = e.max_recipients {
            self.rule(
                "email/max_recipients",
                bad,
                "too_many_recipients",
                format!("at most {max} recipients (to, cc and bcc)"),
                format!("{is_email} && context.email.recipient_count > {max}"),
            );
        }
        let (mut exts, mut types) = (BTreeSet::new(), BTreeSet::new());
        for entry in &e.blocked_attachments {
            let entry = entry.trim().to_ascii_lowercase();
            if entry.len() < 2 || !is_action(&entry) {
                self.errors.push(SpecError::new(
                    format!("{path}.blocked_attachments"),
                    "entries are `.ext` extensions or content types",
                ));
            } else if entry.starts_with('.') {
                exts.insert(entry);
            } else {
                types.insert(entry);
            }
        }
        if !exts.is_empty() {
            self.rule(
                "email/blocked_extensions",
                bad,
                "attachment_blocked",
                "an attachment has a blocked file type".into(),
                format!(
                    "{is_email} && context.email.attachment_extensions.containsAny({})",
                    set_lit(&exts)
                ),
            );
        }
        if !types.is_empty() {
            self.rule(
                "email/blocked_types",
                bad,
                "attachment_blocked",
                "an attachment has a blocked content type".into(),
                format!(
                    "{is_email} && context.email.attachment_types.containsAny({})",
                    set_lit(&types)
                ),
            );
        }
        if let Some(max) = e.max_attachment_bytes {
            if max > i64::MAX as u64 {
                self.errors.push(SpecError::new(
                    format!("{path}.max_attachment_bytes"),
                    "is too large",
                ));
            }
            self.rule(
                "email/max_attachment_bytes",
                bad,
                "attachment_too_large",
                format!("attachments may be at most {max} bytes"),
                format!("{is_email} && context.email.max_attachment_bytes > {max}"),
            );
        }
        if let Some(n) = e.rate_limit_per_minute {
            self.rule(
                "email/rate_limit_per_minute",
                Outcome::Deny,
                "rate_limit_exceeded",
                format!("at most {n} emails per minute per agent"),
                format!("{is_email} && context.email.sent_last_minute >= {n}"),
            );
        }
        if let Some(n) = e.rate_limit_per_day {
            self.rule(
                "email/rate_limit_per_day",
                Outcome::Deny,
                "rate_limit_exceeded",
                format!("at most {n} emails per day per agent"),
                format!("{is_email} && context.email.sent_last_day >= {n}"),
            );
        }
    }

    fn amount(&mut self, a: &AmountRules, path: &str) {
        for (field, name) in [(&a.field, "field"), (&a.currency_field, "currency_field")] {
            if !field
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || field.is_empty()
                || field.len() > 64
            {
                self.errors.push(SpecError::new(
                    format!("{path}.{name}"),
                    "must be a context field name (letters, digits, _)",
                ));
                return;
            }
        }
        if a.limits.is_empty() {
            self.errors.push(SpecError::new(
                format!("{path}.limits"),
                "give at least one currency (or `*`)",
            ));
            return;
        }
        self.scope = a
            .actions
            .as_deref()
            .filter(|x| !x.is_empty())
            .and_then(action_scope);
        let has = format!("resource.hasTag({})", lit(&a.field));
        let value = format!("resource.getTag({})", lit(&a.field));
        let base = match &a.actions {
            Some(actions) if !actions.is_empty() => {
                format!("{} && {has}", actions_condition(actions))
            }
            _ => has.clone(),
        };
        let explicit: Vec<String> = a
            .limits
            .keys()
            .filter(|c| c.as_str() != "*")
            .map(|c| format!("{}={}", a.currency_field, c))
            .collect();
        for (currency, t) in &a.limits {
            let tpath = format!("{path}.limits.{currency}");
            if currency != "*"
                && !(currency.len() <= 12 && currency.bytes().all(|b| b.is_ascii_alphanumeric()))
            {
                self.errors.push(SpecError::new(
                    tpath.clone(),
                    "currency codes are letters and digits (or `*`)",
                ));
                continue;
            }
            let challenge_up_to = t.challenge_up_to.unwrap_or(t.allow_up_to);
            let (Some(allow), Some(challenge)) = (scaled(t.allow_up_to), scaled(challenge_up_to))
            else {
                self.errors.push(SpecError::new(
                    tpath,
                    "thresholds must be finite numbers below 9e14",
                ));
                continue;
            };
            if t.allow_up_to < 0.0 || challenge_up_to < t.allow_up_to {
                self.errors.push(SpecError::new(
                    tpath,
                    "need 0 <= allow_up_to <= challenge_up_to",
                ));
                continue;
            }
            let (which, guard) = if currency == "*" {
                if explicit.is_empty() {
                    ("true".to_owned(), None)
                } else {
                    (
                        format!("!context.fields.containsAny({})", set_lit(&explicit)),
                        Some(FieldGuard::HasNone(explicit.iter().cloned().collect())),
                    )
                }
            } else {
                let field = format!("{}={}", a.currency_field, currency);
                (
                    format!("context.fields.contains({})", lit(&field)),
                    Some(FieldGuard::Has(field)),
                )
            };
            self.guard = guard;
            let kind = format!("amount/{}", if currency == "*" { "any" } else { currency });
            let range = |above, up_to| Some(TagRange::new(&a.field, above, up_to));
            if self.allows {
                self.rule(
                    &format!("{kind}/allow"),
                    Outcome::Allow,
                    "amount_within_limit",
                    format!("{} {currency} or less is allowed", t.allow_up_to),
                    format!("{base} && {which} && {value} <= {allow}"),
                )
                .range = range(None, Some(allow));
            }
            if challenge_up_to > t.allow_up_to {
                self.rule(
                    &format!("{kind}/challenge"),
                    Outcome::Challenge,
                    "amount_requires_approval",
                    format!("amounts over {} {currency} need approval", t.allow_up_to),
                    format!("{base} && {which} && {value} > {allow} && {value} <= {challenge}"),
                )
                .range = range(Some(allow), Some(challenge));
            }
            self.rule(
                &format!("{kind}/deny"),
                Outcome::Deny,
                "amount_over_limit",
                format!("amounts over {challenge_up_to} {currency} are not allowed"),
                format!("{base} && {which} && {value} > {challenge}"),
            )
            .range = range(Some(challenge), None);
        }
        self.guard = None;
        self.rule(
            "amount/negative",
            Outcome::Deny,
            "amount_invalid",
            "amounts may not be negative".into(),
            format!("{base} && {value} < 0"),
        )
        .range = Some(TagRange::new(&a.field, None, Some(-1)));
        if !a.limits.contains_key("*") {
            self.guard = Some(FieldGuard::HasNone(explicit.iter().cloned().collect()));
            self.rule(
                "amount/unknown_currency",
                Outcome::Deny,
                "currency_not_allowed",
                format!(
                    "only {} are allowed",
                    a.limits.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
                format!(
                    "{base} && !context.fields.containsAny({})",
                    set_lit(&explicit)
                ),
            );
        }
        self.guard = None;
    }

    fn actions(&mut self, a: &ActionRules, path: &str) {
        for (list, name) in [
            (&a.allow, "allow"),
            (&a.challenge, "challenge"),
            (&a.deny, "deny"),
        ] {
            if let Some(bad) = list.iter().find(|x| !is_action(x)) {
                self.errors.push(SpecError::new(
                    format!("{path}.{name}"),
                    format!("`{bad}` is not an action name"),
                ));
            }
        }
        if !a.allow.is_empty() {
            self.scope = action_scope(&a.allow);
            let condition = if a.allow.iter().any(|x| x == "*") {
                "true".to_owned()
            } else {
                actions_condition(&a.allow)
            };
            self.rule(
                "actions/allow",
                Outcome::Allow,
                "action_allowed",
                "the action is allowed".into(),
                condition,
            );
        }
        if !a.challenge.is_empty() {
            self.scope = action_scope(&a.challenge);
            self.rule(
                "actions/challenge",
                Outcome::Challenge,
                "action_requires_approval",
                "the action needs a human's approval".into(),
                actions_condition(&a.challenge),
            );
        }
        if !a.deny.is_empty() {
            self.scope = action_scope(&a.deny);
            self.rule(
                "actions/deny",
                Outcome::Deny,
                "action_denied",
                "the action is not allowed".into(),
                actions_condition(&a.deny),
            );
        }
    }
}

fn tier_name(t: RiskTier) -> &'static str {
    match t {
        RiskTier::Low => "low",
        RiskTier::Medium => "medium",
        RiskTier::High => "high",
    }
}

/// The request facts a rule's condition reads: the context fields of `resource.getTag("f")` /
/// `hasTag("f")` (numbers) and of `"f=value"` strings tested against `context.fields`, and
/// `email` when it reads `context.email`. Sorted, without duplicates.
pub fn fields_read(condition: &str) -> Vec<String> {
    let is_field = |f: &str| {
        !f.is_empty() && f.len() <= 64 && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let tests_fields = condition.contains("context.fields");
    let mut out = BTreeSet::new();
    let mut rest = condition;
    // Walk the string literals, knowing what precedes each.
    while let Some(start) = rest.find('"') {
        let before = &rest[..start];
        let body = &rest[start + 1..];
        let mut end = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let text = &body[..end];
        if before.ends_with("getTag(") || before.ends_with("hasTag(") {
            if is_field(text) {
                out.insert(text.to_owned());
            }
        } else if tests_fields {
            if let Some((name, _)) = text.split_once('=') {
                if is_field(name) {
                    out.insert(name.to_owned());
                }
            }
        }
        rest = &body[end + 1..];
    }
    if condition.contains("context.email") {
        out.insert("email".to_owned());
    }
    out.into_iter().collect()
}

fn cedar_text(rule: &Rule) -> String {
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

/// A guardrail on the agent's own status: matches agents whose status is `status`.
fn status_rule(
    status: &str,
    outcome: Outcome,
    reason_code: &str,
    reason: &str,
    approval: Option<ApprovalRules>,
) -> Rule {
    // `#` cannot appear in block names, so this source never clashes with a spec element.
    let source = "global_guardrails#agent_status";
    Rule {
        id: format!("{source}#{status}"),
        group: None,
        meta: RuleMeta {
            outcome,
            reason_code: reason_code.into(),
            reason: reason.into(),
            source: source.into(),
            approval,
            reads: Vec::new(),
        },
        actions: None,
        unusual: true,
        guard: None,
        range: None,
        condition: format!("principal.status == {}", lit(status)),
        raw: None,
    }
}

fn base_rules(spec: &PolicySpec) -> Vec<Rule> {
    let mut rules = vec![
        status_rule(
            "revoked",
            Outcome::Deny,
            "agent_revoked",
            "the agent is revoked",
            None,
        ),
        status_rule(
            "suspended",
            Outcome::Deny,
            "agent_suspended",
            "the agent is suspended",
            None,
        ),
    ];
    let guardrail_blocks = spec
        .global_guardrails
        .blocks
        .iter()
        .filter_map(|b| spec.reusable_policy_blocks.get(b));
    let allow_pending = spec
        .global_guardrails
        .status
        .as_ref()
        .is_some_and(|s| s.allow_pending)
        || guardrail_blocks
            .filter_map(|b| b.status.as_ref())
            .any(|s| s.allow_pending);
    if !allow_pending {
        rules.push(status_rule(
            "pending",
            Outcome::Challenge,
            "agent_pending",
            "the agent has not proven its key yet (pending)",
            spec.global_guardrails.approval.clone(),
        ));
    }
    rules
}

/// Checks names and references; answers the bound blocks per group.
fn check_structure(spec: &PolicySpec, errors: &mut Vec<SpecError>) {
    for name in spec.reusable_policy_blocks.keys() {
        if !is_name(name) {
            errors.push(SpecError::new(
                format!("reusable_policy_blocks.{name}"),
                "block names are 1-64 letters, digits, `_ - . :`",
            ));
        }
    }
    let mut groups = BTreeSet::new();
    for (i, g) in spec.agent_groups.iter().enumerate() {
        if !is_name(&g.name) {
            errors.push(SpecError::new(
                format!("agent_groups[{i}].name"),
                "group names are 1-64 letters, digits, `_ - . :`",
            ));
        }
        if !groups.insert(g.name.clone()) {
            errors.push(SpecError::new(
                format!("agent_groups[{i}].name"),
                format!("`{}` is defined twice", g.name),
            ));
        }
        for (j, sel) in g.selectors.iter().enumerate() {
            if sel.metadata.is_empty() && sel.labels.is_empty() {
                errors.push(SpecError::new(
                    format!("agent_groups[{i}].selectors[{j}]"),
                    "a selector needs at least one metadata or labels entry (an empty one would match every agent)",
                ));
            }
        }
        for (j, m) in g.members.iter().enumerate() {
            if !crate::ids::has_shape(m, crate::ids::AGENT) {
                errors.push(SpecError::new(
                    format!("agent_groups[{i}].members[{j}]"),
                    format!("`{m}` is not an agent id"),
                ));
            }
        }
    }
    let mut bindings = BTreeSet::new();
    for (i, b) in spec.bindings.iter().enumerate() {
        if !groups.contains(&b.group) {
            errors.push(SpecError::new(
                format!("bindings[{i}].group"),
                format!("no group `{}`", b.group),
            ));
        }
        if b.blocks.is_empty() {
            errors.push(SpecError::new(
                format!("bindings[{i}].blocks"),
                "bind at least one block",
            ));
        }
        for (j, block) in b.blocks.iter().enumerate() {
            if !spec.reusable_policy_blocks.contains_key(block) {
                errors.push(SpecError::new(
                    format!("bindings[{i}].blocks[{j}]"),
                    format!("no block `{block}`"),
                ));
            }
        }
        if let Some(name) = &b.name {
            if !is_name(name) {
                errors.push(SpecError::new(
                    format!("bindings[{i}].name"),
                    "binding names are 1-64 letters, digits, `_ - . :`",
                ));
            }
        }
        if b.display_name() == "global_guardrails" {
            errors.push(SpecError::new(
                format!("bindings[{i}].name"),
                "`global_guardrails` is reserved",
            ));
        }
        if !bindings.insert(b.display_name()) {
            errors.push(SpecError::new(
                format!("bindings[{i}].name"),
                format!("`{}` is used twice; name the binding", b.display_name()),
            ));
        }
        if let Some(actions) = &b.actions {
            if actions.is_empty() || actions.iter().any(|a| !is_action(a)) {
                errors.push(SpecError::new(
                    format!("bindings[{i}].actions"),
                    "list one or more action names",
                ));
            }
        }
    }
    for (j, block) in spec.global_guardrails.blocks.iter().enumerate() {
        if !spec.reusable_policy_blocks.contains_key(block) {
            errors.push(SpecError::new(
                format!("global_guardrails.blocks[{j}]"),
                format!("no block `{block}`"),
            ));
        }
    }
}

/// The guardrail rules, parsed.
fn static_rules(rules: &[&Rule], errors: &mut Vec<SpecError>) -> Vec<Placed> {
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
                    first_line(&e.to_string())
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
struct Templates {
    /// Per condition: the template, and the length of its text.
    by_condition: HashMap<String, (cedar_policy::Template, usize)>,
    /// Template id → the first rule that used it, and the template's text (for error
    /// messages).
    origin: HashMap<PolicyId, (String, String, Option<Raw>, String)>,
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
                        first_line(&e.to_string())
                    ),
                ));
                None
            }
        }
    }
}

/// A group's rules, linked from the shared templates.
fn group_rules(
    group: &str,
    rules: &[&Rule],
    templates: &mut Templates,
    errors: &mut Vec<SpecError>,
) -> Vec<Placed> {
    let Ok(group_uid) = cedar_policy::EntityUid::from_str(&format!("Group::{}", lit(group))) else {
        errors.push(SpecError::new(
            "agent_groups",
            format!("`{group}` cannot name a Cedar entity"),
        ));
        return Vec::new();
    };
    rules
        .iter()
        .filter_map(|rule| {
            let (template, text_len) = templates.get(rule, errors)?;
            Some(Placed {
                text_len,
                compiled: Compiled::Linked {
                    template: Box::new(template),
                    id: PolicyId::new(&rule.id),
                    group: group_uid.clone(),
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

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

/// The place (byte offset and length) of a Cedar error's first label.
fn first_span(err: &dyn miette::Diagnostic) -> Option<(usize, usize)> {
    let label = err.labels()?.next()?;
    Some((label.offset(), label.len()))
}

/// Cedar's hint, when it has one (`did you mean ...?`), after a semicolon.
fn help_text(err: &dyn miette::Diagnostic) -> String {
    err.help()
        .map(|h| h.to_string())
        .filter(|h| !h.contains("template#") && !h.contains("Action::") && !h.contains("policy `"))
        .map(|h| format!("; {h}"))
        .unwrap_or_default()
}

/// A Cedar message without the generated policy id it starts with.
fn strip_policy_id(message: &str, id: &str) -> String {
    let prefix = format!("for policy `{id}`");
    let message = match message.strip_prefix(&prefix) {
        Some(rest) => rest.trim_start_matches([',', ':', ' ']),
        None => message,
    };
    // Every rule is a policy on the one action `check`: naming it says nothing the user wrote.
    message.replace(" for Action::\"check\"", "")
}

/// The user's condition quoted, and the part an error points at (a byte range of it).
fn quote(when: &str, span: Option<(usize, usize)>) -> String {
    let shown: String = when.chars().take(160).collect();
    let more = if shown.len() < when.len() { " ..." } else { "" };
    match span.and_then(|(at, len)| Some((at, when.get(at..at + len)?))) {
        Some((at, part)) if !part.is_empty() => {
            let column = when.get(..at).map_or(0, |b| b.chars().count()) + 1;
            format!(", at `{part}` (column {column} of the condition `{shown}`{more})")
        }
        _ => format!(", in the condition `{shown}`{more}"),
    }
}

/// Compiles a spec. Errors list every problem found, each with its path.
pub fn compile(spec: &PolicySpec) -> Result<CompiledPolicy, Vec<SpecError>> {
    compile_with(spec, &Budget::default())
}

/// Compiles a spec within a budget: the spec's limits are checked first (nothing reaches
/// Cedar's parser before), and the work stops when the budget says so (too much Cedar built,
/// or nobody waits for the result any more).
pub fn compile_with(spec: &PolicySpec, budget: &Budget) -> Result<CompiledPolicy, Vec<SpecError>> {
    let over = limits::check_spec(spec);
    if !over.is_empty() {
        return Err(over);
    }
    let stop = |e: SpecError| vec![e];
    let mut errors = Vec::new();
    check_structure(spec, &mut errors);
    let mut rules = base_rules(spec);
    {
        let inline = spec.global_guardrails.inline_block();
        let mut e = Emitter {
            rules: &mut rules,
            errors: &mut errors,
            group: None,
            source: "global_guardrails".into(),
            narrow: None,
            narrow_actions: None,
            scope: None,
            unusual: false,
            guard: None,
            allows: false,
            approval: None,
        };
        e.block(&inline, "global_guardrails", true);
        for name in &spec.global_guardrails.blocks {
            if let Some(block) = spec.reusable_policy_blocks.get(name) {
                e.source = format!("global_guardrails/{name}");
                e.block(block, &format!("reusable_policy_blocks.{name}"), true);
            }
        }
    }
    for binding in &spec.bindings {
        let mut e = Emitter {
            rules: &mut rules,
            errors: &mut errors,
            group: Some(binding.group.clone()),
            source: String::new(),
            narrow: binding
                .actions
                .as_ref()
                .filter(|a| !a.is_empty())
                .map(|a| actions_condition(a)),
            narrow_actions: binding
                .actions
                .as_deref()
                .filter(|a| !a.is_empty())
                .and_then(action_scope),
            scope: None,
            unusual: false,
            guard: None,
            allows: true,
            approval: None,
        };
        for name in &binding.blocks {
            if let Some(block) = spec.reusable_policy_blocks.get(name) {
                e.source = format!("{}/{name}", binding.display_name());
                e.block(block, &format!("reusable_policy_blocks.{name}"), false);
            }
        }
    }
    let mut seen = BTreeSet::new();
    for r in &rules {
        if !seen.insert(r.id.clone()) {
            errors.push(SpecError::new(
                r.meta.source.clone(),
                format!(
                    "rule `{}` appears twice (a block bound twice to the same binding?)",
                    r.id
                ),
            ));
        }
    }

    budget.check().map_err(stop)?;
    let cedar: String = rules.iter().map(cedar_text).collect::<Vec<_>>().join("\n");
    budget.charge(cedar.len());
    let guardrail_rules: Vec<&Rule> = rules.iter().filter(|r| r.group.is_none()).collect();
    let guardrail_placed = static_rules(&guardrail_rules, &mut errors);
    budget.check().map_err(stop)?;
    let guardrails = index(&guardrail_placed, &mut errors, budget);
    let mut groups = BTreeMap::new();
    let mut bound: BTreeMap<&String, Vec<&Rule>> = BTreeMap::new();
    for rule in &rules {
        if let Some(group) = &rule.group {
            bound.entry(group).or_default().push(rule);
        }
    }
    let mut templates = Templates {
        by_condition: HashMap::new(),
        origin: HashMap::new(),
    };
    for (group, of_group) in bound {
        budget.check().map_err(stop)?;
        // Every group's set also holds the guardrails (see `evaluate`).
        let mut placed = group_rules(group, &of_group, &mut templates, &mut errors);
        placed.extend(guardrail_placed.iter().cloned());
        groups.insert(group.clone(), index(&placed, &mut errors, budget));
    }
    budget.check().map_err(stop)?;
    if errors.is_empty() {
        // Strict validation: the guardrail rules, and each binding template once (a rule's
        // types do not depend on which group it is linked to).
        let mut all = PolicySet::new();
        for p in guardrails.policies.policies() {
            let _ = all.add(p.clone());
        }
        for (t, _) in templates.by_condition.values() {
            let _ = all.add_template(t.clone());
        }
        let schema = schema().map_err(|e| vec![e])?;
        let result = Validator::new(schema.clone()).validate(&all, ValidationMode::Strict);
        let guardrail_raw: HashMap<&str, &Rule> = rules
            .iter()
            .filter(|r| r.group.is_none() && r.raw.is_some())
            .map(|r| (r.id.as_str(), r))
            .collect();
        for err in result.validation_errors() {
            let id = err.policy_id();
            // The rule as written, and the Cedar text the error's place is counted in.
            let written: Option<(Raw, String)> = match guardrail_raw.get(id.to_string().as_str()) {
                Some(rule) => rule.raw.clone().map(|raw| (raw, cedar_text(rule))),
                None => templates
                    .origin
                    .get(id)
                    .and_then(|(_, _, raw, text)| raw.clone().map(|raw| (raw, text.clone()))),
            };
            let message = strip_policy_id(&first_line(&err.to_string()), id.as_ref());
            match written {
                Some((raw, text)) => {
                    let span = first_span(err).and_then(|(at, len)| {
                        let start = text.rfind(&format!("({})", raw.when))? + 1;
                        (at >= start && at + len <= start + raw.when.len())
                            .then(|| (at - start, len))
                    });
                    errors.push(SpecError::new(
                        raw.path.clone(),
                        format!(
                            "rule `{}`: {message}{}{}",
                            raw.name,
                            quote(&raw.when, span),
                            help_text(err)
                        ),
                    ));
                }
                None => {
                    let (rule, source) = match (guardrails.rules.get(id), templates.origin.get(id))
                    {
                        (Some(meta), _) => (id.to_string(), meta.source.clone()),
                        (None, Some((rule, source, _, _))) => (rule.clone(), source.clone()),
                        (None, None) => (id.to_string(), String::new()),
                    };
                    errors.push(SpecError::new(source, format!("rule `{rule}`: {message}")));
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    let mut members: HashMap<String, Vec<String>> = HashMap::new();
    let mut selectors = Vec::new();
    for g in &spec.agent_groups {
        for m in &g.members {
            let list = members.entry(m.clone()).or_default();
            if !list.contains(&g.name) {
                list.push(g.name.clone());
            }
        }
        if !g.selectors.is_empty() {
            selectors.push((g.name.clone(), g.selectors.clone()));
        }
    }
    let counts_emails = rules.iter().any(|r| r.condition.contains("sent_last_"));
    let tags_read_by_ranges_only = rules
        .iter()
        .all(|r| r.range.is_some() || !r.condition.contains("getTag"));
    Ok(CompiledPolicy {
        counts_emails,
        tags_read_by_ranges_only,
        spec: spec.clone(),
        hash: spec.hash(),
        cedar,
        guardrails,
        groups,
        members,
        selectors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compilation_stops_when_its_request_is_gone() {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let budget = Budget::cancellable(flag);
        let errs = compile_with(&PolicySpec::default(), &budget).unwrap_err();
        assert!(errs[0].message.contains("gone"), "{errs:?}");
    }

    #[test]
    fn the_embedded_schema_parses() {
        assert!(schema().is_ok());
    }

    #[test]
    fn an_empty_spec_compiles_to_the_status_guardrails() {
        let compiled = compile(&PolicySpec::default()).unwrap();
        assert!(
            compiled.cedar.contains("agent_revoked") && compiled.cedar.contains("agent_pending")
        );
        assert!(compiled.groups.is_empty());
    }

    #[test]
    fn compile_is_deterministic() {
        let text = "reusable_policy_blocks:\n  b:\n    actions: {allow: [read], deny: [drop]}\n    amount: {limits: {USD: {allow_up_to: 10, challenge_up_to: 20}, EUR: {allow_up_to: 5}}}\nagent_groups:\n  - {name: g, members: [agt_0123456789abcdef0123456789abcdef]}\nbindings:\n  - {group: g, blocks: [b]}\n";
        let spec = parse(text, Format::Yaml).unwrap();
        let a = compile(&spec).unwrap();
        let b = compile(&parse(text, Format::Yaml).unwrap()).unwrap();
        assert_eq!(a.cedar, b.cedar);
        assert_eq!(a.hash, b.hash);
    }

    #[test]
    fn every_error_is_reported_with_its_path() {
        let text = "reusable_policy_blocks:\n  b:\n    status: {allow_pending: true}\n    cedar:\n      - {name: x, when: 'context.nope == 1', outcome: deny, reason_code: Bad, reason: r}\nagent_groups:\n  - {name: g, members: [bob]}\nbindings:\n  - {group: h, blocks: [b, c]}\n";
        let errs = compile(&parse(text, Format::Yaml).unwrap()).unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        for expected in [
            "agent_groups[0].members[0]",
            "bindings[0].group",
            "bindings[0].blocks[1]",
            "reusable_policy_blocks.b.status.allow_pending",
            "reusable_policy_blocks.b.cedar[0].reason_code",
        ] {
            assert!(paths.contains(&expected), "{expected} not in {paths:?}");
        }
    }

    #[test]
    fn raw_cedar_is_validated_against_the_schema_and_cannot_inject_policies() {
        let bad = "global_guardrails:\n  cedar:\n    - {name: x, when: 'context.nope == 1', outcome: deny, reason_code: c, reason: r}\n";
        let errs = compile(&parse(bad, Format::Yaml).unwrap()).unwrap_err();
        assert!(errs[0].message.contains("rule"), "{errs:?}");
        let inject = "global_guardrails:\n  cedar:\n    - {name: x, when: 'true }; permit (principal, action, resource) when { true', outcome: deny, reason_code: c, reason: r}\n";
        assert!(compile(&parse(inject, Format::Yaml).unwrap()).is_err());
        let good = "global_guardrails:\n  cedar:\n    - {name: eu, when: 'context.fields.contains(\"region=eu\")', outcome: challenge, reason_code: eu_region, reason: \"EU \\\"data\\\"\"}\n";
        assert!(compile(&parse(good, Format::Yaml).unwrap()).is_ok());
    }
}
