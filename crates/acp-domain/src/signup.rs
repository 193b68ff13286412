//! Who may sign up: log in for the first time, and create a workspace.

use super::EmailAddress;

/// The `signup` setting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Signup {
    /// Only people who are a member of some workspace (added or invited by an owner or admin,
    /// or with `acp admin add-member` / `acp admin workspace create --owner`, as the server's first owner is).
    #[default]
    Invite,
    /// Those, and any address of these domains (lowercase, without a leading `@`).
    Domains(Vec<String>),
    /// Anyone.
    Open,
}

impl Signup {
    /// `invite`, `open` or `domains:example.com,example.org` (case-insensitive, spaces around
    /// the names ignored).
    pub fn parse(text: &str) -> Result<Signup, String> {
        let text = text.trim();
        let lower = text.to_ascii_lowercase();
        let domains = match lower.as_str() {
            "invite" => return Ok(Signup::Invite),
            "open" => return Ok(Signup::Open),
            other => other.strip_prefix("domains:"),
        };
        let malformed = || {
            format!(
                "`signup` must be `invite`, `open` or `domains:` and a comma-separated list of \
                 domains (`domains:example.com,example.org`), got `{text}`"
            )
        };
        let names: Vec<String> = domains
            .ok_or_else(malformed)?
            .split(',')
            .map(|d| d.trim().to_owned())
            .collect();
        if names.iter().all(|d| is_domain(d)) {
            Ok(Signup::Domains(names))
        } else {
            Err(malformed())
        }
    }

    /// Whether `email` may sign up by this setting alone, without a membership: always with
    /// `open`, when its domain is listed with `domains:`, never with `invite`.
    pub fn admits_without_membership(&self, email: &EmailAddress) -> bool {
        match self {
            Signup::Open => true,
            Signup::Domains(domains) => email
                .as_str()
                .rsplit_once('@')
                .is_some_and(|(_, domain)| domains.iter().any(|d| d == domain)),
            Signup::Invite => false,
        }
    }
}

/// A host name: dot-separated labels of letters, digits and inner hyphens, at least two.
fn is_domain(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    name.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email(text: &str) -> EmailAddress {
        EmailAddress::parse(text).unwrap()
    }

    #[test]
    fn settings_are_parsed_and_malformed_ones_refused() {
        assert_eq!(Signup::parse("invite"), Ok(Signup::Invite));
        assert_eq!(Signup::parse(" OPEN "), Ok(Signup::Open));
        let both = Signup::parse("domains:Example.com, example.org").unwrap();
        assert_eq!(
            both,
            Signup::Domains(vec!["example.com".into(), "example.org".into()])
        );
        for bad in [
            "",
            "closed",
            "domains:",
            "domains:example",
            "domains:example.com,,example.org",
            "domains:@example.com",
            "domains:exa mple.com",
            "domains:-x.com",
        ] {
            let err = Signup::parse(bad).unwrap_err();
            assert!(err.contains("`signup` must be"), "{bad}: {err}");
        }
    }

    #[test]
    fn domains_admit_their_addresses_only() {
        let signup = Signup::parse("domains:example.com").unwrap();
        assert!(signup.admits_without_membership(&email("Ada@EXAMPLE.com")));
        assert!(!signup.admits_without_membership(&email("ada@sub.example.com")));
        assert!(!signup.admits_without_membership(&email("ada@example.com.evil.test")));
        assert!(!signup.admits_without_membership(&email("ada@example.org")));
        assert!(!Signup::Invite.admits_without_membership(&email("ada@example.com")));
        assert!(Signup::Open.admits_without_membership(&email("anyone@anywhere.test")));
    }
}
