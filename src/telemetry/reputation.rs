//! Reputation from provider feedback. Each `bad` verdict adds 1 to the agent's risk score and
//! each `good` verdict takes 0.5 off (never below 0); the score halves every 7 days without
//! feedback, so recent feedback weighs more than old. The risk tier is `low` below 1, `medium`
//! below 3, `high` from 3: one bad report makes an agent medium, three recent ones high.

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::enforce_rate_limit;
use crate::identity::keys::b64_decode;
use crate::identity::signing::{check_nonce, check_timestamp};
use crate::ids;
use crate::secret::{ct_eq, sha256, sha256_hex};
use crate::store::{Change, NonceClaim, Op, Outcome, StoreError};
use crate::time::{iso, now_ms};

pub const HALF_LIFE_MS: f64 = 7.0 * 86_400_000.0;
const FEEDBACK_PER_MINUTE: i64 = 600;

pub fn tier_of(score: f64) -> &'static str {
    // To three decimals: feedback seconds apart has barely decayed and counts in full.
    let score = (score * 1000.0).round() / 1000.0;
    if score < 1.0 {
        "low"
    } else if score < 3.0 {
        "medium"
    } else {
        "high"
    }
}

/// The feedback signature headers, as received.
pub struct FeedbackSignature<'a> {
    pub timestamp: &'a str,
    pub nonce: &'a str,
    pub signature: &'a str,
}

/// HMAC-SHA256 with the raw SHA-256 digest of the API key as key, over
/// `"{timestamp_ms}\n{nonce}\n{hex_sha256(body)}"`.
fn signature_matches(api_key: &str, sig: &FeedbackSignature<'_>, body: &[u8]) -> bool {
    let Some(sent) = b64_decode(sig.signature) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&sha256(api_key.as_bytes())) else {
        return false;
    };
    mac.update(format!("{}\n{}\n{}", sig.timestamp, sig.nonce, sha256_hex(body)).as_bytes());
    ct_eq(&mac.finalize().into_bytes(), &sent)
}

pub async fn feedback(
    ctx: &Context,
    workspace_id: &str,
    key_id: &str,
    api_key: &str,
    sig: Option<FeedbackSignature<'_>>,
    body: &[u8],
) -> ApiResult<api::FeedbackResponse> {
    let Some(sig) = sig else {
        return Err(ApiError::unauthorized(
            "missing_signature_headers",
            "feedback needs X-Service-Feedback-Timestamp, X-Service-Feedback-Nonce and X-Service-Feedback-Signature",
        ));
    };
    let now = now_ms();
    check_timestamp(sig.timestamp, now, ctx.config.signature_window_ms).map_err(|_| {
        ApiError::unauthorized(
            "timestamp_out_of_range",
            "the timestamp must be Unix epoch milliseconds within the accepted window",
        )
    })?;
    check_nonce(sig.nonce).map_err(|_| {
        ApiError::unauthorized(
            "invalid_nonce",
            "the nonce must be 1 to 128 printable ASCII characters",
        )
    })?;
    if !signature_matches(api_key, &sig, body) {
        return Err(ApiError::unauthorized(
            "bad_signature",
            "the feedback signature does not verify",
        ));
    }
    let req: api::FeedbackRequest = crate::http::extract::parse_json(body)?;
    if req.agent_id.is_empty() {
        return Err(ApiError::missing("agent_id"));
    }
    let delta = match req.verdict.as_str() {
        "bad" => 1.0,
        "good" => -0.5,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_verdict",
                "`verdict` must be `good` or `bad`",
            ))
        }
    };
    let evidence = req.evidence.unwrap_or(Value::Object(Default::default()));
    if !evidence.is_object() || evidence.to_string().len() > 16 * 1024 {
        return Err(ApiError::invalid(
            "evidence",
            "must be an object of at most 16 KiB",
        ));
    }
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    let agent = crate::policy::check::agent_facts(ctx, &view, &req.agent_id).await?;
    enforce_rate_limit(
        ctx,
        format!("feedback:key:{key_id}"),
        60_000,
        FEEDBACK_PER_MINUTE,
    )
    .await?;
    let event = audit::state_change(
        "reputation.feedback",
        "feedback",
        Some(workspace_id),
        Some(&agent.agent.id),
        &Actor::ApiKey(key_id.to_owned()),
        json!({ "verdict": req.verdict }),
    );
    let change = Change::new(Op::RecordFeedback {
        id: ids::new_id("fbk"),
        workspace_id: workspace_id.to_owned(),
        agent_id: agent.agent.id.clone(),
        key_id: key_id.to_owned(),
        verdict: req.verdict.clone(),
        evidence: evidence.to_string(),
        delta,
        half_life_ms: HALF_LIFE_MS,
        at: now,
    })
    .with_nonce(NonceClaim {
        scope: format!("api_key:{key_id}"),
        nonce: sig.nonce.to_owned(),
        expires_at: now + 2 * ctx.config.signature_window_ms,
        agent_id: None,
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(Outcome::Agent(updated)) => {
            ctx.agent_changed(&updated.id).await;
            Ok(api::FeedbackResponse {
                ok: true,
                accepted: true,
                received_at: iso(now),
                risk_tier: updated.risk_tier.clone(),
            })
        }
        Ok(_) => Err(ApiError::internal(
            "feedback answered an unexpected outcome",
        )),
        Err(StoreError::Replay) => Err(ApiError::unauthorized(
            "replay_detected",
            "this nonce was already used",
        )),
        Err(e) => Err(e.into()),
    }
}
