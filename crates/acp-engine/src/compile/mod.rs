//! Compilation: a spec becomes a Cedar policy set, validated in strict mode against
//! `schemas/acp.cedarschema`, with deterministic text. Pure: no I/O.
//!
//! Every rule of the spec compiles to one Cedar `permit` that means "this rule matches"; its
//! outcome (allow, challenge, deny), reason code, reason and source ride along as annotations.
//! Evaluation collects the matching rules and applies deny > challenge > allow, with default
//! deny. Guardrail rules are unscoped; binding rules are scoped to `principal in Group::"..."`.
//! The compiled form keeps one Cedar policy set for the guardrails and one per bound group, so a
//! check evaluates only the rules that can apply to its agent; groups whose bound rules decide
//! alike (bound to the same blocks the same way) share one set, its bound rules linked to a
//! class entity that their agents are children of, and each group keeps only what its own
//! rules mean (their source names its binding); each set is indexed by the actions
//! its rules test, and status and reputation rules sit apart, evaluated only for agents that are
//! not active or above low risk. Within an action, rules that test one value of a context field
//! (an amount block's currency) are indexed by that value too, and rules that bound a numeric tag
//! (an amount block's thresholds) by the interval of the tag's value. The indexes only skip rules
//! that cannot match: every condition still tests its action, status, fields and amounts itself
//! (the policy tests check both ways agree).
//!
//! In four parts, run in this order by [`compile_with`]: [`lower`] (each block read once into
//! typed rules: what each tests, means and reads of a check; the semantic diff reads the same
//! rules), [`validate`] (names, references, block values as `lower` meets them, and the Cedar
//! in strict mode against the schema), [`emit`] (each rule's Cedar and index hints, from its
//! test), [`index`] (the rule sets and their indexes, which evaluation reads).

mod emit;
mod index;
pub(crate) mod lower;
mod validate;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet};

use super::limits::{self, Budget};
use super::spec::{PolicySpec, Selector, SpecError};

use emit::{cedar_text, Rule, Shape, Templates};
pub(crate) use index::FieldGuard;
pub use index::{scaled, tag_value, GroupRules, Indexed, Picked, RuleMeta, RuleSet};
pub use validate::schema;

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
    /// Per group that some binding names. Groups whose bound rules decide alike share one
    /// rule set: ten thousand groups bound to ten blocks hold ten sets.
    pub groups: BTreeMap<String, GroupRules>,
    /// Explicit members: agent id → groups.
    pub members: HashMap<String, Vec<String>>,
    /// Groups with selectors.
    pub selectors: Vec<(String, Vec<Selector>)>,
    /// Some rule reads the agent's email counts (an email rate limit, or raw Cedar that names
    /// `sent_last_minute` / `sent_last_day`), as the emitter recorded it.
    pub counts_emails: bool,
    /// Every rule that reads a numeric tag's value has a `range` on that tag (no raw Cedar
    /// condition calls `getTag`), as the emitter recorded it: a check's decision then depends
    /// on the tag an interval index is built on only through the interval its value falls in
    /// (see `evaluate`'s decision cache; other tags count by value there).
    pub tags_read_by_ranges_only: bool,
    /// The context fields some rule reads as numbers (an `amount` block's `field`, a tag that
    /// raw Cedar names), in name order, each with the actions of those rules: a check whose
    /// context holds one of them as another JSON type gets a warning (see
    /// `evaluate::field_warnings`), found without parsing anything per check.
    pub number_fields: Vec<NumberField>,
}

/// A context field that rules read as a number, and for which actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberField {
    pub name: String,
    /// The actions of the rules reading it; `None`: some rule reads it for any action.
    pub actions: Option<BTreeSet<String>>,
}

impl NumberField {
    /// Whether a check of `action` has a rule that reads this field.
    pub fn read_for(&self, action: &str) -> bool {
        self.actions.as_ref().is_none_or(|a| a.contains(action))
    }
}

