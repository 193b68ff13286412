//! The one lowering of a spec: each block is read once, destructured field by field (a field
//! added to a block breaks the build here and nowhere else), checked, and turned into typed
//! rules: what each rule tests ([`Test`]), what it means (outcome, reason code, reason) and
//! what it reads of a check ([`Reads`]). Everything else reads the spec's rules from here:
//! emission writes each rule's Cedar and its index hints from its test, the semantic diff
//! decides its enumerated requests with the same tests, and what a challenge shows its
//! approver and what a decision records for replay follow from the reads.
//!
//! A block is lowered once however often it is placed: the guardrails place the inline rules
//! and their blocks for every agent, each binding places its blocks for its group, narrowed to
//! the binding's actions. Rules that grant (an email block's allow, an amount's allowance, a
//! vault block's allow) are placed only by bindings: in the guardrails those blocks only
//! restrict.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cedar_policy::Policy;
use serde_json::Value;

use crate::spec::{
    ActionRules, AmountRules, ApprovalRules, Block, CedarRule, EmailRules, Outcome, PolicySpec,
    ReputationRules, SpecError, StatusRules, VaultApproval, VaultRules,
};
use acp_domain::RiskTier;

use super::index::FieldGuard;
use super::validate::{self, Raw};

/// The action of the email rules.
pub(crate) const SEND_EMAIL: &str = "send_email";
/// The action of the vault's proxy.
pub(crate) const VAULT_PROXY: &str = "vault.proxy";

/// A list of actions as the spec writes it (the Cedar keeps its order) and as a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionList {
    pub(crate) written: Vec<String>,
    pub(crate) set: BTreeSet<String>,
}

impl ActionList {
    pub(crate) fn new(written: Vec<String>) -> Self {
        let set = written.iter().cloned().collect();
        Self { written, set }
    }

    pub(crate) fn contains(&self, action: &str) -> bool {
        self.set.contains(action)
    }

    /// The actions, for the index (`None` when `*` names every action).
    pub(crate) fn scope(&self) -> Option<Arc<BTreeSet<String>>> {
        if self.set.contains("*") {
            None
        } else {
            Some(Arc::new(self.set.clone()))
        }
    }
}

/// The vault's actions, by the names checks use.
pub(crate) fn vault_actions() -> BTreeSet<String> {
    validate::VAULT_ACTIONS
        .iter()
        .map(|(_, full)| (*full).to_owned())
        .collect()
}

pub(crate) fn is_vault(action: &str) -> bool {
    validate::VAULT_ACTIONS
        .iter()
        .any(|(_, full)| *full == action)
}

/// An amount block as its rules read it.
#[derive(Debug, PartialEq)]
pub(crate) struct AmountKind {
    /// Only these actions (`None`: any whose context has the field).
    pub(crate) actions: Option<ActionList>,
    pub(crate) field: String,
    pub(crate) currency_field: String,
    /// Currency code (or `*`) → allow and challenge limits as tag values (ten-thousandths).
    pub(crate) limits: BTreeMap<String, (i64, i64)>,
}

impl AmountKind {
    pub(crate) fn applies(&self, action: &str) -> bool {
        self.actions.as_ref().is_none_or(|a| a.contains(action))
    }

    /// The `currency_field=code` fields of its listed currencies (`*` aside).
    pub(crate) fn explicit(&self) -> BTreeSet<String> {
        self.limits
            .keys()
            .filter(|c| c.as_str() != "*")
            .map(|c| format!("{}={c}", self.currency_field))
            .collect()
    }
}

