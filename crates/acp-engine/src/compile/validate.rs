//! Validation: what a spec must satisfy besides its shape (which [`crate::spec`] reads):
//! names and references, the values of each built-in block, raw Cedar conditions, and the
//! compiled Cedar checked in strict mode against `schemas/acp.cedarschema`, with each error
//! pointed back at the part of the spec it comes from. The lowering calls the block checks as it
//! meets each block, so errors come out in the order of the spec.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{PolicyId, PolicySet, Schema, ValidationMode, Validator};

use crate::spec::{
    nearest, ActionRules, AmountRules, ApprovalRules, CedarRule, Outcome, PolicySpec, SpecError,
    StatusRules, Threshold,
};

use super::index::scaled;

const SCHEMA_TEXT: &str = include_str!("../../../../schemas/acp.cedarschema");

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

pub(super) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

pub(super) fn is_code(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

pub(super) fn is_action(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .all(|c| !c.is_control() && c != '"' && c != '\\')
}

/// Checks the spec's names and references: blocks, groups and their members and selectors,
/// bindings.
pub(super) fn structure(spec: &PolicySpec, errors: &mut Vec<SpecError>) {
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
            if !acp_domain::ids::has_shape(m, acp_domain::ids::AGENT) {
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
                format!(
                    "no group `{}`{}",
                    b.group,
                    did_you_mean(&b.group, groups.iter().map(String::as_str))
                ),
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
                    format!("no block `{block}`{}", block_hint(spec, block)),
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
                format!("no block `{block}`{}", block_hint(spec, block)),
            ));
        }
    }
}

/// `; did you mean `x`?` when one of `names` is close to `word` (a likely typo), else nothing.
fn did_you_mean<'a>(word: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    nearest(word, &names)
        .map(|n| format!("; did you mean `{n}`?"))
        .unwrap_or_default()
}

fn block_hint(spec: &PolicySpec, block: &str) -> String {
    did_you_mean(
        block,
        spec.reusable_policy_blocks.keys().map(String::as_str),
    )
}

/// What a raw condition that reads `context.<name>` is told: the check's context fields are
/// not attributes of `context` in the compiled policy.
pub(super) fn context_hint(name: &str) -> String {
    format!(
        "; the check's context fields are not attributes of `context`: read a string or boolean field as `context.fields.contains(\"{name}=value\")`, and a number as `resource.hasTag(\"{name}\") && resource.getTag(\"{name}\") > N`, where N is in ten-thousandths (12.5 is 125000)"
    )
}

/// The attribute an error says `context` does not have.
fn missing_context_attribute(message: &str) -> Option<&str> {
    let rest = message.split("attribute `").nth(1)?;
    let (name, after) = rest.split_once('`')?;
    after.starts_with(" in context not found").then_some(name)
}

/// A raw `cedar` rule as the user wrote it, for errors that point at it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Raw {
    /// Its spec path, e.g. `reusable_policy_blocks.b.cedar[0].when`.
    pub(super) path: String,
    pub(super) name: String,
    pub(crate) when: String,
}

/// A block's approval settings.
pub(super) fn approval(a: &ApprovalRules, path: &str, errors: &mut Vec<SpecError>) {
    for (i, email) in a.approvers.iter().enumerate() {
        if acp_domain::EmailAddress::parse(email).is_err() {
            errors.push(SpecError::new(
                format!("{path}.approval.approvers[{i}]"),
                format!("`{email}` is not an email address"),
            ));
        }
    }
    if a.approver_role
        .as_deref()
        .is_some_and(|r| acp_domain::Role::parse(r).is_none())
    {
        errors.push(SpecError::new(
            format!("{path}.approval.approver_role"),
            "must be `owner`, `admin`, `approver` or `member`",
        ));
    }
    if a.ttl_secs.is_some_and(|t| !(30..=86_400).contains(&t)) {
        errors.push(SpecError::new(
            format!("{path}.approval.ttl_secs"),
            "must be between 30 and 86400",
        ));
    }
}

