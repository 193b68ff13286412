//! The dependency direction, checked: every `crate::` path in `src/**` (a `use` line, a group
//! or a path in code), and every `self::` and `super::` path of every file (chains of
//! `super::` included), made absolute, is an arrow from the file's module to the module it
//! names; a name a module re-exports from one of its submodules (`pub use sub::Item`) names
//! that submodule. Modules are the table's entries: a top-level module, or one of its
//! submodules where the table places that apart (the policy engine sits below the run-time
//! context; the check and sync use cases, in the same folder so that the decision path reads
//! top to bottom in one place, sit above it). An arrow to a higher layer fails, and so does any
//! circle of arrows between modules, each named by the file and line that draws it. The table
//! is the one in `docs/architecture.md`. The crates below the service (`acp-domain`,
//! `acp-engine`) are held by the compiler, and by the last test here, which reads `Cargo.lock`.

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
    // Who may do what: effective permissions and the AuthZEN searches.
    ("policy::access", 2),
    ("identity", 2),
    ("enforce", 2),
    ("vault", 2),
    // The MCP gateway: registered servers, and the tool calls it decides.
    ("mcp", 2),
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

/// Names re-exported by a module from one of its own submodules (`pub use check::Attempt;` in
/// `policy/mod.rs`), by the module's path and the name: a path through the re-export names the
/// submodule's table entry, not the module's.
type Reexports = BTreeMap<(String, String), String>;

/// The paths that start at byte `at` of `code` (just past a prefix such as `crate::`), each
/// item of a group (`a::{b, c::{d, e}}`) a path of its own, after `prefix`; with the byte offset
/// of each.
fn paths_at(code: &str, at: usize, prefix: Vec<String>, into: &mut Vec<(usize, Vec<String>)>) {
    let mut path = prefix;
    let mut at = at;
    loop {
        if code[at..].starts_with('{') {
            let mut depth = 0;
            let mut start_of_item = true;
            for (k, ch) in code[at..].char_indices() {
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
                        paths_at(code, at + k, path.clone(), into);
                        start_of_item = false;
                    }
                    _ => {}
                }
            }
            return;
        }
        let segment = ident_at(code, at);
        if segment.is_empty() {
            if !path.is_empty() {
                into.push((at, path));
            }
            return;
        }
        path.push(segment.to_owned());
        let next = at + segment.len();
        if code[next..].starts_with("::") {
            at = next + 2;
        } else {
            into.push((at, path));
            return;
        }
    }
}

/// The table entry an absolute path names: the longest prefix of it that is an entry or
/// reaches one through a re-export. `None` for a path that names no module of the table.
fn unit_for(path: &[String], reexports: &Reexports) -> Option<String> {
    for k in (1..=path.len()).rev() {
        if k >= 2 {
            let key = (path[..k - 1].join("::"), path[k - 1].clone());
            if let Some(unit) = reexports.get(&key) {
                return Some(unit.clone());
            }
        }
        let candidate = path[..k].join("::");
        if LAYERS.iter().any(|(m, _)| *m == candidate) {
            return Some(candidate);
        }
    }
    None
}

/// A module path named in a file, made absolute, at a byte offset of the file; `absolute` when
/// it was written from the crate root (`crate::`, or `acp::` in the binary).
struct Named {
    at: usize,
    path: Vec<String>,
    absolute: bool,
}

/// The module paths named in `code` of a file whose module path is `module`: every
/// `crate::` path (`acp::` in the binary), and every `self::` and `super::` path (chains of
/// `super::` included), each made absolute.
fn named_paths(code: &str, module: &[String], crate_prefix: &str) -> Vec<Named> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let starts_path = at == 0 || {
            let before = code[..at].chars().next_back();
            !before.is_some_and(|c| is_ident(c) || c == '$' || c == ':')
        };
        if !starts_path || !(bytes[at].is_ascii_alphabetic()) {
            at += code[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let (base, after) = if code[at..].starts_with(crate_prefix) {
            (Vec::new(), at + crate_prefix.len())
        } else if code[at..].starts_with("self::") || code[at..].starts_with("super::") {
            let mut base = module.to_vec();
            let mut after = at;
            if code[after..].starts_with("self::") {
                after += "self::".len();
            }
            let mut outside = false;
            while code[after..].starts_with("super::") {
                after += "super::".len();
                outside |= base.pop().is_none();
            }
            if outside {
                at = after;
                continue;
            }
            (base, after)
        } else {
            at += ident_at(code, at).len().max(1);
            continue;
        };
        let absolute = code[at..].starts_with(crate_prefix);
        let mut paths = Vec::new();
        paths_at(code, after, base, &mut paths);
        for (offset, path) in paths {
            found.push(Named {
                at: offset,
                path,
                absolute,
            });
        }
        at = after;
    }
    found
}

/// The module path a file of `src/` stands for: `src/m/x.rs` is `m::x`, `src/m/mod.rs` is `m`.
fn module_of(parts: &[String]) -> Vec<String> {
    let mut module = parts.to_vec();
    if module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    module
}

