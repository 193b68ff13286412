//! Lint: what a spec says that its author probably did not mean, short of an error. A block
//! that no binding and no guardrail uses does nothing (its values are still checked, as a
//! binding would check them: see `compile::unused_block_errors`); so does a group that no
//! binding names. `acp policy validate` prints these as warnings; they fail it only with
//! `--deny-warnings`.

use std::collections::BTreeSet;

use super::spec::{PolicySpec, SpecError};

/// The spec's warnings, each at the path of what it is about, in the order of the spec.
pub fn warnings(spec: &PolicySpec) -> Vec<SpecError> {
    let mut out = Vec::new();
    let used_blocks = spec.used_blocks();
    for name in spec.reusable_policy_blocks.keys() {
        if !used_blocks.contains(name.as_str()) {
            out.push(SpecError::new(
                format!("reusable_policy_blocks.{name}"),
                format!(
                    "block `{name}` is not used: no binding and no `global_guardrails.blocks` names it, so its rules apply to nobody"
                ),
            ));
        }
    }
    let bound: BTreeSet<&str> = spec.bindings.iter().map(|b| b.group.as_str()).collect();
    for (i, group) in spec.agent_groups.iter().enumerate() {
        if !bound.contains(group.name.as_str()) {
            out.push(SpecError::new(
                format!("agent_groups[{i}].name"),
                format!(
                    "group `{}` is not used: no binding names it, so being in it changes no decision",
                    group.name
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{compile, unused_block_errors};
    use crate::spec::{parse, Format};

    #[test]
    fn unused_blocks_and_groups_are_warnings_and_unused_blocks_are_still_checked() {
        let text = "reusable_policy_blocks:\n  used: {actions: {allow: [read]}}\n  spare:\n    amount: {limits: {USD: {allow_up_to: 10, challenge_up_to: 5}}}\n    cedar:\n      - {name: r, when: 'context.amount > 5', outcome: deny, reason_code: c, reason: r}\nagent_groups:\n  - {name: g}\n  - {name: idle}\nbindings:\n  - {group: g, blocks: [used]}\n";
        let spec = parse(text, Format::Yaml).unwrap();
        // The policy compiles (an unused block never reaches it)...
        assert!(compile(&spec).is_ok());
        let paths: Vec<String> = warnings(&spec).into_iter().map(|w| w.path).collect();
        assert_eq!(
            paths,
            ["reusable_policy_blocks.spare", "agent_groups[1].name"]
        );
        // ...but the unused block has the errors a binding would give it.
        let errors = unused_block_errors(&spec);
        let text = SpecError::list(&errors);
        assert!(
            errors
                .iter()
                .any(|e| e.path == "reusable_policy_blocks.spare.amount.limits.USD"),
            "{text}"
        );
        // Bound, the same block has the same errors.
        let bound = parse(
            "reusable_policy_blocks:\n  spare:\n    amount: {limits: {USD: {allow_up_to: 10, challenge_up_to: 5}}}\nagent_groups: [{name: g}]\nbindings: [{group: g, blocks: [spare]}]\n",
            Format::Yaml,
        )
        .unwrap();
        let bound_errors = compile(&bound).unwrap_err();
        assert_eq!(bound_errors[0].message, errors[0].message);
        // A raw rule of an unused block is checked against the schema, with the hint on how
        // context fields are read.
        let raw = parse(
            "reusable_policy_blocks:\n  spare:\n    cedar:\n      - {name: r, when: 'context.amount > 5', outcome: deny, reason_code: c, reason: r}\n",
            Format::Yaml,
        )
        .unwrap();
        let errors = unused_block_errors(&raw);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "reusable_policy_blocks.spare.cedar[0].when");
        assert!(
            errors[0].message.contains("resource.getTag(\"amount\")")
                && errors[0]
                    .message
                    .contains("context.fields.contains(\"amount=value\")"),
            "{}",
            errors[0].message
        );
    }
}
