//! The dependency direction, checked: every `crate::` path in `src/**` (a `use` line or a path
//! in code), and every `super::` path of a module's own files, is an arrow from the file's module
//! to the module it names. Modules are the table's entries: a top-level module, or one of its
//! submodules where the table places that apart (the policy engine sits below the run-time
//! context; the check and sync use cases, in the same folder so that the decision path reads top
//! to bottom in one place, sit above it). An arrow to a higher layer fails, and so does any
//! circle of arrows between modules, each named by the file and line that draws it. The table is
//! the one in `docs/architecture.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module and its layer, bottom (0) to top (3).
const LAYERS: &[(&str, u8)] = &[
    // 0. The ground floor: the service's own types and small pure utilities (`domain` and
    // `time` are the `acp-domain` crate, which the last test below keeps free of I/O).
    ("domain", 0),
    ("time", 0),
    ("secret", 0),
    // The metrics' names and recorder: recorded from every layer, so below them all.
    ("observe", 0),
    // 1. Infrastructure: wire types, settings, storage and mail delivery.
    ("api", 1),
    ("config", 1),
    ("store", 1),
    ("mail", 1),
    // The policy engine (the `acp-engine` crate's modules: spec, compile, evaluation, diff),
    // the replica's caches of keys, agents and compiled policies, and the errors and texts of
    // its use cases. Pure but for the caches, which read the store.
    ("policy", 1),
    // Outbound HTTP with its SSRF rules (the vault proxy's and the audit sinks' way out).
    ("net", 1),
    // The audit trail's events, cursors, names and tail (what every use case records with);
    // its own use cases (sinks and their delivery, retention, the summary) sit a floor above.
    ("audit", 1),
    // 2. The use cases and the run-time context they share.
    ("context", 2),
    ("policy::check", 2),
    ("policy::sync", 2),
    ("identity", 2),
    ("enforce", 2),
    ("vault", 2),
    ("telemetry", 2),
    ("audit::delivery", 2),
    ("audit::retention", 2),
    ("audit::sinks", 2),
    ("audit::summary", 2),
    ("site", 2),
    // 3. The edges: HTTP (with its error type), the command line, assembly and the binary.
    ("error", 3),
    ("http", 3),
    ("cli", 3),
    ("app", 3),
    ("main", 3),
];

const LAYER_NAMES: [&str; 4] = ["domain", "infrastructure", "use case", "edge"];

