//! Prefixed, sortable identifiers: `ws_`, `key_`, `agt_`, `ch_`, `evt_`, ... followed by the
//! 32 hex digits of a UUIDv7, so that ids sort by creation time; and [`Id`], an id of one kind
//! checked once where it enters (a path, a body, a row) and passed on typed: a function that
//! takes an [`AgentId`] needs no check of its own, and cannot be handed a key's id.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

pub const WORKSPACE: &str = "ws";
pub const API_KEY: &str = "key";
pub const AGENT: &str = "agt";
pub const CHALLENGE: &str = "ch";
pub const EVENT: &str = "evt";
pub const HEARTBEAT: &str = "hb";
pub const TRACE: &str = "trc";
pub const CREDENTIAL: &str = "crd";
pub const POLICY_CHALLENGE: &str = "pch";
pub const SECRET_SET: &str = "ss";
pub const USER: &str = "usr";
pub const TOKEN: &str = "pat";
pub const MCP_SERVER: &str = "mcp";

/// A new id with the given prefix, for example `agt_0193a4...`.
pub fn new_id(prefix: &str) -> String {
    let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
    let hex = Uuid::now_v7().simple().encode_lower(&mut buf);
    let mut id = String::with_capacity(prefix.len() + 1 + hex.len());
    id.push_str(prefix);
    id.push('_');
    id.push_str(hex);
    id
}

