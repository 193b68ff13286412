//! `POST /v1/email/send`: the service sends an agent's email itself, and only on allow.
//!
//! 1. The send is decided as action `send_email` with the email facts and the agent's counts of
//!    emails sent in the last minute and day. An allow reserves the send in the same transaction
//!    as the decision's audit event, serialised per agent across replicas and compared against
//!    the counts the decision saw: two replicas racing at a rate limit cannot both get through.
//! 2. The message goes to the provider (SMTP or the outbox), with a time limit.
//! 3. Delivered: the reservation becomes a sent email, audited with the recipients' domains and
//!    counts and the provider's message id (never the body). Failed: the reservation is removed
//!    (the email does not count), audited, and the caller gets 502 `provider_unavailable`.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::cache::KeyAccess;
use crate::context::SharedContext;
use crate::error::{ApiError, ApiResult};
use crate::ids;
use crate::mail::{Email, MailError};
use crate::policy::check::{check_reserving, EmailReservation};
use crate::policy::evaluate::EmailFacts;
use crate::store::{Change, Op};

/// How long the provider may take before the send counts as failed.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(20);
const MAX_SUBJECT_CHARS: usize = 998;
const MAX_RECIPIENTS: usize = 100;

fn addresses(email: &Value, field: &str) -> ApiResult<Vec<String>> {
    match email.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(one)) => Ok(vec![one.trim().to_owned()]),
        Some(Value::Array(list)) => list
            .iter()
            .map(|v| {
                v.as_str()
                    .map(|s| s.trim().to_owned())
                    .ok_or_else(|| ApiError::invalid(&format!("email.{field}"), "must be strings"))
            })
            .collect(),
        Some(_) => Err(ApiError::invalid(
            &format!("email.{field}"),
            "must be an address or a list of addresses",
        )),
    }
}

fn body_text(email: &Value, field: &str) -> ApiResult<Option<String>> {
    match email.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            &format!("email.{field}"),
            "must be a string",
        )),
    }
}

/// The message to hand to the provider, validated.
fn message(email: &Value) -> ApiResult<Email> {
    if !email.is_object() {
        return Err(ApiError::invalid(
            "email",
            "must be {to, cc, bcc, subject, text, html}",
        ));
    }
    let to = addresses(email, "to")?;
    let cc = addresses(email, "cc")?;
    let bcc = addresses(email, "bcc")?;
    if to.is_empty() {
        return Err(ApiError::missing("email.to"));
    }
    if to.len() + cc.len() + bcc.len() > MAX_RECIPIENTS {
        return Err(ApiError::invalid(
            "email.to",
            format!("at most {MAX_RECIPIENTS} recipients in all"),
        ));
    }
    let subject = match email.get("subject") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return Err(ApiError::missing("email.subject")),
        Some(_) => return Err(ApiError::invalid("email.subject", "must be a string")),
    };
    // A line break in the subject would inject headers.
    if subject.chars().count() > MAX_SUBJECT_CHARS || subject.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "email.subject",
            format!("must be one line of at most {MAX_SUBJECT_CHARS} characters"),
        ));
    }
    let text = body_text(email, "text")?;
    let html = body_text(email, "html")?;
    if text.is_none() && html.is_none() {
        return Err(ApiError::missing("email.text"));
    }
    Ok(Email {
        to,
        cc,
        bcc,
        subject,
        text,
        html,
    })
}

fn domains<'a>(addresses: impl Iterator<Item = &'a String>) -> Vec<String> {
    let set: BTreeSet<String> = addresses
        .filter_map(|a| a.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase()))
        .collect();
    set.into_iter().collect()
}