/// One arrow: `from` names `to` at `file:line`.
#[derive(Debug, Clone)]
struct Arrow {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// The source with comments, string and character literals blanked out (newlines kept), so
/// that only code is searched and line numbers stay right.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"...", r#"..."#, ...
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
            for &ch in &chars[i..j.min(chars.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c == '"' || (c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')))
        {
            // A string or character literal (a lifetime has no closing quote), escapes included.
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn ident_at(code: &str, at: usize) -> &str {
    let rest = &code[at..];
    let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    &rest[..end]
}

/// The module (a table entry) that `path` names, from its first segment `first` at byte
/// `after` of `code` (just past `first`): `first::sub` when the table has that entry and the
/// path goes on into it, else `first`. A group (`first::{a, b}`) names each of its items.
fn units_at(code: &str, first: &str, after: usize) -> Vec<String> {
    let rest = &code[after..];
    let Some(rest) = rest.strip_prefix("::") else {
        return vec![first.to_owned()];
    };
    let entry = |sub: &str| {
        let unit = format!("{first}::{sub}");
        if LAYERS.iter().any(|(m, _)| *m == unit) {
            unit
        } else {
            first.to_owned()
        }
    };
    if let Some(group) = rest.strip_prefix('{') {
        let end = group.find('}').unwrap_or(group.len());
        let mut units: Vec<String> = group[..end]
            .split(',')
            .map(|item| entry(ident_at(item.trim_start(), 0)))
            .collect();
        units.dedup();
        units
    } else {
        vec![entry(ident_at(rest, 0))]
    }
}

/// The modules named after `prefix` (`crate::`, or `acp::` in the binary): `x` in
/// `crate::x::...`, and each `x` in `crate::{x, y::z}`, each refined by [`units_at`]. `base`
/// stands for the prefix itself (`super::` in a module's files names the module): then the
/// names are its submodules. With the byte offset of each.
fn named_after(code: &str, prefix: &str, base: Option<&str>) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    let name = |first: &str, at: usize| -> Vec<String> {
        match base {
            None => units_at(code, first, at + first.len()),
            Some(base) => {
                let unit = format!("{base}::{first}");
                if LAYERS.iter().any(|(m, _)| *m == unit) {
                    vec![unit]
                } else {
                    vec![base.to_owned()]
                }
            }
        }
    };
    while let Some(pos) = code[from..].find(prefix) {
        let at = from + pos;
        from = at + prefix.len();
        if at > 0
            && code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| is_ident(c) || c == '$' || c == ':')
        {
            continue;
        }
        let after = at + prefix.len();
        if code[after..].starts_with('{') {
            let mut depth = 0;
            let mut start_of_item = true;
            for (k, ch) in code[after..].char_indices() {
                match ch {
                    '{' => {
                        depth += 1;
                        start_of_item = depth == 1;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start_of_item = true,
                    c if c.is_whitespace() => {}
                    _ if depth == 1 && start_of_item => {
                        let first = ident_at(code, after + k);
                        if !first.is_empty() {
                            for unit in name(first, after + k) {
                                found.push((after + k, unit));
                            }
                        }
                        start_of_item = false;
                    }
                    _ => {}
                }
            }
        } else {
            let first = ident_at(code, after);
            if !first.is_empty() {
                for unit in name(first, after) {
                    found.push((at, unit));
                }
            }
        }
    }
    found
}

/// The table entry a file belongs to: the longest entry its module path starts with.
fn unit_of(parts: &[String]) -> String {
    if parts.len() > 1 {
        let sub = format!("{}::{}", parts[0], parts[1]);
        if LAYERS.iter().any(|(m, _)| *m == sub) {
            return sub;
        }
    }
    parts[0].clone()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Every arrow between two different top-level modules in `src/`.
fn arrows(src: &Path) -> Vec<Arrow> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut arrows = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
            .collect();
        if parts[0] == "lib" {
            // The crate root declares every module; it imports none.
            continue;
        }
        let from = unit_of(&parts);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let code = code_only(&text);
        let prefix = if from == "main" { "acp::" } else { "crate::" };
        let line_of = |at: usize| code[..at].matches('\n').count() + 1;
        let mut named = named_after(&code, prefix, None);
        // `super::` in `src/m/x.rs` names `m`'s own items (in `src/m/mod.rs`, the crate root's).
        if parts.len() == 2 && parts[1] != "mod" {
            named.extend(named_after(&code, "super::", Some(&parts[0])));
        }
        for (at, to) in named {
            if to != from {
                arrows.push(Arrow {
                    from: from.clone(),
                    to,
                    file: format!("src/{}", rel.display()),
                    line: line_of(at),
                });
            }
        }
    }
    arrows
}

fn layer_of(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// Arrows to a higher layer, and arrows to modules the table does not place.
fn upward(arrows: &[Arrow]) -> Vec<String> {
    let mut problems = Vec::new();
    for a in arrows {
        match (layer_of(&a.from), layer_of(&a.to)) {
            (Some(from), Some(to)) if to > from => problems.push(format!(
                "{}:{}: `{}` ({} layer) imports `{}` ({} layer), a layer above it",
                a.file,
                a.line,
                a.from,
                LAYER_NAMES[usize::from(from)],
                a.to,
                LAYER_NAMES[usize::from(to)]
            )),
            (None, _) => problems.push(format!(
                "{}:{}: module `{}` has no layer in the table",
                a.file, a.line, a.from
            )),
            (_, None) => problems.push(format!(
                "{}:{}: `{}` imports `{}`, which has no layer in the table",
                a.file, a.line, a.from, a.to
            )),
            _ => {}
        }
    }
    problems
}

/// Every circle of imports between top-level modules (the strongly connected components of more
/// than one module), each with the arrows that close it.
fn circles(arrows: &[Arrow]) -> Vec<String> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in arrows {
        graph.entry(&a.from).or_default().insert(&a.to);
        graph.entry(&a.to).or_default();
    }
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m) {
                stack.extend(graph.get(m).into_iter().flatten().copied());
            }
        }
        false
    };
    let mut problems = Vec::new();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    for &m in graph.keys() {
        if placed.contains(m) {
            continue;
        }
        let component: BTreeSet<&str> = graph
            .keys()
            .copied()
            .filter(|&n| n == m || (reaches(m, n) && reaches(n, m)))
            .collect();
        placed.extend(component.iter().copied());
        if component.len() < 2 {
            continue;
        }
        let mut lines = vec![format!(
            "modules import each other in a circle: {}",
            component.iter().copied().collect::<Vec<_>>().join(", ")
        )];
        let mut shown = BTreeSet::new();
        for a in arrows {
            if component.contains(a.from.as_str())
                && component.contains(a.to.as_str())
                && shown.insert((a.from.clone(), a.to.clone()))
            {
                lines.push(format!(
                    "  {}:{}: `{}` imports `{}`",
                    a.file, a.line, a.from, a.to
                ));
            }
        }
        problems.push(lines.join("\n"));
    }
    problems
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_from_a_layer_above_it_or_in_a_circle() {
    let arrows = arrows(&src_dir());
    assert!(
        arrows.len() > 100,
        "the scan found only {} arrows: is it reading src/?",
        arrows.len()
    );
    let mut problems = upward(&arrows);
    problems.extend(circles(&arrows));
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap_or_default();
    let lib = code_only(&lib);
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').trim())
        .collect();
    assert!(!declared.is_empty());
    let missing: Vec<&&str> = declared.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(missing.is_empty(), "modules without a layer: {missing:?}");
}

#[test]
fn the_scan_sees_paths_and_groups_but_not_comments_or_strings() {
    let text = r##"
use crate::store::{Store, Op};
use crate::{api, domain::ids};
// use crate::http;
/* crate::app */
let a = "crate::cli";
let b = r#"crate::cli"#;
let c = '"'; let d = crate::time::now_ms();
fn f<'a>(x: &'a str) -> crate::audit::Actor { make() }
"##;
    let code = code_only(text);
    let names: Vec<String> = named_after(&code, "crate::", None)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["store", "api", "domain", "time", "audit"]);
    // Submodules the table places apart are modules of their own, in paths, groups and the
    // `super::` paths of a module's files.
    let code = code_only(
        "use crate::policy::check::check;\nuse crate::policy::{cache::View, sync};\nuse super::check::x;\nuse super::spec::y;\n",
    );
    let names: Vec<String> = named_after(&code, "crate::", None)
        .into_iter()
        .chain(named_after(&code, "super::", Some("policy")))
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        names,
        [
            "policy::check",
            "policy",
            "policy::sync",
            "policy::check",
            "policy"
        ]
    );
    let engine_to_check = vec![Arrow {
        from: "policy".into(),
        to: "policy::check".into(),
        file: "src/policy/cache.rs".into(),
        line: 1,
    }];
    assert_eq!(upward(&engine_to_check).len(), 1);
    let upward_one = vec![Arrow {
        from: "store".into(),
        to: "http".into(),
        file: "src/store/x.rs".into(),
        line: 3,
    }];
    assert_eq!(
        upward(&upward_one),
        ["src/store/x.rs:3: `store` (infrastructure layer) imports `http` (edge layer), a layer above it"]
    );
    let circle = [
        Arrow {
            from: "identity".into(),
            to: "policy".into(),
            file: "src/identity/a.rs".into(),
            line: 1,
        },
        Arrow {
            from: "policy".into(),
            to: "enforce".into(),
            file: "src/policy/b.rs".into(),
            line: 2,
        },
        Arrow {
            from: "enforce".into(),
            to: "identity".into(),
            file: "src/enforce/c.rs".into(),
            line: 3,
        },
    ];
    let found = circles(&circle);
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("enforce, identity, policy"));
    assert!(found[0].contains("src/policy/b.rs:2: `policy` imports `enforce`"));
    assert!(circles(&circle[..2]).is_empty());
}

