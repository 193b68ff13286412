//! Emission: each element of a spec becomes rules, each rule a Cedar condition with its
//! meaning (outcome, reason code, reason, source) and what the emitter knows of it: which
//! actions it can match, the context field it tests, the bounds it puts on a numeric tag (the
//! index hints), and what it reads of a check (the request facts an approver is shown, the
//! agent's email counts, the value of a numeric tag). The compiled policy records the last two
//! from here, so nothing searches the Cedar text for them. The rules are then parsed into Cedar
//! policies (the guardrails) and templates linked per group (the bindings).

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{EntityUid, Policy, PolicyId};
use serde_json::Value;

use crate::spec::{
    ActionRules, AmountRules, ApprovalRules, Block, EmailRules, Outcome, PolicySpec, SpecError,
    VaultRules,
};
use acp_domain::RiskTier;

use super::index::{Compiled, FieldGuard, Placed, RuleMeta, TagRange};
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

fn actions_condition(actions: &[String]) -> String {
    if actions.len() == 1 {
        format!("context.action == {}", lit(&actions[0]))
    } else {
        format!("{}.contains(context.action)", set_lit(actions))
    }
}

/// Every rule of a spec: the status guardrails, then the guardrails' blocks, then each
/// binding's. Problems in the blocks' values are added to `errors` as they are met.
pub(super) fn rules(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Rule> {
    let mut rules = base_rules(spec);
    let mut raw_reads = HashMap::new();
    {
        let inline = spec.global_guardrails.inline_block();
        let mut e = Emitter {
            rules: &mut rules,
            errors: &mut *errors,
            group: None,
            source: "global_guardrails".into(),
            narrow: None,
            narrow_actions: None,
            scope: None,
            unusual: false,
            guard: None,
            reads: Reads::default(),
            allows: false,
            approval: None,
            raw_reads: &mut raw_reads,
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
            errors: &mut *errors,
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
            reads: Reads::default(),
            allows: true,
            approval: None,
            raw_reads: &mut raw_reads,
        };
        for name in &binding.blocks {
            if let Some(block) = spec.reusable_policy_blocks.get(name) {
                e.source = format!("{}/{name}", binding.display_name());
                e.block(block, &format!("reusable_policy_blocks.{name}"), false);
            }
        }
    }
    rules
}

/// The rules of the blocks that no binding and no guardrail names, emitted as a binding
/// would emit them, only for their errors: they never reach a compiled policy.
pub(super) fn unused_block_rules(spec: &PolicySpec, errors: &mut Vec<SpecError>) -> Vec<Rule> {
    let used: BTreeSet<&str> = spec
        .bindings
        .iter()
        .flat_map(|b| b.blocks.iter())
        .chain(spec.global_guardrails.blocks.iter())
        .map(String::as_str)
        .collect();
    let mut rules = Vec::new();
    let mut raw_reads = HashMap::new();
    for (name, block) in &spec.reusable_policy_blocks {
        if used.contains(name.as_str()) {
            continue;
        }
        let mut e = Emitter {
            rules: &mut rules,
            errors: &mut *errors,
            group: None,
            source: format!("reusable_policy_blocks/{name}"),
            narrow: None,
            narrow_actions: None,
            scope: None,
            unusual: false,
            guard: None,
            reads: Reads::default(),
            allows: true,
            approval: None,
            raw_reads: &mut raw_reads,
        };
        e.block(block, &format!("reusable_policy_blocks.{name}"), false);
    }
    rules
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
    /// What the rules being emitted read of a check (see `Reads`).
    reads: Reads,
    allows: bool,
    approval: Option<ApprovalRules>,
    /// What each raw condition met so far reads (a block bound many times is read once).
    raw_reads: &'a mut HashMap<String, Reads>,
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
            reads_email_counts: self.reads.email_counts,
            reads_tag_values: self.reads.tag_values,
            raw_tags: self.reads.tags.iter().cloned().collect(),
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
                    self.reads.fields.iter().cloned().collect()
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
            validate::approval(a, path, self.errors);
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
        if let Some(vault) = &block.vault {
            self.vault(vault, &format!("{path}.vault"));
        }
        self.scope = None;
        if let Some(status) = &block.status {
            validate::status(status, path, in_guardrails, self.errors);
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
            if !validate::raw_rule(raw, &rpath, self.errors) {
                continue;
            }
            self.reads = self
                .raw_reads
                .entry(raw.when.clone())
                .or_insert_with(|| raw_reads(&raw.when))
                .clone();
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
            self.reads = Reads::default();
        }
    }

    fn email(&mut self, e: &EmailRules, path: &str) {
        let is_email = "context.action == \"send_email\"".to_string();
        self.scope = Some(Arc::new(BTreeSet::from(["send_email".to_owned()])));
        self.reads = Reads::fields(["email"]);
        let bad = e.on_violation;
        validate::on_violation(bad, path, self.errors);
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
            validate::domains(&lower, path, self.errors);
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
            validate::max_attachment_bytes(max, path, self.errors);
            self.rule(
                "email/max_attachment_bytes",
                bad,
                "attachment_too_large",
                format!("attachments may be at most {max} bytes"),
                format!("{is_email} && context.email.max_attachment_bytes > {max}"),
            );
        }
        // The rate limits read the agent's email counts.
        self.reads.email_counts = true;
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
        self.reads = Reads::default();
    }

    fn amount(&mut self, a: &AmountRules, path: &str) {
        if !validate::amount(a, path, self.errors) {
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
            let Some((allow, challenge)) = validate::thresholds(currency, t, &tpath, self.errors)
            else {
                continue;
            };
            let challenge_up_to = t.challenge_up_to.unwrap_or(t.allow_up_to);
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
            // The amount, and the currency when its rules test it.
            self.reads = match &guard {
                Some(_) => Reads::fields([a.field.as_str(), a.currency_field.as_str()]),
                None => Reads::fields([a.field.as_str()]),
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
        self.reads = Reads::fields([a.field.as_str()]);
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
            self.reads = Reads::fields([a.field.as_str(), a.currency_field.as_str()]);
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
        self.reads = Reads::default();
    }

    /// The vault block. Its restrictions hold for every vault action (`proxy_hosts` for
    /// `vault.proxy`), whatever the block allows; what they read is what an approver of a vault
    /// check is shown: the set, its environment, the keys and, for a proxied request, where it
    /// goes.
    fn vault(&mut self, v: &VaultRules, path: &str) {
        let bad = v.on_violation;
        validate::on_violation(bad, path, self.errors);
        let every: Vec<String> = validate::VAULT_ACTIONS
            .iter()
            .map(|(_, full)| (*full).to_owned())
            .collect();
        let is_vault = actions_condition(&every);
        let reads = |actions: &[String]| {
            let mut fields = vec!["secret_set", "environment", "keys"];
            if actions.iter().any(|a| a == "vault.proxy") {
                fields.extend(["method", "target_host", "path"]);
            }
            Reads::fields(fields)
        };
        // `name=value` fields, as `context.fields` holds them.
        let fields = |name: &str, values: &[String]| -> Vec<String> {
            values.iter().map(|v| format!("{name}={v}")).collect()
        };
        if let Some(allow) = &v.allow {
            let allowed: Vec<String> =
                validate::vault_actions(allow, &format!("{path}.allow"), self.errors)
                    .into_iter()
                    .collect();
            if self.allows && !allowed.is_empty() {
                self.scope = action_scope(&allowed);
                self.rule(
                    "vault/allow",
                    Outcome::Allow,
                    "vault_allowed",
                    "the vault action is allowed".into(),
                    actions_condition(&allowed),
                );
            }
        }
        self.scope = action_scope(&every);
        self.reads = reads(&every);
        if let Some(sets) = &v.secret_sets {
            let sets = validate::vault_names(
                sets,
                "secret set name",
                100,
                &format!("{path}.secret_sets"),
                self.errors,
            );
            let sets_fields = fields("secret_set", &sets);
            self.guard = Some(FieldGuard::HasNone(sets_fields.iter().cloned().collect()));
            self.rule(
                "vault/secret_sets",
                bad,
                "secret_set_not_allowed",
                format!(
                    "vault actions are allowed only on the secret sets {}",
                    sets.join(", ")
                ),
                format!(
                    "{is_vault} && !context.fields.containsAny({})",
                    set_lit(&sets_fields)
                ),
            );
        }
        if let Some(envs) = &v.environments {
            let envs = validate::vault_names(
                envs,
                "environment",
                64,
                &format!("{path}.environments"),
                self.errors,
            );
            let env_fields = fields("environment", &envs);
            self.guard = Some(FieldGuard::HasNone(env_fields.iter().cloned().collect()));
            self.rule(
                "vault/environments",
                bad,
                "environment_not_allowed",
                format!(
                    "vault actions are allowed only on secret sets of the environments {}",
                    envs.join(", ")
                ),
                format!(
                    "{is_vault} && !context.fields.containsAny({})",
                    set_lit(&env_fields)
                ),
            );
        }
        if let Some(hosts) = &v.proxy_hosts {
            let hosts = validate::proxy_hosts(hosts, &format!("{path}.proxy_hosts"), self.errors);
            // The vault sends the target host and each `*.parent` of it as
            // `target_host_patterns`: a pattern of the spec matches when it is one of them.
            let host_fields = fields("target_host_patterns", &hosts);
            let proxy = vec!["vault.proxy".to_owned()];
            self.scope = action_scope(&proxy);
            self.reads = reads(&proxy);
            self.guard = Some(FieldGuard::HasNone(host_fields.iter().cloned().collect()));
            self.rule(
                "vault/proxy_hosts",
                bad,
                "proxy_host_not_allowed",
                format!("the vault proxies only to {}", hosts.join(", ")),
                format!(
                    "{} && !context.fields.containsAny({})",
                    actions_condition(&proxy),
                    set_lit(&host_fields)
                ),
            );
        }
        self.guard = None;
        if let Some(approval) = &v.require_approval {
            let apath = format!("{path}.require_approval");
            let actions: Vec<String> = match &approval.actions {
                Some(list) => {
                    validate::vault_actions(list, &format!("{apath}.actions"), self.errors)
                        .into_iter()
                        .collect()
                }
                None => every.clone(),
            };
            let mut condition = actions_condition(&actions);
            let mut reason = "the vault action needs a human's approval".to_owned();
            if let Some(envs) = &approval.environments {
                let envs = validate::vault_names(
                    envs,
                    "environment",
                    64,
                    &format!("{apath}.environments"),
                    self.errors,
                );
                let env_fields = fields("environment", &envs);
                if let [only] = env_fields.as_slice() {
                    self.guard = Some(FieldGuard::Has(only.clone()));
                }
                condition = format!(
                    "{condition} && context.fields.containsAny({})",
                    set_lit(&env_fields)
                );
                reason = format!("{reason} in {}", envs.join(", "));
            }
            if !actions.is_empty() {
                self.scope = action_scope(&actions);
                self.reads = reads(&actions);
                self.rule(
                    "vault/require_approval",
                    Outcome::Challenge,
                    "vault_requires_approval",
                    reason,
                    condition,
                );
            }
            self.guard = None;
        }
        self.reads = Reads::default();
    }

    fn actions(&mut self, a: &ActionRules, path: &str) {
        validate::action_lists(a, path, self.errors);
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

/// What a rule's condition reads of a check.
#[derive(Debug, Clone, Default)]
pub(super) struct Reads {
    /// The request facts an approver of a challenge is shown: context field names (numbers
    /// and `name=value` strings), and `email` for the email's facts.
    fields: BTreeSet<String>,
    /// The agent's email counts.
    email_counts: bool,
    /// The value of a numeric tag (raw Cedar; a built-in rule reads tags through its range).
    tag_values: bool,
    /// The numeric tags a raw condition names (`getTag` / `hasTag`).
    tags: BTreeSet<String>,
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
        reads_email_counts: false,
        reads_tag_values: false,
        raw_tags: Vec::new(),
        condition: format!("principal.status == {}", lit(status)),
        raw: None,
    }
}

/// The status guardrails every policy has: revoked and suspended agents are denied, pending
/// ones challenged unless the guardrails let them through.
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
