//! The public face of the service: a status summary built from stored component checks, and
//! the contact form.

use std::time::Instant;

use serde_json::json;

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ids;
use crate::domain::refusal::use_case_error;
use crate::domain::EmailAddress;
use crate::domain::{FieldError, Refusal};
use crate::identity::accounts::enforce_rate_limit;
use crate::identity::IdentityError;
use crate::mail::Email;
use crate::store::{Backend, Change, ContactSubmission, SiteOp, StatusCheck, StoreError};
use crate::time::{iso, now_ms};

/// What the site's use cases answer when they cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(SiteError);

pub type SiteResult<T> = Result<T, SiteError>;

fn severity(status: &str) -> u8 {
    match status {
        "ok" => 0,
        "degraded" => 1,
        _ => 2,
    }
}

fn wire(c: StatusCheck) -> api::StatusComponent {
    api::StatusComponent {
        component: c.component,
        status: c.status,
        detail: c.detail,
        latency_ms: c.latency_ms,
        checked_at: iso(c.checked_at),
    }
}

fn summary(checks: Vec<StatusCheck>) -> api::StatusSummary {
    let status = checks
        .iter()
        .map(|c| c.status.as_str())
        .max_by_key(|s| severity(s))
        .unwrap_or("unknown")
        .to_owned();
    api::StatusSummary {
        ok: true,
        status,
        components: checks.into_iter().map(wire).collect(),
    }
}

pub async fn status_summary(ctx: &Context) -> SiteResult<api::StatusSummary> {
    Ok(summary(ctx.store.latest_status_checks().await?))
}

/// Checks every component now, stores the results and answers them.
pub async fn run_checks(
    ctx: &Context,
    actor: &Actor,
    workspace_id: Option<&str>,
) -> SiteResult<api::StatusSummary> {
    let mut checks = Vec::new();
    let started = Instant::now();
    let db = ctx.store.ping().await;
    checks.push(check(
        "database",
        db.map_err(|e| e.to_string()),
        started,
        format!("{} reachable", backend_name(ctx.store.backend())),
    ));
    let started = Instant::now();
    let mail = ctx.mailer.check().await;
    checks.push(check(
        "mailer",
        mail.map_err(|e| e.to_string()),
        started,
        format!("provider `{}` reachable", ctx.mailer.provider()),
    ));
    let event = audit::state_change(
        "status.checks_run",
        "run_checks",
        workspace_id,
        None,
        actor,
        json!({ "statuses": checks.iter().map(|c| json!({"component": c.component, "status": c.status})).collect::<Vec<_>>() }),
    );
    ctx.writer
        .commit(Change::new(SiteOp::RecordStatusChecks(checks.clone())).audited(event))
        .await?;
    Ok(summary(checks))
}

/// The database engine as the status page names it.
fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "Sqlite",
        Backend::Postgres => "Postgres",
    }
}

fn check(
    component: &str,
    result: Result<(), String>,
    started: Instant,
    ok_detail: String,
) -> StatusCheck {
    let (status, detail) = match result {
        Ok(()) => ("ok", ok_detail),
        Err(e) => ("down", e),
    };
    StatusCheck {
        id: ids::new_id("chk"),
        component: component.into(),
        status: status.into(),
        detail,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        checked_at: now_ms(),
    }
}

const MAX_MESSAGE_CHARS: usize = 5000;

/// Stores a contact submission and mails the configured address about it.
pub async fn contact(
    ctx: &Context,
    req: api::ContactRequest,
    client_ip: &str,
) -> SiteResult<api::ContactResponse> {
    // Lengths as sent (the OpenAPI document's `maxLength`), emptiness after trimming.
    if req.name.chars().count() > 200 {
        return Err(SiteError::invalid("name", "must be at most 200 characters"));
    }
    let name = req.name.trim().to_owned();
    if name.is_empty() {
        return Err(SiteError::missing("name"));
    }
    if name.chars().count() > 200 {
        return Err(SiteError::invalid("name", "must be at most 200 characters"));
    }
    let email = EmailAddress::from_field("email", &req.email)?.into_string();
    if req.message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(SiteError::invalid(
            "message",
            format!("must be at most {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    let message = req.message.trim().to_owned();
    if message.is_empty() {
        return Err(SiteError::missing("message"));
    }
    if message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(SiteError::invalid(
            "message",
            format!("must be at most {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    enforce_rate_limit(
        ctx,
        format!("contact:ip:{client_ip}"),
        3_600_000,
        ctx.config.contact_limit_per_ip,
    )
    .await?;
    let submission = ContactSubmission {
        id: ids::new_id("cnt"),
        name,
        email,
        message,
        created_at: now_ms(),
    };
    ctx.writer
        .commit(Change::new(SiteOp::StoreContact(submission.clone())))
        .await?;
    let notified = match &ctx.config.contact_email {
        None => false,
        Some(to) => {
            let mail = Email {
                to: vec![to.clone()],
                subject: format!("acp contact: {}", submission.name),
                text: Some(format!(
                    "From: {} <{}>\nReceived: {}\nId: {}\n\n{}",
                    submission.name,
                    submission.email,
                    iso(submission.created_at),
                    submission.id,
                    submission.message
                )),
                ..Email::default()
            };
            match ctx.mailer.send(&mail).await {
                Ok(_) => true,
                Err(err) => {
                    tracing::error!(error = %err, submission = %submission.id, "contact notification failed; the submission is stored");
                    false
                }
            }
        }
    };
    Ok(api::ContactResponse {
        ok: true,
        id: submission.id,
        received_at: iso(submission.created_at),
        notified,
    })
}