/// A block's status rules: only the guardrails may let pending agents through.
pub(super) fn status(
    status: &StatusRules,
    path: &str,
    in_guardrails: bool,
    errors: &mut Vec<SpecError>,
) {
    if status.allow_pending && !in_guardrails {
        errors.push(SpecError::new(
            format!("{path}.status.allow_pending"),
            "`allow_pending` can only be set in `global_guardrails` (a binding cannot relax it)",
        ));
    }
}

/// A raw Cedar rule at `path`: whether its condition can be emitted (a bad name or reason
/// code is reported, but does not keep the condition from being checked further).
pub(super) fn raw_rule(raw: &CedarRule, path: &str, errors: &mut Vec<SpecError>) -> bool {
    if !is_name(&raw.name) {
        errors.push(SpecError::new(
            format!("{path}.name"),
            "use 1-64 letters, digits, `_ - . :`",
        ));
    }
    if !is_code(&raw.reason_code) {
        errors.push(SpecError::new(
            format!("{path}.reason_code"),
            "use snake_case (a-z, 0-9, _)",
        ));
    }
    if raw.when.trim().is_empty() {
        errors.push(SpecError::new(
            format!("{path}.when"),
            "a Cedar condition is required",
        ));
        return false;
    }
    // Parsed alone first: errors then point into the user's own text, and a condition cannot
    // close the policy it is put in.
    if let Err(e) = cedar_policy::Expression::from_str(&raw.when) {
        errors.push(SpecError::new(
            format!("{path}.when"),
            format!(
                "rule `{}`: {}{}",
                raw.name,
                first_line(&e.to_string()),
                quote(&raw.when, first_span(&e))
            ),
        ));
        return false;
    }
    true
}

/// An email or vault block's outcome for a violation: `deny` or `challenge`.
pub(super) fn on_violation(outcome: Outcome, path: &str, errors: &mut Vec<SpecError>) {
    if outcome == Outcome::Allow {
        errors.push(SpecError::new(
            format!("{path}.on_violation"),
            "must be `deny` or `challenge`",
        ));
    }
}

/// An email block's allowed domains (trimmed and lowercased).
pub(super) fn domains(domains: &[String], path: &str, errors: &mut Vec<SpecError>) {
    if domains
        .iter()
        .any(|d| d.is_empty() || !d.contains('.') && d != "localhost" || !is_action(d))
    {
        errors.push(SpecError::new(
            format!("{path}.allowed_domains"),
            "each entry must be a domain name",
        ));
    }
}

/// One entry of an email block's blocked attachments (trimmed and lowercased): whether it is a
/// `.ext` extension or a content type.
pub(super) fn blocked_attachment(entry: &str, path: &str, errors: &mut Vec<SpecError>) -> bool {
    if entry.len() < 2 || !is_action(entry) {
        errors.push(SpecError::new(
            format!("{path}.blocked_attachments"),
            "entries are `.ext` extensions or content types",
        ));
        return false;
    }
    true
}

/// An email block's attachment size limit.
pub(super) fn max_attachment_bytes(max: u64, path: &str, errors: &mut Vec<SpecError>) {
    if max > i64::MAX as u64 {
        errors.push(SpecError::new(
            format!("{path}.max_attachment_bytes"),
            "is too large",
        ));
    }
}

/// An amount block's field names and currencies: whether its rules can be emitted.
pub(super) fn amount(a: &AmountRules, path: &str, errors: &mut Vec<SpecError>) -> bool {
    for (field, name) in [(&a.field, "field"), (&a.currency_field, "currency_field")] {
        if !field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            || field.is_empty()
            || field.len() > 64
        {
            errors.push(SpecError::new(
                format!("{path}.{name}"),
                "must be a context field name (letters, digits, _)",
            ));
            return false;
        }
    }
    if a.limits.is_empty() {
        errors.push(SpecError::new(
            format!("{path}.limits"),
            "give at least one currency (or `*`)",
        ));
        return false;
    }
    true
}

