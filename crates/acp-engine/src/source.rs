//! Spec text read strictly: YAML or JSON to a tree that remembers where each value and key
//! was written. A key written twice in one mapping is an error naming both places (never a
//! silent overwrite); nesting, size and YAML alias expansion are bounded (the bounds are here; `limits` lists
//! them with the others). The
//! tree becomes the JSON value the spec is read from, and answers where a spec path is written
//! so that every error about a file carries its line and column.

use std::collections::HashMap;

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

/// Reads JSON text strictly (one value, no duplicate keys, bounded nesting).
pub fn parse_json(text: &str) -> Result<Located, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(too_large(text.len()));
    }
    let mut reader = JsonReader {
        bytes: text.as_bytes(),
        at: 0,
        line: 1,
        column: 1,
    };
    reader.skip_space();
    let value = reader.value("", 0)?;
    reader.skip_space();
    if reader.at < reader.bytes.len() {
        return Err(reader.error("", "unexpected text after the JSON value"));
    }
    Ok(value)
}

struct JsonReader<'a> {
    bytes: &'a [u8],
    at: usize,
    line: usize,
    column: usize,
}

impl JsonReader<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn error(&self, path: &str, message: &str) -> SpecError {
        located_error(path, self.pos(), format!("invalid JSON: {message}"))
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn bump(&mut self) {
        if let Some(b) = self.peek() {
            self.at += 1;
            if b == b'\n' {
                self.line += 1;
                self.column = 1;
            } else if b & 0xC0 != 0x80 {
                // A column per character, not per byte.
                self.column += 1;
            }
        }
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.bump();
        }
    }

    fn expect_word(&mut self, word: &str, path: &str) -> Result<(), SpecError> {
        for expected in word.bytes() {
            if self.peek() != Some(expected) {
                return Err(self.error(path, "expected a value"));
            }
            self.bump();
        }
        Ok(())
    }

    fn value(&mut self, path: &str, depth: usize) -> Result<Located, SpecError> {
        let pos = self.pos();
        let node = match self.peek() {
            Some(b'{') => {
                if depth >= MAX_SPEC_NESTING {
                    return Err(too_deep(path, pos));
                }
                self.object(path, depth)?
            }
            Some(b'[') => {
                if depth >= MAX_SPEC_NESTING {
                    return Err(too_deep(path, pos));
                }
                self.array(path, depth)?
            }
            Some(b'"') => Node::String(self.string(path)?),
            Some(b't') => {
                self.expect_word("true", path)?;
                Node::Bool(true)
            }
            Some(b'f') => {
                self.expect_word("false", path)?;
                Node::Bool(false)
            }
            Some(b'n') => {
                self.expect_word("null", path)?;
                Node::Null
            }
            Some(b'-' | b'0'..=b'9') => Node::Number(self.number(path)?),
            Some(_) => return Err(self.error(path, "expected a value")),
            None => return Err(self.error(path, "the text ends where a value should be")),
        };
        Ok(Located { pos, node })
    }

    fn object(&mut self, path: &str, depth: usize) -> Result<Node, SpecError> {
        self.bump();
        let mut entries: Vec<(String, Pos, Located)> = Vec::new();
        let mut seen: HashMap<String, Pos> = HashMap::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.bump();
            return Ok(Node::Map(entries));
        }
        loop {
            self.skip_space();
            let key_pos = self.pos();
            if self.peek() != Some(b'"') {
                return Err(self.error(path, "expected a key in double quotes"));
            }
            let key = self.string(path)?;
            let key_path = child_path(path, &key);
            if let Some(first) = seen.get(&key) {
                return Err(duplicate(&key_path, &key, *first, key_pos));
            }
            seen.insert(key.clone(), key_pos);
            self.skip_space();
            if self.peek() != Some(b':') {
                return Err(self.error(&key_path, "expected `:` after the key"));
            }
            self.bump();
            self.skip_space();
            let value = self.value(&key_path, depth + 1)?;
            entries.push((key, key_pos, value));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.bump(),
                Some(b'}') => {
                    self.bump();
                    return Ok(Node::Map(entries));
                }
                _ => return Err(self.error(path, "expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, path: &str, depth: usize) -> Result<Node, SpecError> {
        self.bump();
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.bump();
            return Ok(Node::Seq(items));
        }
        loop {
            self.skip_space();
            let item_path = format!("{path}[{}]", items.len());
            items.push(self.value(&item_path, depth + 1)?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.bump(),
                Some(b']') => {
                    self.bump();
                    return Ok(Node::Seq(items));
                }
                _ => return Err(self.error(path, "expected `,` or `]`")),
            }
        }
    }

    fn hex4(&mut self, path: &str) -> Result<u32, SpecError> {
        let mut code = 0u32;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| (b as char).to_digit(16))
                .ok_or_else(|| self.error(path, "a `\\u` escape needs four hex digits"))?;
            code = code * 16 + digit;
            self.bump();
        }
        Ok(code)
    }

    fn string(&mut self, path: &str) -> Result<String, SpecError> {
        self.bump();
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error(path, "a string is not closed"));
            };
            match b {
                b'"' => {
                    self.bump();
                    break;
                }
                b'\\' => {
                    self.bump();
                    let escaped = self.peek();
                    self.bump();
                    let c = match escaped {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let high = self.hex4(path)?;
                            let code = if (0xD800..0xDC00).contains(&high) {
                                if self.peek() != Some(b'\\') {
                                    return Err(self.error(path, "a lone surrogate in `\\u`"));
                                }
                                self.bump();
                                if self.peek() != Some(b'u') {
                                    return Err(self.error(path, "a lone surrogate in `\\u`"));
                                }
                                self.bump();
                                let low = self.hex4(path)?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(self.error(path, "a lone surrogate in `\\u`"));
                                }
                                0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                            } else {
                                high
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.error(path, "a lone surrogate in `\\u`"))?
                        }
                        _ => return Err(self.error(path, "an unknown escape in a string")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => {
                    return Err(self.error(path, "a control character in a string"));
                }
                _ => {
                    out.push(b);
                    self.bump();
                }
            }
        }
        String::from_utf8(out).map_err(|_| self.error(path, "a string is not UTF-8"))
    }

    fn number(&mut self, path: &str) -> Result<Number, SpecError> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.bump();
        }
        let text = std::str::from_utf8(self.bytes.get(start..self.at).unwrap_or_default())
            .unwrap_or_default();
        serde_json::from_str::<Number>(text)
            .map_err(|_| self.error(path, &format!("`{text}` is not a number")))
    }
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