/// The fields the rules read as numbers, merged by name (see `CompiledPolicy::number_fields`).
fn number_fields(rules: &[Rule]) -> Vec<NumberField> {
    let mut by_name: BTreeMap<&str, Option<BTreeSet<String>>> = BTreeMap::new();
    for rule in rules {
        let tags = rule
            .range
            .iter()
            .map(|r| r.tag())
            .chain(rule.raw_tags.iter().map(String::as_str));
        for tag in tags {
            let entry = by_name.entry(tag).or_insert_with(|| Some(BTreeSet::new()));
            match (entry.as_mut(), &rule.actions) {
                (Some(known), Some(actions)) => known.extend(actions.iter().cloned()),
                _ => *entry = None,
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, actions)| NumberField {
            name: name.to_owned(),
            actions,
        })
        .collect()
}

/// The errors of the blocks that no binding and no guardrail uses, found as if a binding used
/// them: their values, and their raw Cedar in strict mode against the schema. Not part of
/// [`compile`], so that a stored policy holding such a block still loads; `acp policy
/// validate` and the sync endpoint report them with the spec's other errors.
pub fn unused_block_errors(spec: &PolicySpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let rules = emit::unused_block_rules(spec, &mut errors);
    let refs: Vec<&Rule> = rules.iter().collect();
    let placed = emit::static_rules(&refs, &mut errors);
    if !errors.is_empty() || placed.is_empty() {
        return errors;
    }
    let mut all = PolicySet::new();
    for p in placed {
        if let index::Compiled::Static(policy) = p.compiled {
            let _ = all.add(*policy);
        }
    }
    let by_id: HashMap<&str, &Rule> = rules.iter().map(|r| (r.id.as_str(), r)).collect();
    let origin = |id: &cedar_policy::PolicyId| {
        let rule = by_id.get(id.to_string().as_str());
        validate::Origin {
            rule: id.to_string(),
            source: rule.map(|r| r.meta.source.clone()).unwrap_or_default(),
            written: rule.and_then(|r| r.raw.clone().map(|raw| (raw, cedar_text(r)))),
        }
    };
    if let Err(e) = validate::against_schema(&all, origin, &mut errors) {
        errors.push(e);
    }
    errors
}

/// The entity the bound rules of the `n`th shared rule set are linked to. Its type is not in
/// the schema, so no rule a spec writes can name it (raw Cedar is validated strictly).
fn class_uid(n: usize) -> Result<EntityUid, SpecError> {
    let class = EntityTypeName::from_str("RuleClass")
        .map_err(|e| SpecError::new("bindings", format!("no rule class: {e}")))?;
    Ok(EntityUid::from_type_name_and_id(
        class,
        EntityId::new(n.to_string()),
    ))
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
    validate::structure(spec, &mut errors);
    let rules = emit::rules(spec, &mut errors);
    validate::unique_ids(
        rules
            .iter()
            .map(|r| (r.id.as_str(), r.meta.source.as_str())),
        &mut errors,
    );

    budget.check().map_err(stop)?;
    let cedar: String = rules.iter().map(cedar_text).collect::<Vec<_>>().join("\n");
    budget.charge(cedar.len());
    let guardrail_rules: Vec<&Rule> = rules.iter().filter(|r| r.group.is_none()).collect();
    let guardrail_placed = emit::static_rules(&guardrail_rules, &mut errors);
    budget.check().map_err(stop)?;
    let guardrails = index::index(&guardrail_placed, &mut errors, budget);
    let mut groups = BTreeMap::new();
    let mut bound: BTreeMap<&String, Vec<&Rule>> = BTreeMap::new();
    for rule in &rules {
        if let Some(group) = &rule.group {
            bound.entry(group).or_default().push(rule);
        }
    }
    let mut templates = Templates::default();
    // The sets built so far, by their shape's key: each with its shape, its class and the ids
    // its bound rules have in it (the first group's rule ids, in the group's order).
    type Built<'a> = (Shape<'a>, Arc<RuleSet>, EntityUid, Vec<PolicyId>);
    let mut built: HashMap<Vec<[&str; 3]>, Vec<Built<'_>>> = HashMap::new();
    let mut classes = 0usize;
    for (group, of_group) in bound {
        budget.check().map_err(stop)?;
        if emit::group_uid(group, &mut errors).is_none() {
            continue;
        }
        let shape = Shape::of(&of_group);
        let alike = built.entry(shape.key()).or_default();
        let found = alike
            .iter()
            .find(|(other, ..)| *other == shape)
            .map(|(_, set, class, ids)| (set.clone(), class.clone(), ids.clone()));
        let (set, class, ids) = match found {
            Some(found) => found,
            None => {
                let class = class_uid(classes).map_err(stop)?;
                classes += 1;
                let mut placed = emit::group_rules(&class, &of_group, &mut templates, &mut errors);
                let ids: Vec<PolicyId> = placed.iter().map(|p| p.compiled.id()).collect();
                // Every group's set also holds the guardrails (see `evaluate`).
                placed.extend(guardrail_placed.iter().cloned());
                let set = Arc::new(index::index(&placed, &mut errors, budget));
                alike.push((shape, set.clone(), class.clone(), ids.clone()));
                (set, class, ids)
            }
        };
        // Equal shapes have as many rules in the same order, so the ids pair up by position.
        // (A rule whose template failed has no id, which shifts the pairs; the compile then
        // fails, so nothing reads them.)
        let own = of_group
            .iter()
            .zip(ids)
            .map(|(rule, id)| (id, rule.meta.clone()))
            .collect();
        groups.insert(group.clone(), GroupRules { set, class, own });
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
        let guardrail_rules: HashMap<&str, &Rule> = guardrail_rules
            .iter()
            .map(|r| (r.id.as_str(), *r))
            .collect();
        let origin =
            |id: &cedar_policy::PolicyId| match guardrail_rules.get(id.to_string().as_str()) {
                Some(rule) => validate::Origin {
                    rule: id.to_string(),
                    source: rule.meta.source.clone(),
                    written: rule.raw.clone().map(|raw| (raw, cedar_text(rule))),
                },
                None => match templates.origin.get(id) {
                    Some((rule, source, raw, text)) => validate::Origin {
                        rule: rule.clone(),
                        source: source.clone(),
                        written: raw.clone().map(|raw| (raw, text.clone())),
                    },
                    None => validate::Origin {
                        rule: id.to_string(),
                        source: String::new(),
                        written: None,
                    },
                },
            };
        validate::against_schema(&all, origin, &mut errors).map_err(stop)?;
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
    Ok(CompiledPolicy {
        counts_emails: rules.iter().any(|r| r.reads_email_counts),
        tags_read_by_ranges_only: rules.iter().all(|r| !r.reads_tag_values),
        number_fields: number_fields(&rules),
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
    use crate::spec::{parse, Format};

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

    /// The rules of the compiled guardrails, by the name of their raw rule.
    fn raw_rule<'a>(compiled: &'a CompiledPolicy, name: &str) -> &'a RuleMeta {
        let id = format!("global_guardrails#cedar/{name}");
        compiled
            .guardrails
            .rules
            .iter()
            .find(|(rule, _)| rule.to_string() == id)
            .map(|(_, meta)| meta)
            .unwrap()
    }

    #[test]
    fn what_rules_read_is_recorded_as_they_are_emitted() {
        let guardrails = |rules: &str| {
            compile(&parse(&format!("global_guardrails:\n  {rules}\n"), Format::Yaml).unwrap())
                .unwrap()
        };
        // The email block's rate limits read the counts; its other rules do not.
        let limited = guardrails("email: {rate_limit_per_minute: 5}");
        assert!(limited.counts_emails && limited.tags_read_by_ranges_only);
        let domains = guardrails("email: {allowed_domains: [example.com], max_recipients: 3}");
        assert!(!domains.counts_emails);
        // Amount rules read their tag through their ranges only.
        let amounts = guardrails("amount: {limits: {USD: {allow_up_to: 10}}}");
        assert!(amounts.tags_read_by_ranges_only && !amounts.counts_emails);
        // Raw Cedar is read in its parsed form, not searched as text.
        let raw = |when: &str| {
            guardrails(&format!(
                "cedar: [{{name: r, when: '{when}', outcome: challenge, reason_code: c, reason: r}}]"
            ))
        };
        let counts = raw("context.email.sent_last_day > 3");
        assert!(counts.counts_emails && counts.tags_read_by_ranges_only);
        assert_eq!(raw_rule(&counts, "r").reads, ["email"]);
        let tag = raw("resource.hasTag(\"amount\") && resource.getTag(\"amount\") > 5");
        assert!(!tag.tags_read_by_ranges_only && !tag.counts_emails);
        assert_eq!(raw_rule(&tag, "r").reads, ["amount"]);
        let has_only = raw("resource.hasTag(\"amount\")");
        assert!(has_only.tags_read_by_ranges_only);
        // Words in strings are not reads.
        let words = raw("context.action == \"getTag sent_last_day\"");
        assert!(words.tags_read_by_ranges_only && !words.counts_emails);
        assert!(raw_rule(&words, "r").reads.is_empty());
        let fields =
            raw("context.fields.contains(\"region=eu\") && context.email.recipient_count > 1");
        assert_eq!(raw_rule(&fields, "r").reads, ["email", "region"]);
        // `name=value` strings are fields only when the condition reads `context.fields`.
        let no_fields = raw("context.action == \"region=eu\"");
        assert!(raw_rule(&no_fields, "r").reads.is_empty());
    }
}