pub async fn send(
    ctx: &SharedContext,
    access: &KeyAccess,
    actor: &Actor,
    req: api::EmailSendRequest,
) -> ApiResult<api::EmailSendResponse> {
    let workspace_id = access.view.workspace_id.as_str();
    if req.agent_id.is_empty() {
        return Err(ApiError::missing("agent_id"));
    }
    let agent_id = req.agent_id;
    let mail = message(&req.email)?;
    // The facts the policy sees (addresses are checked one per entry there too).
    let facts_json =
        json!({ "to": mail.to, "cc": mail.cc, "bcc": mail.bcc, "subject": mail.subject });
    EmailFacts::from_json(&facts_json)
        .map_err(|field| ApiError::invalid(field, "each entry must be one email address"))?;
    let reservation = EmailReservation {
        id: ids::new_id("eml"),
        recipients: i64::try_from(mail.recipients().count()).unwrap_or(i64::MAX),
    };
    let decision = check_reserving(
        ctx,
        access,
        actor,
        api::CheckRequest {
            agent_id: agent_id.clone(),
            policy_id: req.policy_id,
            action: "send_email".into(),
            context: None,
            email: Some(facts_json),
        },
        &reservation,
    )
    .await?;
    if decision.decision != "allow" {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "policy_blocked",
            "the policy does not allow this email; nothing was sent",
        )
        .with("decision", decision.decision.clone())
        .with("reasons", json!(decision.reasons))
        .with("reason_codes", json!(decision.reason_codes))
        .with("trace_id", decision.trace_id.clone())
        .with("challenge_id", decision.challenge_id.clone())
        .with(
            "challenge",
            decision
                .challenge
                .as_ref()
                .and_then(|c| serde_json::to_value(c).ok())
                .unwrap_or(Value::Null),
        ));
    }
    // Delivery and its record run in their own task: a client that disconnects (or the
    // request timeout) cannot leave a sent email unaudited or a reservation open.
    let task = tokio::spawn(deliver(
        ctx.clone(),
        mail,
        reservation.id.clone(),
        Recorded {
            workspace_id: workspace_id.to_owned(),
            agent_id: agent_id.clone(),
            actor: actor.clone(),
            trace_id: decision.trace_id.clone(),
            policy_id: decision.policy_id.clone(),
            policy_hash: decision.policy_hash.clone(),
        },
    ));
    let (provider, delivered) = task
        .await
        .map_err(|e| ApiError::internal(format!("email delivery task: {e}")))??;
    match delivered {
        Ok(provider_message_id) => Ok(api::EmailSendResponse {
            ok: true,
            provider,
            provider_message_id,
            trace_id: decision.trace_id,
        }),
        Err(MailError::Invalid(why)) => Err(ApiError::invalid("email", why)),
        Err(MailError::Provider(why)) => {
            tracing::warn!(provider = %provider, error = %why, "email provider failed");
            Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "provider_unavailable",
                "the email provider failed or timed out; the email was not sent",
            )
            .with("provider", provider)
            .with("trace_id", decision.trace_id))
        }
    }
}

/// What the delivery's audit event carries besides the email's own facts.
struct Recorded {
    workspace_id: String,
    agent_id: String,
    actor: Actor,
    trace_id: String,
    policy_id: String,
    policy_hash: String,
}

/// Hands the message to the provider and records the outcome: the reservation becomes a sent
/// email, or is removed; either way with its audit event. Answers the provider's name and
/// message id (or its failure).
async fn deliver(
    ctx: SharedContext,
    mail: Email,
    email_id: String,
    rec: Recorded,
) -> ApiResult<(String, Result<String, MailError>)> {
    let provider = ctx.mailer.provider().to_owned();
    let delivered = match tokio::time::timeout(PROVIDER_TIMEOUT, ctx.mailer.send(&mail)).await {
        Ok(result) => result,
        Err(_) => Err(MailError::Provider("timed out".into())),
    };
    // The provider's own words can echo addresses, so only the kind of failure is recorded.
    let (event_type, message_id, error) = match &delivered {
        Ok(id) => ("email.sent", Some(id.clone()), None),
        Err(MailError::Invalid(_)) => ("email.failed", None, Some("invalid_message")),
        Err(MailError::Provider(_)) => ("email.failed", None, Some("provider_unavailable")),
    };
    let mut details = json!({
        "email_id": email_id,
        "provider": provider,
        "recipient_domains": domains(mail.recipients()),
        "to_count": mail.to.len(),
        "cc_count": mail.cc.len(),
        "bcc_count": mail.bcc.len(),
        "has_text": mail.text.is_some(),
        "has_html": mail.html.is_some(),
        "provider_message_id": message_id,
    });
    if let Some(error) = error {
        details["error"] = json!(error);
    }
    let mut event = audit::state_change(
        event_type,
        "send_email",
        Some(&rec.workspace_id),
        Some(&rec.agent_id),
        &rec.actor,
        details,
    );
    event.decision = Some("allow".into());
    event.trace_id = Some(rec.trace_id);
    event.policy_id = Some(rec.policy_id);
    event.policy_hash = Some(rec.policy_hash);
    ctx.writer
        .commit(
            Change::new(Op::FinishEmail {
                id: email_id,
                provider: provider.clone(),
                provider_message_id: message_id,
            })
            .audited(event),
        )
        .await?;
    Ok((provider, delivered))
}
