//! An email address as the service keeps it: parsed once, then passed on as this type. Its
//! grammar is the one lettre (the service's mail library) checks an `Address` with, the
//! `email_address` crate's local part and domain, narrowed to what the service stores: lower
//! case, printable ASCII without quoting or comments, one `@`. lettre itself stays out of this
//! crate (the policy engine depends on it and must not reach a mail library); the mail layer's
//! tests hold every address this type accepts to lettre's own parser.

use std::fmt;

use super::FieldError;

/// Lowercased and trimmed, with one `@`, a local part and a domain as lettre checks them
/// (`email_address`), printable ASCII without quotes, angle brackets, commas, semicolons,
/// backslashes or parentheses; at most 254 bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EmailAddress(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    #[error("no address was given")]
    Empty,
    #[error("is not an email address")]
    Malformed,
}

impl EmailAddress {
    pub fn parse(raw: &str) -> Result<Self, EmailError> {
        let email = raw.trim().to_ascii_lowercase();
        if email.is_empty() {
            return Err(EmailError::Empty);
        }
        let valid = email.len() <= 254
            && email.chars().all(|c| {
                c.is_ascii_graphic() && !matches!(c, '<' | '>' | ',' | ';' | '"' | '\\' | '(' | ')')
            })
            && email.split_once('@').is_some_and(|(local, domain)| {
                !domain.contains('@')
                    && email_address::EmailAddress::is_valid_local_part(local)
                    && email_address::EmailAddress::is_valid_domain(domain)
            });
        if valid {
            Ok(Self(email))
        } else {
            Err(EmailError::Malformed)
        }
    }

    /// Parses the value of a request field: an empty one is missing, a malformed one invalid.
    pub fn from_field(field: &'static str, raw: &str) -> Result<Self, FieldError> {
        Self::parse(raw).map_err(|e| match e {
            EmailError::Empty => FieldError::missing(field),
            EmailError::Malformed => FieldError::invalid(field, e),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_normalised_or_refused() {
        assert_eq!(
            EmailAddress::parse("  Ada@Example.COM ").map(EmailAddress::into_string),
            Ok("ada@example.com".to_owned())
        );
        assert_eq!(EmailAddress::parse("   "), Err(EmailError::Empty));
        for bad in [
            "ada",
            "ada@",
            "@example.com",
            "a@b@c",
            "ada@.example.com",
            "ada@example.com.",
            "Ada <ada@example.com>",
            "ada lovelace@example.com",
            "ada@-example.com",
            ".ada@example.com",
        ] {
            assert_eq!(
                EmailAddress::parse(bad),
                Err(EmailError::Malformed),
                "{bad}"
            );
        }
        let long = format!("{}@example.com", "a".repeat(250));
        assert_eq!(EmailAddress::parse(&long), Err(EmailError::Malformed));
    }
}
