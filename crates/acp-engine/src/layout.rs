//! The spec's canonical text: what `acp policy fmt` writes and `acp policy get` prints. The
//! parsed spec is written back with keys in the model's order, without the keys that only
//! repeat a default (a key is left out exactly when the spec parses the same without it), in
//! one layout that depends on the spec alone: so the text of a spec the server holds is the
//! text `fmt` makes of the file it came from.
//!
//! The YAML layout: a mapping or list is written on one line, in flow style
//! (`{allow_up_to: 100, challenge_up_to: 1000}`, `[read, write]`), when it nests at most two
//! levels, fits within 80 columns and holds no comment; otherwise one entry per line. The
//! top-level sections, the blocks and the test cases are always written one entry per line.
//!
//! Comments are kept. No YAML library for Rust keeps them (the parsers drop them with the
//! whitespace), so they are found here, in the text between the parser's tokens, and each is
//! attached to an entry (a mapping key or a list item) of the spec: a comment on a line of its
//! own to the entry written after it (or, when it is indented deeper than that entry, to the end
//! of the entry before it), a comment after code to the first entry written on its line, the
//! comments before the first entry to the top of the file. Entries move with their comments
//! when the keys are put in order, and an entry with a comment is kept even when it only
//! repeats a default. The result is checked before it is used: it must parse to the same spec
//! and hold the same comments, or formatting is refused (nothing is ever dropped silently).

use std::collections::{HashMap, HashSet};

use serde_yaml_ng::Value as Yaml;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::source::{parse_yaml, reads_as_string, Located, Node};
use super::spec::{self, Format, PolicySpec, SpecError};

/// Lines are at most this wide when a mapping or list is written on one line.
const WIDTH: usize = 80;

/// Why a spec could not be formatted.
#[derive(Debug, Clone, PartialEq)]
pub enum FmtError {
    /// The spec does not parse.
    Spec(Vec<SpecError>),
    /// The text holds a comment that formatting cannot keep where it belongs (at `line`).
    Comments { line: usize, why: String },
}

/// One segment of a path into the document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A path as a map key.
fn path_key(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                out.push('\u{1}');
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('\u{2}');
                out.push_str(&i.to_string());
            }
        }
    }
    out
}

// --- the canonical document ---------------------------------------------------------------

/// Whether a value may be a field's default: only such keys are tried for leaving out (a
/// name, a non-empty list or a threshold above 0 never is one).
fn default_like(value: &Yaml) -> bool {
    match value {
        Yaml::Null | Yaml::Bool(false) => true,
        Yaml::Number(n) => n.as_f64() == Some(0.0),
        Yaml::Sequence(items) => items.is_empty(),
        Yaml::Mapping(map) => map.is_empty(),
        Yaml::String(s) => DEFAULT_STRINGS.contains(&s.as_str()),
        Yaml::Bool(true) | Yaml::Tagged(_) => false,
    }
}

/// The spec's default strings: `on_violation`, `amount.field`, `amount.currency_field`, a test
/// agent's status, risk tier and id.
const DEFAULT_STRINGS: [&str; 6] = [
    "deny",
    "amount",
    "currency",
    "active",
    "low",
    "agt_00000000000000000000000000000000",
];

