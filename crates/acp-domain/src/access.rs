//! Who may do what: what each management request needs, which roles
//! give it to people, and which scopes narrow an API key or a personal access token.
//!
//! Three kinds of caller act on a workspace: its API keys (machines), people (session cookie)
//! and their personal access tokens (CI). A person acts by role: `owner` and `admin` change,
//! `member` reads, `approver` reads and decides challenges. An API key or a token may carry
//! scopes; without any it may do all its kind may do.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::member::Role;

/// What a request does, as far as access is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Need {
    /// `/v1/check`.
    Check,
    /// `/v1/verify`.
    Verify,
    /// `/v1/email/send`.
    Email,
    /// Minting and exchanging credentials.
    Mint,
    /// Heartbeat ingestion, provider feedback, inventory upserts.
    Telemetry,
    /// Agents, the inventory, heartbeats: read.
    AgentsRead,
    /// Suspend, resume, revoke, approve and claim agents.
    AgentsChange,
    /// The audit trail: search and export.
    AuditRead,
    /// The kill switch's state.
    KillSwitchRead,
    /// Pause or resume minting; revoke every credential.
    KillSwitch,
    /// Revoke credentials; introspect one (a one-time credential is spent by it).
    Credentials,
    /// Policies and their versions: read.
    PoliciesRead,
    /// Sync (dry run or apply) and roll back policies.
    PolicySync,
    /// Policy challenges: read.
    ChallengesRead,
    /// Approve or deny a policy challenge.
    ChallengesDecide,
    /// The workspace's settings, members and API keys: read.
    WorkspaceRead,
    /// The workspace's settings, members and API keys: change.
    WorkspaceChange,
    /// The vault's secret sets (names, keys, versions: never values) and grants: read.
    VaultRead,
    /// The vault's secret sets and grants: change.
    VaultChange,
    /// Vault leases: list.
    VaultLeasesRead,
    /// Vault workflow leases: issue and revoke.
    VaultLeases,
    /// The MCP gateway's registered servers and their tool calls: read.
    McpRead,
    /// Register, change and remove the MCP gateway's servers.
    McpChange,
}

/// The scopes an API key may be narrowed to.
pub const KEY_SCOPES: &[&str] = &[
    "check",
    "verify",
    "email",
    "credentials",
    "telemetry",
    "agents:read",
    "agents:write",
    "audit:read",
    "kill-switch",
    "policies:read",
    "challenges:read",
    "vault:lease",
];

/// The scopes a personal access token may be narrowed to.
pub const TOKEN_SCOPES: &[&str] = &["read", "policy:sync", "approve"];

impl Need {
    /// True for the needs that change nothing.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Self::AgentsRead
                | Self::AuditRead
                | Self::KillSwitchRead
                | Self::PoliciesRead
                | Self::ChallengesRead
                | Self::WorkspaceRead
                | Self::VaultRead
                | Self::VaultLeasesRead
                | Self::McpRead
        )
    }

    /// The API-key scope that grants this, or `None` when no API key may (people's matters:
    /// policy sync, deciding challenges, the workspace's settings, members and keys).
    pub fn key_scope(self) -> Option<&'static str> {
        Some(match self {
            Self::Check => "check",
            Self::Verify => "verify",
            Self::Email => "email",
            Self::Mint | Self::Credentials => "credentials",
            Self::Telemetry => "telemetry",
            Self::AgentsRead => "agents:read",
            Self::AgentsChange => "agents:write",
            Self::AuditRead => "audit:read",
            Self::KillSwitchRead | Self::KillSwitch => "kill-switch",
            Self::PoliciesRead => "policies:read",
            Self::ChallengesRead => "challenges:read",
            Self::VaultLeasesRead | Self::VaultLeases => "vault:lease",
            Self::PolicySync
            | Self::ChallengesDecide
            | Self::WorkspaceRead
            | Self::WorkspaceChange
            | Self::VaultRead
            | Self::VaultChange
            | Self::McpRead
            | Self::McpChange => return None,
        })
    }

    /// True when people may ask for this at all (the machine endpoints are API keys' only).
    pub fn for_people(self) -> bool {
        !matches!(
            self,
            Self::Check | Self::Verify | Self::Email | Self::Mint | Self::Telemetry
        )
    }

    /// True when `role` may do this.
    pub fn allowed_to(self, role: Role) -> bool {
        match role {
            Role::Owner | Role::Admin => self.for_people(),
            Role::Member => self.is_read(),
            Role::Approver => self.is_read() || self == Self::ChallengesDecide,
        }
    }

    /// The token scope that grants this.
    pub fn token_scope(self) -> &'static str {
        match self {
            Self::PolicySync => "policy:sync",
            Self::ChallengesDecide => "approve",
            _ if self.is_read() => "read",
            // Other changes need a token without scopes; name the broadest narrowing there is.
            _ => "(none: an unscoped token)",
        }
    }
}

