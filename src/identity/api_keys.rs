//! Workspace API keys: `svc_live_` or `svc_test_` followed by 43 base62 characters (256 bits).
//! Only the SHA-256 hash is stored.

use crate::secret::{random_base62, sha256_hex, Secret};

pub const LIVE_PREFIX: &str = "svc_live_";
pub const TEST_PREFIX: &str = "svc_test_";
const BODY_LEN: usize = 43;

/// The highest rate a key may be given as its own, requests and decisions per second.
pub const MAX_RATE_LIMIT: i64 = 1_000_000;

/// A freshly generated key: the secret (shown once) and what is stored.
pub struct NewApiKey {
    pub secret: Secret,
    pub hash: String,
    pub mode: &'static str,
    pub last_four: String,
}

impl NewApiKey {
    pub fn generate(live: bool) -> Self {
        let prefix = if live { LIVE_PREFIX } else { TEST_PREFIX };
        Self::from_secret(Secret::new(format!("{prefix}{}", random_base62(BODY_LEN))))
    }

    /// Wraps a key supplied from outside (`ACP_BOOTSTRAP_API_KEY`); `None` unless well formed.
    pub fn from_supplied(key: &str) -> Option<Self> {
        is_well_formed(key).then(|| Self::from_secret(Secret::new(key.to_owned())))
    }

    fn from_secret(secret: Secret) -> Self {
        let key = secret.expose();
        let mode = if key.starts_with(LIVE_PREFIX) {
            "live"
        } else {
            "test"
        };
        let last_four = key[key.len().saturating_sub(4)..].to_owned();
        let hash = sha256_hex(key.as_bytes());
        Self {
            secret,
            hash,
            mode,
            last_four,
        }
    }
}

/// A key prefix followed by at least 43 characters of base62 or base64url (32 bytes or more).
pub fn is_well_formed(key: &str) -> bool {
    let body = key
        .strip_prefix(LIVE_PREFIX)
        .or_else(|| key.strip_prefix(TEST_PREFIX));
    body.is_some_and(|b| {
        b.len() >= BODY_LEN
            && b.len() <= 256
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_hashed() {
        let key = NewApiKey::generate(false);
        assert!(key.secret.expose().starts_with("svc_test_"));
        assert!(is_well_formed(key.secret.expose()));
        assert_eq!(key.hash, sha256_hex(key.secret.expose().as_bytes()));
        assert_eq!(key.mode, "test");
        assert_eq!(NewApiKey::generate(true).mode, "live");
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert!(!is_well_formed("svc_test_short"));
        assert!(!is_well_formed(&format!("svc_prod_{}", "a".repeat(43))));
        assert!(!is_well_formed(&format!("svc_test_{}!", "a".repeat(43))));
        assert!(NewApiKey::from_supplied(&format!("svc_live_{}", "a".repeat(43))).is_some());
    }
}