/// Paths of the mapping keys whose values may be defaults (not under `keep`).
fn candidates(
    value: &Yaml,
    prefix: &mut Vec<Seg>,
    keep: &HashSet<String>,
    out: &mut Vec<Vec<Seg>>,
) {
    match value {
        Yaml::Mapping(map) => {
            for (k, v) in map {
                prefix.push(Seg::Key(k.as_str().unwrap_or_default().to_owned()));
                candidates(v, prefix, keep, out);
                if default_like(v) && !keep.contains(&path_key(prefix)) {
                    out.push(prefix.clone());
                }
                prefix.pop();
            }
        }
        Yaml::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                prefix.push(Seg::Index(i));
                candidates(v, prefix, keep, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// Leaves out of `doc` the keys at `paths` that the spec reads the same without: all at once
/// when it does, else each half in turn. Leaving out one field's default never changes
/// whether another's may be, so the result is the same as trying one key at a time, with a
/// number of parses that grows with the keys that must stay, not with the keys tried.
fn leave_out(doc: &mut Yaml, paths: &[Vec<Seg>], spec: &PolicySpec) {
    if paths.is_empty() {
        return;
    }
    let mut candidate = doc.clone();
    for path in paths {
        remove_at(&mut candidate, path);
    }
    if parses_to(&candidate, spec) {
        *doc = candidate;
        return;
    }
    if paths.len() > 1 {
        let (a, b) = paths.split_at(paths.len() / 2);
        leave_out(doc, a, spec);
        leave_out(doc, b, spec);
    }
}

/// Removes the key at `path`; false when the path does not lead to one.
fn remove_at(root: &mut Yaml, path: &[Seg]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = root;
    for seg in parents {
        let next = match (seg, node) {
            (Seg::Key(k), Yaml::Mapping(map)) => map.get_mut(k.as_str()),
            (Seg::Index(i), Yaml::Sequence(items)) => items.get_mut(*i),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        node = next;
    }
    match (last, node) {
        (Seg::Key(k), Yaml::Mapping(map)) => map.shift_remove(k.as_str()).is_some(),
        _ => false,
    }
}

fn parses_to(value: &Yaml, spec: &PolicySpec) -> bool {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| spec::from_value(&v).ok())
        .is_some_and(|parsed| &parsed == spec)
}

/// Whole numbers written as floats (`100.0`, as a threshold serialises) as integers.
fn integral_floats(value: &mut Yaml) {
    match value {
        Yaml::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f.abs() < 9e15 {
                    // In range: the cast is exact.
                    *n = serde_yaml_ng::Number::from(f as i64);
                }
            }
        }
        Yaml::Mapping(map) => map.values_mut().for_each(integral_floats),
        Yaml::Sequence(items) => items.iter_mut().for_each(integral_floats),
        _ => {}
    }
}

/// The spec as a document in the model's key order, without the keys that only repeat a
/// default (a key is left out exactly when the spec parses the same without it, so the policy
/// hash and the test cases never change), except the keys at `keep` (they hold comments).
fn document(spec: &PolicySpec, keep: &HashSet<String>) -> Result<Yaml, String> {
    let mut doc = serde_yaml_ng::to_value(spec).map_err(|e| format!("cannot write: {e}"))?;
    // The thresholds are the model's only floats; free-form values (the test cases' contexts
    // and agents) keep their type: `10.0` and `10` differ there.
    let mut candidate = doc.clone();
    if let Yaml::Mapping(map) = &mut candidate {
        for (k, v) in map.iter_mut() {
            if k.as_str() != Some("tests") {
                integral_floats(v);
            }
        }
    }
    if parses_to(&candidate, spec) {
        doc = candidate;
    }
    // A mapping whose keys were all defaults may be a default itself: again, until nothing
    // more goes (a few rounds: the spec nests a few levels).
    for _ in 0..8 {
        let mut paths = Vec::new();
        candidates(&doc, &mut Vec::new(), keep, &mut paths);
        let before = doc.clone();
        leave_out(&mut doc, &paths, spec);
        if doc == before {
            break;
        }
    }
    Ok(doc)
}

// --- comments -----------------------------------------------------------------------------

/// A comment in the text: where its `#` is (line from 1, column from 0, in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Comment {
    line: usize,
    col: usize,
    /// From `#` to the end of the line, trailing blanks removed.
    text: String,
    /// Nothing but blanks before it on its line.
    own_line: bool,
}

/// The scalars that are not plain, where the parser met them.
#[derive(Default)]
struct Scalars {
    found: Vec<(usize, usize, TScalarStyle)>,
}

impl MarkedEventReceiver for Scalars {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if let Event::Scalar(_, style, _, _) = event {
            if style != TScalarStyle::Plain {
                self.found.push((mark.line(), mark.col(), style));
            }
        }
    }
}

/// Per line (from 1), the column ranges `[from, to)` that are inside a quoted or block scalar.
type Protected = HashMap<usize, Vec<(usize, usize)>>;

fn indentation(line: &[char]) -> usize {
    line.iter().take_while(|c| **c == ' ').count()
}

fn protect(protected: &mut Protected, line: usize, from: usize, to: usize) {
    protected.entry(line).or_default().push((from, to));
}

/// Marks a quoted scalar starting at or after `(line, col)` (an anchor or tag may come first).
fn quoted(lines: &[Vec<char>], line: usize, col: usize, out: &mut Protected) -> Result<(), usize> {
    let mut l = line;
    let mut c = col;
    let text = lines.get(l.wrapping_sub(1)).ok_or(line)?;
    while c < text.len() && text[c] != '"' && text[c] != '\'' {
        c += 1;
    }
    let quote = *text.get(c).ok_or(line)?;
    let start = c;
    c += 1;
    let mut from = start;
    loop {
        let Some(text) = lines.get(l - 1) else {
            return Err(line);
        };
        while c < text.len() {
            let ch = text[c];
            if quote == '"' && ch == '\\' {
                c += 2;
                continue;
            }
            if ch == quote {
                if quote == '\'' && text.get(c + 1) == Some(&'\'') {
                    c += 2;
                    continue;
                }
                protect(out, l, from, c + 1);
                return Ok(());
            }
            c += 1;
        }
        protect(out, l, from, text.len());
        l += 1;
        c = 0;
        from = 0;
    }
}

