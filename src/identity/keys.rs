//! Ed25519 keys and signatures as they travel: standard base64 (padding optional), public keys
//! as the raw 32 bytes or as SPKI DER.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use ed25519_dalek::pkcs8::DecodePublicKey;
use ed25519_dalek::{Signature, VerifyingKey};

/// Standard alphabet, accepts input with or without padding.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Standard base64 with padding, the form the service writes.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn b64_decode(text: &str) -> Option<Vec<u8>> {
    LENIENT.decode(text.trim()).ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublicKeyError {
    #[error("is not valid base64")]
    NotBase64,
    #[error("must be 32 raw bytes or an SPKI DER Ed25519 key")]
    WrongLength,
    #[error("is not a usable Ed25519 public key")]
    NotAKey,
}

/// Parses a base64 Ed25519 public key (raw 32 bytes, or SPKI DER). Small-order ("weak") keys
/// are refused: any signature would verify under them.
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, PublicKeyError> {
    let bytes = b64_decode(text).ok_or(PublicKeyError::NotBase64)?;
    let key = match bytes.len() {
        32 => {
            let raw: [u8; 32] = bytes.try_into().map_err(|_| PublicKeyError::WrongLength)?;
            VerifyingKey::from_bytes(&raw).map_err(|_| PublicKeyError::NotAKey)?
        }
        40..=64 => {
            VerifyingKey::from_public_key_der(&bytes).map_err(|_| PublicKeyError::NotAKey)?
        }
        _ => return Err(PublicKeyError::WrongLength),
    };
    if key.is_weak() {
        return Err(PublicKeyError::NotAKey);
    }
    Ok(key)
}

/// The length of an Ed25519 signature, bytes.
pub const SIGNATURE_LEN: usize = 64;

/// Why a signature does not verify: what the caller can be told without revealing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureFault {
    /// A well-formed 64-byte signature, but not the key's over this message.
    Mismatch,
    /// The text is not base64 (standard alphabet, padding optional).
    NotBase64,
    /// The text decodes to this many bytes, not [`SIGNATURE_LEN`].
    WrongLength(usize),
}

/// Verifies a base64 Ed25519 signature over `message` with strict (non-malleable) rules.
/// Anything that is not a well-formed 64-byte signature simply does not verify.
pub fn verify_signature(key: &VerifyingKey, message: &[u8], signature_b64: &str) -> bool {
    check_signature(key, message, signature_b64).is_ok()
}

/// [`verify_signature`], saying why a signature does not verify.
pub fn check_signature(
    key: &VerifyingKey,
    message: &[u8],
    signature_b64: &str,
) -> Result<(), SignatureFault> {
    let bytes = b64_decode(signature_b64).ok_or(SignatureFault::NotBase64)?;
    let raw = <[u8; SIGNATURE_LEN]>::try_from(bytes.as_slice())
        .map_err(|_| SignatureFault::WrongLength(bytes.len()))?;
    key.verify_strict(message, &Signature::from_bytes(&raw))
        .map_err(|_| SignatureFault::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::pkcs8::EncodePublicKey;
    use ed25519_dalek::{Signer, SigningKey};

    #[test]
    fn raw_and_spki_keys_parse_to_the_same_key() {
        let signing = SigningKey::from_bytes(&[7u8; 32]);
        let public = signing.verifying_key();
        let raw = b64(public.as_bytes());
        let der = public.to_public_key_der().unwrap();
        assert_eq!(parse_public_key(&raw).unwrap(), public);
        assert_eq!(parse_public_key(raw.trim_end_matches('=')).unwrap(), public);
        assert_eq!(parse_public_key(&b64(der.as_bytes())).unwrap(), public);
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason() {
        assert_eq!(parse_public_key("!!!"), Err(PublicKeyError::NotBase64));
        assert_eq!(
            parse_public_key(&b64(&[1u8; 31])),
            Err(PublicKeyError::WrongLength)
        );
        assert_eq!(
            parse_public_key(&b64(&[0u8; 32])),
            Err(PublicKeyError::NotAKey)
        );
    }

    #[test]
    fn signatures_verify_only_for_their_message() {
        let signing = SigningKey::from_bytes(&[9u8; 32]);
        let sig = b64(&signing.sign(b"hello").to_bytes());
        assert!(verify_signature(&signing.verifying_key(), b"hello", &sig));
        assert!(!verify_signature(&signing.verifying_key(), b"hellO", &sig));
        assert!(!verify_signature(
            &signing.verifying_key(),
            b"hello",
            "AAAA"
        ));
        assert!(!verify_signature(
            &signing.verifying_key(),
            b"hello",
            "not base64"
        ));
    }

    #[test]
    fn a_signature_that_does_not_verify_says_why() {
        let signing = SigningKey::from_bytes(&[9u8; 32]);
        let key = signing.verifying_key();
        let sig = b64(&signing.sign(b"hello").to_bytes());
        assert_eq!(check_signature(&key, b"hello", &sig), Ok(()));
        assert_eq!(
            check_signature(&key, b"hellO", &sig),
            Err(SignatureFault::Mismatch)
        );
        assert_eq!(
            check_signature(&key, b"hello", "not base64!"),
            Err(SignatureFault::NotBase64)
        );
        assert_eq!(
            check_signature(&key, b"hello", &b64(&[1u8; 63])),
            Err(SignatureFault::WrongLength(63))
        );
        // Unpadded is accepted, as everywhere.
        assert_eq!(
            check_signature(&key, b"hello", sig.trim_end_matches('=')),
            Ok(())
        );
    }
}
