//! Agent-signed requests: the canonical string, the timestamp window and the checks shared by
//! every signed endpoint and by `POST /v1/verify`; and the HMAC that signs provider feedback.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::AgentStatus;
use crate::secret::{ct_eq, sha256, sha256_hex};
use crate::store::{AgentRecord, NonceClaim};

use super::keys::{b64_decode, parse_public_key, verify_signature};

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
    BadSignature,
    AgentNotActive,
    Replay,
}

impl SignFailure {
    pub fn code(self) -> &'static str {
        match self {
            Self::TimestampOutOfRange => "timestamp_out_of_range",
            Self::InvalidNonce => "invalid_nonce",
            Self::UnknownAgent => "unknown_agent",
            Self::BadSignature => "bad_signature",
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
            Self::BadSignature => "the signature does not verify over the canonical request string".into(),
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
    let key = parse_public_key(&agent.public_key).map_err(|_| SignFailure::BadSignature)?;
    let canonical = canonical_string(
        parts.method,
        parts.path,
        parts.timestamp,
        parts.nonce,
        parts.body_sha256,
    );
    if !verify_signature(&key, canonical.as_bytes(), parts.signature_b64) {
        return Err(SignFailure::BadSignature);
    }
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
}