/// Where a block scalar's indicator (`|` or `>`) is: the parser places the scalar at its first
/// line of content, so the last indicator on a line before that one (only indicator characters
/// and blanks, and a comment, after it); or on that line, for a scalar without content.
fn indicator(lines: &[Vec<char>], line: usize) -> Option<(usize, usize)> {
    let last = line.min(lines.len());
    let order = (1..last).rev().chain(std::iter::once(last));
    for l in order.filter(|l| *l >= 1) {
        let text = &lines[l - 1];
        let found = text.iter().enumerate().rev().find(|(at, c)| {
            if **c != '|' && **c != '>' {
                return false;
            }
            let before = at.checked_sub(1).map(|b| text[b]);
            if !matches!(before, None | Some(' ' | '\t' | ':' | '-')) {
                return false;
            }
            let rest = &text[at + 1..];
            let flags = rest
                .iter()
                .take_while(|c| matches!(c, '+' | '-' | '1'..='9'))
                .count();
            let tail: String = rest[flags..].iter().collect();
            let tail = tail.trim_start();
            tail.is_empty()
                || (tail.starts_with('#')
                    && rest.get(flags).is_some_and(|c| *c == ' ' || *c == '\t'))
        });
        if let Some((at, _)) = found {
            return Some((l, at));
        }
    }
    None
}

/// Marks a block scalar (`|` or `>`) the parser met at `line`: the indicator and every line of
/// its content.
fn block(lines: &[Vec<char>], line: usize, out: &mut Protected) -> Result<(), usize> {
    let (line, start) = indicator(lines, line).ok_or(line)?;
    let text = &lines[line - 1];
    let mut c = start + 1;
    let mut explicit = None;
    while let Some(ch) = text.get(c) {
        match ch {
            '+' | '-' => {}
            d @ '1'..='9' => explicit = d.to_digit(10).map(|d| d as usize),
            _ => break,
        }
        c += 1;
    }
    protect(out, line, start, c);
    let parent = indentation(text);
    let mut content = explicit.map(|d| parent + d);
    for (l, text) in lines.iter().enumerate().skip(line) {
        let blank = text.iter().all(|c| *c == ' ' || *c == '\t');
        let indent = indentation(text);
        if !blank {
            let need = *content.get_or_insert(indent);
            if indent < need || indent <= parent && explicit.is_none() {
                break;
            }
        }
        protect(out, l + 1, 0, text.len());
    }
    Ok(())
}

/// Every comment of a YAML text. Plain scalars cannot hold ` #` (it starts a comment), so a
/// `#` at the start of a line or after a blank is a comment unless it is inside a quoted or
/// block scalar, which the parser locates.
fn comments(text: &str) -> Result<Vec<Comment>, FmtError> {
    let mut scalars = Scalars::default();
    let mut parser = Parser::new_from_str(text);
    parser
        .load(&mut scalars, true)
        .map_err(|e| FmtError::Comments {
            line: e.marker().line(),
            why: format!("invalid YAML: {}", e.info()),
        })?;
    let lines: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
    let mut protected = Protected::new();
    for (line, col, style) in scalars.found {
        let marked = match style {
            TScalarStyle::Literal | TScalarStyle::Folded => block(&lines, line, &mut protected),
            _ => quoted(&lines, line, col, &mut protected),
        };
        marked.map_err(|line| FmtError::Comments {
            line,
            why: "cannot find where a quoted or block scalar ends".into(),
        })?;
    }
    let mut found = Vec::new();
    for (i, text) in lines.iter().enumerate() {
        let ranges = protected.get(&(i + 1)).map(Vec::as_slice).unwrap_or(&[]);
        for (c, ch) in text.iter().enumerate() {
            if *ch != '#' || ranges.iter().any(|(from, to)| (*from..*to).contains(&c)) {
                continue;
            }
            if c == 0 || text[c - 1] == ' ' || text[c - 1] == '\t' {
                let comment: String = text[c..].iter().collect();
                found.push(Comment {
                    line: i + 1,
                    col: c,
                    text: comment.trim_end().to_owned(),
                    own_line: text[..c].iter().all(|c| *c == ' ' || *c == '\t'),
                });
                break;
            }
        }
    }
    Ok(found)
}