/// What one rule tests of a check, besides the actions of the binding that places it.
#[derive(Debug, PartialEq)]
pub(crate) enum Test {
    /// The agent's status is this one (the status guardrails every policy has).
    Status(&'static str),
    /// The agent is not active.
    NotActive,
    /// The agent's risk tier is this one or higher.
    RiskAtLeast(RiskTier),
    /// Any action (`actions.allow: ["*"]`).
    AnyAction,
    /// One of these actions.
    Actions(ActionList),
    /// `send_email`.
    SendEmail,
    /// An email with a recipient at none of these domains (lowercase).
    Domains(BTreeSet<String>),
    MaxRecipients(u32),
    /// An email with an attachment of one of these extensions (`.ext`).
    Extensions(BTreeSet<String>),
    /// An email with an attachment of one of these content types.
    Types(BTreeSet<String>),
    MaxBytes(u64),
    /// An email when the agent sent this many or more in the last minute.
    PerMinute(u32),
    /// An email when the agent sent this many or more in the last day.
    PerDay(u32),
    /// The amount block's actions and field, the currency test (`None`: any currency) and
    /// `above < amount <= up_to`.
    Amount {
        kind: Arc<AmountKind>,
        which: Option<FieldGuard>,
        above: Option<i64>,
        up_to: Option<i64>,
    },
    /// A negative amount.
    Negative(Arc<AmountKind>),
    /// An amount in a currency the block does not list (and it has no `*`).
    UnknownCurrency(Arc<AmountKind>),
    /// One of these vault actions.
    VaultAllow(BTreeSet<String>),
    /// A vault action whose context holds none of these `name=value` fields.
    VaultNone(BTreeSet<String>),
    /// `vault.proxy` to none of these `target_host_patterns=` fields.
    ProxyNone(BTreeSet<String>),
    /// One of these vault actions, in one of these environments' fields (`None`: any).
    VaultApproval {
        actions: BTreeSet<String>,
        environments: Option<BTreeSet<String>>,
    },
    /// Raw Cedar, as written (not read by the semantic diff).
    Raw(Raw),
}

/// The actions a test can match.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Actions<'a> {
    Any,
    One(&'static str),
    Listed(&'a BTreeSet<String>),
    /// Every vault action.
    Vault,
}

impl Actions<'_> {
    pub(crate) fn contains(self, action: &str) -> bool {
        match self {
            Actions::Any => true,
            Actions::One(one) => one == action,
            Actions::Listed(set) => set.contains(action),
            Actions::Vault => is_vault(action),
        }
    }

    /// The actions it names (none for any).
    pub(crate) fn names(self) -> BTreeSet<String> {
        match self {
            Actions::Any => BTreeSet::new(),
            Actions::One(one) => BTreeSet::from([one.to_owned()]),
            Actions::Listed(set) => set.clone(),
            Actions::Vault => vault_actions(),
        }
    }

    /// The actions, for the index (`None` for any, and for a list holding `*`: a rule's index
    /// entry may only be wider than what it matches).
    pub(crate) fn scope(self) -> Option<Arc<BTreeSet<String>>> {
        match self {
            Actions::Any => None,
            Actions::Listed(set) if set.contains("*") => None,
            other => Some(Arc::new(other.names())),
        }
    }
}

impl Test {
    /// The actions a check must name for this test to match it.
    pub(crate) fn actions(&self) -> Actions<'_> {
        match self {
            Test::Status(_)
            | Test::NotActive
            | Test::RiskAtLeast(_)
            | Test::AnyAction
            | Test::Raw(_) => Actions::Any,
            Test::Actions(list) => Actions::Listed(&list.set),
            Test::SendEmail
            | Test::Domains(_)
            | Test::MaxRecipients(_)
            | Test::Extensions(_)
            | Test::Types(_)
            | Test::MaxBytes(_)
            | Test::PerMinute(_)
            | Test::PerDay(_) => Actions::One(SEND_EMAIL),
            Test::Amount { kind, .. } | Test::Negative(kind) | Test::UnknownCurrency(kind) => kind
                .actions
                .as_ref()
                .map_or(Actions::Any, |list| Actions::Listed(&list.set)),
            Test::VaultAllow(set) | Test::VaultApproval { actions: set, .. } => {
                Actions::Listed(set)
            }
            Test::VaultNone(_) => Actions::Vault,
            Test::ProxyNone(_) => Actions::One(VAULT_PROXY),
        }
    }
}

/// One rule of a block: what it tests and what it means.
#[derive(Debug)]
pub(crate) struct Rule {
    /// Its kind within the block (`email/allowed_domains`, `amount/USD/challenge`, `cedar/x`):
    /// with the place's source, its id.
    pub(crate) kind: String,
    pub(crate) outcome: Outcome,
    pub(crate) reason_code: String,
    pub(crate) reason: String,
    /// It grants (see the module doc): placed by bindings only.
    pub(crate) grants: bool,
    pub(crate) test: Test,
    pub(crate) reads: Reads,
}

/// A block, lowered.
#[derive(Debug, Default)]
pub(crate) struct Lowered {
    pub(crate) rules: Vec<Arc<Rule>>,
    /// Who approves its challenges, and for how long.
    pub(crate) approval: Option<ApprovalRules>,
    /// It lets pending agents through (only the guardrails may).
    pub(crate) allow_pending: bool,
}

