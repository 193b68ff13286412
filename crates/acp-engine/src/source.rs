//! Spec text read strictly: YAML or JSON to a tree that remembers where each value and key
//! was written. A key written twice in one mapping is an error naming both places (never a
//! silent overwrite); nesting, size and YAML alias expansion are bounded (the bounds are here; `limits` lists
//! them with the others). The
//! tree becomes the JSON value the spec is read from, and answers where a spec path is written
//! so that every error about a file carries its line and column.

use std::collections::HashMap;

use jsonc_parser::common::Ranged;
use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

pub use super::error::Pos;
use super::error::SpecError;

/// Largest spec text (a file, or the JSON of the sync request's `spec`).
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;
/// Deepest nesting of mappings and lists in a spec's YAML or JSON.
pub const MAX_SPEC_NESTING: usize = 32;
/// Most values a YAML spec may expand to once its aliases are resolved.
pub const MAX_SPEC_NODES: usize = 1_000_000;

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub pos: Pos,
    pub node: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Seq(Vec<Located>),
    /// Entries in the order written, each with the place of its key.
    Map(Vec<(String, Pos, Located)>),
}

impl Located {
    /// The JSON value of the tree.
    pub fn to_value(&self) -> Value {
        match &self.node {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.clone()),
            Node::Seq(items) => Value::Array(items.iter().map(Located::to_value).collect()),
            Node::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, _, v)| (k.clone(), v.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }

    /// Where the value at a spec path (`bindings[0].group`, `reusable_policy_blocks.a.b.email`)
    /// is written: the place of its key for a mapping entry, of the item for a list item; the
    /// deepest written part of the path when the rest is not written (a missing key).
    pub fn locate(&self, path: &str) -> Pos {
        self.find(path).unwrap_or(self.pos)
    }

    fn find(&self, path: &str) -> Option<Pos> {
        if path.is_empty() {
            return Some(self.pos);
        }
        match &self.node {
            Node::Seq(items) => {
                let rest = path.strip_prefix('[')?;
                let close = rest.find(']')?;
                let index: usize = rest.get(..close)?.parse().ok()?;
                let item = items.get(index)?;
                let after = rest.get(close + 1..)?;
                let after = after.strip_prefix('.').unwrap_or(after);
                Some(item.find(after).unwrap_or(item.pos))
            }
            Node::Map(entries) => {
                let path = path.strip_prefix('.').unwrap_or(path);
                // Keys may hold `.` (block names do): the longest key that the path starts
                // with, followed by the end, `.` or `[`, that leads somewhere.
                let mut best: Option<Pos> = None;
                let mut best_len = 0;
                for (key, key_pos, value) in entries {
                    let Some(after) = path.strip_prefix(key.as_str()) else {
                        continue;
                    };
                    if !(after.is_empty() || after.starts_with('.') || after.starts_with('['))
                        || key.len() < best_len
                    {
                        continue;
                    }
                    let found = if after.is_empty() {
                        Some(*key_pos)
                    } else {
                        value.find(after).or(Some(*key_pos))
                    };
                    best = found;
                    best_len = key.len();
                }
                best
            }
            _ => None,
        }
    }
}

fn located_error(path: &str, pos: Pos, message: impl Into<String>) -> SpecError {
    SpecError::new(path, message).at(pos)
}

fn too_large(len: usize) -> SpecError {
    SpecError::new(
        "",
        format!("the spec is {len} bytes long; at most {MAX_SPEC_BYTES} bytes are allowed"),
    )
}

fn too_deep(path: &str, pos: Pos) -> SpecError {
    located_error(
        path,
        pos,
        format!("the spec nests more than {MAX_SPEC_NESTING} levels of mappings and lists"),
    )
}

fn duplicate(path: &str, key: &str, first: Pos, again: Pos) -> SpecError {
    located_error(
        path,
        again,
        format!("duplicate key `{key}`: first written at {first}, again at {again}"),
    )
}

/// A path segment for error messages.
fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

// --- JSON ---------------------------------------------------------------------------------
//
// Two libraries, each for what it does well: serde_json decides whether the text is JSON (its
// grammar exactly, with the line of an error; it skips the value without recursing), and
// jsonc-parser, in its strict mode, gives the tree with the byte range of every key and value,
// keeping a key written twice (serde_json keeps the last one silently). jsonc-parser refuses
// nesting deeper than 512 levels itself; the tree refuses more than `MAX_SPEC_NESTING`.

