//! What one spec may hold, and the budget of its compilation. Every bound here is documented in
//! `docs/policy-spec.md` ("Limits"); a spec over one is an error naming the bound (422
//! `invalid_spec` from sync, exit status 1 from `acp policy`), never a crash or an unbounded
//! amount of work.
//!
//! Raw Cedar is checked here, before Cedar's parser sees it: that parser and the passes after it
//! recurse once per level of nesting, so a condition nested a few hundred levels deep would
//! exhaust the thread's stack and abort the whole process. The check is one linear scan.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::spec::{Block, PolicySpec, SpecError};

/// The bounds of the spec text itself, kept by the reader that enforces them.
pub use super::source::{MAX_SPEC_BYTES, MAX_SPEC_NESTING, MAX_SPEC_NODES};
/// Most entries of `reusable_policy_blocks`.
pub const MAX_BLOCKS: usize = 1_000;
/// Most `agent_groups`.
pub const MAX_GROUPS: usize = 10_000;
/// Most `bindings`.
pub const MAX_BINDINGS: usize = 10_000;
/// Most group members and selectors, over all groups.
pub const MAX_MEMBERS: usize = 100_000;
/// Most names (actions, domains, attachment types, approvers, currencies, the vault block's
/// actions, sets, environments and hosts, blocks a binding lists), over the whole spec.
pub const MAX_NAMES: usize = 100_000;
/// Most raw `cedar` rules, over the whole spec.
pub const MAX_CEDAR_RULES: usize = 1_000;
/// Largest `when` of one raw rule, in bytes.
pub const MAX_CEDAR_BYTES: usize = 10 * 1024;
/// Deepest nesting of one raw rule's `when`: brackets `(`, `[`, `{` and `if` expressions.
pub const MAX_CEDAR_DEPTH: usize = 24;
/// Most test cases.
pub const MAX_TESTS: usize = 10_000;
/// Most rules a spec compiles to (every binding's copy of its blocks' rules counts).
pub const MAX_RULES: usize = 200_000;
/// Most bytes of Cedar that compilation may build, every copy counted (each bound group's
/// policy set holds its rules and the guardrails; the action index holds sets of them).
pub const MAX_COMPILED_BYTES: u64 = 512 * 1024 * 1024;

/// The work a compilation may still do, and whether anyone still waits for it. Compilation
/// charges what it builds and looks at the budget between steps; past the budget, or once the
/// request that asked for it is gone, it stops with an error.
#[derive(Debug, Default)]
pub struct Budget {
    cancel: Option<Arc<AtomicBool>>,
    used: Cell<u64>,
}

impl Budget {
    /// A budget whose compilation stops when `cancel` becomes true.
    pub fn cancellable(cancel: Arc<AtomicBool>) -> Self {
        Self {
            cancel: Some(cancel),
            used: Cell::new(0),
        }
    }

    /// Records `bytes` of Cedar built.
    pub fn charge(&self, bytes: usize) {
        self.used.set(self.used.get().saturating_add(bytes as u64));
    }

    /// An error when the work is over the budget or no longer wanted.
    pub fn check(&self) -> Result<(), SpecError> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(SpecError::new(
                "",
                "compilation stopped: the request that asked for it is gone",
            ));
        }
        if self.used.get() > MAX_COMPILED_BYTES {
            return Err(SpecError::new(
                "",
                format!(
                    "the spec compiles to more than {} MiB of Cedar (every bound group holds a copy of its blocks' rules and of the guardrails); bind large blocks to fewer groups",
                    MAX_COMPILED_BYTES / (1024 * 1024)
                ),
            ));
        }
        Ok(())
    }
}

/// Sets its flag when dropped: held by the future that waits for a compilation, so that the
/// compilation stops when that future is dropped (the client went away, or the request timed
/// out).
#[derive(Debug)]
pub struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn over(path: &str, what: &str, count: usize, max: usize) -> Option<SpecError> {
    (count > max).then(|| {
        SpecError::new(
            path,
            format!("the spec has {count} {what}; at most {max} are allowed"),
        )
    })
}