/// A block placed: in the guardrails (for every agent) or by a binding (for its group).
#[derive(Debug)]
pub(crate) struct Placement {
    /// `global_guardrails`, `global_guardrails/<block>`, `<binding>/<block>`.
    pub(crate) source: String,
    /// The binding's group (`None` in the guardrails).
    pub(crate) group: Option<String>,
    /// The binding's actions.
    pub(crate) narrow: Option<Arc<ActionList>>,
    pub(crate) block: Arc<Lowered>,
    /// Bindings place the rules that grant; the guardrails do not.
    pub(crate) grants: bool,
}

impl Placement {
    /// The block's rules that this place holds.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.block
            .rules
            .iter()
            .filter(move |r| self.grants || !r.grants)
    }

    /// Who approves a rule of this place that challenges.
    pub(crate) fn approval_of(&self, rule: &Rule) -> Option<&ApprovalRules> {
        (rule.outcome == Outcome::Challenge)
            .then_some(self.block.approval.as_ref())
            .flatten()
    }
}

/// A spec's rules: the status guardrails, then the guardrails' inline rules and blocks, then
/// each binding's blocks, in the spec's order; problems met on the way are added to `errors`.
pub(crate) fn spec(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Placement> {
    let mut blocks = Blocks {
        lowered: HashMap::new(),
        bound: spec
            .bindings
            .iter()
            .flat_map(|b| b.blocks.iter().map(String::as_str))
            .collect(),
    };
    let g = &spec.global_guardrails;
    let inline = Arc::new(block(&g.inline_block(), "global_guardrails", true, errors));
    let guardrail_blocks: Vec<(&String, Arc<Lowered>)> = g
        .blocks
        .iter()
        .filter_map(|name| Some((name, blocks.get(spec, name, errors)?)))
        .collect();
    let allow_pending =
        inline.allow_pending || guardrail_blocks.iter().any(|(_, b)| b.allow_pending);
    let mut placed = vec![status_guardrails(allow_pending, g.approval.clone())];
    placed.push(Placement {
        source: "global_guardrails".into(),
        group: None,
        narrow: None,
        block: inline,
        grants: false,
    });
    for (name, block) in guardrail_blocks {
        placed.push(Placement {
            source: format!("global_guardrails/{name}"),
            group: None,
            narrow: None,
            block,
            grants: false,
        });
    }
    for binding in &spec.bindings {
        let narrow = binding
            .actions
            .as_ref()
            .filter(|a| !a.is_empty())
            .map(|a| Arc::new(ActionList::new(a.clone())));
        for name in &binding.blocks {
            let Some(block) = blocks.get(spec, name, errors) else {
                continue;
            };
            placed.push(Placement {
                source: format!("{}/{name}", binding.display_name()),
                group: Some(binding.group.clone()),
                narrow: narrow.clone(),
                block,
                grants: true,
            });
        }
    }
    placed
}

/// The blocks that no binding and no guardrail names, each placed as a binding would place it,
/// only for their errors: they never reach a compiled policy.
pub(crate) fn unused_blocks(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Placement> {
    let used = spec.used_blocks();
    spec.reusable_policy_blocks
        .iter()
        .filter(|(name, _)| !used.contains(name.as_str()))
        .map(|(name, b)| {
            let path = format!("reusable_policy_blocks.{name}");
            let block = block(b, &path, false, errors);
            Placement {
                source: format!("reusable_policy_blocks/{name}"),
                group: None,
                narrow: None,
                block: Arc::new(block),
                grants: true,
            }
        })
        .collect()
}

/// The reusable blocks lowered so far, each once.
struct Blocks<'s> {
    lowered: HashMap<String, Arc<Lowered>>,
    /// The blocks some binding places (their status is checked as a binding's: only the
    /// guardrails may let pending agents through).
    bound: BTreeSet<&'s str>,
}

impl Blocks<'_> {
    fn get(
        &mut self,
        spec: &PolicySpec,
        name: &str,
        errors: &mut Vec<SpecError>,
    ) -> Option<Arc<Lowered>> {
        if let Some(b) = self.lowered.get(name) {
            return Some(b.clone());
        }
        let written = spec.reusable_policy_blocks.get(name)?;
        let b = Arc::new(block(
            written,
            &format!("reusable_policy_blocks.{name}"),
            !self.bound.contains(name),
            errors,
        ));
        self.lowered.insert(name.to_owned(), b.clone());
        Some(b)
    }
}