/// Reads JSON text strictly (one value, no duplicate keys, bounded nesting).
pub fn parse_json(text: &str) -> Result<Located, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(too_large(text.len()));
    }
    let lines = Lines::of(text);
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        let full = e.to_string();
        let message = full
            .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
            .unwrap_or(&full);
        let pos = lines.at_byte_column(e.line(), e.column());
        return Err(located_error("", pos, format!("invalid JSON: {message}")));
    }
    let strict = jsonc_parser::ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    let parsed =
        jsonc_parser::parse_to_ast(text, &jsonc_parser::CollectOptions::default(), &strict)
            .map_err(|e| {
                let pos = lines.pos(e.range().start);
                match e.kind() {
                    jsonc_parser::errors::ParseErrorKind::NestingDepthExceeded => too_deep("", pos),
                    kind => located_error("", pos, format!("invalid JSON: {kind}")),
                }
            })?;
    match parsed.value {
        Some(value) => located(&value, "", 0, &lines),
        None => Err(located_error(
            "",
            Pos { line: 1, column: 1 },
            "invalid JSON: the text holds no value",
        )),
    }
}

/// Where each line of a text starts, to turn byte offsets into lines and columns.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn of(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { text, starts }
    }

    /// The place serde_json names by its line and its column in bytes (0 before the line's
    /// first byte), with the column counted in characters.
    fn at_byte_column(&self, line: usize, column: usize) -> Pos {
        let start = self
            .starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        self.pos(start + column.saturating_sub(1))
    }

    /// The line and column (a column per character, not per byte) of a byte offset.
    fn pos(&self, at: usize) -> Pos {
        // The character the offset falls in (or the end of the text).
        let at = (0..=at.min(self.text.len()))
            .rev()
            .find(|&i| self.text.is_char_boundary(i))
            .unwrap_or(0);
        let line = self.starts.partition_point(|&start| start <= at).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..at)
            .map_or(1, |s| s.chars().count() + 1);
        Pos { line, column }
    }
}

/// The tree of a JSON value that serde_json accepted, at `path`, `depth` levels down.
fn located(
    value: &jsonc_parser::ast::Value<'_>,
    path: &str,
    depth: usize,
    lines: &Lines<'_>,
) -> Result<Located, SpecError> {
    use jsonc_parser::ast::{ObjectPropName, Value as Json};
    let pos = lines.pos(value.range().start);
    let node = match value {
        Json::NullKeyword(_) => Node::Null,
        Json::BooleanLit(b) => Node::Bool(b.value),
        Json::StringLit(s) => Node::String(s.value.to_string()),
        Json::NumberLit(n) => {
            Node::Number(serde_json::from_str::<Number>(n.value).map_err(|_| {
                located_error(
                    path,
                    pos,
                    format!("invalid JSON: the number {} is out of range", n.value),
                )
            })?)
        }
        Json::Array(_) | Json::Object(_) if depth >= MAX_SPEC_NESTING => {
            return Err(too_deep(path, pos));
        }
        Json::Array(array) => Node::Seq(
            array
                .elements
                .iter()
                .enumerate()
                .map(|(i, item)| located(item, &format!("{path}[{i}]"), depth + 1, lines))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(object) => {
            let mut entries: Vec<(String, Pos, Located)> = Vec::new();
            let mut seen: HashMap<String, Pos> = HashMap::new();
            for prop in &object.properties {
                let (key, key_pos) = match &prop.name {
                    ObjectPropName::String(s) => (s.value.to_string(), lines.pos(s.range.start)),
                    ObjectPropName::Word(w) => (w.value.to_owned(), lines.pos(w.range.start)),
                };
                let key_path = child_path(path, &key);
                if let Some(first) = seen.get(&key) {
                    return Err(duplicate(&key_path, &key, *first, key_pos));
                }
                seen.insert(key.clone(), key_pos);
                let value = located(&prop.value, &key_path, depth + 1, lines)?;
                entries.push((key, key_pos, value));
            }
            Node::Map(entries)
        }
    };
    Ok(Located { pos, node })
}

// --- YAML ---------------------------------------------------------------------------------

/// Reads YAML text strictly: one document, no duplicate keys, bounded nesting, aliases
/// expanded within a bound (so that a few lines of anchors cannot expand to billions of
/// values).
pub fn parse_yaml(text: &str) -> Result<Located, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(too_large(text.len()));
    }
    let mut builder = YamlBuilder::default();
    let mut parser = Parser::new_from_str(text);
    let loaded = parser.load(&mut builder, true);
    if let Some(e) = builder.error.take() {
        return Err(e);
    }
    if let Err(e) = loaded {
        let m = e.marker();
        if e.info().contains("recursion limit") {
            return Err(too_deep("", yaml_pos(m)));
        }
        return Err(located_error(
            "",
            yaml_pos(m),
            format!("invalid YAML: {}", e.info()),
        ));
    }
    match builder.documents {
        0 => Ok(Located {
            pos: Pos { line: 1, column: 1 },
            node: Node::Null,
        }),
        1 => builder
            .root
            .take()
            .ok_or_else(|| SpecError::new("", "invalid YAML")),
        _ => Err(SpecError::new(
            "",
            "the file holds several YAML documents (`---`); a spec is one document",
        )),
    }
}

