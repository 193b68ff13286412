//! The semantic diff of two policy specs: which requests a change makes more or less
//! permissive, found by enumerating the finite partition that the specs' own thresholds and
//! lists induce, each with one concrete request that the two policies decide that way. Pure:
//! no I/O. The dry run of a sync reports it beside the text diff of [`super::diff`].
//!
//! # Method
//!
//! Each spec is lowered as the compiler lowers it (`compile::lower`: one typed rule per rule the
//! compiler writes in Cedar, from the same test), and each rule's test decides the enumerated
//! requests here (the tests check the two agree). An agent's decision
//! depends on the bound groups it belongs to, its status and risk tier, the action and the
//! request's facts; the analysis walks these:
//!
//! - **Principals.** The agents that differ in kind: an agent in no group; the agents that each
//!   selector of either spec matches (its metadata and labels, nothing more); every explicit
//!   member of either spec (so a member moved from group `a` to `b` is its own principal, `a →
//!   b`). Principals whose bound groups are the same under both specs, and whose groups'
//!   bindings and the guardrails are the same in content, cannot change and are skipped; the
//!   others are analysed once per distinct content (10,000 groups bound to one block cost one
//!   analysis), within a work budget.
//! - **Actions.** Every action either spec names for the principal (action lists, amount
//!   blocks' and bindings' `actions`, `send_email` for email rules, the vault's actions), and
//!   one action neither names.
//! - **Dimensions** of a request, per action: the agent's status (`active`, `pending`,
//!   `suspended`, `revoked`) and risk tier; the amount (none, or per currency field and
//!   currency — each currency either spec lists, and one neither lists — the intervals between
//!   the thresholds of both specs, negative amounts included); for `send_email`, the recipient
//!   domain (each allowed domain of either spec, one of neither, no recipient), the number of
//!   recipients (intervals between the `max_recipients` of both), the attachment (none, each
//!   blocked extension and content type, sizes between the `max_attachment_bytes` of both) and
//!   the emails sent in the last minute and day (between the rate limits of both); for the
//!   vault's actions, the secret set, the environment and the proxy's target host (each
//!   listed one, and one not listed).
//!
//! For each (principal, action), a baseline request is chosen that passes every dimension as
//! well as both policies allow (a value replaces another only when neither policy decides it
//! worse and one decides it better), and each dimension is varied from it in turn. The rules
//! that restrict (deny, challenge) combine as a minimum over dimensions, so a combination of
//! values that decides differently under the two specs shows in one of these single-dimension
//! variations, in the same direction, when the baseline passes under both. What grants is the
//! action's own allow rules, the amount's allowance, and a challenge (a pending agent is
//! challenged, not denied, even where nothing allows the action): so the dimensions are also
//! varied from the same request by a pending agent, and what that shows beyond the first
//! variation is listed with `(with status = pending)`. Values that decide alike are merged into
//! one cell (`amount.USD in (500, 1000]`, `email recipient domain in {a.example, b.example}`);
//! values that decide as the baseline does are folded into the baseline's cell (`status =
//! active, risk_tier in {low, medium}`); a condition names the dimension varied, the rest of
//! the request being the baseline's (the example shows it whole). "More permissive" follows
//! deny < challenge < allow.
//!
//! # Not analysed
//!
//! Raw Cedar rules (`cedar:` in a block or the guardrails) are not read: each one in force
//! under either spec is listed in `not_analysed` (added, removed, changed or unchanged). When
//! the compiled policies are at hand ([`semantic_diff`]), every listed cell's example is
//! evaluated against both, as `/v1/check` would; a cell whose example they decide otherwise
//! (a raw rule matches it) is dropped from the lists and named in `not_analysed` (cells past
//! the listing cap are counted as the model finds them, unconfirmed). Also named
//! there: checks that carry two differently named amount fields at once, `max_recipients`
//! above 1,000, and principals left when the work budget runs out (`complete` is then false).
//! Agents matching the selectors of several groups at once are analysed only when one
//! selector's pairs are enough to match the other groups too. Context fields other than the
//! ones above (read only by raw Cedar), approvers, and reason codes are not compared.
//!
//! Why one file of this length: the method above is one analysis over the lowered rules, and
//! its principals, dimensions, cells and work budget share their types; the rules themselves
//! are read from the spec by the compiler's lowering only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use acp_domain::RiskTier;

use super::compile::lower::{
    self, is_vault, ActionList, AmountKind, Test, SEND_EMAIL, VAULT_PROXY,
};
use super::compile::{compile, CompiledPolicy, FieldGuard};
use super::evaluate::{evaluate, ContextFields, EmailFacts, Facts};
use super::spec::{Block, Outcome, PolicySpec, Selector, TestAgent};

/// At most this many cells are listed per direction (all are counted).
pub const MAX_LISTED: usize = 200;
/// At most this many requests are decided (under both specs) by one analysis; what is left
/// then is named in `not_analysed`.
pub const WORK_BUDGET: u64 = 1_000_000;
/// At most this many notes are listed in `not_analysed` (then one more says how many more).
const MAX_NOTES: usize = 100;
/// `max_recipients` above this is not enumerated (an example would list that many addresses).
const MAX_ENUMERATED_RECIPIENTS: u32 = 1_000;

const STATUSES: [&str; 4] = ["active", "pending", "suspended", "revoked"];
/// The first dimensions of every action: the agent's status and risk tier.
const AGENT_AXES: usize = 2;
const TIERS: [RiskTier; 3] = [RiskTier::Low, RiskTier::Medium, RiskTier::High];
/// The name cells give to the action that neither spec names.
pub const OTHER_ACTIONS: &str = "(any other action)";

/// What a change of policy makes more and less permissive.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SemanticDiff {
    /// Cells whose outcome goes up (deny → challenge, deny → allow, challenge → allow); at
    /// most [`MAX_LISTED`].
    pub more_permissive: Vec<Cell>,
    /// Cells whose outcome goes down; at most [`MAX_LISTED`].
    pub less_permissive: Vec<Cell>,
    /// How many cells go up, listed or not.
    pub more_permissive_total: usize,
    /// How many cells go down, listed or not.
    pub less_permissive_total: usize,
    /// Some cells are counted but not listed.
    pub truncated: bool,
    /// Principals (agents that differ in kind) whose rules differ and were analysed.
    pub principals_analysed: usize,
    /// Every principal whose rules differ was analysed (the work budget did not run out).
    pub complete: bool,
    /// What was not analysed, named: raw Cedar rules, and the rest the module doc lists.
    pub not_analysed: Vec<String>,
}

impl SemanticDiff {
    /// Some cell becomes more permissive (for `--fail-on more-permissive`).
    pub fn is_more_permissive(&self) -> bool {
        self.more_permissive_total > 0
    }

    /// Nothing changes, as far as the analysis sees.
    pub fn is_empty(&self) -> bool {
        self.more_permissive_total == 0 && self.less_permissive_total == 0
    }
}

/// One (principal, action, condition) cell whose outcome changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The agent's bound groups: `finance`, `a, b`, `(no group)`, or `a → b` when they differ
    /// between the specs (a membership or selector change).
    pub group: String,
    /// Which agents: `members of finance`, `agents with labels dept=finance`,
    /// `agt_… (explicit member)`, `agents in no group`.
    pub principal: String,
    /// The action, or [`OTHER_ACTIONS`] for every action neither spec names.
    pub action: String,
    /// The requests of the cell, e.g. `amount.USD in (1000, 5000]`, `status = suspended`.
    pub condition: String,
    pub before: Outcome,
    pub after: Outcome,
    /// One request of the cell, which the current policy decides `before` and the desired one
    /// `after`.
    pub example: Example,
}

/// A request, in the shape of a spec's test case (`acp policy test`) without its name and
/// expectation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Example {
    pub agent: TestAgent,
    pub action: String,
    pub context: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<Value>,
    pub emails_sent_last_minute: u64,
    pub emails_sent_last_day: u64,
}

