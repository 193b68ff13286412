//! The difference between the current and the desired policy: a unified text diff of the
//! compiled Cedar and a summary of blocks, groups, bindings and memberships added, removed or
//! changed.

use std::collections::BTreeMap;

use serde::Serialize;
use similar::TextDiff;

use super::spec::PolicySpec;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl Changes {
    fn of<T: PartialEq>(old: &BTreeMap<String, T>, new: &BTreeMap<String, T>) -> Changes {
        let mut c = Changes::default();
        for (k, v) in new {
            match old.get(k) {
                None => c.added.push(k.clone()),
                Some(o) if o != v => c.changed.push(k.clone()),
                Some(_) => {}
            }
        }
        c.removed = old
            .keys()
            .filter(|k| !new.contains_key(*k))
            .cloned()
            .collect();
        c
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub blocks: Changes,
    pub groups: Changes,
    pub bindings: Changes,
    /// `group:agent_id` pairs of explicit members.
    pub memberships: Changes,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyDiff {
    pub changed: bool,
    /// Unified diff of the compiled Cedar, current → desired; empty when unchanged.
    pub cedar_diff: String,
    pub summary: Summary,
}

fn memberships(spec: &PolicySpec) -> BTreeMap<String, ()> {
    spec.agent_groups
        .iter()
        .flat_map(|g| {
            g.members
                .iter()
                .map(move |m| (format!("{}:{m}", g.name), ()))
        })
        .collect()
}

/// A unified diff of the two specs as `acp policy fmt` writes them (current → desired): what
/// the spec's author changed, in the spec's own words. Empty when they read the same.
pub fn spec_diff(current: Option<&PolicySpec>, desired: &PolicySpec) -> String {
    let text = |spec: &PolicySpec| super::layout::yaml(spec).unwrap_or_default();
    let old = current.map(text).unwrap_or_default();
    let new = text(desired);
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header("current", "desired")
        .to_string()
}

/// Compares the current spec and Cedar (none for a new policy) with the desired ones.
pub fn diff(
    current: Option<(&PolicySpec, &str)>,
    desired: &PolicySpec,
    desired_cedar: &str,
) -> PolicyDiff {
    let empty = PolicySpec::default();
    let (old_spec, old_cedar) = current.unwrap_or((&empty, ""));
    let groups = |s: &PolicySpec| {
        s.agent_groups
            .iter()
            .map(|g| (g.name.clone(), g.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let bindings = |s: &PolicySpec| {
        s.bindings
            .iter()
            .map(|b| (b.display_name(), b.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let summary = Summary {
        blocks: Changes::of(
            &old_spec.reusable_policy_blocks,
            &desired.reusable_policy_blocks,
        ),
        groups: Changes::of(&groups(old_spec), &groups(desired)),
        bindings: Changes::of(&bindings(old_spec), &bindings(desired)),
        memberships: Changes::of(&memberships(old_spec), &memberships(desired)),
    };
    let changed = current.is_none() || old_spec.hash() != desired.hash();
    let cedar_diff = if old_cedar == desired_cedar {
        String::new()
    } else {
        TextDiff::from_lines(old_cedar, desired_cedar)
            .unified_diff()
            .context_radius(3)
            .header("current", "desired")
            .to_string()
    };
    PolicyDiff {
        changed,
        cedar_diff,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse, Format};

    #[test]
    fn summary_lists_what_changed() {
        let old = parse("reusable_policy_blocks: {a: {actions: {allow: [x]}}, b: {}}\nagent_groups: [{name: g, members: [agt_0123456789abcdef0123456789abcdef]}]\nbindings: [{group: g, blocks: [a]}]\n", Format::Yaml).unwrap();
        let new = parse("reusable_policy_blocks: {a: {actions: {allow: [y]}}, c: {}}\nagent_groups: [{name: g, members: []}, {name: h}]\nbindings: [{group: g, blocks: [a]}]\n", Format::Yaml).unwrap();
        let d = diff(Some((&old, "x\n")), &new, "y\n");
        assert!(d.changed);
        assert_eq!(
            d.summary.blocks,
            Changes {
                added: vec!["c".into()],
                removed: vec!["b".into()],
                changed: vec!["a".into()]
            }
        );
        assert_eq!(d.summary.groups.added, vec!["h".to_string()]);
        assert_eq!(d.summary.groups.changed, vec!["g".to_string()]);
        assert_eq!(
            d.summary.memberships.removed,
            vec!["g:agt_0123456789abcdef0123456789abcdef".to_string()]
        );
        assert!(d.cedar_diff.contains("-x") && d.cedar_diff.contains("+y"));
        let same = diff(Some((&new, "y\n")), &new, "y\n");
        assert!(!same.changed && same.cedar_diff.is_empty());
        // The specs' own text: a block's action, a member gone.
        let text = spec_diff(Some(&old), &new);
        assert!(
            text.contains("-    actions: {allow: [x]}\n")
                && text.contains("+    actions: {allow: [\"y\"]}\n"),
            "{text}"
        );
        assert!(
            text.contains("-  - {name: g, members: [agt_0123456789abcdef0123456789abcdef]}\n"),
            "{text}"
        );
        assert!(spec_diff(Some(&new), &new).is_empty());
    }
}