fn yaml_pos(m: &Marker) -> Pos {
    Pos {
        line: m.line(),
        column: m.col() + 1,
    }
}

enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Located>,
        path: String,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(String, Pos, Located)>,
        seen: HashMap<String, Pos>,
        key: Option<(String, Pos)>,
        path: String,
    },
}

#[derive(Default)]
struct YamlBuilder {
    stack: Vec<Frame>,
    root: Option<Located>,
    documents: usize,
    /// Anchored values and how many values each holds.
    anchors: HashMap<usize, (Located, usize)>,
    /// Values built so far, aliases expanded.
    nodes: usize,
    error: Option<SpecError>,
}

fn count(value: &Located) -> usize {
    match &value.node {
        Node::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        Node::Map(entries) => 1 + entries.iter().map(|(_, _, v)| count(v)).sum::<usize>(),
        _ => 1,
    }
}

/// Whether a plain scalar reads as this very string (not as null, a boolean or a number).
pub fn reads_as_string(text: &str) -> bool {
    matches!(plain_scalar(text), Ok(Node::String(s)) if s == text)
}

/// A plain scalar as YAML's core schema reads it.
fn plain_scalar(text: &str) -> Result<Node, String> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Node::Null),
        "true" | "True" | "TRUE" => return Ok(Node::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Node::Bool(false)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "-.inf" | "-.Inf" | "-.INF" | ".nan" | ".NaN"
        | ".NAN" => return Err(format!("`{text}` is not a finite number")),
        _ => {}
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let negative = text.starts_with('-');
    for (prefix, radix) in [("0x", 16), ("0o", 8)] {
        if let Some(digits) = unsigned.strip_prefix(prefix) {
            if let Ok(n) = i64::from_str_radix(digits, radix) {
                return Ok(Node::Number(Number::from(if negative { -n } else { n })));
            }
        }
    }
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Node::Number(Number::from(n)));
        }
        if let Ok(n) = text.trim_start_matches('+').parse::<u64>() {
            return Ok(Node::Number(Number::from(n)));
        }
    }
    let numeric = unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && unsigned.bytes().any(|b| b.is_ascii_digit())
        && unsigned
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.');
    if numeric {
        if let Ok(f) = text.parse::<f64>() {
            return Number::from_f64(f)
                .map(Node::Number)
                .ok_or_else(|| format!("`{text}` is not a finite number"));
        }
    }
    Ok(Node::String(text.to_owned()))
}