impl Example {
    /// The outcome of this request under `policy`, as `/v1/check` decides it.
    pub fn evaluate(&self, policy: &CompiledPolicy) -> Result<Outcome, String> {
        self.decide(policy).map(|d| d.outcome)
    }

    /// The decision of this request under `policy`, as `/v1/check` decides it.
    pub fn decide(&self, policy: &CompiledPolicy) -> Result<super::evaluate::Decision, String> {
        let email = match &self.email {
            Some(v) => Some(
                EmailFacts::from_json(v, super::evaluate::bare_address)
                    .map_err(|f| format!("`{f}` is not valid"))?,
            ),
            None => None,
        };
        let facts = Facts::of_test(
            &self.agent,
            &self.action,
            ContextFields::new(&self.context),
            email.as_ref(),
            (self.emails_sent_last_minute, self.emails_sent_last_day),
        );
        evaluate(policy, &facts)
    }
}

/// The semantic diff of the current policy (`None` for a new one: before it, every check is
/// judged by the empty spec) and the desired one, each cell's example confirmed against both
/// compiled policies (see the module doc).
pub fn semantic_diff(old: Option<&CompiledPolicy>, new: &CompiledPolicy) -> SemanticDiff {
    let mut diff = analyse(old.map(|p| &p.spec), &new.spec);
    let empty = match old {
        Some(_) => None,
        None => compile(&PolicySpec::default()).ok(),
    };
    match old.or(empty.as_ref()) {
        Some(before) => confirm(&mut diff, before, new),
        None => diff
            .not_analysed
            .push("the examples could not be confirmed: the empty spec did not compile".into()),
    }
    diff
}

/// The policy's model of what can decide an agent, made once and asked per action (see
/// [`Reach::never_allowed`]).
pub struct Reach {
    model: Model,
}

impl std::fmt::Debug for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reach").finish_non_exhaustive()
    }
}

impl Reach {
    pub fn of(spec: &PolicySpec) -> Reach {
        Reach {
            model: Model::of(spec),
        }
    }

    /// Whether no request of `action` by an agent of these groups (as
    /// [`super::evaluate::groups_of`] finds them), with this status and risk tier, is allowed
    /// or challenged, whatever its other facts: the request's dimensions (amounts and
    /// currencies, recipients, the vault's sets and hosts) are each set to the value the rules
    /// treat best, in turn, as the semantic diff's baseline is chosen, and the action is never
    /// allowed when even that request is denied. A raw Cedar rule that may allow or challenge
    /// is not read: an action it could decide is never answered `true`.
    pub fn never_allowed(
        &self,
        groups: &[String],
        status: &str,
        tier: RiskTier,
        action: &str,
    ) -> bool {
        let bound = self.model.bound(groups.iter().cloned());
        let rules: Vec<&Rule> = self
            .model
            .rules_of(&bound)
            .into_iter()
            .filter(|r| r.narrow.as_ref().is_none_or(|n| n.contains(action)))
            .collect();
        // A deny of the action itself (or of every action) decides every request.
        let always_denied = rules.iter().any(|r| {
            r.outcome() == Outcome::Deny
                && match r.test() {
                    Test::Actions(list) => list.contains(action),
                    Test::AnyAction => true,
                    _ => false,
                }
        });
        if always_denied {
            return true;
        }
        let raw_may_grant = rules
            .iter()
            .any(|r| matches!(r.test(), Test::Raw(_)) && r.outcome() != Outcome::Deny);
        if raw_may_grant {
            return false;
        }
        let rules: Vec<&Rule> = rules.into_iter().filter(|r| r.may_match(action)).collect();
        let mut notes = Notes::default();
        let (axes, mut probe) = axes(&rules, action, &mut notes);
        probe.status = STATUSES
            .iter()
            .copied()
            .find(|s| *s == status)
            .unwrap_or("revoked");
        probe.tier = tier;
        let decided = |p: &Probe| decide(&rules, &p.req());
        let mut best = decided(&probe);
        for _ in 0..2 {
            for axis in axes.iter().skip(AGENT_AXES) {
                for value in &axis.values {
                    let tried = probe.with(&value.set);
                    let outcome = decided(&tried);
                    if outcome > best {
                        best = outcome;
                        probe = tried;
                    }
                }
            }
        }
        best == Outcome::Deny
    }
}

/// The semantic diff from the specs alone (no confirmation of the examples): the model's
/// answer, which the tests check against the compiled policies.
pub fn analyse(old: Option<&PolicySpec>, new: &PolicySpec) -> SemanticDiff {
    analyse_within(old, new, WORK_BUDGET)
}

fn analyse_within(old: Option<&PolicySpec>, new: &PolicySpec, budget: u64) -> SemanticDiff {
    let empty = PolicySpec::default();
    let old_spec = old.unwrap_or(&empty);
    let before = Model::of(old_spec);
    let after = Model::of(new);
    let mut notes = Notes::default();
    raw_rules(old_spec, new, &mut notes);
    let mut out = SemanticDiff {
        more_permissive: Vec::new(),
        less_permissive: Vec::new(),
        more_permissive_total: 0,
        less_permissive_total: 0,
        truncated: false,
        principals_analysed: 0,
        complete: true,
        not_analysed: Vec::new(),
    };
    let mut work = Work {
        done: 0,
        limit: budget,
    };
    let mut analysed: HashMap<(String, String), Arc<Vec<RawCell>>> = HashMap::new();
    let mut skipped: Vec<String> = Vec::new();
    for class in classes(&before, &after) {
        let key = (before.content(&class.before), after.content(&class.after));
        if key.0 == key.1 {
            continue;
        }
        if !skipped.is_empty() {
            skipped.push(class.label());
            continue;
        }
        let cells = match analysed.get(&key) {
            Some(cells) => cells.clone(),
            None => {
                let old_rules = before.rules_of(&class.before);
                let new_rules = after.rules_of(&class.after);
                match analyse_principal(&old_rules, &new_rules, &mut work, &mut notes) {
                    Some(cells) => {
                        let cells = Arc::new(cells);
                        analysed.insert(key, cells.clone());
                        cells
                    }
                    None => {
                        skipped.push(class.label());
                        continue;
                    }
                }
            }
        };
        out.principals_analysed += 1;
        for raw in cells.iter() {
            let (list, total) = if raw.after > raw.before {
                (&mut out.more_permissive, &mut out.more_permissive_total)
            } else {
                (&mut out.less_permissive, &mut out.less_permissive_total)
            };
            *total += 1;
            if list.len() < MAX_LISTED {
                list.push(Cell {
                    group: class.label(),
                    principal: class.principal.clone(),
                    action: raw.action.clone(),
                    condition: raw.condition.clone(),
                    before: raw.before,
                    after: raw.after,
                    example: raw.probe.example(&class.agent),
                });
            } else {
                out.truncated = true;
            }
        }
    }
    if !skipped.is_empty() {
        out.complete = false;
        let shown: Vec<&str> = skipped.iter().take(5).map(String::as_str).collect();
        notes.add(format!(
            "{} principal(s) not analysed: the analysis stopped at its work budget ({}{})",
            skipped.len(),
            shown.join("; "),
            if skipped.len() > shown.len() {
                "; …"
            } else {
                ""
            }
        ));
    }
    out.not_analysed = notes.into_list();
    out
}

/// Drops every listed cell whose example the compiled policies decide otherwise than the
/// model (a raw Cedar rule matches it), naming it in `not_analysed`.
fn confirm(diff: &mut SemanticDiff, before: &CompiledPolicy, after: &CompiledPolicy) {
    let mut notes = Vec::new();
    for (list, total) in [
        (&mut diff.more_permissive, &mut diff.more_permissive_total),
        (&mut diff.less_permissive, &mut diff.less_permissive_total),
    ] {
        list.retain(|cell| {
            let decided = (
                cell.example.evaluate(before),
                cell.example.evaluate(after),
            );
            if let (Ok(b), Ok(a)) = &decided {
                if *b == cell.before && *a == cell.after {
                    return true;
                }
            }
            let shown = |r: &Result<Outcome, String>| match r {
                Ok(o) => o.as_str().to_owned(),
                Err(e) => format!("an error ({e})"),
            };
            notes.push(format!(
                "{}, {}, {}: the compiled policies decide its example {} → {}, not {} → {} (a raw Cedar rule decides it)",
                cell.group,
                cell.action,
                cell.condition,
                shown(&decided.0),
                shown(&decided.1),
                cell.before.as_str(),
                cell.after.as_str()
            ));
            *total -= 1;
            false
        });
    }
    diff.not_analysed.extend(notes);
}

