//! `/v1/workspace/audit/*`: query and export the workspace's audit trail.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use crate::api::{
    AuditEvent, AuditExportRequest, AuditExportResponse, AuditFilters, AuditListResponse,
    AuditPageParams, AuditStreamParams, ErrorBody,
};
use crate::audit;
use crate::audit::tail::Tail;
use crate::context::{Context, SharedContext};
use crate::error::{ApiError, ApiResult};
use crate::store::{AuditQuery, Cursor};

use super::extract::{AppJson, AppQuery};
use super::operator::{needs, Authorized, Who};

fn query(
    workspace_id: String,
    f: AuditFilters,
    after: Option<Cursor>,
    limit: i64,
) -> ApiResult<AuditQuery> {
    let keep = |v: Option<String>| v.filter(|s| !s.is_empty());
    if let (Some(start), Some(end)) = (f.start_ms, f.end_ms) {
        if end < start {
            return Err(ApiError::invalid("end_ms", "must not be before `start_ms`"));
        }
    }
    Ok(AuditQuery {
        workspace_id,
        agent_id: keep(f.agent_id),
        action: keep(f.action),
        decision: keep(f.decision),
        trace_id: keep(f.trace_id),
        event_type: keep(f.event_type),
        start_ms: f.start_ms,
        end_ms: f.end_ms,
        after,
        limit,
        oldest_first: false,
        event_type_prefix: None,
        secret_set_id: None,
        event_id: None,
        policy_id: None,
    })
}

/// One page of the workspace's events, newest first, and the next page's cursor: what
/// `GET /v1/workspace/audit/events` answers and the console's audit page shows.
pub(super) async fn list_events(
    ctx: &Context,
    workspace_id: String,
    filters: AuditFilters,
    page: AuditPageParams,
) -> ApiResult<(Vec<AuditEvent>, Option<String>)> {
    let limit = super::page_limit(page.limit, 50, 200)?;
    let q = query(
        workspace_id.clone(),
        filters,
        super::page_cursor(page.cursor.as_deref())?,
        limit + 1,
    )?;
    let mut rows = ctx.store.audit_events(&q).await?;
    let next_cursor = super::next_cursor(&mut rows, limit, |e| (e.created_at, e.id.clone()));
    let events = rows.into_iter().map(audit::to_wire).collect();
    let events = audit::with_actor_names(ctx.store.as_ref(), &workspace_id, events).await?;
    Ok((events, next_cursor))
}

/// The events an export holds (newest first, `limit` up to 10,000, default 1,000): what
/// `POST /v1/workspace/audit/export` answers and the console's export links download.
pub(super) async fn export_events(
    ctx: &Context,
    workspace_id: String,
    filters: AuditFilters,
    limit: Option<i64>,
) -> ApiResult<Vec<AuditEvent>> {
    let limit = super::page_limit(limit, 1000, 10_000)?;
    let q = query(workspace_id.clone(), filters, None, limit)?;
    let events = ctx
        .store
        .audit_events(&q)
        .await?
        .into_iter()
        .map(audit::to_wire)
        .collect();
    Ok(audit::with_actor_names(ctx.store.as_ref(), &workspace_id, events).await?)
}

/// Audit events of the workspace, newest first, with filters and an opaque cursor.
#[utoipa::path(get, path = "/v1/workspace/audit/events", tag = "audit", params(AuditFilters, AuditPageParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditListResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn events(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AuditRead>,
    AppQuery(filters): AppQuery<AuditFilters>,
    AppQuery(page): AppQuery<AuditPageParams>,
) -> ApiResult<Json<AuditListResponse>> {
    let (items, next_cursor) = list_events(&ctx, op.workspace_id, filters, page).await?;
    Ok(Json(AuditListResponse {
        ok: true,
        items,
        next_cursor,
    }))
}

/// Exports audit events as JSON or CSV (newest first).
#[utoipa::path(post, path = "/v1/workspace/audit/export", tag = "audit", request_body = AuditExportRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, description = "JSON (`format: json`) or `text/csv` (`format: csv`)",
            content((AuditExportResponse = "application/json"), (String = "text/csv"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn export(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AuditRead>,
    AppJson(req): AppJson<AuditExportRequest>,
) -> ApiResult<Response> {
    let csv = match req.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::invalid("format", "must be `json` or `csv`")),
    };
    let items = export_events(
        &ctx,
        op.workspace_id,
        req.filters.unwrap_or_default(),
        req.limit,
    )
    .await?;
    Ok(if csv {
        (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"audit-events.csv\"",
                ),
            ],
            audit::to_csv(&items).map_err(ApiError::internal)?,
        )
            .into_response()
    } else {
        Json(AuditExportResponse {
            ok: true,
            count: items.len(),
            items,
        })
        .into_response()
    })
}

