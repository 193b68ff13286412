//! `POST /v1/verify`: a backend asks whether a request it received was really signed by an
//! agent of its workspace. Every signature, skew, replay, unknown or inactive-agent failure is
//! an answer (`valid: false` with a `reason`), never an HTTP error; a valid request consumes its
//! nonce like any signed request.

use super::error::{IdentityError, IdentityResult};
use crate::api;
use crate::context::Context;
use crate::domain::ids;
use crate::domain::{AgentStatus, RiskTier};
use crate::policy::cache::KeyAccess;
use crate::store::{AgentRecord, Change, StoreError};
use crate::time::{iso, now_ms};

use super::signing::{verify_parts, SignFailure, SignRejection, SignatureFault, SignedParts};

fn check_request(req: &api::VerifyRequest) -> IdentityResult<()> {
    for (field, value) in [
        ("agent_id", &req.agent_id),
        ("method", &req.method),
        ("path", &req.path),
        ("nonce", &req.nonce),
        ("body_sha256", &req.body_sha256),
        ("signature_b64", &req.signature_b64),
    ] {
        if value.is_empty() {
            return Err(IdentityError::missing(field));
        }
    }
    if req.method.len() > 16 || !req.method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(IdentityError::invalid(
            "method",
            "must be an uppercase HTTP method",
        ));
    }
    if !req.path.starts_with('/') || req.path.len() > 4096 {
        return Err(IdentityError::invalid(
            "path",
            "must be the request path, starting with `/`",
        ));
    }
    if req.body_sha256.len() != 64
        || !req
            .body_sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(IdentityError::invalid(
            "body_sha256",
            "must be 64 lowercase hex digits",
        ));
    }
    Ok(())
}

/// Answers on the cached agent under the access's view; the nonce claim that makes a valid
/// answer final commits only while that view is current and the agent active.
pub async fn verify(
    ctx: &Context,
    access: &KeyAccess,
    req: api::VerifyRequest,
) -> IdentityResult<api::VerifyResponse> {
    verify_with(ctx, access, req, STALE_ATTEMPTS).await
}

/// How often a request is answered again on fresh state when its workspace keeps changing.
const STALE_ATTEMPTS: u32 = 8;

async fn verify_with(
    ctx: &Context,
    access: &KeyAccess,
    req: api::VerifyRequest,
    attempts: u32,
) -> IdentityResult<api::VerifyResponse> {
    check_request(&req)?;
    let cached = if ids::has_shape(&req.agent_id, ids::AGENT) {
        ctx.caches
            .agent_in(ctx.store.as_ref(), &access.view, &req.agent_id)
            .await?
    } else {
        None
    };
    let agent = cached.as_ref().map(|c| &c.agent);
    let now = now_ms();
    let timestamp = req.timestamp_ms.to_string();
    let parts = SignedParts {
        method: &req.method,
        path: &req.path,
        timestamp: &timestamp,
        nonce: &req.nonce,
        body_sha256: &req.body_sha256,
        signature_b64: &req.signature_b64,
    };
    let outcome = match verify_parts(&parts, agent, now, ctx.config.signature_window_ms) {
        Ok(nonce) => match ctx
            .writer
            .commit(Change::default().with_nonce(nonce).on(access.view.basis()))
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::Stale(version)) if attempts > 1 => {
                let renewed = ctx
                    .caches
                    .renew(ctx.store.as_ref(), access, version)
                    .await?
                    .ok_or_else(crate::domain::Refusal::invalid_api_key)?;
                return Box::pin(verify_with(ctx, &renewed, req, attempts - 1)).await;
            }
            Err(StoreError::Replay) => Err(SignFailure::Replay),
            Err(StoreError::AgentNotActive) => Err(SignFailure::AgentNotActive),
            Err(e) => return Err(e.into()),
        },
        Err(failure) => Err(failure),
    };
    let rejection = outcome.err().map(|failure| parts.reject(failure));
    Ok(answer(req.agent_id, agent, now, rejection))
}

fn answer(
    agent_id: String,
    agent: Option<&AgentRecord>,
    now: i64,
    rejection: Option<SignRejection>,
) -> api::VerifyResponse {
    let failure = rejection.as_ref().map(|r| r.failure);
    if let Some(failure) = failure {
        crate::observe::signature_failure("verify", failure.code());
    }
    let fault = match failure {
        Some(SignFailure::BadSignature(fault)) => Some(fault),
        _ => None,
    };
    let wrong_length = match fault {
        Some(SignatureFault::WrongLength(len)) => Some(len),
        _ => None,
    };
    api::VerifyResponse {
        ok: true,
        valid: failure.is_none(),
        agent_id,
        verified_at: iso(now),
        reason: failure.map(|f| f.code().to_owned()),
        canonical_string: rejection.and_then(|r| r.canonical_string),
        hint: fault.and_then(SignatureFault::hint).map(str::to_owned),
        signature_length: wrong_length,
        expected_signature_length: wrong_length.map(|_| super::signing::SIGNATURE_LEN),
        verification_tier: match agent {
            Some(a) if a.attested_at.is_some() => "attested",
            _ => "unverified",
        }
        .into(),
        // Nothing is known of an agent the workspace does not have: treat it as high risk.
        risk_tier: agent
            .map_or(RiskTier::High, |a| a.risk_tier)
            .as_str()
            .to_owned(),
        revoked: agent.is_some_and(|a| a.status == AgentStatus::Revoked),
    }
}