/// `not_analysed`, without repeats, in the order met, capped.
#[derive(Default)]
struct Notes {
    seen: BTreeSet<String>,
    list: Vec<String>,
}

impl Notes {
    fn add(&mut self, note: String) {
        if self.seen.insert(note.clone()) {
            self.list.push(note);
        }
    }

    fn into_list(mut self) -> Vec<String> {
        if self.list.len() > MAX_NOTES {
            let more = self.list.len() - MAX_NOTES;
            self.list.truncate(MAX_NOTES);
            self.list.push(format!("… and {more} more"));
        }
        self.list
    }
}

/// Counts the requests decided; `None` once over the budget.
struct Work {
    done: u64,
    limit: u64,
}

impl Work {
    fn take(&mut self) -> Option<()> {
        self.done += 1;
        (self.done <= self.limit).then_some(())
    }
}

// ---------------------------------------------------------------------------------------------
// The model of a spec's rules: the compiler's lowering (see `compile::lower`), per place.

/// A lowered rule as a place holds it.
#[derive(Debug)]
struct Rule {
    /// The binding's actions.
    narrow: Option<Arc<ActionList>>,
    rule: Arc<lower::Rule>,
    /// Where it is placed: `global_guardrails`, `global_guardrails/<block>`,
    /// `<binding>/<block>` (as a decision's `determining_policies` name it).
    source: Arc<str>,
}

impl Rule {
    fn outcome(&self) -> Outcome {
        self.rule.outcome
    }

    fn test(&self) -> &Test {
        &self.rule.test
    }

    /// Whether the rule matches the request, as its Cedar condition would (raw Cedar is not
    /// read: it matches nothing here).
    fn matches(&self, r: &Req) -> bool {
        if !self.narrow.as_ref().is_none_or(|n| n.contains(&r.action)) {
            return false;
        }
        let email = r.action == SEND_EMAIL;
        let none_of = |fs: &BTreeSet<String>| fs.iter().all(|f| !r.fields.contains(f));
        let amount = |kind: &AmountKind| {
            r.numbers
                .get(&kind.field)
                .copied()
                .filter(|_| kind.applies(&r.action))
        };
        match self.test() {
            Test::Status(s) => r.status == *s,
            Test::NotActive => r.status != "active",
            Test::RiskAtLeast(tier) => r.risk >= tier.level(),
            Test::Actions(list) => list.contains(&r.action),
            Test::AnyAction => true,
            Test::SendEmail => email,
            Test::Domains(d) => email && !r.domains.is_subset(d),
            Test::MaxRecipients(m) => email && r.recipients > u64::from(*m),
            Test::Extensions(e) => email && !r.extensions.is_disjoint(e),
            Test::Types(t) => email && !r.types.is_disjoint(t),
            Test::MaxBytes(m) => email && r.largest > *m,
            Test::PerMinute(n) => email && r.sent_minute >= u64::from(*n),
            Test::PerDay(n) => email && r.sent_day >= u64::from(*n),
            Test::Amount {
                kind,
                which,
                above,
                up_to,
            } => amount(kind).is_some_and(|v| {
                let currency = match which {
                    None => true,
                    Some(FieldGuard::Has(f)) => r.fields.contains(f),
                    Some(FieldGuard::HasNone(fs)) => none_of(fs),
                };
                currency && above.is_none_or(|a| v > a) && up_to.is_none_or(|u| v <= u)
            }),
            Test::Negative(kind) => amount(kind).is_some_and(|v| v < 0),
            Test::UnknownCurrency(kind) => amount(kind).is_some() && none_of(&kind.explicit()),
            Test::VaultAllow(set) => set.contains(&r.action),
            Test::VaultNone(fs) => is_vault(&r.action) && none_of(fs),
            Test::ProxyNone(fs) => r.action == VAULT_PROXY && none_of(fs),
            Test::VaultApproval {
                actions,
                environments,
            } => actions.contains(&r.action) && environments.as_ref().is_none_or(|e| !none_of(e)),
            Test::Raw(_) => false,
        }
    }

    /// Whether the rule can match some check of `action`.
    fn may_match(&self, action: &str) -> bool {
        if !self.narrow.as_ref().is_none_or(|n| n.contains(action)) {
            return false;
        }
        !matches!(self.test(), Test::Raw(_)) && self.test().actions().contains(action)
    }

    /// The actions the rule names.
    fn named_actions(&self, out: &mut BTreeSet<String>) {
        if let Some(n) = &self.narrow {
            out.extend(n.set.iter().cloned());
        }
        out.extend(self.test().actions().names());
    }
}

/// deny > challenge > allow; nothing matched is a deny.
fn decide(rules: &[&Rule], req: &Req) -> Outcome {
    let (mut challenge, mut allow) = (false, false);
    for rule in rules.iter().filter(|r| r.matches(req)) {
        match rule.outcome() {
            Outcome::Deny => return Outcome::Deny,
            Outcome::Challenge => challenge = true,
            Outcome::Allow => allow = true,
        }
    }
    if challenge {
        Outcome::Challenge
    } else if allow {
        Outcome::Allow
    } else {
        Outcome::Deny
    }
}

fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A spec's rules, per bound group, and what decides an agent's groups.
struct Model {
    guardrails: Vec<Rule>,
    /// Per bound group, its bindings' rules.
    groups: HashMap<String, Vec<Rule>>,
    /// The content of the guardrails (inline rules and blocks), as a digest.
    guardrail_key: String,
    /// Per bound group, the content of each of its bindings (actions and blocks), as digests.
    binding_keys: HashMap<String, Vec<String>>,
    /// Explicit members: agent id → groups.
    members: HashMap<String, BTreeSet<String>>,
    selectors: Vec<(String, Selector)>,
    /// Selectors (by place in `selectors`) by their first pair: (is a label, key, value).
    selector_index: HashMap<(bool, String, String), Vec<usize>>,
}

impl Model {
    fn of(spec: &PolicySpec) -> Model {
        let block_keys: HashMap<&String, String> = spec
            .reusable_policy_blocks
            .iter()
            .map(|(name, b)| {
                (
                    name,
                    digest(&serde_json::to_string(b).unwrap_or_else(|_| name.clone())),
                )
            })
            .collect();
        let g = &spec.global_guardrails;
        // The spec compiled (or is being diffed against one that did): its errors are reported
        // there, not here.
        let mut errors = Vec::new();
        let mut guardrails = Vec::new();
        let mut groups: HashMap<String, Vec<Rule>> = HashMap::new();
        for place in lower::spec(spec, &mut errors) {
            let source: Arc<str> = Arc::from(place.source.as_str());
            let rules = place.rules().map(|rule| Rule {
                narrow: place.narrow.clone(),
                rule: rule.clone(),
                source: source.clone(),
            });
            match &place.group {
                None => guardrails.extend(rules),
                Some(group) => groups.entry(group.clone()).or_default().extend(rules),
            }
        }
        let guardrail_key = digest(&format!(
            "{}|{}",
            serde_json::to_string(g).unwrap_or_default(),
            g.blocks
                .iter()
                .map(|b| block_keys.get(b).map_or("-", String::as_str))
                .collect::<Vec<_>>()
                .join(",")
        ));
        let mut binding_keys: HashMap<String, Vec<String>> = HashMap::new();
        for binding in &spec.bindings {
            binding_keys
                .entry(binding.group.clone())
                .or_default()
                .push(format!(
                    "{}|{}",
                    serde_json::to_string(&binding.actions).unwrap_or_default(),
                    binding
                        .blocks
                        .iter()
                        .map(|b| block_keys.get(b).map_or("-", String::as_str))
                        .collect::<Vec<_>>()
                        .join(",")
                ));
        }
        let mut members: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut selectors = Vec::new();
        let mut selector_index: HashMap<(bool, String, String), Vec<usize>> = HashMap::new();
        for group in &spec.agent_groups {
            for m in &group.members {
                members
                    .entry(m.clone())
                    .or_default()
                    .insert(group.name.clone());
            }
            for s in &group.selectors {
                let first = s
                    .metadata
                    .iter()
                    .next()
                    .map(|(k, v)| (false, k.clone(), v.clone()))
                    .or_else(|| {
                        s.labels
                            .iter()
                            .next()
                            .map(|(k, v)| (true, k.clone(), v.clone()))
                    });
                if let Some(first) = first {
                    selector_index
                        .entry(first)
                        .or_default()
                        .push(selectors.len());
                    selectors.push((group.name.clone(), s.clone()));
                }
            }
        }
        Model {
            guardrails,
            groups,
            guardrail_key,
            binding_keys,
            members,
            selectors,
            selector_index,
        }
    }

