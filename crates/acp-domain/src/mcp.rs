//! The MCP gateway's own words: the name a registered server is reached by (`/mcp/{name}`,
//! and the `mcp.<server>.<tool>` actions the policy decides).

use std::fmt;

use crate::input::FieldError;

/// The longest server name.
pub const MAX_SERVER_NAME: usize = 64;

/// A registered server's name: 1 to 64 of `a-z`, `0-9` and `-`, unique in its workspace. It
/// is a path segment and a part of Cedar action names, so nothing else is let in; it can never
/// be taken for a server id (`mcp_…` holds an underscore).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerName(String);

impl ServerName {
    /// `raw` as a name, or why it is not one (the error names the field `name`).
    pub fn parse(raw: &str) -> Result<Self, FieldError> {
        if raw.is_empty() {
            return Err(FieldError::missing("name"));
        }
        if raw.len() > MAX_SERVER_NAME
            || !raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(FieldError::invalid(
                "name",
                format!(
                    "must be 1 to {MAX_SERVER_NAME} characters of `a-z`, `0-9` and `-` (it is a path segment and part of the tools' action names)"
                ),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_path_segments() {
        for good in ["github", "a", "jira-cloud-2", &"x".repeat(64)] {
            assert_eq!(ServerName::parse(good).unwrap().as_str(), good);
        }
        assert_eq!(ServerName::parse("").unwrap_err().code(), "missing_name");
        for bad in [
            "GitHub",
            "git hub",
            "git_hub",
            "mcp_0193",
            "git.hub",
            "gít",
            "a/b",
            &"x".repeat(65),
        ] {
            let err = ServerName::parse(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_name", "{bad}");
            assert!(err.to_string().starts_with("`name` must be"), "{err}");
        }
    }
}
