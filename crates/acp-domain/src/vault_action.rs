//! The vault's three actions, with one spelling each in every answer: `read` (an agent reads
//! secret values), `proxy` (acp makes a call with them injected) and `mint_lease` (an agent mints
//! a request lease from its workflow lease). Grants, leases, policy specs and the agent's
//! requests all parse them here, so the same aliases are accepted everywhere: `vault.read`,
//! `proxy_use`, `vault.proxy`, `mint_request_lease` and `vault.mint_lease`. The policy decides
//! each of them as a check whose action is the `vault.` name ([`VaultAction::check_action`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VaultAction {
    Read,
    Proxy,
    MintLease,
}

impl VaultAction {
    /// Every action, in the order forms and messages list them.
    pub const ALL: [Self; 3] = [Self::Proxy, Self::Read, Self::MintLease];
    /// The actions a lease (workflow or request) is for: not `mint_lease`, which is what a
    /// workflow lease itself lets an agent do.
    pub const LEASABLE: [Self; 2] = [Self::Proxy, Self::Read];

    /// The one spelling answers use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Proxy => "proxy",
            Self::MintLease => "mint_lease",
        }
    }

    /// The other spellings accepted on input.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            Self::Read => &["vault.read"],
            Self::Proxy => &["proxy_use", "vault.proxy"],
            Self::MintLease => &["mint_request_lease", "vault.mint_lease"],
        }
    }

    /// The action of the check the policy decides (`vault.read`, `vault.proxy`,
    /// `vault.mint_lease`).
    pub fn check_action(self) -> &'static str {
        match self {
            Self::Read => "vault.read",
            Self::Proxy => "vault.proxy",
            Self::MintLease => "vault.mint_lease",
        }
    }

    /// An action by its name or one of its aliases (surrounding spaces ignored).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        Self::ALL
            .into_iter()
            .find(|a| a.name() == text || a.aliases().contains(&text))
    }

    /// An action a lease may be for (see [`Self::LEASABLE`]).
    pub fn parse_leasable(text: &str) -> Option<Self> {
        Self::parse(text).filter(|a| Self::LEASABLE.contains(a))
    }

    /// `names` as a message lists them: "`proxy`, `read` or `mint_lease`".
    pub fn listed(actions: &[Self]) -> String {
        let names: Vec<String> = actions.iter().map(|a| format!("`{}`", a.name())).collect();
        match names.split_last() {
            None => String::new(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }

    /// The actions stored in a row (JSON text): each by its name or an alias (rows written
    /// before the names were settled carry `proxy_use` and `mint_request_lease`); a word that is
    /// no action (a row written by a later version) allows nothing.
    pub fn from_stored(json: &str) -> Vec<Self> {
        let words: Vec<String> = serde_json::from_str(json).unwrap_or_default();
        let mut out: Vec<Self> = Vec::new();
        for action in words.iter().filter_map(|w| Self::parse(w)) {
            if !out.contains(&action) {
                out.push(action);
            }
        }
        out
    }

    /// The names of `actions`, as answers and audit events carry them.
    pub fn names(actions: &[Self]) -> Vec<String> {
        actions.iter().map(|a| a.name().to_owned()).collect()
    }
}

impl fmt::Display for VaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for VaultAction {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for VaultAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not a vault action: {}",
                Self::listed(&Self::ALL)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_to_one_name() {
        for (text, name) in [
            ("read", "read"),
            ("vault.read", "read"),
            ("proxy", "proxy"),
            ("proxy_use", "proxy"),
            (" vault.proxy ", "proxy"),
            ("mint_lease", "mint_lease"),
            ("mint_request_lease", "mint_lease"),
            ("vault.mint_lease", "mint_lease"),
        ] {
            assert_eq!(
                VaultAction::parse(text).map(VaultAction::name),
                Some(name),
                "{text}"
            );
        }
        for text in ["", "write", "lease", "Read", "mint-lease", "vault.*"] {
            assert_eq!(VaultAction::parse(text), None, "{text}");
        }
        assert_eq!(VaultAction::parse_leasable("mint_lease"), None);
        assert_eq!(
            VaultAction::parse_leasable("proxy_use"),
            Some(VaultAction::Proxy)
        );
    }

    #[test]
    fn stored_rows_of_either_spelling_read_the_same() {
        assert_eq!(
            VaultAction::from_stored(r#"["proxy_use","mint_request_lease","proxy","read"]"#),
            vec![
                VaultAction::Proxy,
                VaultAction::MintLease,
                VaultAction::Read
            ]
        );
        assert_eq!(
            VaultAction::from_stored(r#"["teleport"]"#),
            Vec::<VaultAction>::new()
        );
        assert_eq!(
            serde_json::to_string(&[VaultAction::Proxy, VaultAction::MintLease]).ok(),
            Some(r#"["proxy","mint_lease"]"#.to_owned())
        );
        assert_eq!(
            VaultAction::listed(&VaultAction::ALL),
            "`proxy`, `read` or `mint_lease`"
        );
    }
}