/// The scopes of a key or token: `None` is every scope its kind has. Shared, so that the
/// cached key a request clones costs no allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scopes(Option<Arc<BTreeSet<String>>>);

/// A scope a key or token was given that its kind does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScope {
    pub scope: String,
    pub known: &'static [&'static str],
}

impl fmt::Display for UnknownScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown scope `{}`; the scopes are {}",
            self.scope,
            self.known.join(", ")
        )
    }
}

impl Scopes {
    /// No narrowing.
    pub fn all() -> Self {
        Self(None)
    }

    /// Checks every scope against `known`; an empty or absent list is no narrowing.
    pub fn parse<'a>(
        scopes: impl IntoIterator<Item = &'a str>,
        known: &'static [&'static str],
    ) -> Result<Self, UnknownScope> {
        let mut set = BTreeSet::new();
        for scope in scopes {
            let scope = scope.trim();
            if !known.contains(&scope) {
                return Err(UnknownScope {
                    scope: scope.to_owned(),
                    known,
                });
            }
            set.insert(scope.to_owned());
        }
        Ok(Self::of(set))
    }

    /// Reads what [`Self::stored`] wrote (scopes were checked when they were given).
    pub fn from_stored(text: Option<&str>) -> Self {
        let set: BTreeSet<String> = text
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        Self::of(set)
    }

    fn of(set: BTreeSet<String>) -> Self {
        if set.is_empty() {
            Self(None)
        } else {
            Self(Some(Arc::new(set)))
        }
    }

    /// Space-separated, sorted; `None` for no narrowing.
    pub fn stored(&self) -> Option<String> {
        self.0
            .as_ref()
            .map(|s| s.iter().map(String::as_str).collect::<Vec<_>>().join(" "))
    }

    /// The scopes as a list; empty for no narrowing.
    pub fn list(&self) -> Vec<String> {
        self.0
            .as_ref()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn has(&self, scope: &str) -> bool {
        self.0.as_ref().is_none_or(|s| s.contains(scope))
    }

    /// True for a key or token without scopes.
    pub fn is_unscoped(&self) -> bool {
        self.0.is_none()
    }
}