/// The status guardrails every policy has: revoked and suspended agents are denied, pending
/// ones challenged unless the guardrails let them through.
fn status_guardrails(allow_pending: bool, approval: Option<ApprovalRules>) -> Placement {
    let status = |s: &'static str, outcome, code: &str, reason: &str| Rule {
        kind: s.into(),
        outcome,
        reason_code: code.into(),
        reason: reason.into(),
        grants: false,
        test: Test::Status(s),
        reads: Reads::default(),
    };
    let mut rules = vec![
        status(
            "revoked",
            Outcome::Deny,
            "agent_revoked",
            "the agent is revoked",
        ),
        status(
            "suspended",
            Outcome::Deny,
            "agent_suspended",
            "the agent is suspended",
        ),
    ];
    if !allow_pending {
        rules.push(status(
            "pending",
            Outcome::Challenge,
            "agent_pending",
            "the agent has not proven its key yet (pending)",
        ));
    }
    Placement {
        // `#` cannot appear in block names, so this source never clashes with a spec element.
        source: "global_guardrails#agent_status".into(),
        group: None,
        narrow: None,
        block: Arc::new(Lowered {
            rules: rules.into_iter().map(Arc::new).collect(),
            approval,
            allow_pending,
        }),
        grants: false,
    }
}

/// The rules being collected for one block.
struct Lowering<'a> {
    rules: Vec<Rule>,
    errors: &'a mut Vec<SpecError>,
}

impl Lowering<'_> {
    fn push(
        &mut self,
        kind: impl Into<String>,
        outcome: Outcome,
        code: &str,
        reason: String,
        test: Test,
        reads: Reads,
    ) -> &mut Rule {
        self.rules.push(Rule {
            kind: kind.into(),
            outcome,
            reason_code: code.into(),
            reason,
            grants: false,
            test,
            reads,
        });
        let last = self.rules.len() - 1;
        &mut self.rules[last]
    }

    /// `push`, for a rule that grants.
    fn grant(&mut self, kind: &str, code: &str, reason: &str, test: Test) {
        self.push(
            kind,
            Outcome::Allow,
            code,
            reason.into(),
            test,
            Reads::default(),
        )
        .grants = true;
    }
}

/// One block, lowered; `path` is where it is written, `in_guardrails` whether only the
/// guardrails place it.
fn block(block: &Block, path: &str, in_guardrails: bool, errors: &mut Vec<SpecError>) -> Lowered {
    // Written out field by field (no `..`): a part added to blocks must be lowered here.
    let Block {
        description: _,
        email,
        amount,
        actions,
        vault,
        status,
        reputation,
        cedar,
        approval,
    } = block;
    if let Some(a) = approval {
        validate::approval(a, path, errors);
    }
    let mut l = Lowering {
        rules: Vec::new(),
        errors,
    };
    if let Some(e) = email {
        l.email(e, &format!("{path}.email"));
    }
    if let Some(a) = amount {
        l.amount(a, &format!("{path}.amount"));
    }
    if let Some(a) = actions {
        l.actions(a, &format!("{path}.actions"));
    }
    if let Some(v) = vault {
        l.vault(v, &format!("{path}.vault"));
    }
    let mut allow_pending = false;
    if let Some(s) = status {
        validate::status(s, path, in_guardrails, l.errors);
        let StatusRules {
            allow_pending: pending,
            require_active,
        } = s;
        allow_pending = *pending;
        if *require_active {
            l.push(
                "status/require_active",
                Outcome::Deny,
                "agent_not_active",
                "only active agents may do this".into(),
                Test::NotActive,
                Reads::default(),
            );
        }
    }
    if let Some(r) = reputation {
        l.reputation(r);
    }
    for (i, raw) in cedar.iter().enumerate() {
        l.raw(raw, &format!("{path}.cedar[{i}]"));
    }
    Lowered {
        rules: l.rules.into_iter().map(Arc::new).collect(),
        approval: approval.clone(),
        allow_pending,
    }
}