impl YamlBuilder {
    fn fail(&mut self, e: SpecError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// The path of the value about to be added.
    fn next_path(&self) -> String {
        match self.stack.last() {
            None => String::new(),
            Some(Frame::Seq { items, path, .. }) => format!("{path}[{}]", items.len()),
            Some(Frame::Map { key, path, .. }) => match key {
                Some((k, _)) => child_path(path, k),
                None => path.clone(),
            },
        }
    }

    fn add(&mut self, value: Located, anchor: usize) {
        if anchor > 0 {
            let size = count(&value);
            self.anchors.insert(anchor, (value.clone(), size));
        }
        let path = self.next_path();
        match self.stack.last_mut() {
            None => {
                self.root = Some(value);
            }
            Some(Frame::Seq { items, .. }) => items.push(value),
            Some(Frame::Map {
                entries, seen, key, ..
            }) => match key.take() {
                Some((k, key_pos)) => entries.push((k, key_pos, value)),
                None => {
                    let key_text = match &value.node {
                        Node::String(s) => s.clone(),
                        Node::Bool(b) => b.to_string(),
                        Node::Number(n) => n.to_string(),
                        Node::Null => "null".to_owned(),
                        Node::Seq(_) | Node::Map(_) => {
                            let e = located_error(
                                &path,
                                value.pos,
                                "a mapping key must be a plain value, not a list or mapping",
                            );
                            self.fail(e);
                            return;
                        }
                    };
                    if let Some(first) = seen.get(&key_text) {
                        let e =
                            duplicate(&child_path(&path, &key_text), &key_text, *first, value.pos);
                        self.fail(e);
                        return;
                    }
                    seen.insert(key_text.clone(), value.pos);
                    *key = Some((key_text, value.pos));
                }
            },
        }
    }

    fn counted(&mut self, n: usize, pos: Pos) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_SPEC_NODES {
            let path = self.next_path();
            self.fail(located_error(
                &path,
                pos,
                format!(
                    "the spec holds more than {MAX_SPEC_NODES} values once its YAML aliases are expanded"
                ),
            ));
            return false;
        }
        true
    }
}

impl MarkedEventReceiver for YamlBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let pos = yaml_pos(&mark);
        match event {
            Event::DocumentStart => self.documents += 1,
            Event::Scalar(text, style, anchor, tag) => {
                if !self.counted(1, pos) {
                    return;
                }
                let is_str_tag = tag
                    .as_ref()
                    .is_some_and(|t| t.suffix == "str" || t.suffix == "tag:yaml.org,2002:str");
                let node = if style == TScalarStyle::Plain && !is_str_tag {
                    match plain_scalar(&text) {
                        Ok(node) => node,
                        Err(message) => {
                            let path = self.next_path();
                            self.fail(located_error(&path, pos, message));
                            return;
                        }
                    }
                } else {
                    Node::String(text)
                };
                self.add(Located { pos, node }, anchor);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if !self.counted(1, pos) {
                    return;
                }
                let path = self.next_path();
                if self.stack.len() >= MAX_SPEC_NESTING {
                    self.fail(too_deep(&path, pos));
                    return;
                }
                let frame = if matches!(event, Event::SequenceStart(..)) {
                    Frame::Seq {
                        pos,
                        anchor,
                        items: Vec::new(),
                        path,
                    }
                } else {
                    Frame::Map {
                        pos,
                        anchor,
                        entries: Vec::new(),
                        seen: HashMap::new(),
                        key: None,
                        path,
                    }
                };
                self.stack.push(frame);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (value, anchor) = match self.stack.pop() {
                    Some(Frame::Seq {
                        pos, anchor, items, ..
                    }) => (
                        Located {
                            pos,
                            node: Node::Seq(items),
                        },
                        anchor,
                    ),
                    Some(Frame::Map {
                        pos,
                        anchor,
                        entries,
                        ..
                    }) => {
                        // A block mapping starts where its first key is written.
                        let pos = match entries.first() {
                            Some((_, first, _)) if first.line == pos.line => *first,
                            _ => pos,
                        };
                        (
                            Located {
                                pos,
                                node: Node::Map(entries),
                            },
                            anchor,
                        )
                    }
                    None => return,
                };
                self.add(value, anchor);
            }
            Event::Alias(anchor) => {
                let Some((value, size)) = self.anchors.get(&anchor).cloned() else {
                    let path = self.next_path();
                    self.fail(located_error(&path, pos, "an alias to an unknown anchor"));
                    return;
                };
                if !self.counted(size, pos) {
                    return;
                }
                if self.stack.len() + depth(&value) > MAX_SPEC_NESTING {
                    let path = self.next_path();
                    self.fail(too_deep(&path, pos));
                    return;
                }
                self.add(Located { pos, ..value }, 0);
            }
            _ => {}
        }
    }
}