/// A mapping key or list item of the text, and where it starts.
struct Entry {
    path: Vec<Seg>,
    line: usize,
    /// From 0. A block list's items start at their `-`.
    col: usize,
}

fn entries(node: &Located, lines: &[Vec<char>], path: &mut Vec<Seg>, out: &mut Vec<Entry>) {
    match &node.node {
        Node::Map(items) => {
            for (key, pos, value) in items {
                path.push(Seg::Key(key.clone()));
                out.push(Entry {
                    path: path.clone(),
                    line: pos.line,
                    col: pos.column.saturating_sub(1),
                });
                entries(value, lines, path, out);
                path.pop();
            }
        }
        Node::Seq(items) => {
            let at = node.pos;
            let dash = lines
                .get(at.line.wrapping_sub(1))
                .and_then(|l| l.get(at.column.saturating_sub(1)))
                == Some(&'-');
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                out.push(Entry {
                    path: path.clone(),
                    line: item.pos.line,
                    col: if dash {
                        at.column.saturating_sub(1)
                    } else {
                        item.pos.column.saturating_sub(1)
                    },
                });
                entries(item, lines, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The comments, each attached to an entry by its path.
#[derive(Debug, Default)]
struct Attached {
    /// Before the first entry: the top of the file.
    header: Vec<String>,
    /// On lines of their own after the last entry: the end of the file.
    footer: Vec<String>,
    leading: HashMap<String, Vec<String>>,
    /// On the first line of the entry.
    eol: HashMap<String, Vec<String>>,
    /// After the entry and everything in it.
    trailing: HashMap<String, Vec<String>>,
    /// Every path with a comment, and every path above one.
    holders: HashSet<String>,
    /// The paths whose comments are inside them (not on the entry itself).
    inner: HashSet<String>,
}

impl Attached {
    fn add(&mut self, which: Which, path: &[Seg], text: String) {
        let key = path_key(path);
        let map = match which {
            Which::Leading => &mut self.leading,
            Which::Eol => &mut self.eol,
            Which::Trailing => &mut self.trailing,
        };
        map.entry(key).or_default().push(text);
        for n in 0..=path.len() {
            self.holders.insert(path_key(&path[..n]));
        }
        for n in 0..path.len() {
            self.inner.insert(path_key(&path[..n]));
        }
    }
}

#[derive(Clone, Copy)]
enum Which {
    Leading,
    Eol,
    Trailing,
}

fn attach(text: &str, root: &Located) -> Result<Attached, FmtError> {
    let found = comments(text)?;
    let mut attached = Attached::default();
    if found.is_empty() {
        return Ok(attached);
    }
    let lines: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
    let mut all = Vec::new();
    entries(root, &lines, &mut Vec::new(), &mut all);
    // Document order. An alias's entries repeat its anchor's places: a comment there belongs
    // to the anchor's own entries, which come first (the sort is stable).
    all.sort_by_key(|e| (e.line, e.col));
    all.dedup_by_key(|e| (e.line, e.col));
    let before = |c: &Comment| all.partition_point(|e| (e.line, e.col) < (c.line, c.col));
    for c in found {
        let next = before(&c);
        if next == 0 {
            attached.header.push(c.text);
            continue;
        }
        if !c.own_line {
            // The first entry written on the comment's line, or the last one before it.
            let on_line = all[..next].iter().position(|e| e.line == c.line);
            let entry = &all[on_line.unwrap_or(next - 1)];
            attached.add(Which::Eol, &entry.path.clone(), c.text);
            continue;
        }
        // The last entry before the comment that is not indented deeper than it.
        let previous = all[..next].iter().rev().find(|e| e.col <= c.col);
        match (all.get(next), previous) {
            (Some(e), Some(p)) if e.col < c.col && !e.path.starts_with(&p.path) => {
                attached.add(Which::Trailing, &p.path.clone(), c.text)
            }
            (Some(e), _) => attached.add(Which::Leading, &e.path.clone(), c.text),
            // Indented: the end of the entry before; at the margin: the end of the file.
            (None, Some(p)) if c.col > 0 => attached.add(Which::Trailing, &p.path.clone(), c.text),
            (None, _) => attached.footer.push(c.text),
        }
    }
    Ok(attached)
}

// --- writing --------------------------------------------------------------------------------

/// One line of output: its indentation, its text and a comment at its end.
struct Line {
    indent: usize,
    text: String,
    comment: Option<String>,
    /// A comment line (moved above a list item's `-` when it would come right after it).
    is_comment: bool,
}

impl Line {
    fn code(indent: usize, text: String) -> Self {
        Self {
            indent,
            text,
            comment: None,
            is_comment: false,
        }
    }

    fn comment(indent: usize, text: &str) -> Self {
        Self {
            indent,
            text: text.to_owned(),
            comment: None,
            is_comment: true,
        }
    }
}

struct Writer<'a> {
    comments: &'a Attached,
    /// Comments written so far, by kind and path: each is written once.
    used: HashSet<(u8, String)>,
}

/// Strings that other YAML readers (YAML 1.1) take for booleans: quoted.
const YAML11_BOOLS: [&str; 16] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

/// Whether a string can be written plain, in block and in flow context alike.
fn plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    !"-?:,[]{}#&*!|>'\"%@`".contains(first)
        && !s.starts_with(char::is_whitespace)
        && !s.ends_with(char::is_whitespace)
        && !s.ends_with(':')
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.contains([',', '[', ']', '{', '}', '\t'])
        && !s.chars().any(char::is_control)
        && !YAML11_BOOLS.contains(&s)
        && reads_as_string(s)
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn string_text(s: &str) -> String {
    if plain(s) {
        s.to_owned()
    } else {
        quote(s)
    }
}

/// A scalar written on one line; `None` for collections and multi-line strings.
fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::Null => Some("null".to_owned()),
        Yaml::Bool(b) => Some(b.to_string()),
        Yaml::Number(n) => Some(if n.is_f64() {
            let f = n.as_f64().unwrap_or_default();
            // Keep a float a float (`10.0`): free-form values compare by type.
            if f.fract() == 0.0 && f.abs() < 1e16 {
                format!("{f:.1}")
            } else {
                f.to_string()
            }
        } else {
            n.to_string()
        }),
        Yaml::String(s) if literal(s).is_none() => Some(string_text(s)),
        _ => None,
    }
}

/// A multi-line string as a literal block scalar: its indicator and lines.
fn literal(s: &str) -> Option<(&'static str, Vec<&str>)> {
    if !s.contains('\n')
        || s.contains('\r')
        || s.starts_with([' ', '\n'])
        || s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return None;
    }
    let (indicator, body) = match s.strip_suffix('\n') {
        Some(body) if !body.ends_with('\n') => ("|", body),
        Some(_) => return None,
        None => ("|-", s),
    };
    let lines: Vec<&str> = body.split('\n').collect();
    // Trailing blanks on a line would be kept but invisible: quote instead.
    if lines.iter().any(|l| l.ends_with([' ', '\t'])) {
        return None;
    }
    Some((indicator, lines))
}