impl Lowering<'_> {
    fn email(&mut self, e: &EmailRules, path: &str) {
        let EmailRules {
            allowed_domains,
            max_recipients,
            blocked_attachments,
            max_attachment_bytes,
            rate_limit_per_minute,
            rate_limit_per_day,
            on_violation,
        } = e;
        let bad = *on_violation;
        validate::on_violation(bad, path, self.errors);
        let reads = || Reads::fields(["email"]);
        self.grant(
            "email/allow",
            "email_allowed",
            "the email is within policy",
            Test::SendEmail,
        );
        if let Some(domains) = allowed_domains {
            let lower: BTreeSet<String> = domains
                .iter()
                .map(|d| d.trim().to_ascii_lowercase())
                .collect();
            let list: Vec<String> = lower.iter().cloned().collect();
            validate::domains(&list, path, self.errors);
            self.push(
                "email/allowed_domains",
                bad,
                "recipient_domain_not_allowed",
                format!("every recipient must be at {}", list.join(", ")),
                Test::Domains(lower),
                reads(),
            );
        }
        if let Some(max) = *max_recipients {
            self.push(
                "email/max_recipients",
                bad,
                "too_many_recipients",
                format!("at most {max} recipients (to, cc and bcc)"),
                Test::MaxRecipients(max),
                reads(),
            );
        }
        let (mut exts, mut types) = (BTreeSet::new(), BTreeSet::new());
        for entry in blocked_attachments {
            let entry = entry.trim().to_ascii_lowercase();
            if !validate::blocked_attachment(&entry, path, self.errors) {
                continue;
            }
            if entry.starts_with('.') {
                exts.insert(entry);
            } else {
                types.insert(entry);
            }
        }
        if !exts.is_empty() {
            self.push(
                "email/blocked_extensions",
                bad,
                "attachment_blocked",
                "an attachment has a blocked file type".into(),
                Test::Extensions(exts),
                reads(),
            );
        }
        if !types.is_empty() {
            self.push(
                "email/blocked_types",
                bad,
                "attachment_blocked",
                "an attachment has a blocked content type".into(),
                Test::Types(types),
                reads(),
            );
        }
        if let Some(max) = *max_attachment_bytes {
            validate::max_attachment_bytes(max, path, self.errors);
            self.push(
                "email/max_attachment_bytes",
                bad,
                "attachment_too_large",
                format!("attachments may be at most {max} bytes"),
                Test::MaxBytes(max),
                reads(),
            );
        }
        // The rate limits read the agent's email counts.
        let counted = || Reads {
            email_counts: true,
            ..reads()
        };
        if let Some(n) = *rate_limit_per_minute {
            self.push(
                "email/rate_limit_per_minute",
                Outcome::Deny,
                "rate_limit_exceeded",
                format!("at most {n} emails per minute per agent"),
                Test::PerMinute(n),
                counted(),
            );
        }
        if let Some(n) = *rate_limit_per_day {
            self.push(
                "email/rate_limit_per_day",
                Outcome::Deny,
                "rate_limit_exceeded",
                format!("at most {n} emails per day per agent"),
                Test::PerDay(n),
                counted(),
            );
        }
    }

    fn amount(&mut self, a: &AmountRules, path: &str) {
        let AmountRules {
            field,
            currency_field,
            limits,
            actions,
        } = a;
        if !validate::amount(a, path, self.errors) {
            return;
        }
        let mut checked = BTreeMap::new();
        for (currency, t) in limits {
            let tpath = format!("{path}.limits.{currency}");
            if let Some(bounds) = validate::thresholds(currency, t, &tpath, self.errors) {
                checked.insert(currency.clone(), bounds);
            }
        }
        let kind = Arc::new(AmountKind {
            actions: actions
                .as_ref()
                .filter(|x| !x.is_empty())
                .map(|x| ActionList::new(x.clone())),
            field: field.clone(),
            currency_field: currency_field.clone(),
            limits: checked,
        });
        let explicit = kind.explicit();
        let with_currency = || Reads::fields([field.as_str(), currency_field.as_str()]);
        for (currency, t) in limits {
            let Some(&(allow, challenge)) = kind.limits.get(currency) else {
                continue;
            };
            let challenge_up_to = t.challenge_up_to.unwrap_or(t.allow_up_to);
            let which = if currency == "*" {
                (!explicit.is_empty()).then(|| FieldGuard::HasNone(explicit.clone()))
            } else {
                Some(FieldGuard::Has(format!("{currency_field}={currency}")))
            };
            // The amount, and the currency when its rules test it.
            let reads = || match &which {
                Some(_) => with_currency(),
                None => Reads::fields([field.as_str()]),
            };
            let test = |above, up_to| Test::Amount {
                kind: kind.clone(),
                which: which.clone(),
                above,
                up_to,
            };
            let kind_name = format!("amount/{}", if currency == "*" { "any" } else { currency });
            self.push(
                format!("{kind_name}/allow"),
                Outcome::Allow,
                "amount_within_limit",
                format!("{} {currency} or less is allowed", t.allow_up_to),
                test(None, Some(allow)),
                reads(),
            )
            .grants = true;
            if challenge_up_to > t.allow_up_to {
                self.push(
                    format!("{kind_name}/challenge"),
                    Outcome::Challenge,
                    "amount_requires_approval",
                    format!("amounts over {} {currency} need approval", t.allow_up_to),
                    test(Some(allow), Some(challenge)),
                    reads(),
                );
            }
            self.push(
                format!("{kind_name}/deny"),
                Outcome::Deny,
                "amount_over_limit",
                format!("amounts over {challenge_up_to} {currency} are not allowed"),
                test(Some(challenge), None),
                reads(),
            );
        }
        self.push(
            "amount/negative",
            Outcome::Deny,
            "amount_invalid",
            "amounts may not be negative".into(),
            Test::Negative(kind.clone()),
            Reads::fields([field.as_str()]),
        );
        if !limits.contains_key("*") {
            self.push(
                "amount/unknown_currency",
                Outcome::Deny,
                "currency_not_allowed",
                format!(
                    "only {} are allowed",
                    limits.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
                Test::UnknownCurrency(kind.clone()),
                with_currency(),
            );
        }
    }

    fn actions(&mut self, a: &ActionRules, path: &str) {
        validate::action_lists(a, path, self.errors);
        let ActionRules {
            allow,
            challenge,
            deny,
        } = a;
        if !allow.is_empty() {
            let test = if allow.iter().any(|x| x == "*") {
                Test::AnyAction
            } else {
                Test::Actions(ActionList::new(allow.clone()))
            };
            self.push(
                "actions/allow",
                Outcome::Allow,
                "action_allowed",
                "the action is allowed".into(),
                test,
                Reads::default(),
            );
        }
        if !challenge.is_empty() {
            self.push(
                "actions/challenge",
                Outcome::Challenge,
                "action_requires_approval",
                "the action needs a human's approval".into(),
                Test::Actions(ActionList::new(challenge.clone())),
                Reads::default(),
            );
        }
        if !deny.is_empty() {
            self.push(
                "actions/deny",
                Outcome::Deny,
                "action_denied",
                "the action is not allowed".into(),
                Test::Actions(ActionList::new(deny.clone())),
                Reads::default(),
            );
        }
    }

    /// The vault block. Its restrictions hold for every vault action (`proxy_hosts` for
    /// `vault.proxy`), whatever the block allows; what they read is what an approver of a vault
    /// check is shown: the set, its environment, the keys and, for a proxied request, where it
    /// goes.
    fn vault(&mut self, v: &VaultRules, path: &str) {
        let VaultRules {
            allow,
            secret_sets,
            environments,
            proxy_hosts,
            require_approval,
            on_violation,
        } = v;
        let bad = *on_violation;
        validate::on_violation(bad, path, self.errors);
        let reads = |actions: &BTreeSet<String>| {
            let mut fields = vec!["secret_set", "environment", "keys"];
            if actions.contains(VAULT_PROXY) {
                fields.extend(["method", "target_host", "path"]);
            }
            Reads::fields(fields)
        };
        // `name=value` fields, as `context.fields` holds them.
        let fields = |name: &str, values: &[String]| -> BTreeSet<String> {
            values.iter().map(|v| format!("{name}={v}")).collect()
        };
        let every = vault_actions();
        if let Some(allow) = allow {
            let allowed = validate::vault_actions(allow, &format!("{path}.allow"), self.errors);
            if !allowed.is_empty() {
                self.grant(
                    "vault/allow",
                    "vault_allowed",
                    "the vault action is allowed",
                    Test::VaultAllow(allowed),
                );
            }
        }
        if let Some(sets) = secret_sets {
            let sets = validate::vault_names(
                sets,
                "secret set name",
                100,
                &format!("{path}.secret_sets"),
                self.errors,
            );
            self.push(
                "vault/secret_sets",
                bad,
                "secret_set_not_allowed",
                format!(
                    "vault actions are allowed only on the secret sets {}",
                    sets.join(", ")
                ),
                Test::VaultNone(fields("secret_set", &sets)),
                reads(&every),
            );
        }
        if let Some(envs) = environments {
            let envs = validate::vault_names(
                envs,
                "environment",
                64,
                &format!("{path}.environments"),
                self.errors,
            );
            self.push(
                "vault/environments",
                bad,
                "environment_not_allowed",
                format!(
                    "vault actions are allowed only on secret sets of the environments {}",
                    envs.join(", ")
                ),
                Test::VaultNone(fields("environment", &envs)),
                reads(&every),
            );
        }
        if let Some(hosts) = proxy_hosts {
            let hosts = validate::proxy_hosts(hosts, &format!("{path}.proxy_hosts"), self.errors);
            // The vault sends the target host and each `*.parent` of it as
            // `target_host_patterns`: a pattern of the spec matches when it is one of them.
            self.push(
                "vault/proxy_hosts",
                bad,
                "proxy_host_not_allowed",
                format!("the vault proxies only to {}", hosts.join(", ")),
                Test::ProxyNone(fields("target_host_patterns", &hosts)),
                reads(&BTreeSet::from([VAULT_PROXY.to_owned()])),
            );
        }
        if let Some(VaultApproval {
            actions,
            environments,
        }) = require_approval
        {
            let apath = format!("{path}.require_approval");
            let actions = match actions {
                Some(list) => {
                    validate::vault_actions(list, &format!("{apath}.actions"), self.errors)
                }
                None => every.clone(),
            };
            let mut reason = "the vault action needs a human's approval".to_owned();
            let environments = environments.as_ref().map(|envs| {
                let envs = validate::vault_names(
                    envs,
                    "environment",
                    64,
                    &format!("{apath}.environments"),
                    self.errors,
                );
                reason = format!("{reason} in {}", envs.join(", "));
                fields("environment", &envs)
            });
            if !actions.is_empty() {
                let reads = reads(&actions);
                self.push(
                    "vault/require_approval",
                    Outcome::Challenge,
                    "vault_requires_approval",
                    reason,
                    Test::VaultApproval {
                        actions,
                        environments,
                    },
                    reads,
                );
            }
        }
    }

    fn reputation(&mut self, r: &ReputationRules) {
        let ReputationRules {
            challenge_at,
            deny_at,
        } = r;
        for (tier, kind, outcome) in [
            (challenge_at, "reputation/challenge", Outcome::Challenge),
            (deny_at, "reputation/deny", Outcome::Deny),
        ] {
            if let Some(tier) = *tier {
                self.push(
                    kind,
                    outcome,
                    "risk_tier_too_high",
                    format!("the agent's risk tier is {} or higher", tier.as_str()),
                    Test::RiskAtLeast(tier),
                    Reads::default(),
                );
            }
        }
    }

    fn raw(&mut self, raw: &CedarRule, path: &str) {
        if !validate::raw_rule(raw, path, self.errors) {
            return;
        }
        let CedarRule {
            name,
            when,
            outcome,
            reason_code,
            reason,
        } = raw;
        self.push(
            format!("cedar/{name}"),
            *outcome,
            reason_code,
            reason.clone(),
            Test::Raw(Raw {
                path: format!("{path}.when"),
                name: name.clone(),
                when: when.clone(),
            }),
            raw_reads(when),
        );
    }
}

