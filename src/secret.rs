//! Secrets: generation, hashing and constant-time comparison. A [`Secret`] never prints.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::ChaCha20Poly1305;
use rand::distributions::Alphanumeric;
use rand::Rng;
use sha2::{Digest, Sha256};
use std::fmt;
use subtle::ConstantTimeEq;

/// A secret string (API key, token). `Debug` and `Display` print `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    /// The secret itself; call only where it must leave the process (shown once to its owner).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `len` characters drawn uniformly from `[0-9A-Za-z]` by the OS-seeded CSPRNG.
pub fn random_base62(len: usize) -> String {
    rand::thread_rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// `n` random bytes from the OS-seeded CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    rand::thread_rng().fill(&mut out[..]);
    out
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lowercase hex SHA-256, the form stored for every secret.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut digits = [0u8; 64];
    // 32 bytes always fill the 64 digits: `encode_to_slice` cannot fail here. (It encodes by
    // table; `hex::encode` goes through a character iterator, slower on every key check.)
    let _ = hex::encode_to_slice(sha256(bytes), &mut digits);
    digits.iter().copied().map(char::from).collect()
}

/// Constant-time equality for secret material.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// The key that encrypts secrets the service must read back (the JWT issuer's private keys):
/// ChaCha20-Poly1305 with a random nonce per value. Never printed.
#[derive(Clone)]
pub struct MasterKey([u8; 32]);

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

const SEALED_PREFIX: &str = "v1:";

impl MasterKey {
    /// From its standard base64 text (32 bytes).
    pub fn from_base64(text: &str) -> Result<MasterKey, String> {
        STANDARD
            .decode(text.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .map(MasterKey)
            .ok_or_else(|| "the master key must be 32 bytes in standard base64".to_owned())
    }

    pub fn generate() -> MasterKey {
        MasterKey(random_bytes())
    }

    pub fn to_base64(&self) -> Secret {
        Secret::new(STANDARD.encode(self.0))
    }

    /// `v1:` + base64(nonce ‖ ciphertext), bound to `context` (e.g. the record's id).
    pub fn seal(&self, plaintext: &[u8], context: &str) -> Result<String, String> {
        seal_with(&self.0, plaintext, context)
    }

    /// Opens what [`seal`](Self::seal) made with this key and `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Vec<u8>, String> {
        open_with(&self.0, sealed, context).map_err(|()| {
            "cannot decrypt: a different master key (ACP_MASTER_KEY) sealed it".to_owned()
        })
    }
}

/// A vault secret set's own key (envelope encryption: the values are sealed with it, and it is
/// sealed with the master key). Never printed.
pub struct DataKey([u8; 32]);

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey([redacted])")
    }
}

impl DataKey {
    pub fn generate() -> DataKey {
        DataKey(random_bytes())
    }

    /// The key sealed with `master`, bound to `context`.
    pub fn wrap(&self, master: &MasterKey, context: &str) -> Result<String, String> {
        master.seal(&self.0, context)
    }

    /// The key that [`wrap`](Self::wrap) sealed.
    pub fn unwrap_with(
        master: &MasterKey,
        wrapped: &str,
        context: &str,
    ) -> Result<DataKey, String> {
        let bytes = master.open(wrapped, context)?;
        <[u8; 32]>::try_from(bytes)
            .map(DataKey)
            .map_err(|_| "a wrapped data key is not 32 bytes".to_owned())
    }

    pub fn seal(&self, plaintext: &[u8], context: &str) -> Result<String, String> {
        seal_with(&self.0, plaintext, context)
    }

    pub fn open(&self, sealed: &str, context: &str) -> Result<Vec<u8>, String> {
        open_with(&self.0, sealed, context)
            .map_err(|()| "cannot decrypt: the value is not this record's".to_owned())
    }
}

/// ChaCha20-Poly1305 with a random nonce: `v1:` + base64(nonce ‖ ciphertext), the associated
/// data `context` binding the value to its place.
fn seal_with(key: &[u8; 32], plaintext: &[u8], context: &str) -> Result<String, String> {
    let nonce: [u8; 12] = random_bytes();
    let payload = Payload {
        msg: plaintext,
        aad: context.as_bytes(),
    };
    let sealed = ChaCha20Poly1305::new(key.into())
        .encrypt((&nonce).into(), payload)
        .map_err(|_| "encryption failed".to_owned())?;
    Ok(format!(
        "{SEALED_PREFIX}{}",
        STANDARD.encode([&nonce[..], &sealed].concat())
    ))
}

fn open_with(key: &[u8; 32], sealed: &str, context: &str) -> Result<Vec<u8>, ()> {
    let bytes = sealed
        .strip_prefix(SEALED_PREFIX)
        .and_then(|b| STANDARD.decode(b).ok())
        .filter(|b| b.len() > 12)
        .ok_or(())?;
    let (nonce, ciphertext) = bytes.split_at(12);
    let payload = Payload {
        msg: ciphertext,
        aad: context.as_bytes(),
    };
    ChaCha20Poly1305::new(key.into())
        .decrypt(nonce.into(), payload)
        .map_err(|_| ())
}

/// The URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("svc_test_abc".into());
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        assert_eq!(s.expose(), "svc_test_abc");
    }

    #[test]
    fn sha256_hex_is_the_lowercase_hex_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let digest = sha256(b"svc_test_key");
        assert_eq!(sha256_hex(b"svc_test_key"), hex::encode(digest));
    }

    #[test]
    fn random_base62_has_requested_length_and_alphabet() {
        let s = random_base62(43);
        assert_eq!(s.len(), 43);
        assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_ne!(s, random_base62(43));
    }

    #[test]
    fn ct_eq_compares_content_and_length() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }

    #[test]
    fn sealed_values_open_only_with_their_key_and_context() {
        let key = MasterKey::generate();
        let sealed = key.seal(b"seed bytes", "kid-1").unwrap();
        assert!(sealed.starts_with("v1:") && !sealed.contains("seed"));
        assert_eq!(key.open(&sealed, "kid-1").unwrap(), b"seed bytes");
        assert!(key.open(&sealed, "kid-2").is_err(), "bound to its context");
        assert!(MasterKey::generate().open(&sealed, "kid-1").is_err());
        let again = MasterKey::from_base64(key.to_base64().expose()).unwrap();
        assert_eq!(again.open(&sealed, "kid-1").unwrap(), b"seed bytes");
        assert!(MasterKey::from_base64("c2hvcnQ=").is_err());
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("sqlite:./data/acp.db"), "sqlite:./data/acp.db");
    }
}