fn key_text(k: &Yaml) -> String {
    match k {
        Yaml::String(s) => string_text(s),
        other => scalar(other).unwrap_or_default(),
    }
}

/// How deep a value nests (a scalar 0, a list of scalars 1).
fn depth(value: &Yaml) -> usize {
    match value {
        Yaml::Mapping(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Yaml::Sequence(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A value in flow style, on one line; `None` when it cannot be (a multi-line string).
fn flow(value: &Yaml) -> Option<String> {
    match value {
        Yaml::Mapping(map) => {
            let parts = map
                .iter()
                .map(|(k, v)| flow(v).map(|v| format!("{}: {v}", key_text(k))))
                .collect::<Option<Vec<_>>>()?;
            Some(format!("{{{}}}", parts.join(", ")))
        }
        Yaml::Sequence(items) => {
            let parts = items.iter().map(flow).collect::<Option<Vec<_>>>()?;
            Some(format!("[{}]", parts.join(", ")))
        }
        Yaml::Tagged(t) => flow(&t.value),
        other => scalar(other),
    }
}

/// Paths always written one entry per line: the document, its sections, each block and each
/// test case.
fn structural(path: &[Seg]) -> bool {
    match path {
        [] | [_] => true,
        [Seg::Key(section), _] => section == "reusable_policy_blocks" || section == "tests",
        _ => false,
    }
}

impl Writer<'_> {
    fn take(&mut self, kind: u8, path: &[Seg]) -> Vec<String> {
        let key = path_key(path);
        let map = match kind {
            0 => &self.comments.leading,
            1 => &self.comments.eol,
            _ => &self.comments.trailing,
        };
        match map.get(&key) {
            Some(list) if self.used.insert((kind, key)) => list.clone(),
            _ => Vec::new(),
        }
    }

    /// The one-line form of a collection at `path`, when it may have one at `width` columns.
    fn inline(&self, value: &Yaml, path: &[Seg], width: usize) -> Option<String> {
        let empty = match value {
            Yaml::Mapping(m) => m.is_empty(),
            Yaml::Sequence(s) => s.is_empty(),
            _ => false,
        };
        if empty {
            return flow(value);
        }
        if structural(path) || depth(value) > 2 || self.comments.inner.contains(&path_key(path)) {
            return None;
        }
        flow(value).filter(|text| text.chars().count() <= width)
    }

    /// A mapping entry `key: value` at `indent`.
    fn entry(
        &mut self,
        out: &mut Vec<Line>,
        indent: usize,
        path: &[Seg],
        key: &Yaml,
        value: &Yaml,
    ) {
        for c in self.take(0, path) {
            out.push(Line::comment(indent, &c));
        }
        let eol = self.take(1, path);
        let head = format!("{}:", key_text(key));
        let first = out.len();
        self.value(out, indent, path, head, value);
        if let Some(line) = out.get_mut(first) {
            add_comments(line, eol);
        }
        for c in self.take(2, path) {
            out.push(Line::comment(indent, &c));
        }
    }

    /// `head` (`key:` or `-`) and its value: on the same line when the value is a scalar or
    /// written inline, below it (indented) otherwise.
    fn value(
        &mut self,
        out: &mut Vec<Line>,
        indent: usize,
        path: &[Seg],
        head: String,
        value: &Yaml,
    ) {
        let value = match value {
            Yaml::Tagged(t) => &t.value,
            v => v,
        };
        if let Some(text) = scalar(value) {
            out.push(Line::code(indent, format!("{head} {text}")));
            return;
        }
        if let Yaml::String(s) = value {
            if let Some((indicator, lines)) = literal(s) {
                out.push(Line::code(indent, format!("{head} {indicator}")));
                for l in lines {
                    out.push(Line::code(
                        if l.is_empty() { 0 } else { indent + 2 },
                        l.to_owned(),
                    ));
                }
                return;
            }
        }
        let room = WIDTH.saturating_sub(indent + head.chars().count() + 1);
        if let Some(text) = self.inline(value, path, room) {
            out.push(Line::code(indent, format!("{head} {text}")));
            return;
        }
        out.push(Line::code(indent, head));
        self.block(out, indent + 2, path, value);
    }

    /// A collection, one entry per line, at `indent`.
    fn block(&mut self, out: &mut Vec<Line>, indent: usize, path: &[Seg], value: &Yaml) {
        match value {
            Yaml::Mapping(map) => {
                for (k, v) in map {
                    let mut child = path.to_vec();
                    child.push(Seg::Key(k.as_str().unwrap_or_default().to_owned()));
                    self.entry(out, indent, &child, k, v);
                }
            }
            Yaml::Sequence(items) => {
                for (i, v) in items.iter().enumerate() {
                    let mut child = path.to_vec();
                    child.push(Seg::Index(i));
                    self.item(out, indent, &child, v);
                }
            }
            _ => {}
        }
    }

    /// A list item at `indent` (its `-` there).
    fn item(&mut self, out: &mut Vec<Line>, indent: usize, path: &[Seg], value: &Yaml) {
        for c in self.take(0, path) {
            out.push(Line::comment(indent, &c));
        }
        let eol = self.take(1, path);
        let mut lines = Vec::new();
        let room = WIDTH.saturating_sub(indent + 2);
        let compact = match value {
            Yaml::Mapping(m) if !m.is_empty() => self.inline(value, path, room).is_none(),
            Yaml::Sequence(s) if !s.is_empty() => self.inline(value, path, room).is_none(),
            _ => false,
        };
        if compact {
            // `- key: value` with the other entries below, aligned with the first.
            self.block(&mut lines, indent + 2, path, value);
            // Comments above the first entry go above the `-`.
            while lines.first().is_some_and(|l| l.is_comment) {
                let mut line = lines.remove(0);
                line.indent = indent;
                out.push(line);
            }
            if let Some(first) = lines.first_mut() {
                first.indent = indent;
                first.text = format!("- {}", first.text);
            }
        } else {
            self.value(&mut lines, indent, path, "-".to_owned(), value);
        }
        if let Some(first) = lines.iter_mut().find(|l| !l.is_comment) {
            add_comments(first, eol);
        }
        out.extend(lines);
        for c in self.take(2, path) {
            out.push(Line::comment(indent, &c));
        }
    }
}

fn add_comments(line: &mut Line, comments: Vec<String>) {
    for c in comments {
        line.comment = Some(match line.comment.take() {
            Some(before) => format!("{before} {c}"),
            None => c,
        });
    }
}

fn render(doc: &Yaml, comments: &Attached) -> String {
    let mut writer = Writer {
        comments,
        used: HashSet::new(),
    };
    let mut lines = Vec::new();
    match doc {
        Yaml::Mapping(map) if !map.is_empty() => writer.block(&mut lines, 0, &[], doc),
        other => lines.push(Line::code(
            0,
            flow(other).unwrap_or_else(|| "{}".to_owned()),
        )),
    }
    let mut out = String::new();
    for c in &comments.header {
        out.push_str(c);
        out.push('\n');
    }
    if !comments.header.is_empty() {
        out.push('\n');
    }
    for line in lines {
        if !line.text.is_empty() {
            out.push_str(&" ".repeat(line.indent));
            out.push_str(&line.text);
        }
        if let Some(c) = line.comment {
            out.push_str("  ");
            out.push_str(&c);
        }
        out.push('\n');
    }
    for c in &comments.footer {
        out.push_str(c);
        out.push('\n');
    }
    out
}

// --- the entry points -----------------------------------------------------------------------

/// The canonical YAML text of a spec (no comments: the spec alone).
pub fn yaml(spec: &PolicySpec) -> Result<String, String> {
    let doc = document(spec, &HashSet::new())?;
    Ok(render(&doc, &Attached::default()))
}

/// The canonical JSON text of a spec: the same document, as pretty JSON.
pub fn json(spec: &PolicySpec) -> Result<String, String> {
    let doc = document(spec, &HashSet::new())?;
    serde_json::to_string_pretty(&doc)
        .map(|s| s + "\n")
        .map_err(|e| format!("cannot write JSON: {e}"))
}

/// The formatted text of a spec file: YAML stays YAML (its comments kept), JSON becomes pretty
/// JSON.
pub fn format(text: &str, format: Format) -> Result<String, FmtError> {
    let (spec, located) = spec::parse_located(text, format).map_err(FmtError::Spec)?;
    let internal = |e: String| FmtError::Spec(vec![SpecError::new("", e)]);
    if format == Format::Json {
        return json(&spec).map_err(internal);
    }
    let attached = attach(text, &located)?;
    let doc = document(&spec, &attached.holders).map_err(internal)?;
    let out = render(&doc, &attached);
    verify(text, &out, &spec)?;
    Ok(out)
}

/// The formatted text says the same as `before`: the same spec and the same comments.
fn verify(before: &str, after: &str, spec: &PolicySpec) -> Result<(), FmtError> {
    let parsed = parse_yaml(after)
        .ok()
        .and_then(|l| spec::from_value(&l.to_value()).ok());
    if parsed.as_ref() != Some(spec) {
        return Err(FmtError::Comments {
            line: 1,
            why: "the formatted text would not read as the same spec".into(),
        });
    }
    let was = comments(before)?;
    let now = comments(after)?;
    let mut kept: Vec<&str> = now.iter().map(|c| c.text.as_str()).collect();
    for c in &was {
        match kept.iter().position(|k| *k == c.text) {
            Some(i) => {
                kept.swap_remove(i);
            }
            None => {
                return Err(FmtError::Comments {
                    line: c.line,
                    why: format!("the comment `{}` would not be kept as written", c.text),
                })
            }
        }
    }
    if let Some(extra) = kept.first() {
        return Err(FmtError::Comments {
            line: 1,
            why: format!("the comment `{extra}` would be written differently"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(text: &str) -> String {
        format(text, Format::Yaml).unwrap()
    }

    #[test]
    fn comments_are_found_outside_scalars_only() {
        let text = "# top\na: 'x # not' # one\nb: \"y # not\"\nc: |\n  # not\n  z\n# two\nd: e#f  # three\n";
        let found: Vec<String> = comments(text)
            .unwrap()
            .into_iter()
            .map(|c| c.text)
            .collect();
        assert_eq!(found, ["# top", "# one", "# two", "# three"]);
    }

    #[test]
    fn comments_move_with_their_entries_and_flow_stays_on_one_line() {
        let text = "# The team's policy.\n\nbindings:\n  # the only binding\n  - {group: g, blocks: [b]}  # narrow later\nagent_groups:\n  - name: g\n    members: [agt_0123456789abcdef0123456789abcdef]  # alice\nreusable_policy_blocks:\n  b:\n    amount:\n      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n    actions:\n      allow: [read]\n      # deny: [drop_db]\n";
        let out = fmt(text);
        assert_eq!(
            out,
            "# The team's policy.\n\nreusable_policy_blocks:\n  b:\n    amount:\n      limits: {USD: {allow_up_to: 100, challenge_up_to: 1000}}\n    actions:\n      allow: [read]\n      # deny: [drop_db]\nagent_groups:\n  - name: g\n    members: [agt_0123456789abcdef0123456789abcdef]  # alice\nbindings:\n  # the only binding\n  - {group: g, blocks: [b]}  # narrow later\n"
        );
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn a_commented_default_is_kept_and_defaults_are_dropped() {
        let text = "reusable_policy_blocks:\n  b:\n    email:\n      on_violation: deny  # say it\n      max_recipients: 3\n    vault: {on_violation: deny, allow: [read]}\n";
        let out = fmt(text);
        assert!(out.contains("on_violation: deny  # say it"), "{out}");
        assert!(out.contains("vault: {allow: [read]}"), "{out}");
    }

    #[test]
    fn the_layout_depends_on_the_spec_alone() {
        let a = "bindings:\n- group: g\n  blocks:\n  - b\nagent_groups: [{name: g}]\nreusable_policy_blocks: {b: {actions: {allow: [\"*\", read]}}}\n";
        let spec = spec::parse(a, Format::Yaml).unwrap();
        let out = fmt(a);
        assert_eq!(out, yaml(&spec).unwrap());
        assert!(out.contains("allow: [\"*\", read]"), "{out}");
        assert!(out.contains("  - {group: g, blocks: [b]}\n"), "{out}");
    }

    #[test]
    fn strings_numbers_and_multi_line_conditions_read_back_the_same() {
        let text = "reusable_policy_blocks:\n  b:\n    amount: {limits: {USD: {allow_up_to: 100.5, challenge_up_to: 1000}}}\n    cedar:\n      - name: r\n        when: |\n          context.action == \"a\" &&\n          context.fields.contains(\"x=#1\")\n        outcome: deny\n        reason_code: c\n        reason: \"yes: no\"\ntests:\n  - name: t\n    agent: {metadata: {on: \"yes\", n: \"1\"}}\n    action: a\n    context: {amount: 10.0, n: 10, s: \"\", t: \"true\"}\n    expect: {decision: deny}\n";
        let out = fmt(text);
        assert!(out.contains("when: |\n          context.action"), "{out}");
        // `n` and `on` are booleans to YAML 1.1 readers: quoted.
        assert!(out.contains("amount: 10.0, \"n\": 10"), "{out}");
        assert!(out.contains("{\"on\": \"yes\", \"n\": \"1\"}"), "{out}");
        assert!(out.contains("challenge_up_to: 1000}"), "{out}");
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn comments_of_anchors_block_scalars_and_flow_collections_are_kept_once() {
        let text = "reusable_policy_blocks:   # the blocks\n  base: &base\n    actions:\n      allow: [read, 'it''s # not']   # eol\n      deny:\n        - drop_db   # dangerous\n        # more soon\n  copy: *base\n  raw:\n    cedar:\n      - name: s\n        when: |-   # header\n          context.action == \"b\"\n        outcome: deny\n        reason_code: d\n        reason: \"two\n          lines # not\"\nagent_groups: [ {name: g,   # in flow\n   description: \"d\"} ]\n";
        let out = fmt(text);
        assert_eq!(
            out,
            "reusable_policy_blocks:  # the blocks\n  base:\n    actions:\n      allow: [read, \"it's # not\"]  # eol\n      deny:\n        - drop_db  # dangerous\n        # more soon\n  copy:\n    actions: {allow: [read, \"it's # not\"], deny: [drop_db]}\n  raw:\n    cedar:\n      - name: s\n        when: context.action == \"b\"  # header\n        outcome: deny\n        reason_code: d\n        reason: \"two lines # not\"\nagent_groups:  # in flow\n  - {name: g, description: d}\n"
        );
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn a_comment_that_cannot_be_kept_refuses_instead_of_being_dropped() {
        // The item's comment and its first entry's would have to share a line.
        let text = "agent_groups: [{name: g}]\nreusable_policy_blocks: {b: {}}\nbindings:\n  - {  # the binding\n     group: g,  # the group\n     blocks: [b]}\n";
        match format(text, Format::Yaml) {
            Err(FmtError::Comments { line, why }) => {
                assert_eq!(line, 4, "{why}");
                assert!(why.contains("# the binding"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // The check itself: a comment missing, or a changed meaning.
        let spec = spec::parse("{}", Format::Yaml).unwrap();
        assert!(matches!(
            verify("{}  # one\n", "{}\n", &spec),
            Err(FmtError::Comments { line: 1, .. })
        ));
        assert!(matches!(
            verify("{}\n", "agent_groups: [{name: g}]\n", &spec),
            Err(FmtError::Comments { .. })
        ));
        assert!(verify("{}  # one\n", "# one\n{}\n", &spec).is_ok());
    }
}
