//! Audit sinks: a workspace's outbound streams of its audit trail, configured by owners and
//! admins. Each sink is an HTTPS endpoint that receives the workspace's events as NDJSON
//! batches signed with HMAC-SHA256, in commit order, from a durable cursor (delivered by
//! [`crate::audit::delivery`]).

use serde_json::json;

use crate::api;
use crate::context::Context;
use crate::domain::ids;
use crate::identity::accounts::{bounded_name, Principal};
use crate::identity::{IdentityError, IdentityResult};
use crate::net::egress::EgressError;
use crate::secret::random_base62;
use crate::store::{AuditOp, Change, SinkRecord, StoreError};
use crate::time::{iso, now_ms};

use crate::audit::delivery::{secret_context, DESTINATION_NOT_ALLOWED, LAG_COUNT_CAP};
use crate::audit::state_change;

/// Sinks per workspace.
pub const MAX_SINKS: i64 = 10;
const ID_PREFIX: &str = "snk";

/// A new signing secret: `whsec_` and 40 base62 characters (238 bits).
fn generate_secret() -> String {
    format!("whsec_{}", random_base62(40))
}

/// An `https://` URL with a host, no user name or password (batches are signed), no fragment;
/// answered as given.
fn checked_url(raw: &str) -> IdentityResult<String> {
    crate::net::egress::https_endpoint(raw)
        .map(String::from)
        .map_err(|why| IdentityError::malformed("invalid_sink_url", format!("`url` {why}")))
}

/// Refuses a URL whose host resolves, now, to an address the sinks may not reach (loopback,
/// private, link-local, metadata... unless the operator's allow-list opens it): the same rules
/// as every delivery, applied when the URL is set so that such a sink is never made.
async fn reachable(ctx: &Context, url: &str) -> IdentityResult<()> {
    match ctx.sink_egress.check_destination(url).await {
        Err(EgressError::DestinationNotAllowed(_)) => Err(IdentityError::malformed(
            "destination_not_allowed",
            format!(
                "`url`: {DESTINATION_NOT_ALLOWED}: its host is, or resolves to, an address that is not public (loopback, private, link-local or a cloud metadata service) and that the operator's allow-list does not open"
            ),
        )),
        _ => Ok(()),
    }
}

fn sink_name(raw: &str) -> IdentityResult<String> {
    bounded_name(raw, 100)?.ok_or_else(|| IdentityError::missing("name"))
}

fn unknown_sink() -> IdentityError {
    IdentityError::not_found("unknown_sink", "this workspace has no such audit sink")
}

fn store_error(err: StoreError) -> IdentityError {
    match err {
        StoreError::NotFound => unknown_sink(),
        StoreError::Conflict(message) => IdentityError::conflict("too_many_sinks", message),
        other => other.into(),
    }
}

/// Commits `op` with its audit event (`event_type`, the person as actor), answering the
/// store's refusals in the API's words.
async fn commit(
    ctx: &Context,
    principal: &Principal,
    workspace_id: &str,
    (event_type, action): (&str, &str),
    details: serde_json::Value,
    op: AuditOp,
) -> IdentityResult<()> {
    let event = state_change(
        event_type,
        action,
        Some(workspace_id),
        None,
        &principal.actor(),
        details,
    );
    ctx.writer
        .commit(Change::new(op).audited(event))
        .await
        .map_err(store_error)?;
    Ok(())
}

/// The sink as the API shows it, with how far behind it is.
pub async fn view(ctx: &Context, sink: SinkRecord) -> IdentityResult<api::AuditSink> {
    let now = now_ms();
    let lag = ctx
        .store
        .sink_lag(&sink.workspace_id, &sink.cursor, LAG_COUNT_CAP)
        .await?;
    let state = if !sink.enabled {
        "paused"
    } else if sink.failures > 0 {
        "retrying"
    } else {
        "delivering"
    };
    Ok(api::AuditSink {
        sink_id: sink.id,
        name: sink.name,
        url: sink.url,
        kind: "https_ndjson".into(),
        enabled: sink.enabled,
        state: state.into(),
        created_at: iso(sink.created_at),
        created_by: sink.created_by,
        created_by_name: None,
        delivered_events: sink.delivered_events,
        last_delivered_at: sink.last_delivered_at.map(iso),
        last_attempt_at: sink.last_attempt_at.map(iso),
        last_error: sink.last_error,
        consecutive_failures: sink.failures,
        next_attempt_at: (sink.enabled && sink.failures > 0).then(|| iso(sink.next_attempt_at)),
        lag_events: lag.events,
        lag_seconds: lag.seconds(now),
    })
}

