//! `/v1/workspace/audit/*`: query and export the workspace's audit trail.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{
    AuditExportRequest, AuditExportResponse, AuditFilters, AuditListResponse, AuditPageParams,
    ErrorBody,
};
use crate::audit;
use crate::context::SharedContext;
use crate::error::{ApiError, ApiResult};
use crate::store::{AuditQuery, Cursor};

use super::extract::{AppJson, AppQuery};
use super::operator::{needs, Authorized};

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
    })
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
    let limit = super::page_limit(page.limit, 50, 200)?;
    let q = query(
        op.workspace_id,
        filters,
        super::page_cursor(page.cursor.as_deref())?,
        limit + 1,
    )?;
    let mut rows = ctx.store.audit_events(&q).await?;
    let next_cursor = super::next_cursor(&mut rows, limit, |e| (e.created_at, e.id.clone()));
    Ok(Json(AuditListResponse {
        ok: true,
        items: rows.into_iter().map(audit::to_wire).collect(),
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
    let limit = super::page_limit(req.limit, 1000, 10_000)?;
    let csv = match req.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::invalid("format", "must be `json` or `csv`")),
    };
    let q = query(
        op.workspace_id,
        req.filters.unwrap_or_default(),
        None,
        limit,
    )?;
    let items: Vec<_> = ctx
        .store
        .audit_events(&q)
        .await?
        .into_iter()
        .map(audit::to_wire)
        .collect();
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