/// How often a stream looks for new events.
const STREAM_POLL: Duration = Duration::from_millis(500);

/// New audit events as they are committed, as server-sent events (`event: audit`, `data:` the
/// event's JSON, `id:` a cursor): oldest first, from now on or after `cursor` /
/// `Last-Event-ID`. Each event is sent once per stream; after a resume, events of the five
/// seconds before the cursor may come again (drop repeated `id`s). A comment line every 15 s
/// keeps proxies from closing an idle stream; the stream ends when the server shuts down.
/// Each principal (API key, access token, a person's sessions) holds at most
/// `audit_streams_per_principal` streams at once, the server at most `audit_streams_max`: past
/// either, 429 `too_many_streams` with `Retry-After`.
#[utoipa::path(get, path = "/v1/workspace/audit/stream", tag = "audit", params(AuditFilters, AuditStreamParams,
        ("Last-Event-ID" = Option<String>, Header, description = "resume after this event (as `cursor`)")),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, description = "`text/event-stream` of `audit` events", content_type = "text/event-stream", body = String),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 429, description = "`too_many_streams`: the caller, or the server, holds the most streams it may (`limit`); `retry_after` and `Retry-After` say when to try again", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn stream(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AuditRead>,
    headers: HeaderMap,
    AppQuery(filters): AppQuery<AuditFilters>,
    AppQuery(params): AppQuery<AuditStreamParams>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let resume = params.cursor.or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let after = super::page_cursor(resume.as_deref())?;
    let q = query(op.workspace_id.clone(), filters, None, 0)?;
    // Held by the stream for as long as it lasts, given back when it ends or its client leaves.
    let slot = ctx.streams.acquire(stream_principal(&op))?;
    let tail = Tail::new(ctx.store.clone(), q, after.as_ref());
    let closing = ctx.closing.subscribe();
    let names = (ctx.store.clone(), op.workspace_id.clone());
    let events = futures::stream::unfold(
        (tail, closing, std::collections::VecDeque::new(), true, slot),
        move |(mut tail, mut closing, mut queue, mut first, slot)| {
            let (store, workspace_id) = names.clone();
            async move {
                loop {
                    if let Some((id, wire)) = queue.pop_front() {
                        let data = serde_json::to_string(&wire).unwrap_or_default();
                        let event = Event::default().event("audit").id(id).data(data);
                        return Some((Ok(event), (tail, closing, queue, first, slot)));
                    }
                    if *closing.borrow() {
                        return None;
                    }
                    if !first {
                        tokio::select! {
                            _ = tokio::time::sleep(STREAM_POLL) => {}
                            _ = closing.changed() => return None,
                        }
                    }
                    first = false;
                    let fresh = match tail.poll().await {
                        Ok(fresh) => fresh,
                        Err(err) => {
                            // The client resumes from its last event; nothing is skipped.
                            tracing::warn!(error = %err, "audit stream: reading events failed; ending the stream");
                            return None;
                        }
                    };
                    if fresh.is_empty() {
                        continue;
                    }
                    // The actors' names of a batch in one lookup.
                    let ids: Vec<String> = fresh.iter().map(Tail::cursor).collect();
                    let wire = fresh.into_iter().map(audit::to_wire).collect();
                    match audit::with_actor_names(store.as_ref(), &workspace_id, wire).await {
                        Ok(named) => queue.extend(ids.into_iter().zip(named)),
                        Err(err) => {
                            tracing::warn!(error = %err, "audit stream: reading actor names failed; ending the stream");
                            return None;
                        }
                    }
                }
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Whose streams a stream counts among: the API key, the personal access token, or the person
/// (all their sessions together).
fn stream_principal<G>(op: &Authorized<G>) -> String {
    match &op.who {
        Who::Key(caller) => format!("key:{}", caller.key_id),
        Who::Person(principal) => match &principal.pat_id {
            Some(token) => format!("token:{token}"),
            None => format!("user:{}", principal.user.id),
        },
    }
}
