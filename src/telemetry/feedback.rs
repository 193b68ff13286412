//! Reputation from provider feedback. Each `bad` verdict adds 1 to the agent's risk score and
//! each `good` verdict takes 0.5 off (never below 0); the score decays and gives the agent its
//! risk tier as `domain::agent` says.

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::agent::REPUTATION_HALF_LIFE_MS;
use crate::domain::ids;
use crate::identity::accounts::enforce_rate_limit;
use crate::store::{Applied, Change, NonceClaim, StoreError, TelemetryOp};
use crate::time::{iso, now_ms};

use super::{TelemetryError, TelemetryResult};

const FEEDBACK_PER_MINUTE: i64 = 600;

/// Records a provider's verdict on an agent. The request's signature was verified at the edge;
/// `nonce` is its nonce, spent with the feedback (once per API key).
pub async fn record(
    ctx: &Context,
    workspace_id: &str,
    key_id: &str,
    nonce: &str,
    req: api::FeedbackRequest,
) -> TelemetryResult<api::FeedbackResponse> {
    let now = now_ms();
    if req.agent_id.is_empty() {
        return Err(TelemetryError::missing("agent_id"));
    }
    let delta = match req.verdict.as_str() {
        "bad" => 1.0,
        "good" => -0.5,
        _ => {
            return Err(TelemetryError::malformed(
                "invalid_verdict",
                "`verdict` must be `good` or `bad`",
            ))
        }
    };
    let evidence = req.evidence.unwrap_or(Value::Object(Default::default()));
    if !evidence.is_object() || evidence.to_string().len() > 16 * 1024 {
        return Err(TelemetryError::invalid(
            "evidence",
            "must be an object of at most 16 KiB",
        ));
    }
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &view, &req.agent_id)
        .await?;
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
    let change = Change::new(TelemetryOp::RecordFeedback {
        id: ids::new_id("fbk"),
        workspace_id: workspace_id.to_owned(),
        agent_id: agent.agent.id.clone(),
        key_id: key_id.to_owned(),
        verdict: req.verdict.clone(),
        evidence: evidence.to_string(),
        delta,
        half_life_ms: REPUTATION_HALF_LIFE_MS,
        at: now,
    })
    .with_nonce(NonceClaim {
        scope: format!("api_key:{key_id}"),
        nonce: nonce.to_owned(),
        expires_at: now + 2 * ctx.config.signature_window_ms,
        agent_id: None,
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(Applied::Agent(updated)) => {
            ctx.agent_changed(&updated.id).await;
            Ok(api::FeedbackResponse {
                ok: true,
                accepted: true,
                received_at: iso(now),
                risk_tier: updated.risk_tier.as_str().to_owned(),
            })
        }
        Ok(_) => Err(TelemetryError::internal(
            "feedback answered an unexpected outcome",
        )),
        Err(StoreError::Replay) => Err(TelemetryError::unauthenticated(
            "replay_detected",
            "this nonce was already used",
        )),
        Err(e) => Err(e.into()),
    }
}
