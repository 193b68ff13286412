//! The JWT issuer: Ed25519 (`EdDSA`) keys kept in the database, so every replica signs with the
//! same key and publishes the same JWKS. The newest unretired key signs; `acp admin keys rotate`
//! adds a key and retires the current one, which stays published until every token it can
//! have signed has expired.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use ed25519_dalek::SigningKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::secret::{random_base62, random_bytes, MasterKey, Secret};
use crate::store::{Applied, Change, CredentialOp, SigningKeyRecord, Store, StoreError};
use crate::time::now_ms;

/// The longest lifetime of any token a key signs (credentials and token exchange).
pub const MAX_TOKEN_TTL_SECS: i64 = crate::domain::credential::MAX_TTL_SECS;

/// A retired key stays published this long past the rotation: it signs for one more JWKS cache
/// lifetime, then its last tokens live `MAX_TOKEN_TTL_SECS`; plus a minute for clock skew.
const PUBLISH_AFTER_RETIRING_MS: i64 = (JWKS_MAX_AGE_SECS + MAX_TOKEN_TTL_SECS + 60) * 1000;

/// A new key; its seed is sealed with the master key, bound to its `kid`.
fn new_key(now: i64, master: &MasterKey) -> Result<SigningKeyRecord, StoreError> {
    let seed: [u8; 32] = random_bytes();
    let key = SigningKey::from_bytes(&seed);
    let kid = format!("acp-{}", random_base62(16));
    let sealed = master.seal(&seed, &kid).map_err(StoreError::Database)?;
    Ok(SigningKeyRecord {
        kid,
        private_key: Secret::new(sealed),
        public_key: URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes()),
        created_at: now,
        retired_at: None,
        publish_until: None,
    })
}

/// Makes a signing key if there is none (at start-up; safe when replicas start together).
pub async fn ensure_key(store: &dyn Store, master: &MasterKey) -> Result<(), StoreError> {
    let now = now_ms();
    if store
        .signing_keys(now)
        .await?
        .iter()
        .any(|k| k.retired_at.is_none())
    {
        return Ok(());
    }
    crate::store::apply_one(
        store,
        Change::new(CredentialOp::AddSigningKey {
            key: new_key(now, master)?,
            rotate: false,
            publish_until: now,
        }),
    )
    .await?;
    Ok(())
}

/// Adds a new signing key and retires the current ones; answers the new key id.
pub async fn rotate(store: &dyn Store, master: &MasterKey) -> Result<String, StoreError> {
    let now = now_ms();
    // A key sealed with another master key than the servers' would be one they cannot open.
    for current in store.signing_keys(now).await? {
        master
            .open(current.private_key.expose(), &current.kid)
            .map_err(|_| {
                StoreError::Database(format!(
                    "the master key (ACP_MASTER_KEY) is not the one that sealed key {}; use the servers' master key",
                    current.kid
                ))
            })?;
    }
    let key = new_key(now, master)?;
    let kid = key.kid.clone();
    let event = crate::audit::state_change(
        "signing_key.rotated",
        "rotate_signing_key",
        None,
        None,
        &crate::audit::Actor::Cli,
        json!({ "kid": kid }),
    );
    match crate::store::apply_one(
        store,
        Change::new(CredentialOp::AddSigningKey {
            key,
            rotate: true,
            publish_until: now + PUBLISH_AFTER_RETIRING_MS,
        })
        .audited(event),
    )
    .await?
    {
        Applied::Count(1) => Ok(kid),
        _ => Err(StoreError::Conflict("the new key was not added".into())),
    }
}

/// How long verifiers may cache the JWKS.
pub const JWKS_MAX_AGE_SECS: i64 = 60;

/// The `Cache-Control` of the JWKS: the lifetime the signing-key choice counts on.
pub fn jwks_cache_control() -> String {
    format!("public, max-age={JWKS_MAX_AGE_SECS}")
}

/// The key that signs now: the newest published key that has been published for longer than
/// verifiers cache the JWKS, so a verifier never meets a token signed by a key its cached set
/// lacks (after a rotation the previous key signs one more minute); when no key is that old,
/// the one published longest (a fresh install's only key). Made on first use if the database
/// has none yet.
pub async fn current_key(
    store: &dyn Store,
    master: &MasterKey,
) -> Result<SigningKeyRecord, StoreError> {
    for _ in 0..2 {
        let now = now_ms();
        if let Some(key) = choose(store.signing_keys(now).await?, now) {
            return Ok(key);
        }
        ensure_key(store, master).await?;
    }
    Err(StoreError::Conflict("no signing key could be made".into()))
}

/// Of the published keys (newest first), the one that signs at `now`.
fn choose(keys: Vec<SigningKeyRecord>, now: i64) -> Option<SigningKeyRecord> {
    let settled = now - JWKS_MAX_AGE_SECS * 1000;
    // Else the key published longest (a fresh install's only key).
    let pos = keys
        .iter()
        .position(|k| k.created_at <= settled)
        .unwrap_or(keys.len().saturating_sub(1));
    keys.into_iter().nth(pos)
}