fn block_names(block: &Block) -> usize {
    let mut n = 0;
    if let Some(e) = &block.email {
        n += e.allowed_domains.as_ref().map_or(0, Vec::len) + e.blocked_attachments.len();
    }
    if let Some(a) = &block.amount {
        n += a.limits.len() + a.actions.as_ref().map_or(0, Vec::len);
    }
    if let Some(a) = &block.actions {
        n += a.allow.len() + a.challenge.len() + a.deny.len();
    }
    if let Some(a) = &block.approval {
        n += a.approvers.len();
    }
    if let Some(v) = &block.vault {
        let len = |list: &Option<Vec<String>>| list.as_ref().map_or(0, Vec::len);
        n += len(&v.allow) + len(&v.secret_sets) + len(&v.environments) + len(&v.proxy_hosts);
        if let Some(r) = &v.require_approval {
            n += len(&r.actions) + len(&r.environments);
        }
    }
    n
}

/// Checks the counts and the raw Cedar of a spec against the limits. Cheap (linear in the
/// spec); compilation must not start when this reports anything.
pub fn check_spec(spec: &PolicySpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let guardrails = spec.global_guardrails.inline_block();
    let names = spec
        .reusable_policy_blocks
        .values()
        .chain(std::iter::once(&guardrails))
        .map(block_names)
        .sum::<usize>()
        + spec.global_guardrails.blocks.len()
        + spec
            .bindings
            .iter()
            .map(|b| b.blocks.len() + b.actions.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
    let members = spec
        .agent_groups
        .iter()
        .map(|g| g.members.len() + g.selectors.len())
        .sum::<usize>();
    let cedar_rules = spec
        .reusable_policy_blocks
        .values()
        .chain(std::iter::once(&guardrails))
        .map(|b| b.cedar.len())
        .sum::<usize>();
    errors.extend(
        [
            over(
                "reusable_policy_blocks",
                "blocks",
                spec.reusable_policy_blocks.len(),
                MAX_BLOCKS,
            ),
            over(
                "agent_groups",
                "groups",
                spec.agent_groups.len(),
                MAX_GROUPS,
            ),
            over("bindings", "bindings", spec.bindings.len(), MAX_BINDINGS),
            over(
                "agent_groups",
                "group members and selectors",
                members,
                MAX_MEMBERS,
            ),
            over("", "names (actions, domains, attachment types, approvers, currencies, vault sets, environments and hosts, block references)", names, MAX_NAMES),
            over("", "raw cedar rules", cedar_rules, MAX_CEDAR_RULES),
            over("tests", "test cases", spec.tests.len(), MAX_TESTS),
        ]
        .into_iter()
        .flatten(),
    );
    let bound_rules: usize = spec
        .bindings
        .iter()
        .flat_map(|b| &b.blocks)
        .filter_map(|name| spec.reusable_policy_blocks.get(name))
        .map(rule_estimate)
        .sum::<usize>()
        + rule_estimate(&guardrails);
    if let Some(e) = over("bindings", "rules once compiled", bound_rules, MAX_RULES) {
        errors.push(e);
    }
    // A binding's `actions` are written into each of its rules.
    let narrowed: usize = spec
        .bindings
        .iter()
        .filter_map(|b| Some((b.actions.as_ref()?, &b.blocks)))
        .map(|(actions, blocks)| {
            let bytes: usize = actions.iter().map(|a| a.len() + 4).sum();
            let rules: usize = blocks
                .iter()
                .filter_map(|name| spec.reusable_policy_blocks.get(name))
                .map(rule_estimate)
                .sum();
            bytes.saturating_mul(rules)
        })
        .fold(0usize, usize::saturating_add);
    if narrowed as u64 > MAX_COMPILED_BYTES / 4 {
        errors.push(SpecError::new(
            "bindings",
            format!(
                "the bindings' `actions` lists, copied into each rule they narrow, come to {} MiB; at most {} MiB are allowed (narrow fewer rules, or list the actions in the blocks instead)",
                narrowed / (1024 * 1024),
                MAX_COMPILED_BYTES / 4 / (1024 * 1024)
            ),
        ));
    }
    for (name, block) in &spec.reusable_policy_blocks {
        check_cedar_rules(
            block,
            &format!("reusable_policy_blocks.{name}"),
            &mut errors,
        );
    }
    check_cedar_rules(&guardrails, "global_guardrails", &mut errors);
    errors
}

/// At most how many rules a block compiles to.
fn rule_estimate(block: &Block) -> usize {
    let email = block.email.as_ref().map_or(0, |_| 8);
    let amount = block.amount.as_ref().map_or(0, |a| 3 * a.limits.len() + 2);
    let actions = block.actions.as_ref().map_or(0, |_| 3);
    let vault = block.vault.as_ref().map_or(0, |_| 5);
    email + amount + actions + vault + 1 + 2 + block.cedar.len()
}

fn check_cedar_rules(block: &Block, path: &str, errors: &mut Vec<SpecError>) {
    for (i, rule) in block.cedar.iter().enumerate() {
        if let Err(message) = check_cedar(&rule.when) {
            errors.push(SpecError::new(
                format!("{path}.cedar[{i}].when"),
                format!("rule `{}`: {message}", rule.name),
            ));
        }
    }
}

/// Checks the size and nesting of a raw Cedar condition without parsing it: one pass over the
/// text that skips string literals and `//` comments and counts open brackets and `if`s (each
/// `if` nests the expressions after it until its bracket closes).
pub fn check_cedar(text: &str) -> Result<(), String> {
    if text.len() > MAX_CEDAR_BYTES {
        return Err(format!(
            "the condition is {} bytes long; at most {MAX_CEDAR_BYTES} bytes are allowed",
            text.len()
        ));
    }
    let depth = cedar_depth(text);
    if depth > MAX_CEDAR_DEPTH {
        return Err(format!(
            "the condition nests {depth} levels deep; at most {MAX_CEDAR_DEPTH} levels of brackets and `if` are allowed"
        ));
    }
    Ok(())
}

/// The deepest nesting of brackets and `if` expressions in Cedar text.
pub fn cedar_depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    // Per open bracket, the `if`s opened inside it (the first entry is the top level).
    let mut frames: Vec<usize> = vec![0];
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut i = 0;
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                i += 1;
                while let Some(&c) = bytes.get(i) {
                    match c {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while bytes.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                frames.push(0);
                depth += 1;
            }
            b')' | b']' | b'}' if frames.len() > 1 => {
                let ifs = frames.pop().unwrap_or(0);
                depth = depth.saturating_sub(1 + ifs);
            }
            _ if is_ident(b) => {
                let start = i;
                while bytes.get(i).copied().is_some_and(is_ident) {
                    i += 1;
                }
                if bytes.get(start..i) == Some(b"if".as_slice()) {
                    if let Some(top) = frames.last_mut() {
                        *top += 1;
                    }
                    depth += 1;
                }
                max = max.max(depth);
                continue;
            }
            _ => {}
        }
        max = max.max(depth);
        i += 1;
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_and_ifs_but_not_strings_or_comments() {
        assert_eq!(cedar_depth("true"), 0);
        assert_eq!(cedar_depth("(true)"), 1);
        assert_eq!(cedar_depth("[[1]].isEmpty() && (a)"), 2);
        assert_eq!(cedar_depth("\"((((\" == \"[[\""), 0);
        assert_eq!(cedar_depth("true // ((((\n && (x)"), 1);
        assert_eq!(cedar_depth("\"a\\\"((\" == x"), 0);
        assert_eq!(cedar_depth("if a then b else c"), 1);
        assert_eq!(cedar_depth("if a then b else if c then d else e"), 2);
        assert_eq!(
            cedar_depth("(if a then b else c) && (if d then e else f)"),
            2
        );
        assert_eq!(cedar_depth("iffy && elif"), 0);
        assert_eq!(
            cedar_depth(&format!("{}1{}", "(".repeat(127), ")".repeat(127))),
            127
        );
        // Unbalanced closing brackets never underflow.
        assert_eq!(cedar_depth(")))(("), 2);
    }

    #[test]
    fn over_the_bounds_is_an_error_naming_the_bound() {
        assert!(check_cedar("context.action == \"x\"").is_ok());
        let deep = format!("{}true{}", "(".repeat(127), ")".repeat(127));
        let e = check_cedar(&deep).unwrap_err();
        assert!(e.contains("127 levels") && e.contains("at most 24"), "{e}");
        let long = format!("\"{}\" == context.action", "a".repeat(MAX_CEDAR_BYTES));
        assert!(check_cedar(&long).unwrap_err().contains("bytes"));
    }

    #[test]
    fn a_dropped_waiter_cancels_the_budget() {
        let flag = Arc::new(AtomicBool::new(false));
        let budget = Budget::cancellable(flag.clone());
        assert!(budget.check().is_ok());
        drop(CancelOnDrop(flag));
        assert!(budget.check().unwrap_err().message.contains("gone"));
        let budget = Budget::default();
        budget.charge(MAX_COMPILED_BYTES as usize + 1);
        assert!(budget.check().unwrap_err().message.contains("MiB"));
    }
}