/// Every `pub use` of a module's own submodule's item, as [`Reexports`] (a re-export through
/// `crate::` or `super::` paths is resolved the same way).
fn reexports(src: &Path, files: &[PathBuf]) -> Reexports {
    let mut map = Reexports::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap_or(path);
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
            .collect();
        if parts[0] == "lib" || parts[0] == "main" {
            continue;
        }
        let module = module_of(&parts);
        let folder = src.join(module.join("/"));
        let code = code_only(&std::fs::read_to_string(path).unwrap_or_default());
        let mut from = 0;
        while let Some(pos) = code[from..].find("pub use ") {
            let start = from + pos + "pub use ".len();
            let end = code[start..].find(';').map_or(code.len(), |e| start + e);
            from = end;
            let statement = code[start..end].trim();
            let own = |first: &str| {
                folder.join(format!("{first}.rs")).exists()
                    || folder.join(first).join("mod.rs").exists()
            };
            let (base, rest) = if let Some(rest) = statement.strip_prefix("crate::") {
                (Vec::new(), rest)
            } else if statement.starts_with("self::") || statement.starts_with("super::") {
                let mut base = module.clone();
                let mut rest = statement.strip_prefix("self::").unwrap_or(statement);
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
                (base, rest)
            } else if own(ident_at(statement, 0)) {
                (module.clone(), statement)
            } else {
                continue;
            };
            // `a::b::{C, D as E}` or `a::b::C` (or `... as E`): the names it exports, each with
            // the path of what it exports.
            let (prefix, items): (&str, Vec<&str>) = match rest.find('{') {
                Some(open) => (
                    rest[..open].trim_end_matches("::"),
                    rest[open + 1..]
                        .trim_end_matches('}')
                        .split(',')
                        .map(str::trim)
                        .filter(|i| !i.is_empty())
                        .collect(),
                ),
                None => match rest.rfind("::") {
                    Some(cut) => (&rest[..cut], vec![&rest[cut + 2..]]),
                    None => ("", vec![rest]),
                },
            };
            let mut target = base.clone();
            target.extend(
                prefix
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            for item in items {
                let (path, name) = match item.split_once(" as ") {
                    Some((path, name)) => (path.trim(), name.trim()),
                    None => (item, item.rsplit("::").next().unwrap_or(item)),
                };
                if name == "self" || name == "*" || path.contains('{') {
                    continue;
                }
                let mut full = target.clone();
                full.extend(path.split("::").map(str::to_owned));
                let (Some(unit), Some(here)) = (unit_for(&full, &map), unit_for(&module, &map))
                else {
                    continue;
                };
                if unit != here {
                    map.insert((module.join("::"), name.to_owned()), unit);
                }
            }
        }
    }
    map
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

/// Every arrow between two different table entries in `src/`: from the entry of each file to
/// the entry of every module path the file names (`crate::`, `self::` and `super::` paths,
/// re-exports resolved to the submodule they come from).
fn arrows(src: &Path) -> Vec<Arrow> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let reexports = reexports(src, &files);
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
        for named in named_paths(&code, &module_of(&parts), prefix) {
            // A `crate::` path to a module the table does not place is an arrow to it (and
            // fails as unplaced); a relative path that reaches no entry names a local item.
            let to = match unit_for(&named.path, &reexports) {
                Some(to) => to,
                None if named.absolute => named.path[0].clone(),
                None => continue,
            };
            let at = named.at;
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
    let none = Reexports::new();
    let units = |code: &str, module: &[&str], reexports: &Reexports| -> Vec<String> {
        let module: Vec<String> = module.iter().map(|m| (*m).to_owned()).collect();
        named_paths(code, &module, "crate::")
            .into_iter()
            .filter_map(|n| unit_for(&n.path, reexports))
            .collect()
    };
    assert_eq!(
        units(&code, &["http", "x"], &none),
        ["store", "store", "api", "domain", "time", "audit"]
    );
    // Submodules the table places apart are modules of their own, in paths, groups and the
    // `self::`/`super::` paths of every file, however deep (a chain of `super::` included).
    let code = code_only(
        "use crate::policy::check::check;\nuse crate::policy::{cache::View, sync};\nuse super::check::x;\nuse super::cache::y;\n",
    );
    assert_eq!(
        units(&code, &["policy", "impact"], &none),
        [
            "policy::check",
            "policy",
            "policy::sync",
            "policy::check",
            "policy"
        ]
    );
    let code = code_only("use super::super::check::check;\nuse self::inner::z;\n");
    assert_eq!(
        units(&code, &["policy", "compile", "emit"], &none),
        ["policy::check", "policy"]
    );
    // A name a module re-exports from a submodule names that submodule.
    let mut reexports = Reexports::new();
    reexports.insert(
        ("policy".to_owned(), "Attempt".to_owned()),
        "policy::check".to_owned(),
    );
    let code = code_only("use crate::policy::Attempt;\nuse crate::policy::{cache, Attempt};\n");
    assert_eq!(
        units(&code, &["audit"], &reexports),
        ["policy::check", "policy", "policy::check"]
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