/// One currency of an amount block (at `path`, its `limits.<currency>`): its allow and
/// challenge limits as the tag values its rules compare with, or `None` when the currency or
/// its thresholds are not valid.
pub(super) fn thresholds(
    currency: &str,
    t: &Threshold,
    path: &str,
    errors: &mut Vec<SpecError>,
) -> Option<(i64, i64)> {
    if currency != "*"
        && !(currency.len() <= 12 && currency.bytes().all(|b| b.is_ascii_alphanumeric()))
    {
        errors.push(SpecError::new(
            path,
            "currency codes are letters and digits (or `*`)",
        ));
        return None;
    }
    let challenge_up_to = t.challenge_up_to.unwrap_or(t.allow_up_to);
    let (Some(allow), Some(challenge)) = (scaled(t.allow_up_to), scaled(challenge_up_to)) else {
        errors.push(SpecError::new(
            path,
            "thresholds must be finite numbers below 9e14",
        ));
        return None;
    };
    if t.allow_up_to < 0.0 || challenge_up_to < t.allow_up_to {
        errors.push(SpecError::new(
            path,
            "need 0 <= allow_up_to <= challenge_up_to",
        ));
        return None;
    }
    Some((allow, challenge))
}

/// An actions block's lists: each entry an action name.
pub(super) fn action_lists(a: &ActionRules, path: &str, errors: &mut Vec<SpecError>) {
    for (list, name) in [
        (&a.allow, "allow"),
        (&a.challenge, "challenge"),
        (&a.deny, "deny"),
    ] {
        if let Some(bad) = list.iter().find(|x| !is_action(x)) {
            errors.push(SpecError::new(
                format!("{path}.{name}"),
                format!("`{bad}` is not an action name"),
            ));
        }
    }
}

/// The vault's actions: the short name a spec may write, and the action the vault checks.
pub(super) const VAULT_ACTIONS: [(&str, &str); 3] = [
    ("mint_lease", "vault.mint_lease"),
    ("proxy", "vault.proxy"),
    ("read", "vault.read"),
];

/// A vault block's list of actions (`allow`, `require_approval.actions`) at `path`: the
/// actions it names, by the names checks use (`*` alone for all three).
pub(super) fn vault_actions(
    list: &[String],
    path: &str,
    errors: &mut Vec<SpecError>,
) -> BTreeSet<String> {
    let every = || VAULT_ACTIONS.iter().map(|(_, a)| (*a).to_owned()).collect();
    if list.is_empty() {
        errors.push(SpecError::new(
            path,
            "list one or more of `read`, `proxy`, `mint_lease` (or `*` for all three)",
        ));
        return BTreeSet::new();
    }
    if list.iter().any(|a| a.trim() == "*") {
        if list.len() > 1 {
            errors.push(SpecError::new(
                path,
                "`*` stands for every vault action: write it alone",
            ));
        }
        return every();
    }
    let mut actions = BTreeSet::new();
    for (i, entry) in list.iter().enumerate() {
        let entry = entry.trim();
        // Every spelling the vault accepts (`proxy_use`, `mint_request_lease` too).
        match acp_domain::VaultAction::parse(entry) {
            Some(action) => {
                actions.insert(action.check_action().to_owned());
            }
            None => {
                let shorts: Vec<&str> = VAULT_ACTIONS.iter().map(|(short, _)| *short).collect();
                let hint = nearest(entry.trim_start_matches("vault."), &shorts)
                    .map(|n| format!(" (did you mean `{n}`?)"))
                    .unwrap_or_default();
                errors.push(SpecError::new(
                    format!("{path}[{i}]"),
                    format!("`{entry}` is not a vault action; use `read`, `proxy` or `mint_lease`{hint}"),
                ));
            }
        }
    }
    actions
}

/// A vault block's secret set names or environments at `path` (trimmed, sorted, without
/// repeats): each as the vault accepts it, at most `max` printable characters.
pub(super) fn vault_names(
    list: &[String],
    what: &str,
    max: usize,
    path: &str,
    errors: &mut Vec<SpecError>,
) -> Vec<String> {
    if list.is_empty() {
        errors.push(SpecError::new(
            path,
            format!("list one or more {what}s (leave the key out for any)"),
        ));
    }
    let mut names = BTreeSet::new();
    for (i, name) in list.iter().enumerate() {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > max || name.chars().any(char::is_control) {
            errors.push(SpecError::new(
                format!("{path}[{i}]"),
                format!("a {what} is 1-{max} printable characters"),
            ));
            continue;
        }
        names.insert(name.to_owned());
    }
    names.into_iter().collect()
}