fn depth(value: &Located) -> usize {
    match &value.node {
        Node::Seq(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Node::Map(entries) => 1 + entries.iter().map(|(_, _, v)| depth(v)).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_reads_like_serde_json_and_knows_where_things_are() {
        let text = "{\"a\": [1, -2.5, 1e3, true, null, \"x\\u00e9\\ud83d\\ude00\\n\"],\n  \"b\": {\"c\": 18446744073709551615}}";
        let located = parse_json(text).unwrap();
        assert_eq!(
            located.to_value(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert_eq!(located.locate("b.c"), Pos { line: 2, column: 9 });
        assert_eq!(
            located.locate("a[3]"),
            Pos {
                line: 1,
                column: 22
            }
        );
        for bad in [
            "{",
            "[1,]",
            "{\"a\" 1}",
            "tru",
            "\"\\x\"",
            "1 2",
            "{\"a\":1,}",
        ] {
            assert!(parse_json(bad).is_err(), "{bad}");
        }
        // serde_json's verdict, with its line and column.
        let e = parse_json("{\n  \"a\" 1}").unwrap_err();
        assert_eq!((e.line, e.column), (Some(2), Some(7)), "{e:?}");
        assert_eq!(e.message, "invalid JSON: expected `:`");
        // Columns in characters for serde_json's errors too; nesting past jsonc-parser's own
        // bound is the spec's nesting error.
        let e = parse_json("[\"é\", tru]").unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(10)), "{e:?}");
        let deep = format!("{}1{}", "[".repeat(600), "]".repeat(600));
        assert!(parse_json(&deep).unwrap_err().message.contains("nests"));
        // Tabs, and columns counted in characters.
        let located = parse_json("{\n\t\"é\": {\"x\": [true]}}").unwrap();
        assert_eq!(
            located.locate("é.x[0]"),
            Pos {
                line: 2,
                column: 14
            }
        );
    }

    #[test]
    fn duplicate_keys_name_both_places() {
        let e = parse_json("{\"a\": {\"email\": 1,\n \"email\": 2}}").unwrap_err();
        assert_eq!(e.path, "a.email");
        assert!(
            e.message.contains("line 1, column 8") && e.message.contains("line 2, column 2"),
            "{e:?}"
        );
        assert_eq!((e.line, e.column), (Some(2), Some(2)));

        let e = parse_yaml("a:\n  email: {}\n  b: 1\n  email: {}\n").unwrap_err();
        assert_eq!(e.path, "a.email");
        assert!(
            e.message.contains("line 2, column 3") && e.message.contains("line 4, column 3"),
            "{e:?}"
        );
    }

    #[test]
    fn yaml_scalars_lists_and_places() {
        let text =
            "a: [1, 2.5, true, ~, 'x', \"1\", 0x10, -3]\nb:\n  - c: yes\n    d: |\n      text\n";
        let located = parse_yaml(text).unwrap();
        assert_eq!(
            located.to_value(),
            serde_json::json!({"a": [1, 2.5, true, null, "x", "1", 16, -3], "b": [{"c": "yes", "d": "text\n"}]})
        );
        assert_eq!(located.locate("b[0].d"), Pos { line: 4, column: 5 });
        assert_eq!(located.locate("b[0].nope"), Pos { line: 3, column: 5 });
        assert!(parse_yaml("a: 1\n---\nb: 2\n").is_err());
        assert!(parse_yaml("a: .inf\n").is_err());
    }

    #[test]
    fn nesting_and_aliases_are_bounded() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(parse_json(&deep).unwrap_err().message.contains("nests"));
        assert!(parse_yaml(&deep).unwrap_err().message.contains("nests"));
        let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            laughs.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let e = parse_yaml(&laughs).unwrap_err();
        assert!(e.message.contains("aliases"), "{e:?}");
        let shared = parse_yaml("base: &b {x: 1}\nother: *b\n").unwrap();
        assert_eq!(shared.to_value()["other"]["x"], 1);
    }

    #[test]
    fn keys_with_dots_are_located() {
        let located = parse_yaml("blocks:\n  a.b:\n    email: 1\n  a:\n    x: 2\n").unwrap();
        assert_eq!(
            located.locate("blocks.a.b.email"),
            Pos { line: 3, column: 5 }
        );
        assert_eq!(located.locate("blocks.a.x"), Pos { line: 5, column: 5 });
    }
}
