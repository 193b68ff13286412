//! Agent-signed requests: the canonical string, the timestamp window and the checks shared by
//! every signed endpoint and by `POST /v1/verify`; and the HMAC that signs provider feedback.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::AgentStatus;
use crate::secret::{ct_eq, sha256, sha256_hex};
use crate::store::{AgentRecord, NonceClaim};

use super::keys::{b64_decode, check_signature, parse_public_key};
pub use super::keys::{SignatureFault, SIGNATURE_LEN};

/// Provider feedback is signed with HMAC-SHA256, keyed by the raw SHA-256 digest of the API
/// key, over `"{timestamp_ms}\n{nonce}\n{hex_sha256(body)}"`; `signature_b64` is its base64.
pub fn feedback_signature_matches(
    api_key: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
    signature_b64: &str,
) -> bool {
    let Some(sent) = b64_decode(signature_b64) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&sha256(api_key.as_bytes())) else {
        return false;
    };
    mac.update(format!("{timestamp}\n{nonce}\n{}", sha256_hex(body)).as_bytes());
    ct_eq(&mac.finalize().into_bytes(), &sent)
}

/// `METHOD\nPATH\nTIMESTAMP\nNONCE\nBODY_SHA256`, no trailing newline.
pub fn canonical_string(
    method: &str,
    path: &str,
    timestamp: &str,
    nonce: &str,
    body_sha256: &str,
) -> String {
    format!("{method}\n{path}\n{timestamp}\n{nonce}\n{body_sha256}")
}

/// Why a signed request does not verify. `code()` is the stable error / reason code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignFailure {
    TimestampOutOfRange,
    InvalidNonce,
    UnknownAgent,
    /// `bad_signature`, and what was wrong with the signature as sent.
    BadSignature(SignatureFault),
    AgentNotActive,
    Replay,
}

impl SignFailure {
    pub fn code(self) -> &'static str {
        match self {
            Self::TimestampOutOfRange => "timestamp_out_of_range",
            Self::InvalidNonce => "invalid_nonce",
            Self::UnknownAgent => "unknown_agent",
            Self::BadSignature(_) => "bad_signature",
            Self::AgentNotActive => "agent_not_active",
            Self::Replay => "replay_detected",
        }
    }

    pub fn message(self) -> String {
        match self {
            Self::TimestampOutOfRange => {
                "the timestamp must be Unix epoch milliseconds within the accepted window of the server clock".into()
            }
            Self::InvalidNonce => "the nonce must be 1 to 128 printable ASCII characters".into(),
            Self::UnknownAgent => "no such agent".into(),
            Self::BadSignature(SignatureFault::Mismatch) => {
                "the signature does not verify over the canonical request string; `canonical_string` is the string the server built and checked the signature against".into()
            }
            Self::BadSignature(SignatureFault::NotBase64) => {
                "the signature is not base64 (standard alphabet, padding optional)".into()
            }
            Self::BadSignature(SignatureFault::WrongLength(n)) => format!(
                "the signature decodes to {n} bytes; an Ed25519 signature is {SIGNATURE_LEN}"
            ),
            Self::AgentNotActive => "the agent is not active; only active agents may sign requests".into(),
            Self::Replay => "this nonce was already used".into(),
        }
    }
}

/// The parts of a signed request, whichever way they arrived (headers or a verify body).
#[derive(Debug, Clone)]
pub struct SignedParts<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The timestamp exactly as sent (the canonical string uses the text, not the number).
    pub timestamp: &'a str,
    pub nonce: &'a str,
    pub body_sha256: &'a str,
    pub signature_b64: &'a str,
}

impl SignatureFault {
    /// The `hint` of a `bad_signature` answer: `signature_not_base64`,
    /// `signature_wrong_length`, or none for a well-formed signature that does not verify.
    pub fn hint(self) -> Option<&'static str> {
        match self {
            Self::Mismatch => None,
            Self::NotBase64 => Some("signature_not_base64"),
            Self::WrongLength(_) => Some("signature_wrong_length"),
        }
    }
}