/// True when `id` has the shape of an id with this prefix. Used to answer malformed ids as
/// unknown without a database round trip.
pub fn has_shape(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|body| body.len() == 32 && body.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A kind of id: its prefix, and what people call it in an error.
pub trait Kind {
    const PREFIX: &'static str;
    /// `agent id`, `API key id`, ...
    const NAME: &'static str;
}

/// An id of kind `K`, of the shape [`has_shape`] checks. It reads as the `str` it is.
pub struct Id<K> {
    text: String,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Id<K> {
    /// A new id of this kind.
    pub fn generate() -> Self {
        Self::checked(new_id(K::PREFIX))
    }

    /// The id `text` is, if it has this kind's shape.
    pub fn parse(text: &str) -> Option<Self> {
        has_shape(text, K::PREFIX).then(|| Self::checked(text.to_owned()))
    }

    fn checked(text: String) -> Self {
        Self {
            text,
            kind: PhantomData,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

impl<K> Clone for Id<K> {
    fn clone(&self) -> Self {
        Self {
            text: self.text.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<K> Eq for Id<K> {}

impl<K> PartialEq<str> for Id<K> {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl<K> PartialEq<String> for Id<K> {
    fn eq(&self, other: &String) -> bool {
        &self.text == other
    }
}

impl<K> PartialOrd for Id<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Id<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl<K> Hash for Id<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl<K> Deref for Id<K> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl<K> AsRef<str> for Id<K> {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl<K> Borrow<str> for Id<K> {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl<K> fmt::Display for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<K> fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl<K> From<Id<K>> for String {
    fn from(id: Id<K>) -> String {
        id.text
    }
}

impl<K> Serialize for Id<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de, K: Kind> Deserialize<'de> for Id<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if has_shape(&text, K::PREFIX) {
            Ok(Self::checked(text))
        } else {
            Err(serde::de::Error::custom(format!(
                "`{text}` is not {} {} (`{}_` and 32 hex digits)",
                article(K::NAME),
                K::NAME,
                K::PREFIX
            )))
        }
    }
}

fn article(name: &str) -> &'static str {
    if name.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    }
}

macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident, $id:ident, $prefix:expr, $name:expr;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $kind {}

        impl Kind for $kind {
            const PREFIX: &'static str = $prefix;
            const NAME: &'static str = $name;
        }

        $(#[$doc])*
        pub type $id = Id<$kind>;
    )*};
}

kinds! {
    /// A workspace (`ws_…`).
    Workspace, WorkspaceId, WORKSPACE, "workspace id";
    /// A workspace API key (`key_…`).
    ApiKey, ApiKeyId, API_KEY, "API key id";
    /// An agent (`agt_…`).
    Agent, AgentId, AGENT, "agent id";
    /// An agent's attestation challenge (`ch_…`).
    AttestationChallenge, ChallengeId, CHALLENGE, "attestation challenge id";
    /// A challenged decision waiting for a human (`pch_…`).
    PolicyChallenge, PolicyChallengeId, POLICY_CHALLENGE, "challenge id";
    /// A credential minted for an agent (`crd_…`).
    Credential, CredentialId, CREDENTIAL, "credential id";
    /// A vault secret set (`ss_…`).
    SecretSet, SecretSetId, SECRET_SET, "secret set id";
    /// A dashboard user (`usr_…`).
    User, UserId, USER, "user id";
    /// A personal access token (`pat_…`).
    Token, TokenId, TOKEN, "token id";
    /// An MCP server registered with the gateway (`mcp_…`).
    McpServer, McpServerId, MCP_SERVER, "MCP server id";
}

/// A policy's id: `pol_` and 1 to 64 of `a-z`, `0-9`, `_` and `-`, chosen by whoever syncs it
/// (`pol_default` unless a sync names another). Unlike the generated ids above it is a name,
/// so it has a type of its own; it reads as the `str` it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId(String);

impl PolicyId {
    /// The policy a request that names none is decided under.
    pub const DEFAULT: &'static str = "pol_default";

    /// The id `text` is, if it has a policy id's shape.
    pub fn parse(text: &str) -> Option<Self> {
        Self::has_shape(text).then(|| Self(text.to_owned()))
    }

    /// [`PolicyId::parse`] of text the caller owns already (a request's field): no copy.
    pub fn from_string(text: String) -> Option<Self> {
        Self::has_shape(&text).then_some(Self(text))
    }

    fn has_shape(text: &str) -> bool {
        text.strip_prefix("pol_").is_some_and(|rest| {
            !rest.is_empty()
                && rest.len() <= 64
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        })
    }

    /// `pol_default`.
    pub fn default_policy() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for PolicyId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<PolicyId> for String {
    fn from(id: PolicyId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_ids_are_pol_and_a_short_name() {
        for good in [
            "pol_default",
            "pol_x",
            "pol_a-b_9",
            &format!("pol_{}", "x".repeat(64)),
        ] {
            assert_eq!(PolicyId::parse(good).unwrap().as_str(), good);
            assert_eq!(
                PolicyId::from_string(good.to_owned()).unwrap().as_str(),
                good
            );
        }
        for bad in [
            "pol_",
            "pol",
            "default",
            "pol_X",
            "pol_a b",
            "pol_é",
            &format!("pol_{}", "x".repeat(65)),
        ] {
            assert!(PolicyId::parse(bad).is_none(), "{bad}");
            assert!(PolicyId::from_string(bad.to_owned()).is_none(), "{bad}");
        }
        assert_eq!(PolicyId::default_policy().as_str(), PolicyId::DEFAULT);
    }

    #[test]
    fn typed_ids_are_checked_once_and_read_as_text() {
        let agent = AgentId::generate();
        assert!(agent.starts_with("agt_") && has_shape(&agent, AGENT));
        let again = AgentId::parse(agent.as_str()).unwrap();
        assert_eq!(again, agent);
        assert!(AgentId::parse("key_0123456789abcdef0123456789abcdef").is_none());
        assert!(ApiKeyId::parse("key_0123456789abcdef0123456789abcdef").is_some());
        let json = serde_json::to_string(&agent).unwrap();
        assert_eq!(serde_json::from_str::<AgentId>(&json).unwrap(), agent);
        let err = serde_json::from_str::<AgentId>("\"agt_x\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`agt_x` is not an agent id (`agt_` and 32 hex digits)"),
            "{err}"
        );
        let err = serde_json::from_str::<SecretSetId>("\"x\"").unwrap_err();
        assert!(
            err.to_string().starts_with("`x` is not a secret set id"),
            "{err}"
        );
        let set: std::collections::HashSet<AgentId> = [agent.clone()].into();
        assert!(set.contains(agent.as_str()));
        assert_eq!(format!("{agent:?}"), format!("{:?}", agent.as_str()));
    }

    #[test]
    fn ids_are_prefixed_sortable_and_recognised() {
        let a = new_id(AGENT);
        let b = new_id(AGENT);
        assert!(a.starts_with("agt_"));
        assert!(a < b);
        assert!(has_shape(&a, AGENT));
        assert!(!has_shape(&a, WORKSPACE));
        assert!(!has_shape("agt_xyz", AGENT));
    }
}