pub async fn list(
    ctx: &Context,
    principal: &Principal,
) -> IdentityResult<api::AuditSinkListResponse> {
    let (workspace_id, _) = principal.membership()?;
    let mut items = Vec::new();
    for sink in ctx.store.sinks(&workspace_id).await? {
        items.push(view(ctx, sink).await?);
    }
    let items = with_names(ctx, &workspace_id, items).await?;
    Ok(api::AuditSinkListResponse { ok: true, items })
}

/// The sinks with the names of who made them (one lookup for all).
async fn with_names(
    ctx: &Context,
    workspace_id: &str,
    mut items: Vec<api::AuditSink>,
) -> IdentityResult<Vec<api::AuditSink>> {
    let names = crate::audit::names::ActorNames::lookup(
        ctx.store.as_ref(),
        workspace_id,
        items.iter().map(|s| s.created_by.as_str()),
    )
    .await?;
    for sink in &mut items {
        sink.created_by_name = names.get(&sink.created_by);
    }
    Ok(items)
}

pub async fn get(
    ctx: &Context,
    principal: &Principal,
    sink_id: &str,
) -> IdentityResult<api::AuditSinkResponse> {
    let (workspace_id, _) = principal.membership()?;
    let sink = ctx
        .store
        .sink(&workspace_id, sink_id)
        .await
        .map_err(store_error)?;
    let sink = view(ctx, sink).await?;
    let sink = with_names(ctx, &workspace_id, vec![sink])
        .await?
        .pop()
        .ok_or_else(|| IdentityError::Internal("the sink went missing".into()))?;
    Ok(api::AuditSinkResponse { ok: true, sink })
}

/// Creates a sink (owners and admins); it receives the events committed from now on, its own
/// creation first. The secret is answered this once.
pub async fn create(
    ctx: &Context,
    principal: &Principal,
    req: api::CreateAuditSinkRequest,
) -> IdentityResult<api::AuditSinkSecretResponse> {
    let (workspace_id, _) = principal.admin_of()?;
    let name = sink_name(&req.name)?;
    let url = checked_url(&req.url)?;
    reachable(ctx, &url).await?;
    let id = ids::new_id(ID_PREFIX);
    let (secret, sealed) = new_secret(ctx, &id)?;
    let enabled = req.enabled.unwrap_or(true);
    let details = json!({ "sink_id": id, "name": name, "url": url, "enabled": enabled });
    let sink = SinkRecord {
        id: id.clone(),
        workspace_id: workspace_id.clone(),
        name,
        url,
        secret_sealed: sealed,
        enabled,
        created_at: now_ms(),
        created_by: principal.actor().label(),
        cursor: Default::default(),
        delivered_events: 0,
        last_delivered_at: None,
        last_attempt_at: None,
        last_error: None,
        failures: 0,
        next_attempt_at: 0,
    };
    let op = AuditOp::CreateSink {
        sink,
        max: MAX_SINKS,
    };
    commit(
        ctx,
        principal,
        &workspace_id,
        ("audit.sink_created", "create_sink"),
        details,
        op,
    )
    .await?;
    with_secret(ctx, &workspace_id, &id, secret).await
}