/// A vault block's proxy hosts at `path` (trimmed, lower-cased, sorted, without repeats): host
/// names or `*.domain` patterns, as the vault's proxy profiles write them.
pub(super) fn proxy_hosts(list: &[String], path: &str, errors: &mut Vec<SpecError>) -> Vec<String> {
    if list.is_empty() {
        errors.push(SpecError::new(
            path,
            "list one or more hosts (leave the key out for any)",
        ));
    }
    let mut hosts = BTreeSet::new();
    for (i, written) in list.iter().enumerate() {
        let host = written.trim().to_ascii_lowercase();
        let bare = host.strip_prefix("*.").unwrap_or(&host);
        let ok = !bare.is_empty()
            && bare.len() <= 253
            && !bare.starts_with('.')
            && !bare.ends_with('.')
            && !bare.contains("..")
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok {
            errors.push(SpecError::new(
                format!("{path}[{i}]"),
                format!("`{written}` is not a host name or `*.domain` pattern"),
            ));
            continue;
        }
        hosts.insert(host);
    }
    hosts.into_iter().collect()
}

/// Rule ids (with their sources) are unique: a block bound twice to one binding would repeat
/// its rules.
pub(super) fn unique_ids<'a>(
    rules: impl IntoIterator<Item = (&'a str, &'a str)>,
    errors: &mut Vec<SpecError>,
) {
    let mut seen = BTreeSet::new();
    for (id, source) in rules {
        if !seen.insert(id) {
            errors.push(SpecError::new(
                source,
                format!("rule `{id}` appears twice (a block bound twice to the same binding?)"),
            ));
        }
    }
}

/// Where a compiled Cedar policy or template comes from, for errors that point at the spec.
pub(super) struct Origin {
    /// The rule's id.
    pub(super) rule: String,
    /// The spec element that produced it.
    pub(super) source: String,
    /// For a raw rule: what the user wrote, and the Cedar text the error's place is counted in.
    pub(super) written: Option<(Raw, String)>,
}

/// Strict validation of the compiled rules (`all`: the guardrail rules, and each binding
/// template once, since a rule's types do not depend on which group it is linked to) against
/// the schema. Each error names its rule; one of a raw rule points into its condition.
pub(super) fn against_schema(
    all: &PolicySet,
    origin: impl Fn(&PolicyId) -> Origin,
    errors: &mut Vec<SpecError>,
) -> Result<(), SpecError> {
    let schema = schema()?;
    let result = Validator::new(schema.clone()).validate(all, ValidationMode::Strict);
    for err in result.validation_errors() {
        let id = err.policy_id();
        let Origin {
            rule,
            source,
            written,
        } = origin(id);
        let message = strip_policy_id(&first_line(&err.to_string()), id.as_ref());
        match written {
            Some((raw, text)) => {
                let span = first_span(err).and_then(|(at, len)| {
                    let start = text.rfind(&format!("({})", raw.when))? + 1;
                    (at >= start && at + len <= start + raw.when.len()).then(|| (at - start, len))
                });
                // Cedar's own hint for a context attribute (`did you mean `action`?`) misleads:
                // a context field is read otherwise.
                let help = match missing_context_attribute(&message) {
                    Some(name) => context_hint(name),
                    None => help_text(err),
                };
                errors.push(SpecError::new(
                    raw.path.clone(),
                    format!(
                        "rule `{}`: {message}{}{help}",
                        raw.name,
                        quote(&raw.when, span),
                    ),
                ));
            }
            None => errors.push(SpecError::new(source, format!("rule `{rule}`: {message}"))),
        }
    }
    Ok(())
}

pub(super) fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

/// The place (byte offset and length) of a Cedar error's first label.
pub(super) fn first_span(err: &dyn miette::Diagnostic) -> Option<(usize, usize)> {
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
pub(super) fn quote(when: &str, span: Option<(usize, usize)>) -> String {
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