/// What a rule's condition reads of a check.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reads {
    /// The request facts an approver of a challenge is shown: context field names (numbers
    /// and `name=value` strings), and `email` for the email's facts.
    pub(crate) fields: BTreeSet<String>,
    /// The agent's email counts.
    pub(crate) email_counts: bool,
    /// The value of a numeric tag (raw Cedar; a built-in rule reads tags through its range).
    pub(crate) tag_values: bool,
    /// The numeric tags a raw condition names (`getTag` / `hasTag`).
    pub(crate) tags: BTreeSet<String>,
}

impl Reads {
    fn fields<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            fields: names.into_iter().map(str::to_owned).collect(),
            ..Self::default()
        }
    }
}

/// What a raw condition reads, from its parsed form (Cedar's JSON policy format): the fields of
/// `resource.getTag("f")` / `hasTag("f")` and of `"f=value"` strings when it reads
/// `context.fields`, `email` when it reads `context.email`, the email counts when it names
/// `sent_last_minute` or `sent_last_day` (an attribute or a record key), tag values when it
/// calls `getTag`. A condition that does not parse as a policy's reads everything.
fn raw_reads(when: &str) -> Reads {
    let text = format!("permit (principal, action, resource) when {{ ({when}) }};");
    let Some(json) = Policy::parse(None, text)
        .ok()
        .and_then(|p| p.to_json().ok())
    else {
        return Reads {
            email_counts: true,
            tag_values: true,
            ..Reads::default()
        };
    };
    let mut found = Found::default();
    if let Some(conditions) = json.get("conditions") {
        found.walk(conditions);
    }
    let is_field = |f: &str| {
        !f.is_empty() && f.len() <= 64 && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let tags: BTreeSet<String> = found.tags.into_iter().filter(|f| is_field(f)).collect();
    let mut fields = tags.clone();
    if found.context_fields {
        fields.extend(
            found
                .strings
                .iter()
                .filter_map(|s| s.split_once('='))
                .map(|(name, _)| name)
                .filter(|name| is_field(name))
                .map(str::to_owned),
        );
    }
    if found.context_email {
        fields.insert("email".to_owned());
    }
    Reads {
        fields,
        email_counts: found.email_counts,
        tag_values: found.get_tag,
        tags,
    }
}

/// What a walk through a condition in Cedar's JSON format met.
#[derive(Default)]
struct Found {
    /// The string literals naming a tag (`getTag` / `hasTag`).
    tags: Vec<String>,
    /// Every string literal.
    strings: Vec<String>,
    get_tag: bool,
    context_fields: bool,
    context_email: bool,
    email_counts: bool,
}

impl Found {
    fn walk(&mut self, node: &Value) {
        match node {
            Value::Object(map) => {
                for (key, child) in map {
                    self.node(key, child);
                    self.walk(child);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.walk(item)),
            _ => {}
        }
    }

    /// One `{key: child}` of the JSON form: an operator with its operands, or a literal.
    fn node(&mut self, key: &str, child: &Value) {
        let is_count = |name: &str| matches!(name, "sent_last_minute" | "sent_last_day");
        match key {
            "getTag" | "hasTag" => {
                self.get_tag |= key == "getTag";
                let tag = child.get("right").and_then(|r| r.get("Value"));
                if let Some(tag) = tag.and_then(Value::as_str) {
                    self.tags.push(tag.to_owned());
                }
            }
            "." | "has" => {
                let attr = child.get("attr").and_then(Value::as_str).unwrap_or("");
                self.email_counts |= is_count(attr);
                let of_context = child.get("left").and_then(|l| l.get("Var"))
                    == Some(&Value::String("context".into()));
                if key == "." && of_context {
                    self.context_fields |= attr == "fields";
                    self.context_email |= attr == "email";
                }
            }
            "Record" => {
                if let Some(record) = child.as_object() {
                    self.email_counts |= record.keys().any(|k| is_count(k));
                }
            }
            "Value" => {
                if let Some(text) = child.as_str() {
                    self.strings.push(text.to_owned());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse, Format};

    const SPEC: &str = "reusable_policy_blocks:\n  mail:\n    email: {allowed_domains: [example.com, 'bad domain'], rate_limit_per_day: 5}\n    status: {allow_pending: true}\nagent_groups:\n  - {name: a, members: [agt_0123456789abcdef0123456789abcdef]}\n  - {name: b, members: [agt_0123456789abcdef0123456789abcdee]}\nbindings:\n  - {group: a, blocks: [mail], actions: [send_email]}\n  - {group: b, blocks: [mail]}\nglobal_guardrails:\n  blocks: [mail]\n";

    #[test]
    fn a_block_placed_three_times_is_lowered_and_checked_once() {
        let spec = parse(SPEC, Format::Yaml).unwrap();
        let mut errors = Vec::new();
        let placed = spec_rules(&spec, &mut errors);
        // The status guardrails, the inline guardrails, the guardrails' `mail`, two bindings.
        assert_eq!(placed.len(), 5);
        let mail: Vec<&Placement> = placed
            .iter()
            .filter(|p| p.source.ends_with("/mail"))
            .collect();
        assert_eq!(mail.len(), 3);
        assert!(mail.iter().all(|p| Arc::ptr_eq(&p.block, &mail[0].block)));
        // Its bad domain once; `allow_pending` refused once (bindings may not relax it).
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "reusable_policy_blocks.mail.email.allowed_domains",
                "reusable_policy_blocks.mail.status.allow_pending"
            ]
        );
        // The guardrails' `allow_pending` counts: no pending challenge.
        assert!(placed[0].rules().all(|r| r.test != Test::Status("pending")));
    }

    #[test]
    fn guardrails_place_no_rule_that_grants_and_bindings_narrow_theirs() {
        let spec = parse(SPEC, Format::Yaml).unwrap();
        let placed = spec_rules(&spec, &mut Vec::new());
        let kinds = |p: &Placement| p.rules().map(|r| r.kind.clone()).collect::<Vec<_>>();
        let guardrail = &placed[2];
        assert_eq!(guardrail.group, None);
        assert_eq!(
            kinds(guardrail),
            ["email/allowed_domains", "email/rate_limit_per_day"]
        );
        let bound = &placed[3];
        assert_eq!(bound.group.as_deref(), Some("a"));
        assert_eq!(kinds(bound)[0], "email/allow");
        assert!(bound
            .narrow
            .as_ref()
            .is_some_and(|n| n.contains("send_email")));
        // The rate limit reads the agent's email counts; the domain rule shows the email.
        let rules: Vec<&Arc<Rule>> = bound.rules().collect();
        assert!(rules[2].reads.email_counts && !rules[1].reads.email_counts);
        assert!(rules[1].reads.fields.contains("email"));
    }

    fn spec_rules(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Placement> {
        super::spec(spec, errors)
    }
}