/// The crates that carry HTTP, SQL or the async runtime, and the modules (top-level, or a file's
/// path under `src/`) that may name them: HTTP only at the edges, SQL only in the store, and the
/// policy engine's compile and evaluate pure.
const CRATE_HOMES: &[(&str, &[&str])] = &[
    ("axum", &["http", "error", "app", "cli", "main"]),
    ("axum_extra", &["http"]),
    ("tower", &["http"]),
    ("tower_http", &["http", "app"]),
    ("hyper", &["http", "app"]),
    ("sqlx", &["store", "app", "cli"]),
    // Metric names and labels are written in one module.
    ("metrics", &["observe"]),
    ("metrics_exporter_prometheus", &["observe"]),
];

/// What the crates below the service may never depend on, directly or through another crate:
/// a runtime, a database, HTTP or mail.
const IMPURE: &[&str] = &["tokio", "sqlx", "axum", "hyper", "reqwest", "lettre", "mio"];

/// Every package that `root` depends on, directly or not, as `Cargo.lock` records them (build
/// dependencies included, which `Cargo.lock` does not tell apart).
fn reachable(lock: &toml::Value, root: &str) -> BTreeSet<String> {
    let packages = lock
        .get("package")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let deps_of = |name: &str| -> Vec<String> {
        packages
            .iter()
            .filter(|p| p.get("name").and_then(toml::Value::as_str) == Some(name))
            .flat_map(|p| {
                p.get("dependencies")
                    .and_then(toml::Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            // An entry is `name` or, when two versions are locked, `name version`.
            .filter_map(|d| {
                d.as_str()
                    .and_then(|d| d.split(' ').next())
                    .map(String::from)
            })
            .collect()
    };
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(name) = todo.pop() {
        for dep in deps_of(&name) {
            if seen.insert(dep.clone()) {
                todo.push(dep);
            }
        }
    }
    seen
}

#[test]
fn the_domain_and_the_engine_hold_no_runtime_database_http_or_mail() {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
        .unwrap_or_default();
    let lock: toml::Value = toml::from_str(&lock).unwrap_or(toml::Value::Integer(0));
    let service = reachable(&lock, "acp");
    assert!(
        service.contains("acp-engine") && service.contains("tokio"),
        "Cargo.lock does not list the service's dependencies"
    );
    for krate in ["acp-domain", "acp-engine"] {
        let deps = reachable(&lock, krate);
        assert!(deps.contains("serde"), "{krate} is not in Cargo.lock");
        let impure: Vec<&&str> = IMPURE.iter().filter(|c| deps.contains(**c)).collect();
        assert!(impure.is_empty(), "{krate} depends on {impure:?}");
    }
}

#[test]
fn http_sql_and_the_runtime_stay_in_their_layers() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        let top = rel.split('/').next().unwrap_or("").trim_end_matches(".rs");
        if top == "layers_test" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&path).unwrap_or_default());
        let names = |krate: &str| {
            let needle = format!("{krate}::");
            code.match_indices(&needle)
                .filter(|(at, _)| {
                    let before = code[..*at].chars().next_back();
                    !before.is_some_and(|c| is_ident(c) || c == ':')
                })
                .map(|(at, _)| code[..at].matches('\n').count() + 1)
                .next()
        };
        for (krate, homes) in CRATE_HOMES {
            if let Some(line) = names(krate) {
                if !homes.contains(&top) {
                    problems.push(format!(
                        "src/{rel}:{line} names `{krate}`, which belongs in {homes:?}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}