/// Why a request may not do what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The caller's kind may never do this (an API key on people's matters, a person on a
    /// machine endpoint).
    Kind(&'static str),
    /// The person's role does not allow it.
    Role(Role),
    /// The key or token lacks the scope that grants it.
    Scope(&'static str),
}

/// May an API key with `scopes` do `need`?
pub fn key_may(scopes: &Scopes, need: Need) -> Result<(), Denied> {
    let scope = need.key_scope().ok_or(Denied::Kind(
        "workspace API keys cannot do this; a person or their token can",
    ))?;
    if scopes.has(scope) {
        Ok(())
    } else {
        Err(Denied::Scope(scope))
    }
}

/// May a person with `role`, through a token with `scopes` (all for a session), do `need`?
pub fn person_may(role: Role, scopes: &Scopes, need: Need) -> Result<(), Denied> {
    if !need.for_people() {
        return Err(Denied::Kind(
            "this endpoint takes a workspace API key, not a person's session or token",
        ));
    }
    if !need.allowed_to(role) {
        return Err(Denied::Role(role));
    }
    let granted = scopes.is_unscoped()
        || match need {
            Need::PolicySync => scopes.has("policy:sync"),
            // Deciding a challenge reads it first.
            Need::ChallengesDecide => scopes.has("approve"),
            Need::ChallengesRead => scopes.has("read") || scopes.has("approve"),
            Need::PoliciesRead => scopes.has("read") || scopes.has("policy:sync"),
            _ if need.is_read() => scopes.has("read"),
            _ => false,
        };
    if granted {
        Ok(())
    } else {
        Err(Denied::Scope(need.token_scope()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Need] = &[
        Need::Check,
        Need::Verify,
        Need::Email,
        Need::Mint,
        Need::Telemetry,
        Need::AgentsRead,
        Need::AgentsChange,
        Need::AuditRead,
        Need::KillSwitchRead,
        Need::KillSwitch,
        Need::Credentials,
        Need::PoliciesRead,
        Need::PolicySync,
        Need::ChallengesRead,
        Need::ChallengesDecide,
        Need::WorkspaceRead,
        Need::WorkspaceChange,
    ];

    #[test]
    fn roles_change_read_or_decide() {
        for &need in ALL {
            let owner = person_may(Role::Owner, &Scopes::all(), need).is_ok();
            let admin = person_may(Role::Admin, &Scopes::all(), need).is_ok();
            let member = person_may(Role::Member, &Scopes::all(), need).is_ok();
            let approver = person_may(Role::Approver, &Scopes::all(), need).is_ok();
            assert_eq!(owner, need.for_people(), "{need:?}");
            assert_eq!(admin, owner, "{need:?}");
            assert_eq!(member, need.is_read(), "{need:?}");
            assert_eq!(
                approver,
                need.is_read() || need == Need::ChallengesDecide,
                "{need:?}"
            );
        }
    }

    #[test]
    fn an_unscoped_key_does_what_keys_do_and_a_scoped_one_only_its_scopes() {
        let gateway = Scopes::parse(["check", "verify"], KEY_SCOPES).unwrap();
        for &need in ALL {
            assert_eq!(
                key_may(&Scopes::all(), need).is_ok(),
                need.key_scope().is_some(),
                "{need:?}"
            );
            assert_eq!(
                key_may(&gateway, need).is_ok(),
                matches!(need, Need::Check | Need::Verify),
                "{need:?}"
            );
        }
        assert_eq!(
            key_may(&gateway, Need::KillSwitch),
            Err(Denied::Scope("kill-switch"))
        );
    }

    #[test]
    fn token_scopes_narrow_the_role() {
        let read = Scopes::parse(["read"], TOKEN_SCOPES).unwrap();
        let sync = Scopes::parse(["policy:sync"], TOKEN_SCOPES).unwrap();
        let approve = Scopes::parse(["approve"], TOKEN_SCOPES).unwrap();
        assert!(person_may(Role::Owner, &read, Need::AuditRead).is_ok());
        assert_eq!(
            person_may(Role::Owner, &read, Need::AgentsChange),
            Err(Denied::Scope("(none: an unscoped token)"))
        );
        assert!(person_may(Role::Admin, &sync, Need::PolicySync).is_ok());
        assert!(person_may(Role::Admin, &sync, Need::PoliciesRead).is_ok());
        assert_eq!(
            person_may(Role::Admin, &sync, Need::AuditRead),
            Err(Denied::Scope("read"))
        );
        assert!(person_may(Role::Approver, &approve, Need::ChallengesDecide).is_ok());
        assert!(person_may(Role::Approver, &approve, Need::ChallengesRead).is_ok());
        // A scope never lifts the role.
        assert_eq!(
            person_may(Role::Member, &sync, Need::PolicySync),
            Err(Denied::Role(Role::Member))
        );
    }

    #[test]
    fn scopes_are_checked_stored_and_read_back() {
        assert_eq!(Scopes::parse([], KEY_SCOPES).unwrap(), Scopes::all());
        let s = Scopes::parse(["verify", "check", "check"], KEY_SCOPES).unwrap();
        assert_eq!(s.stored().as_deref(), Some("check verify"));
        assert_eq!(Scopes::from_stored(s.stored().as_deref()), s);
        assert_eq!(Scopes::from_stored(None), Scopes::all());
        let err = Scopes::parse(["root"], TOKEN_SCOPES).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown scope `root`; the scopes are read, policy:sync, approve"
        );
    }
}
