//! What a spec error says and where: the path into the spec, the message, and for spec text
//! the line and column. Below the reader and the spec types, which both make them.

use serde::{Deserialize, Serialize};

/// A place in the text: line and column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// A problem in a spec, located by a path such as `bindings[2].group` and, for spec text, by
/// the line and column (from 1) where that part is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    pub path: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl SpecError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }

    /// The error, written at `pos`.
    pub fn at(mut self, pos: Pos) -> Self {
        self.line = Some(pos.line);
        self.column = Some(pos.column);
        self
    }

    /// Several errors as one line of text, each as [`Display`](std::fmt::Display) writes it.
    pub fn list(errors: &[SpecError]) -> String {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}