    /// Of `groups`, those some binding names (the others add no rule).
    fn bound(&self, groups: impl IntoIterator<Item = String>) -> Vec<String> {
        groups
            .into_iter()
            .filter(|g| self.binding_keys.contains_key(g))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The groups whose selectors an agent with exactly this metadata and these labels
    /// matches.
    fn selected(
        &self,
        metadata: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> BTreeSet<String> {
        let pairs = metadata
            .iter()
            .map(|(k, v)| (false, k, v))
            .chain(labels.iter().map(|(k, v)| (true, k, v)));
        let mut out = BTreeSet::new();
        for (label, k, v) in pairs {
            let Some(candidates) = self.selector_index.get(&(label, k.clone(), v.clone())) else {
                continue;
            };
            for &i in candidates {
                if let Some((group, s)) = self.selectors.get(i) {
                    let holds = |want: &BTreeMap<String, String>,
                                 have: &BTreeMap<String, String>| {
                        want.iter().all(|(k, v)| have.get(k) == Some(v))
                    };
                    if holds(&s.metadata, metadata) && holds(&s.labels, labels) {
                        out.insert(group.clone());
                    }
                }
            }
        }
        out
    }

    /// What decides an agent of these bound groups: the guardrails and its bindings' content.
    fn content(&self, groups: &[String]) -> String {
        let bindings: BTreeSet<&String> = groups
            .iter()
            .filter_map(|g| self.binding_keys.get(g))
            .flatten()
            .collect();
        let mut key = self.guardrail_key.clone();
        for b in bindings {
            key.push('#');
            key.push_str(b);
        }
        key
    }

    /// The rules that can decide an agent of these bound groups.
    fn rules_of(&self, groups: &[String]) -> Vec<&Rule> {
        self.guardrails
            .iter()
            .chain(groups.iter().filter_map(|g| self.groups.get(g)).flatten())
            .collect()
    }
}

/// Each raw Cedar rule in force under either spec, named in `not_analysed`.
fn raw_rules(old: &PolicySpec, new: &PolicySpec, notes: &mut Notes) {
    fn in_force(spec: &PolicySpec) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut add = |place: String, block: &Block| {
            for rule in &block.cedar {
                out.insert(
                    format!("raw Cedar rule `{}` of {place}", rule.name),
                    serde_json::to_string(rule).unwrap_or_default(),
                );
            }
        };
        add(
            "global_guardrails".into(),
            &spec.global_guardrails.inline_block(),
        );
        let used: BTreeSet<&String> = spec
            .global_guardrails
            .blocks
            .iter()
            .chain(spec.bindings.iter().flat_map(|b| b.blocks.iter()))
            .collect();
        for name in used {
            if let Some(block) = spec.reusable_policy_blocks.get(name) {
                add(format!("block `{name}`"), block);
            }
        }
        out
    }
    let before = in_force(old);
    let after = in_force(new);
    let places: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for place in places {
        let how = match (before.get(place), after.get(place)) {
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            (Some(a), Some(b)) if a != b => "changed",
            _ => "unchanged",
        };
        notes.add(format!("{place} ({how}): raw Cedar is not analysed"));
    }
}

// ---------------------------------------------------------------------------------------------
// Principals.

/// Agents that differ in kind: their bound groups under each spec, and one of them.
struct Class {
    /// Its bound groups (which decide its rules).
    before: Vec<String>,
    after: Vec<String>,
    /// Every group it is in, bound or not (what the cells show).
    shown_before: Vec<String>,
    shown_after: Vec<String>,
    agent: TestAgent,
    principal: String,
}

impl Class {
    fn label(&self) -> String {
        let names = |g: &[String]| {
            if g.is_empty() {
                "(no group)".to_owned()
            } else {
                g.join(", ")
            }
        };
        if self.shown_before == self.shown_after {
            names(&self.shown_before)
        } else {
            format!(
                "{} → {}",
                names(&self.shown_before),
                names(&self.shown_after)
            )
        }
    }
}

fn agent(
    id: &str,
    metadata: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> TestAgent {
    let object = |m: &BTreeMap<String, String>| {
        Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    };
    TestAgent {
        id: id.to_owned(),
        status: "active".into(),
        risk_tier: "low".into(),
        metadata: object(metadata),
        labels: object(labels),
    }
}

fn pairs_text(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The principals of two specs, one per pair of bound group sets, in a stable order.
fn classes(before: &Model, after: &Model) -> Vec<Class> {
    let fresh = (0u128..)
        .map(|i| format!("agt_{i:032x}"))
        .find(|id| !before.members.contains_key(id) && !after.members.contains_key(id))
        .unwrap_or_default();
    let mut out: BTreeMap<(Vec<String>, Vec<String>), Class> = BTreeMap::new();
    let none = BTreeMap::new();
    out.insert(
        (Vec::new(), Vec::new()),
        Class {
            before: Vec::new(),
            after: Vec::new(),
            shown_before: Vec::new(),
            shown_after: Vec::new(),
            agent: agent(&fresh, &none, &none),
            principal: "agents in no group".into(),
        },
    );
    for (_, selector) in before.selectors.iter().chain(after.selectors.iter()) {
        let shown_b = before.selected(&selector.metadata, &selector.labels);
        let shown_a = after.selected(&selector.metadata, &selector.labels);
        let b = before.bound(shown_b.iter().cloned());
        let a = after.bound(shown_a.iter().cloned());
        out.entry((b.clone(), a.clone())).or_insert_with(|| {
            let mut described = Vec::new();
            if !selector.metadata.is_empty() {
                described.push(format!("metadata {}", pairs_text(&selector.metadata)));
            }
            if !selector.labels.is_empty() {
                described.push(format!("labels {}", pairs_text(&selector.labels)));
            }
            Class {
                before: b,
                after: a,
                shown_before: shown_b.into_iter().collect(),
                shown_after: shown_a.into_iter().collect(),
                agent: agent(&fresh, &selector.metadata, &selector.labels),
                principal: format!("agents with {}", described.join(" and ")),
            }
        });
    }
    let ids: BTreeSet<&String> = before.members.keys().chain(after.members.keys()).collect();
    let mut counts: BTreeMap<(Vec<String>, Vec<String>), usize> = BTreeMap::new();
    for id in ids {
        let all = |m: &Model| -> Vec<String> {
            m.members.get(id).into_iter().flatten().cloned().collect()
        };
        let key = (before.bound(all(before)), after.bound(all(after)));
        *counts.entry(key.clone()).or_default() += 1;
        out.entry(key.clone()).or_insert_with(|| Class {
            before: key.0,
            after: key.1,
            shown_before: all(before),
            shown_after: all(after),
            agent: agent(id, &none, &none),
            principal: format!("{id} (explicit member)"),
        });
    }
    out.into_iter()
        .map(|(key, mut class)| {
            let n = counts.get(&key).copied().unwrap_or(0);
            if n > 1 && class.principal.ends_with("(explicit member)") {
                class.principal = format!(
                    "{} (explicit member; {} more with the same groups)",
                    class.agent.id,
                    n - 1
                );
            }
            class
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Requests.

/// The amount part of a request.
#[derive(Debug, Clone)]
struct AmountProbe {
    field: String,
    currency_field: String,
    currency: String,
    /// Ten-thousandths.
    value: i64,
}

/// The email part of a `send_email` request.
#[derive(Debug, Clone)]
struct EmailProbe {
    /// `None`: no recipient.
    domain: Option<String>,
    recipients: u64,
    /// The attachment (one at most): its extension, content type and size, each defaulting
    /// to an unblocked one when another is given; none when all three are `None`.
    extension: Option<String>,
    content_type: Option<String>,
    size: Option<u64>,
    default_extension: String,
    default_type: String,
    default_size: u64,
}

/// The vault part of a vault request.
#[derive(Debug, Clone)]
struct VaultProbe {
    secret_set: String,
    environment: String,
    /// For `vault.proxy`.
    host: Option<String>,
}

/// One request, abstractly: what the model decides and the example shows.
#[derive(Debug, Clone)]
struct Probe {
    status: &'static str,
    tier: RiskTier,
    action: String,
    amount: Option<AmountProbe>,
    email: Option<EmailProbe>,
    vault: Option<VaultProbe>,
    sent_minute: u64,
    sent_day: u64,
}

/// A request as the rules read it (see `evaluate::build_context`).
struct Req {
    status: &'static str,
    risk: i64,
    action: String,
    fields: BTreeSet<String>,
    numbers: BTreeMap<String, i64>,
    domains: BTreeSet<String>,
    recipients: u64,
    extensions: BTreeSet<String>,
    types: BTreeSet<String>,
    largest: u64,
    sent_minute: u64,
    sent_day: u64,
}

/// The host and each `*.parent` of it, as the vault's proxy sends them.
fn host_patterns(host: &str) -> Vec<String> {
    let labels: Vec<&str> = host.split('.').collect();
    let mut patterns = vec![host.to_owned()];
    patterns.extend((1..labels.len()).map(|i| format!("*.{}", labels[i..].join("."))));
    patterns
}

/// An attachment's extension as a rule reads it (see `evaluate::build_context`).
fn extension_of(filename: &str) -> Option<String> {
    filename
        .trim_end_matches(['.', ' '])
        .rsplit_once('.')
        .map(|(_, ext)| format!(".{}", ext.to_ascii_lowercase()))
}

fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// An amount in ten-thousandths as text: `500`, `0.5`, `-1`.
fn decimal(v: i64) -> String {
    let whole = v / 10_000;
    let part = (v % 10_000).abs();
    if part == 0 {
        return whole.to_string();
    }
    let sign = if v < 0 && whole == 0 { "-" } else { "" };
    let frac = format!("{part:04}");
    format!("{sign}{whole}.{}", frac.trim_end_matches('0'))
}

impl EmailProbe {
    fn attachment(&self) -> Option<(String, String, u64)> {
        if self.extension.is_none() && self.content_type.is_none() && self.size.is_none() {
            return None;
        }
        Some((
            format!(
                "attachment{}",
                self.extension.as_deref().unwrap_or(&self.default_extension)
            ),
            self.content_type
                .clone()
                .unwrap_or_else(|| self.default_type.clone()),
            self.size.unwrap_or(self.default_size),
        ))
    }

    fn recipient_list(&self) -> Vec<String> {
        match &self.domain {
            Some(d) => (1..=self.recipients)
                .map(|i| format!("user{i}@{d}"))
                .collect(),
            None => Vec::new(),
        }
    }
}

impl Probe {
    fn req(&self) -> Req {
        let mut fields = BTreeSet::new();
        let mut numbers = BTreeMap::new();
        if let Some(a) = &self.amount {
            fields.insert(format!("{}={}", a.currency_field, a.currency));
            numbers.insert(a.field.clone(), a.value);
        }
        if let Some(v) = &self.vault {
            fields.insert(format!("secret_set={}", v.secret_set));
            fields.insert(format!("environment={}", v.environment));
            if let Some(host) = &v.host {
                fields.insert(format!("target_host={host}"));
                fields.extend(
                    host_patterns(host)
                        .into_iter()
                        .map(|p| format!("target_host_patterns={p}")),
                );
            }
        }
        let mut req = Req {
            status: self.status,
            risk: self.tier.level(),
            action: self.action.clone(),
            fields,
            numbers,
            domains: BTreeSet::new(),
            recipients: 0,
            extensions: BTreeSet::new(),
            types: BTreeSet::new(),
            largest: 0,
            sent_minute: self.sent_minute,
            sent_day: self.sent_day,
        };
        if let Some(e) = &self.email {
            if let Some(d) = &e.domain {
                req.recipients = e.recipients;
                if e.recipients > 0 {
                    req.domains.insert(d.to_ascii_lowercase());
                }
            }
            if let Some((filename, content_type, size)) = e.attachment() {
                req.extensions.extend(extension_of(&filename));
                req.types.insert(media_type(&content_type));
                req.largest = size;
            }
        }
        req
    }

    fn example(&self, agent: &TestAgent) -> Example {
        let mut context = Map::new();
        if let Some(a) = &self.amount {
            context.insert(a.field.clone(), json!(a.value as f64 / 10_000.0));
            context.insert(a.currency_field.clone(), json!(a.currency));
        }
        if let Some(v) = &self.vault {
            context.insert("secret_set".into(), json!(v.secret_set));
            context.insert("environment".into(), json!(v.environment));
            if let Some(host) = &v.host {
                context.insert("target_host".into(), json!(host));
                context.insert("target_host_patterns".into(), json!(host_patterns(host)));
            }
        }
        let email = self.email.as_ref().map(|e| {
            let mut email = json!({ "to": e.recipient_list() });
            if let Some((filename, content_type, size)) = e.attachment() {
                email["attachments"] = json!([{
                    "filename": filename,
                    "content_type": content_type,
                    "size_bytes": size,
                }]);
            }
            email
        });
        Example {
            agent: TestAgent {
                status: self.status.to_owned(),
                risk_tier: self.tier.as_str().to_owned(),
                ..agent.clone()
            },
            action: self.action.clone(),
            context: Value::Object(context),
            email,
            emails_sent_last_minute: self.sent_minute,
            emails_sent_last_day: self.sent_day,
        }
    }

    fn with(&self, set: &Setter) -> Probe {
        let mut p = self.clone();
        match set {
            Setter::Status(s) => p.status = s,
            Setter::Tier(t) => p.tier = *t,
            Setter::Amount(a) => p.amount = a.clone(),
            Setter::Domain(d) => {
                if let Some(e) = p.email.as_mut() {
                    e.domain = d.clone();
                }
            }
            Setter::Recipients(n) => {
                if let Some(e) = p.email.as_mut() {
                    e.recipients = *n;
                }
            }
            Setter::Attachment(ext, ty, size) => {
                if let Some(e) = p.email.as_mut() {
                    e.extension = ext.clone();
                    e.content_type = ty.clone();
                    e.size = *size;
                }
            }
            Setter::SentMinute(n) => p.sent_minute = *n,
            Setter::SentDay(n) => p.sent_day = *n,
            Setter::SecretSet(s) => {
                if let Some(v) = p.vault.as_mut() {
                    v.secret_set = s.clone();
                }
            }
            Setter::Environment(s) => {
                if let Some(v) = p.vault.as_mut() {
                    v.environment = s.clone();
                }
            }
            Setter::Host(h) => {
                if let Some(v) = p.vault.as_mut() {
                    v.host = Some(h.clone());
                }
            }
        }
        p
    }
}

// ---------------------------------------------------------------------------------------------
// The partition.

/// How one value of a dimension changes the baseline request.
#[derive(Debug, Clone)]
enum Setter {
    Status(&'static str),
    Tier(RiskTier),
    Amount(Option<AmountProbe>),
    Domain(Option<String>),
    Recipients(u64),
    Attachment(Option<String>, Option<String>, Option<u64>),
    SentMinute(u64),
    SentDay(u64),
    SecretSet(String),
    Environment(String),
    Host(String),
}

/// How an interval is written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    /// Ten-thousandths, written as decimals.
    Amount,
    Count,
}

/// What a value of a dimension means, for the cell's condition.
#[derive(Debug, Clone)]
enum Label {
    /// `{name} = {value}`.
    Cat { name: String, value: String },
    /// `{name}` in `(lo, hi]` (`hi` `None`: no bound; `lo` `i64::MIN`: no bound). `at` orders
    /// the intervals of one name, so adjacent ones merge.
    Range {
        name: String,
        at: usize,
        lo: i64,
        hi: Option<i64>,
        scale: Scale,
    },
}

struct Point {
    set: Setter,
    label: Label,
}

struct Axis {
    values: Vec<Point>,
}

/// `(lo, hi]` intervals between `cuts` (ascending, distinct), from `(start, cuts[0]]` (or
/// `(-inf, ...]` for `i64::MIN`) to `(cuts[last], +inf)`, each with a representative value.
fn intervals(start: i64, cuts: &BTreeSet<i64>, step: i64) -> Vec<(i64, Option<i64>, i64)> {
    let mut out = Vec::new();
    let mut lo = start;
    for &cut in cuts.iter().filter(|c| **c > start) {
        let rep = if lo == i64::MIN { cut.min(-step) } else { cut };
        out.push((lo, Some(cut), rep));
        lo = cut;
    }
    out.push((lo, None, lo.saturating_add(step)));
    out
}

/// A value not in `taken`, from `make(0)`, `make(1)`, ...
fn fresh(taken: &BTreeSet<String>, make: impl Fn(usize) -> String) -> String {
    (0..)
        .map(make)
        .find(|c| !taken.contains(c))
        .unwrap_or_default()
}

/// The dimensions of requests of `action` that `rules` (of both specs) distinguish, and the
/// request to start from.
fn axes(rules: &[&Rule], action: &str, notes: &mut Notes) -> (Vec<Axis>, Probe) {
    let mut axes = vec![
        Axis {
            values: STATUSES
                .iter()
                .map(|s| Point {
                    set: Setter::Status(s),
                    label: Label::Cat {
                        name: "status".into(),
                        value: (*s).into(),
                    },
                })
                .collect(),
        },
        Axis {
            values: TIERS
                .iter()
                .map(|t| Point {
                    set: Setter::Tier(*t),
                    label: Label::Cat {
                        name: "risk_tier".into(),
                        value: t.as_str().into(),
                    },
                })
                .collect(),
        },
    ];
    let mut probe = Probe {
        status: "active",
        tier: RiskTier::Low,
        action: action.to_owned(),
        amount: None,
        email: None,
        vault: None,
        sent_minute: 0,
        sent_day: 0,
    };
    // Amounts: per (field, currency field), each listed currency and one other.
    let mut kinds: BTreeMap<(String, String), Vec<&AmountKind>> = BTreeMap::new();
    for rule in rules {
        if let Test::Amount { kind, .. } | Test::Negative(kind) | Test::UnknownCurrency(kind) =
            rule.test()
        {
            let list = kinds
                .entry((kind.field.clone(), kind.currency_field.clone()))
                .or_default();
            if !list.iter().any(|k| std::ptr::eq(*k, kind.as_ref())) {
                list.push(kind);
            }
        }
    }
    if !kinds.is_empty() {
        let fields: BTreeSet<&String> = kinds.keys().map(|(f, _)| f).collect();
        let currency_fields: BTreeSet<&String> = kinds.keys().map(|(_, c)| c).collect();
        if kinds.len() > 1 {
            notes.add(format!(
                "{action}: checks carrying the fields of two amount blocks at once ({}) are not enumerated",
                kinds
                    .keys()
                    .map(|(f, c)| format!("{f}/{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut values = vec![Point {
            set: Setter::Amount(None),
            label: Label::Cat {
                name: "amount".into(),
                value: "none".into(),
            },
        }];
        for ((field, currency_field), list) in &kinds {
            let listed: BTreeSet<String> = list
                .iter()
                .flat_map(|k| k.limits.keys())
                .filter(|c| c.as_str() != "*")
                .cloned()
                .collect();
            let other = fresh(&listed, |i| {
                if i == 0 {
                    "XXX".to_owned()
                } else {
                    format!("XX{i}")
                }
            });
            let default_names = field == "amount" && currency_field == "currency";
            let one_kind = fields.len() == 1 && currency_fields.len() == 1;
            for code in listed.iter().chain(std::iter::once(&other)) {
                let mut cuts = BTreeSet::from([-1i64]);
                for k in list {
                    if let Some((allow, challenge)) =
                        k.limits.get(code).or_else(|| k.limits.get("*"))
                    {
                        cuts.insert(*allow);
                        cuts.insert(*challenge);
                    }
                }
                let mut name = if default_names || one_kind {
                    format!("{field}.{code}")
                } else {
                    format!("{field} [{currency_field}={code}]")
                };
                if *code == other {
                    name.push_str(" (a currency not listed)");
                }
                for (at, (lo, hi, rep)) in
                    intervals(i64::MIN, &cuts, 10_000).into_iter().enumerate()
                {
                    values.push(Point {
                        set: Setter::Amount(Some(AmountProbe {
                            field: field.clone(),
                            currency_field: currency_field.clone(),
                            currency: code.clone(),
                            value: rep,
                        })),
                        label: Label::Range {
                            name: name.clone(),
                            at,
                            lo,
                            hi,
                            scale: Scale::Amount,
                        },
                    });
                }
            }
        }
        axes.push(Axis { values });
    }
    if action == SEND_EMAIL {
        let (mut domains, mut exts, mut types) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let (mut counts, mut sizes, mut minutes, mut days) = (
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
        );
        for rule in rules {
            match rule.test() {
                Test::Domains(d) => domains.extend(d.iter().cloned()),
                Test::Extensions(e) => exts.extend(e.iter().cloned()),
                Test::Types(t) => types.extend(t.iter().cloned()),
                Test::MaxRecipients(m) => {
                    if *m > MAX_ENUMERATED_RECIPIENTS {
                        notes.add(format!(
                            "max_recipients of {m}: more than {MAX_ENUMERATED_RECIPIENTS} recipients are not enumerated"
                        ));
                    } else {
                        counts.insert(i64::from(*m));
                    }
                }
                Test::MaxBytes(m) => {
                    sizes.insert(i64::try_from(*m).unwrap_or(i64::MAX - 1));
                }
                Test::PerMinute(n) => {
                    minutes.insert(i64::from(*n) - 1);
                }
                Test::PerDay(n) => {
                    days.insert(i64::from(*n) - 1);
                }
                _ => {}
            }
        }
        let other_domain = fresh(&domains, |i| {
            if i == 0 {
                "unlisted.example".to_owned()
            } else {
                format!("unlisted{i}.example")
            }
        });
        let default_extension = fresh(&exts, |i| match i {
            0 => ".pdf".to_owned(),
            1 => ".txt".to_owned(),
            i => format!(".acp{i}"),
        });
        let default_type = fresh(&types, |i| match i {
            0 => "application/pdf".to_owned(),
            1 => "text/plain".to_owned(),
            i => format!("application/x-acp{i}"),
        });
        let default_size = sizes.iter().next().copied().unwrap_or(1024).clamp(0, 1024) as u64;
        probe.email = Some(EmailProbe {
            domain: Some(
                domains
                    .iter()
                    .next()
                    .cloned()
                    .unwrap_or_else(|| other_domain.clone()),
            ),
            recipients: 1,
            extension: None,
            content_type: None,
            size: None,
            default_extension,
            default_type,
            default_size,
        });
        let cat = |name: &str, value: String| Label::Cat {
            name: name.into(),
            value,
        };
        let mut values: Vec<Point> = domains
            .iter()
            .map(|d| Point {
                set: Setter::Domain(Some(d.clone())),
                label: cat("email recipient domain", d.clone()),
            })
            .collect();
        values.push(Point {
            set: Setter::Domain(Some(other_domain.clone())),
            label: cat(
                "email recipient domain",
                format!("{other_domain} (not listed)"),
            ),
        });
        values.push(Point {
            set: Setter::Domain(None),
            label: cat("email recipients", "none".into()),
        });
        axes.push(Axis { values });
        if !counts.is_empty() {
            axes.push(Axis {
                values: intervals(0, &counts, 1)
                    .into_iter()
                    .enumerate()
                    .map(|(at, (lo, hi, _))| Point {
                        set: Setter::Recipients((lo + 1) as u64),
                        label: Label::Range {
                            name: "email recipients".into(),
                            at,
                            lo,
                            hi,
                            scale: Scale::Count,
                        },
                    })
                    .collect(),
            });
        }
        let mut values = vec![Point {
            set: Setter::Attachment(None, None, None),
            label: cat("attachment", "none".into()),
        }];
        values.extend(exts.iter().map(|e| Point {
            set: Setter::Attachment(Some(e.clone()), None, None),
            label: cat("attachment extension", e.clone()),
        }));
        values.extend(types.iter().map(|t| Point {
            set: Setter::Attachment(None, Some(t.clone()), None),
            label: cat("attachment type", t.clone()),
        }));
        if !sizes.is_empty() {
            values.extend(intervals(-1, &sizes, 1).into_iter().enumerate().map(
                |(at, (lo, hi, _))| Point {
                    set: Setter::Attachment(None, None, Some((lo + 1) as u64)),
                    label: Label::Range {
                        name: "attachment bytes".into(),
                        at,
                        lo,
                        hi,
                        scale: Scale::Count,
                    },
                },
            ));
        }
        if values.len() > 1 {
            axes.push(Axis { values });
        }
        for (cuts, name, minute) in [
            (&minutes, "emails sent in the last minute", true),
            (&days, "emails sent in the last day", false),
        ] {
            if cuts.is_empty() {
                continue;
            }
            axes.push(Axis {
                values: intervals(-1, cuts, 1)
                    .into_iter()
                    .enumerate()
                    .map(|(at, (lo, hi, _))| {
                        // The lowest count of each interval: the fewest emails sent.
                        let first = (lo + 1).max(0) as u64;
                        Point {
                            set: if minute {
                                Setter::SentMinute(first)
                            } else {
                                Setter::SentDay(first)
                            },
                            label: Label::Range {
                                name: name.into(),
                                at,
                                lo,
                                hi,
                                scale: Scale::Count,
                            },
                        }
                    })
                    .collect(),
            });
        }
    }
    if is_vault(action) {
        let (mut sets, mut envs, mut hosts) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let strip = |f: &String, prefix: &str| f.strip_prefix(prefix).map(str::to_owned);
        for rule in rules {
            match rule.test() {
                Test::VaultNone(fs) => {
                    for f in fs {
                        sets.extend(strip(f, "secret_set="));
                        envs.extend(strip(f, "environment="));
                    }
                }
                Test::VaultApproval {
                    environments: Some(fs),
                    ..
                } => {
                    envs.extend(fs.iter().filter_map(|f| strip(f, "environment=")));
                }
                Test::ProxyNone(fs) => {
                    hosts.extend(fs.iter().filter_map(|f| strip(f, "target_host_patterns=")));
                }
                _ => {}
            }
        }
        let other_set = fresh(&sets, |i| format!("unlisted-set-{i}"));
        let other_env = fresh(&envs, |i| format!("unlisted-env-{i}"));
        let other_host = (0..)
            .map(|i| format!("host.unlisted{i}.example"))
            .find(|h| host_patterns(h).iter().all(|p| !hosts.contains(p)))
            .unwrap_or_default();
        let cat = |name: &str, value: &str| Label::Cat {
            name: name.into(),
            value: value.into(),
        };
        let host_of = |pattern: &String| match pattern.strip_prefix("*.") {
            Some(parent) => format!("host.{parent}"),
            None => pattern.clone(),
        };
        probe.vault = Some(VaultProbe {
            secret_set: sets.iter().next().cloned().unwrap_or(other_set.clone()),
            environment: envs.iter().next().cloned().unwrap_or(other_env.clone()),
            host: (action == VAULT_PROXY).then(|| {
                hosts
                    .iter()
                    .next()
                    .map(host_of)
                    .unwrap_or(other_host.clone())
            }),
        });
        // Each listed value, and one that no spec lists.
        let listed = |values: Vec<String>, other: &str, name: &str, set: fn(String) -> Setter| {
            let mut points: Vec<Point> = values
                .into_iter()
                .map(|v| Point {
                    label: cat(name, &v),
                    set: set(v),
                })
                .collect();
            points.push(Point {
                set: set(other.to_owned()),
                label: cat(name, &format!("{other} (not listed)")),
            });
            Axis { values: points }
        };
        axes.push(listed(
            sets.iter().cloned().collect(),
            &other_set,
            "secret set",
            Setter::SecretSet,
        ));
        axes.push(listed(
            envs.iter().cloned().collect(),
            &other_env,
            "environment",
            Setter::Environment,
        ));
        if action == VAULT_PROXY {
            axes.push(listed(
                hosts.iter().map(host_of).collect(),
                &other_host,
                "proxy target host",
                Setter::Host,
            ));
        }
    }
    (axes, probe)
}

/// An interval of a dimension: its place among the dimension's intervals, `(lo, hi]`.
type Span = (usize, i64, Option<i64>);

/// The cells' conditions: values of one dimension, adjacent intervals merged.
fn describe(labels: &[&Label]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cats: Vec<(String, Vec<String>)> = Vec::new();
    let mut ranges: Vec<(String, Scale, Vec<Span>)> = Vec::new();
    for label in labels {
        match label {
            Label::Cat { name, value } => match cats.iter_mut().find(|(n, _)| n == name) {
                Some((_, values)) => values.push(value.clone()),
                None => cats.push((name.clone(), vec![value.clone()])),
            },
            Label::Range {
                name,
                at,
                lo,
                hi,
                scale,
            } => match ranges.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, _, list)) => list.push((*at, *lo, *hi)),
                None => ranges.push((name.clone(), *scale, vec![(*at, *lo, *hi)])),
            },
        }
    }
    for (name, values) in cats {
        parts.push(match (name.as_str(), values.as_slice()) {
            ("amount", [only]) if only == "none" => "no amount".to_owned(),
            ("attachment", [only]) if only == "none" => "no attachment".to_owned(),
            ("email recipients", [only]) if only == "none" => "no recipient".to_owned(),
            (_, [only]) => format!("{name} = {only}"),
            _ => format!("{name} in {{{}}}", values.join(", ")),
        });
    }
    for (name, scale, list) in ranges {
        let mut merged: Vec<Span> = Vec::new();
        for (at, lo, hi) in list {
            match merged.last_mut() {
                Some(last) if last.0 + 1 == at => {
                    last.0 = at;
                    last.2 = hi;
                }
                _ => merged.push((at, lo, hi)),
            }
        }
        let texts: Vec<String> = merged
            .iter()
            .map(|(_, lo, hi)| interval_text(*lo, *hi, scale))
            .collect();
        parts.push(if texts.iter().any(String::is_empty) {
            // Every value.
            name
        } else {
            format!("{name} {}", texts.join(" or "))
        });
    }
    parts.join(" or ")
}

fn interval_text(lo: i64, hi: Option<i64>, scale: Scale) -> String {
    match scale {
        Scale::Amount => match (lo, hi) {
            (i64::MIN, Some(-1)) => "< 0".to_owned(),
            (i64::MIN, Some(h)) => format!("<= {}", decimal(h)),
            (i64::MIN, None) => String::new(),
            (-1, Some(h)) => format!("in [0, {}]", decimal(h)),
            (-1, None) => ">= 0".to_owned(),
            (l, Some(h)) => format!("in ({}, {}]", decimal(l), decimal(h)),
            (l, None) => format!("> {}", decimal(l)),
        },
        Scale::Count => match hi {
            Some(h) if h == lo + 1 => format!("= {h}"),
            Some(h) => format!("in [{}, {h}]", lo + 1),
            None => format!(">= {}", lo + 1),
        },
    }
}

/// A cell of one principal, before it is given the principal's agent.
#[derive(Debug)]
struct RawCell {
    action: String,
    condition: String,
    before: Outcome,
    after: Outcome,
    probe: Probe,
}

/// The actions `rules` name, and a name none of them has (for every other action).
fn named_and_other<'a>(rules: impl Iterator<Item = &'a Rule>) -> (BTreeSet<String>, String) {
    let mut named = BTreeSet::new();
    for rule in rules {
        rule.named_actions(&mut named);
    }
    let other = fresh(&named, |i| {
        if i == 0 {
            "other_action".to_owned()
        } else {
            format!("other_action_{i}")
        }
    });
    (named, other)
}

/// The cells of one principal whose rules are `old` and `new`; `None` when the work budget
/// runs out.
fn analyse_principal(
    old: &[&Rule],
    new: &[&Rule],
    work: &mut Work,
    notes: &mut Notes,
) -> Option<Vec<RawCell>> {
    let (named, other) = named_and_other(old.iter().chain(new.iter()).copied());
    let mut cells = Vec::new();
    for action in named.iter().chain(std::iter::once(&other)) {
        let o: Vec<&Rule> = old
            .iter()
            .copied()
            .filter(|r| r.may_match(action))
            .collect();
        let n: Vec<&Rule> = new
            .iter()
            .copied()
            .filter(|r| r.may_match(action))
            .collect();
        let shown = if *action == other {
            OTHER_ACTIONS.to_owned()
        } else {
            action.clone()
        };
        cells.extend(analyse_action(&o, &n, action, &shown, work, notes)?);
    }
    Some(cells)
}

fn analyse_action(
    old: &[&Rule],
    new: &[&Rule],
    action: &str,
    shown: &str,
    work: &mut Work,
    notes: &mut Notes,
) -> Option<Vec<RawCell>> {
    let both: Vec<&Rule> = old.iter().chain(new.iter()).copied().collect();
    let (axes, mut probe) = axes(&both, action, notes);
    let mut decide_both = |p: &Probe| -> Option<(Outcome, Outcome)> {
        work.take()?;
        let req = p.req();
        Some((decide(old, &req), decide(new, &req)))
    };
    // The baseline: in turn, each dimension's value that both policies treat better than the
    // value it has (neither worse, one better), the request's own dimensions first, then the
    // agent's status and risk tier, which start at `active` and `low`.
    let order: Vec<usize> = (AGENT_AXES..axes.len()).chain(0..AGENT_AXES).collect();
    let better = |(b, a): (Outcome, Outcome), (b0, a0): (Outcome, Outcome)| {
        b >= b0 && a >= a0 && (b, a) != (b0, a0)
    };
    for _ in 0..2 {
        for &i in &order {
            let Some(axis) = axes.get(i) else {
                continue;
            };
            let mut best = (decide_both(&probe)?, None);
            for value in &axis.values {
                let pair = decide_both(&probe.with(&value.set))?;
                if better(pair, best.0) {
                    best = (pair, Some(&value.set));
                }
            }
            if let Some(set) = best.1 {
                probe = probe.with(set);
            }
        }
    }
    let base = decide_both(&probe)?;
    // What the other cells' conditions leave out of the baseline when it is not the usual
    // agent.
    let mut unusual = Vec::new();
    if probe.status != "active" {
        unusual.push((0, format!("status = {}", probe.status)));
    }
    if probe.tier != RiskTier::Low {
        unusual.push((1, format!("risk_tier = {}", probe.tier.as_str())));
    }
    let mut decided: Vec<Vec<(Outcome, Outcome)>> = Vec::new();
    for axis in &axes {
        let mut row = Vec::new();
        for value in &axis.values {
            row.push(decide_both(&probe.with(&value.set))?);
        }
        decided.push(row);
    }
    let mut cells = Vec::new();
    if base.0 != base.1 {
        let mut parts = Vec::new();
        for (axis, row) in axes.iter().zip(&decided) {
            let like: Vec<&Label> = axis
                .values
                .iter()
                .zip(row)
                .filter(|(_, pair)| **pair == base)
                .map(|(v, _)| &v.label)
                .collect();
            if like.len() < axis.values.len() {
                parts.push(describe(&like));
            }
        }
        cells.push(RawCell {
            action: shown.to_owned(),
            condition: if parts.is_empty() {
                "any request".to_owned()
            } else {
                parts.join(", ")
            },
            before: base.0,
            after: base.1,
            probe: probe.clone(),
        });
    }
    cells.extend(variations(
        &axes, &decided, base, &probe, &unusual, None, shown,
    ));
    // A pending agent is challenged whatever else holds, which a deny of another dimension
    // can override: the dimensions are varied from a pending baseline too.
    if probe.status == "active" {
        // Only what the active baseline does not already show going the same way.
        let pending = probe.with(&Setter::Status("pending"));
        let base = decide_both(&pending)?;
        let way = |(b, a): (Outcome, Outcome)| a.cmp(&b);
        let mut again = Vec::new();
        for (axis, shown_row) in axes.iter().zip(&decided) {
            let mut row = Vec::new();
            for (value, seen) in axis.values.iter().zip(shown_row) {
                let pair = decide_both(&pending.with(&value.set))?;
                row.push(if way(pair) == way(*seen) {
                    (pair.0, pair.0)
                } else {
                    pair
                });
            }
            again.push(row);
        }
        let decided = again;
        let mut unusual = unusual.clone();
        unusual.insert(0, (0, "status = pending".to_owned()));
        cells.extend(variations(
            &axes,
            &decided,
            base,
            &pending,
            &unusual,
            Some(0),
            shown,
        ));
    }
    Some(cells)
}

/// The cells of each dimension varied from `probe` (decided `base`; `decided` per dimension
/// and value), but for dimension `skip`: its values that decide otherwise than the baseline,
/// and differently under the two specs, merged by outcomes.
fn variations(
    axes: &[Axis],
    decided: &[Vec<(Outcome, Outcome)>],
    base: (Outcome, Outcome),
    probe: &Probe,
    unusual: &[(usize, String)],
    skip: Option<usize>,
    shown: &str,
) -> Vec<RawCell> {
    let mut cells = Vec::new();
    for (i, (axis, row)) in axes.iter().zip(decided).enumerate() {
        if skip == Some(i) {
            continue;
        }
        let with: Vec<&str> = unusual
            .iter()
            .filter(|(axis, _)| *axis != i)
            .map(|(_, text)| text.as_str())
            .collect();
        let mut by_pair: BTreeMap<(Outcome, Outcome), Vec<&Point>> = BTreeMap::new();
        for (value, pair) in axis.values.iter().zip(row) {
            if *pair != base && pair.0 != pair.1 {
                by_pair.entry(*pair).or_default().push(value);
            }
        }
        // In the order of the dimension's values.
        let mut groups: Vec<((Outcome, Outcome), Vec<&Point>)> = by_pair.into_iter().collect();
        groups.sort_by_key(|(_, values)| {
            axis.values
                .iter()
                .position(|v| values.first().is_some_and(|f| std::ptr::eq(v, *f)))
        });
        for ((before, after), values) in groups {
            let Some(first) = values.first() else {
                continue;
            };
            let labels: Vec<&Label> = values.iter().map(|v| &v.label).collect();
            let mut condition = describe(&labels);
            if !with.is_empty() {
                condition = format!("{condition} (with {})", with.join(", "));
            }
            cells.push(RawCell {
                action: shown.to_owned(),
                condition,
                before,
                after,
                probe: probe.with(&first.set),
            });
        }
    }
    cells
}

pub mod access;

#[cfg(test)]
#[path = "semantic_tests.rs"]
mod tests;