/// `header.claims.signature` (JWS compact form, made by jsonwebtoken): EdDSA over Ed25519,
/// `typ: JWT` and `kid` in the header.
pub fn sign(key: &SigningKeyRecord, master: &MasterKey, claims: &Value) -> Result<String, String> {
    let damaged = |_| "the signing key is damaged".to_owned();
    let seed: [u8; 32] = master
        .open(key.private_key.expose(), &key.kid)?
        .try_into()
        .map_err(|_| "the signing key is damaged")?;
    // jsonwebtoken takes Ed25519 private keys as PKCS#8 DER.
    let der = SigningKey::from_bytes(&seed)
        .to_pkcs8_der()
        .map_err(damaged)?;
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_der(der.as_bytes()))
        .map_err(|e| format!("signing failed: {e}"))
}

/// The claims of a token minted for an agent.
pub struct Claims<'a> {
    pub issuer: &'a str,
    pub agent_id: &'a str,
    pub audience: &'a str,
    pub workspace_id: &'a str,
    pub cred_id: &'a str,
    pub scopes: &'a [String],
    pub issued_at_ms: i64,
    pub expires_at_ms: i64,
}

impl Claims<'_> {
    pub fn to_json(&self) -> Value {
        json!({
            "iss": self.issuer,
            "sub": self.agent_id,
            "aud": self.audience,
            "exp": self.expires_at_ms / 1000,
            "iat": self.issued_at_ms / 1000,
            "nbf": self.issued_at_ms / 1000,
            "jti": self.cred_id,
            "scope": self.scopes.join(" "),
            "ws": self.workspace_id,
        })
    }
}

/// `/.well-known/jwks.json`: every published key.
pub fn jwks(keys: &[SigningKeyRecord]) -> Value {
    json!({
        "keys": keys.iter().map(|k| json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": k.public_key,
            "kid": k.kid,
            "use": "sig",
            "alg": "EdDSA",
        })).collect::<Vec<_>>()
    })
}

/// `/.well-known/openid-configuration`: where the keys are and what the tokens look like.
pub fn openid_configuration(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
        "token_endpoint": format!("{issuer}/v1/token/exchange"),
        "introspection_endpoint": format!("{issuer}/v1/identity/introspect"),
        "response_types_supported": ["token"],
        "grant_types_supported": ["urn:ietf:params:oauth:grant-type:token-exchange"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA"],
        "token_endpoint_auth_methods_supported": ["none"],
        "claims_supported": ["iss", "sub", "aud", "exp", "iat", "nbf", "jti", "scope", "ws"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    #[test]
    fn a_new_key_signs_once_every_cached_jwks_has_it() {
        let t = 1_700_000_000_000;
        let master = MasterKey::generate();
        let old = new_key(t - 86_400_000, &master).unwrap();
        let rotated = new_key(t, &master).unwrap();
        assert_eq!(choose(vec![old.clone()], t).unwrap().kid, old.kid);
        let both = vec![rotated.clone(), old.clone()];
        assert_eq!(choose(both.clone(), t + 59_999).unwrap().kid, old.kid);
        assert_eq!(choose(both, t + 60_000).unwrap().kid, rotated.kid);
        // A fresh install signs with its only key at once; rotated within its first minute,
        // it keeps signing with that key until the new one has been published a minute.
        assert_eq!(choose(vec![rotated.clone()], t).unwrap().kid, rotated.kid);
        let first = new_key(t - 10_000, &master).unwrap();
        assert_eq!(
            choose(vec![rotated.clone(), first.clone()], t).unwrap().kid,
            first.kid
        );
        assert!(choose(Vec::new(), t).is_none());
    }

    #[test]
    fn a_token_verifies_with_the_published_key() {
        let master = MasterKey::generate();
        let key = new_key(1_700_000_000_000, &master).unwrap();
        assert!(
            key.private_key.expose().starts_with("v1:"),
            "sealed at rest"
        );
        assert!(sign(&key, &MasterKey::generate(), &json!({})).is_err());
        let token = sign(&key, &master, &json!({"sub": "agt_x"})).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "EdDSA");
        assert_eq!(header["kid"], key.kid.as_str());
        let x: [u8; 32] = URL_SAFE_NO_PAD
            .decode(
                jwks(std::slice::from_ref(&key))["keys"][0]["x"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap()
            .try_into()
            .unwrap();
        let signature: [u8; 64] = URL_SAFE_NO_PAD
            .decode(parts[2])
            .unwrap()
            .try_into()
            .unwrap();
        VerifyingKey::from_bytes(&x)
            .unwrap()
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &Signature::from_bytes(&signature),
            )
            .unwrap();
    }
}