impl SignedParts<'_> {
    /// The canonical string these parts sign.
    pub fn canonical(&self) -> String {
        canonical_string(
            self.method,
            self.path,
            self.timestamp,
            self.nonce,
            self.body_sha256,
        )
    }

    /// The refusal of these parts for `failure`: a `bad_signature` carries the canonical string
    /// the server built (method, path, timestamp, nonce, body hash; nothing secret), so that a
    /// client can compare it with its own. Built only on failure: the success path allocates
    /// nothing for it.
    pub fn reject(&self, failure: SignFailure) -> SignRejection {
        SignRejection {
            failure,
            canonical_string: matches!(failure, SignFailure::BadSignature(_))
                .then(|| self.canonical()),
        }
    }
}

/// A signed request refused, with what the server saw when that helps the signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignRejection {
    pub failure: SignFailure,
    /// For `bad_signature`: the canonical string the server checked the signature against.
    pub canonical_string: Option<String>,
}

impl From<SignFailure> for SignRejection {
    fn from(failure: SignFailure) -> Self {
        Self {
            failure,
            canonical_string: None,
        }
    }
}

/// Parses the timestamp and checks it lies within `window_ms` of `now`. A seconds timestamp is
/// some 55 years away from now in milliseconds and so falls outside any sane window.
pub fn check_timestamp(timestamp: &str, now: i64, window_ms: i64) -> Result<i64, SignFailure> {
    if timestamp.is_empty()
        || timestamp.len() > 19
        || !timestamp.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(SignFailure::TimestampOutOfRange);
    }
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| SignFailure::TimestampOutOfRange)?;
    if (now - ts).abs() > window_ms {
        return Err(SignFailure::TimestampOutOfRange);
    }
    Ok(ts)
}

pub fn check_nonce(nonce: &str) -> Result<(), SignFailure> {
    if nonce.is_empty() || nonce.len() > 128 || !nonce.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SignFailure::InvalidNonce);
    }
    Ok(())
}

/// Everything but the nonce's single use, which the caller claims in the same transaction as
/// the request's own effect. On success answers the nonce claim to make.
pub fn verify_parts(
    parts: &SignedParts<'_>,
    agent: Option<&AgentRecord>,
    now: i64,
    window_ms: i64,
) -> Result<NonceClaim, SignFailure> {
    check_timestamp(parts.timestamp, now, window_ms)?;
    check_nonce(parts.nonce)?;
    let agent = agent.ok_or(SignFailure::UnknownAgent)?;
    // A stored key always parses (registration checked it); if one did not, no signature
    // could verify under it.
    let key = parse_public_key(&agent.public_key)
        .map_err(|_| SignFailure::BadSignature(SignatureFault::Mismatch))?;
    check_signature(&key, parts.canonical().as_bytes(), parts.signature_b64)
        .map_err(SignFailure::BadSignature)?;
    if agent.status != AgentStatus::Active {
        return Err(SignFailure::AgentNotActive);
    }
    Ok(NonceClaim {
        scope: format!("key:{}", agent.public_key),
        agent_id: Some(agent.id.clone()),
        nonce: parts.nonce.to_owned(),
        // Twice the window: a timestamp at the far edge stays acceptable for `window` more.
        expires_at: now + 2 * window_ms,
    })
}