/// Renames, moves, pauses or resumes a sink (owners and admins).
pub async fn update(
    ctx: &Context,
    principal: &Principal,
    sink_id: &str,
    req: api::UpdateAuditSinkRequest,
) -> IdentityResult<api::AuditSinkResponse> {
    let (workspace_id, _) = principal.admin_of()?;
    let name = req.name.as_deref().map(sink_name).transpose()?;
    let url = req.url.as_deref().map(checked_url).transpose()?;
    if let Some(url) = &url {
        reachable(ctx, url).await?;
    }
    let event_type = match req.enabled {
        Some(false) => "audit.sink_paused",
        Some(true) => "audit.sink_resumed",
        None => "audit.sink_updated",
    };
    let details = json!({ "sink_id": sink_id, "name": name, "url": url, "enabled": req.enabled });
    let op = AuditOp::UpdateSink {
        workspace_id: workspace_id.clone(),
        sink_id: sink_id.to_owned(),
        name,
        url,
        enabled: req.enabled,
    };
    commit(
        ctx,
        principal,
        &workspace_id,
        (event_type, "update_sink"),
        details,
        op,
    )
    .await?;
    get(ctx, principal, sink_id).await
}

/// A new secret for a sink (owners and admins); the old one stops signing at once.
pub async fn rotate_secret(
    ctx: &Context,
    principal: &Principal,
    sink_id: &str,
) -> IdentityResult<api::AuditSinkSecretResponse> {
    let (workspace_id, _) = principal.admin_of()?;
    let (secret, sealed) = new_secret(ctx, sink_id)?;
    let op = AuditOp::RotateSinkSecret {
        workspace_id: workspace_id.clone(),
        sink_id: sink_id.to_owned(),
        secret_sealed: sealed,
    };
    let details = json!({ "sink_id": sink_id });
    commit(
        ctx,
        principal,
        &workspace_id,
        ("audit.sink_secret_rotated", "rotate_sink_secret"),
        details,
        op,
    )
    .await?;
    with_secret(ctx, &workspace_id, sink_id, secret).await
}

/// Deletes a sink (owners and admins): its undelivered events are no longer held back from
/// retention.
pub async fn delete(
    ctx: &Context,
    principal: &Principal,
    sink_id: &str,
) -> IdentityResult<api::OkResponse> {
    let (workspace_id, _) = principal.admin_of()?;
    let op = AuditOp::DeleteSink {
        workspace_id: workspace_id.clone(),
        sink_id: sink_id.to_owned(),
    };
    let details = json!({ "sink_id": sink_id });
    commit(
        ctx,
        principal,
        &workspace_id,
        ("audit.sink_deleted", "delete_sink"),
        details,
        op,
    )
    .await?;
    Ok(api::OkResponse { ok: true })
}

/// A new secret for sink `sink_id`, and the same sealed with the master key.
fn new_secret(ctx: &Context, sink_id: &str) -> IdentityResult<(String, String)> {
    let secret = generate_secret();
    let sealed = ctx
        .master_key
        .seal(secret.as_bytes(), &secret_context(sink_id))
        .map_err(IdentityError::Internal)?;
    Ok((secret, sealed))
}

/// The sink as it is now, with the secret just made (shown this once).
async fn with_secret(
    ctx: &Context,
    workspace_id: &str,
    sink_id: &str,
    secret: String,
) -> IdentityResult<api::AuditSinkSecretResponse> {
    let sink = ctx.store.sink(workspace_id, sink_id).await?;
    Ok(api::AuditSinkSecretResponse {
        ok: true,
        sink: view(ctx, sink).await?,
        secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_urls_are_https_without_credentials_or_fragments() {
        assert_eq!(
            checked_url("https://siem.example.com/ingest?x=1").unwrap(),
            "https://siem.example.com/ingest?x=1"
        );
        for bad in [
            "http://siem.example.com/",
            "https://user:pw@siem.example.com/",
            "https://siem.example.com/#frag",
            "siem.example.com",
            "ftp://siem.example.com/",
        ] {
            let err = checked_url(bad).unwrap_err();
            assert!(
                matches!(&err, IdentityError::Refused(r) if r.code == "invalid_sink_url"),
                "{bad}: {err:?}"
            );
        }
        assert!(checked_url(&format!("https://a.example/{}", "x".repeat(2100))).is_err());
    }

    #[test]
    fn secrets_are_long_and_distinct() {
        let (a, b) = (generate_secret(), generate_secret());
        assert!(a.starts_with("whsec_") && a.len() == 46);
        assert_ne!(a, b);
    }
}