/// The test vectors of `docs/signing.md`, as JSON: the one fenced block between its
/// `signing-vectors` markers. The documentation is compiled into the tests, so a vector the
/// server's code disagrees with fails them.
#[cfg(test)]
pub(crate) fn documented_vectors() -> serde_json::Value {
    const DOC: &str = include_str!("../../docs/signing.md");
    let (_, after) = DOC
        .split_once("<!-- signing-vectors:begin -->")
        .expect("docs/signing.md has the begin marker");
    let (block, _) = after
        .split_once("<!-- signing-vectors:end -->")
        .expect("docs/signing.md has the end marker");
    let json = block
        .trim()
        .strip_prefix("```json")
        .and_then(|b| b.strip_suffix("```"))
        .expect("the vectors are one fenced json block");
    serde_json::from_str(json).expect("the vectors are JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_string_has_five_lines_and_no_trailing_newline() {
        let s = canonical_string("POST", "/v1/x", "1700000000000", "n1", "abc");
        assert_eq!(s, "POST\n/v1/x\n1700000000000\nn1\nabc");
    }

    #[test]
    fn timestamps_outside_the_window_or_in_seconds_fail() {
        let now = 1_700_000_000_000;
        assert_eq!(check_timestamp("1700000000000", now, 300_000), Ok(now));
        assert_eq!(
            check_timestamp("1700000300000", now, 300_000),
            Ok(now + 300_000)
        );
        assert!(check_timestamp("1700000300001", now, 300_000).is_err());
        assert!(check_timestamp("1699999699999", now, 300_000).is_err());
        assert!(check_timestamp("1700000000", now, 300_000).is_err());
        assert!(check_timestamp("-1", now, 300_000).is_err());
        assert!(check_timestamp("99999999999999999999", now, 300_000).is_err());
    }

    #[test]
    fn nonces_are_bounded_printable_ascii() {
        assert!(check_nonce("3f0c1a2e-uuid").is_ok());
        assert!(check_nonce("").is_err());
        assert!(check_nonce("has space").is_err());
        assert!(check_nonce(&"x".repeat(129)).is_err());
    }

    mod documented {
        use super::super::*;
        use crate::domain::RiskTier;
        use crate::identity::keys::b64;
        use ed25519_dalek::pkcs8::DecodePrivateKey;
        use ed25519_dalek::{Signer, SigningKey};
        use serde_json::Value;

        fn text<'a>(v: &'a Value, key: &str) -> &'a str {
            v[key]
                .as_str()
                .unwrap_or_else(|| panic!("`{key}` is text in {v}"))
        }

        fn agent(id: &str, public_key: &str) -> AgentRecord {
            AgentRecord {
                id: id.into(),
                workspace_id: Some("ws_vectors".into()),
                name: "vectors".into(),
                public_key: public_key.into(),
                key_type: "ed25519".into(),
                metadata: serde_json::json!({}),
                status: AgentStatus::Active,
                risk_tier: RiskTier::Low,
                created_at: 0,
                updated_at: 0,
                attested_at: Some(0),
                last_seen_at: None,
            }
        }

        fn parts(request: &Value) -> SignedParts<'_> {
            SignedParts {
                method: text(request, "method"),
                path: text(request, "path"),
                timestamp: text(request, "timestamp"),
                nonce: text(request, "nonce"),
                body_sha256: text(request, "body_sha256"),
                signature_b64: text(request, "signature_b64"),
            }
        }

        #[test]
        fn the_key_and_the_key_file_are_the_seeds() {
            let v = documented_vectors();
            let seed: [u8; 32] = hex::decode(text(&v, "seed_hex"))
                .unwrap()
                .try_into()
                .unwrap();
            let key = SigningKey::from_bytes(&seed);
            let public = text(&v, "public_key_b64");
            assert_eq!(b64(key.verifying_key().as_bytes()), public);
            assert_eq!(parse_public_key(public).unwrap(), key.verifying_key());
            let der = b64_decode(text(&v, "private_key_pkcs8_b64")).unwrap();
            assert_eq!(SigningKey::from_pkcs8_der(&der).unwrap(), key);
            let file = &v["key_file"];
            assert_eq!(text(file, "agent_id"), text(&v, "agent_id"));
            assert_eq!(text(file, "private_key"), text(&v, "private_key_pkcs8_b64"));
            assert_eq!(text(file, "public_key"), public);
            assert!(text(file, "server").starts_with("http"));
            let mut keys: Vec<&str> = file
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            keys.sort_unstable();
            assert_eq!(keys, ["agent_id", "private_key", "public_key", "server"]);
        }

        #[test]
        fn the_attestation_signs_the_decoded_challenge() {
            let v = documented_vectors();
            let key = parse_public_key(text(&v, "public_key_b64")).unwrap();
            let att = &v["attestation"];
            let challenge = b64_decode(text(att, "challenge_b64")).unwrap();
            assert_eq!(challenge.len(), 32);
            assert_eq!(
                check_signature(&key, &challenge, text(att, "signature_b64")),
                Ok(())
            );
            let seed: [u8; 32] = hex::decode(text(&v, "seed_hex"))
                .unwrap()
                .try_into()
                .unwrap();
            let signing = SigningKey::from_bytes(&seed);
            assert_eq!(
                b64(&signing.sign(&challenge).to_bytes()),
                text(att, "signature_b64")
            );
        }

        #[test]
        fn every_request_vector_is_what_the_server_builds_and_accepts() {
            let v = documented_vectors();
            let seed: [u8; 32] = hex::decode(text(&v, "seed_hex"))
                .unwrap()
                .try_into()
                .unwrap();
            let signing = SigningKey::from_bytes(&seed);
            let agent = agent(text(&v, "agent_id"), text(&v, "public_key_b64"));
            let requests = v["requests"].as_array().unwrap();
            assert!(requests.len() >= 5);
            for request in requests {
                let name = text(request, "name");
                let parts = parts(request);
                assert_eq!(
                    crate::secret::sha256_hex(text(request, "body").as_bytes()),
                    parts.body_sha256,
                    "{name}: body hash"
                );
                assert_eq!(
                    parts.canonical(),
                    text(request, "canonical_string"),
                    "{name}: canonical string"
                );
                assert_eq!(
                    canonical_string(
                        parts.method,
                        parts.path,
                        parts.timestamp,
                        parts.nonce,
                        parts.body_sha256
                    ),
                    text(request, "canonical_string")
                );
                assert_eq!(
                    b64(&signing.sign(parts.canonical().as_bytes()).to_bytes()),
                    parts.signature_b64,
                    "{name}: signature"
                );
                let now: i64 = parts.timestamp.parse().unwrap();
                let claim = verify_parts(&parts, Some(&agent), now, 300_000)
                    .unwrap_or_else(|f| panic!("{name}: {f:?}"));
                assert_eq!(claim.nonce, parts.nonce);
            }
        }

        #[test]
        fn every_bad_signature_vector_gets_its_hint_and_the_canonical_string() {
            let v = documented_vectors();
            let agent = agent(text(&v, "agent_id"), text(&v, "public_key_b64"));
            let requests = v["requests"].as_array().unwrap();
            let bad = v["bad_signatures"].as_array().unwrap();
            assert!(bad.len() >= 3);
            for case in bad {
                let name = text(case, "name");
                let request = requests
                    .iter()
                    .find(|r| r["name"] == case["request"])
                    .unwrap_or_else(|| panic!("{name}: no such request"));
                let parts = SignedParts {
                    signature_b64: text(case, "signature_b64"),
                    ..parts(request)
                };
                let now: i64 = parts.timestamp.parse().unwrap();
                let failure = verify_parts(&parts, Some(&agent), now, 300_000).expect_err(name);
                let SignFailure::BadSignature(fault) = failure else {
                    panic!("{name}: {failure:?}");
                };
                assert_eq!(fault.hint(), case["hint"].as_str(), "{name}: hint");
                let length = match fault {
                    SignatureFault::WrongLength(n) => Some(n as u64),
                    _ => None,
                };
                assert_eq!(length, case["signature_length"].as_u64(), "{name}: length");
                let rejection = parts.reject(failure);
                assert_eq!(
                    rejection.canonical_string.as_deref(),
                    Some(text(request, "canonical_string")),
                    "{name}: canonical string"
                );
            }
        }

        #[test]
        fn only_a_bad_signature_carries_the_canonical_string() {
            let v = documented_vectors();
            let request = &v["requests"][0];
            let parts = parts(request);
            for failure in [
                SignFailure::TimestampOutOfRange,
                SignFailure::InvalidNonce,
                SignFailure::UnknownAgent,
                SignFailure::AgentNotActive,
                SignFailure::Replay,
            ] {
                assert_eq!(parts.reject(failure).canonical_string, None);
            }
        }
    }
}
