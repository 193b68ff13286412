//! The console's audit trail: the selected workspace's events searched with every filter of
//! `GET /v1/workspace/audit/events` (agent, action, decision, event type, trace id, from and
//! until), paged by cursor; one event's page with all its fields; the export as CSV or JSON
//! (the same events `POST /v1/workspace/audit/export` answers, as a download); and a live tail:
//! on the first page a small script reads `GET /v1/workspace/audit/stream` (the session cookie
//! authenticates it) and puts new events on top. Without JavaScript the page is the plain list.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{NaiveDate, NaiveDateTime};
use serde::Deserialize;

use crate::api::{self, AuditExportResponse, AuditFilters, AuditPageParams};
use crate::audit::{self, summary};
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::time::parse_iso;

use super::extract::{NotLoggedIn, PageQuery, PageResult, Paged, Person, Positive};
use super::{options, shell, Section, SelectOption, Shell, PAGE_ROWS};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// The search as typed (empty when not set): the API's filters, with `from` and `until` as
/// times rather than epoch milliseconds.
/// The audit page's filters (empty when not set).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Search {
    agent_id: String,
    action: String,
    decision: String,
    event_type: String,
    trace_id: String,
    /// Inclusive: RFC 3339, or `YYYY-MM-DDTHH:MM[:SS]` / `YYYY-MM-DD` read as UTC.
    from: String,
    /// Exclusive, as `from`.
    until: String,
}

impl Search {
    /// The search as given, trimmed, each filter at most 200 characters.
    fn checked(self) -> Result<Search, ApiError> {
        let trim = |s: String| s.trim().to_owned();
        let search = Search {
            agent_id: trim(self.agent_id),
            action: trim(self.action),
            decision: trim(self.decision),
            event_type: trim(self.event_type),
            trace_id: trim(self.trace_id),
            from: trim(self.from),
            until: trim(self.until),
        };
        let too_long = [
            &search.agent_id,
            &search.action,
            &search.decision,
            &search.event_type,
            &search.trace_id,
            &search.from,
            &search.until,
        ]
        .iter()
        .any(|v| v.chars().count() > 200);
        if too_long {
            return Err(ApiError::invalid(
                "filter",
                "filters are at most 200 characters",
            ));
        }
        Ok(search)
    }

    fn is_set(&self) -> bool {
        self.pairs().next().is_some()
    }

    /// The filters that are set, by their query names.
    fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("agent_id", self.agent_id.as_str()),
            ("action", self.action.as_str()),
            ("decision", self.decision.as_str()),
            ("event_type", self.event_type.as_str()),
            ("trace_id", self.trace_id.as_str()),
            ("from", self.from.as_str()),
            ("until", self.until.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
    }

    /// The API's filters: the same names, the times as epoch milliseconds.
    fn filters(&self) -> Result<AuditFilters, ApiError> {
        let keep = |v: &str| Some(v.to_owned()).filter(|v| !v.is_empty());
        Ok(AuditFilters {
            agent_id: keep(&self.agent_id),
            action: keep(&self.action),
            decision: keep(&self.decision),
            trace_id: keep(&self.trace_id),
            event_type: keep(&self.event_type),
            start_ms: time_ms("from", &self.from)?,
            end_ms: time_ms("until", &self.until)?,
        })
    }

    /// `path` with these filters and the extra pairs given.
    fn href(&self, base: &str, path: &str, extra: &[(&str, String)]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in self.pairs() {
            query.append_pair(name, value);
        }
        for (name, value) in extra {
            query.append_pair(name, value);
        }
        let query = query.finish();
        if query.is_empty() {
            format!("{base}{path}")
        } else {
            format!("{base}{path}?{query}")
        }
    }
}

/// A time filter as epoch milliseconds: RFC 3339 (`2025-01-31T09:00:00Z`), or what a
/// `datetime-local` field or a date sends (`2025-01-31T09:00`, `2025-01-31`), read as UTC.
fn time_ms(field: &'static str, text: &str) -> Result<Option<i64>, ApiError> {
    if text.is_empty() {
        return Ok(None);
    }
    let local = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
        .map(|t| t.and_utc().timestamp_millis());
    parse_iso(text).or(local).map(Some).ok_or_else(|| {
        ApiError::invalid(
            field,
            "must be a time such as `2025-01-31T09:00:00Z` or `2025-01-31T09:00` (UTC)",
        )
    })
}

#[derive(Template)]
#[template(path = "audit.html", config = "src/http/templates/askama.toml")]
struct AuditPage {
    shell: Shell,
    search: Search,
    filtered: bool,
    decision_options: Vec<SelectOption>,
    events: Vec<EventRow>,
    first_href: Option<String>,
    next_href: Option<String>,
    csv_href: String,
    json_href: String,
    /// The stream the live tail reads: on the first page of a search without an end.
    stream_href: Option<String>,
}

struct EventRow {
    href: String,
    created_at: String,
    event_type: String,
    agent_id: String,
    agent_href: Option<String>,
    action: String,
    decision: String,
    actor: String,
}

/// The workspace's audit events, newest first, with the API's filters, paged by cursor, with
/// export links and (with JavaScript) a live tail.
#[utoipa::path(get, path = "/dashboard/audit", tag = "dashboard",
    params(("agent_id" = Option<String>, Query), ("action" = Option<String>, Query),
        ("decision" = Option<String>, Query, description = "`allow`, `deny` or `challenge`"),
        ("event_type" = Option<String>, Query), ("trace_id" = Option<String>, Query),
        ("from" = Option<String>, Query, description = "inclusive: RFC 3339, or `YYYY-MM-DDTHH:MM` (UTC)"),
        ("until" = Option<String>, Query, description = "exclusive, as `from`"),
        ("limit" = Option<i64>, Query, description = "1 to 200, default 25"),
        ("cursor" = Option<String>, Query, description = "the next page's cursor")),
    responses((status = 200, description = "HTML list of audit events"), NotLoggedIn,
        (status = 400, description = "HTML page: a filter, the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read the audit trail")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn audit_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<Paged<Search>>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(search_page(&ctx, principal, query).await?)
}

async fn search_page(
    ctx: &Context,
    principal: &Principal,
    query: Paged<Search>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AuditRead)?;
    let (workspace_id, _) = principal.membership()?;
    let (cursor, limit) = (query.cursor(), query.limit());
    let search = query.filters.checked()?;
    let filters = search.filters()?;
    let stream_filters = filters.clone();
    let page = AuditPageParams {
        limit: Some(limit.unwrap_or(PAGE_ROWS)),
        cursor: cursor.clone(),
    };
    let (items, next) = crate::http::audit::list_events(ctx, workspace_id, filters, page).await?;
    let shell = shell(ctx, principal, Section::Audit).await?;
    let base = shell.base.clone();
    let events = items
        .into_iter()
        .map(|e| EventRow {
            href: format!("{base}/dashboard/audit/{}", e.event_id),
            agent_href: e
                .agent_id
                .as_ref()
                .map(|id| format!("{base}/dashboard/agents/{id}")),
            agent_id: e.agent_id.unwrap_or_default(),
            created_at: e.created_at,
            event_type: e.event_type,
            action: e.action.unwrap_or_default(),
            decision: e.decision.unwrap_or_default(),
            actor: e.actor_name.unwrap_or(e.actor),
        })
        .collect();
    let limit_kept: Vec<(&str, String)> = limit
        .filter(|l| *l != PAGE_ROWS)
        .map(|l| ("limit", l.to_string()))
        .into_iter()
        .collect();
    let stream_href = (cursor.is_none() && stream_filters.end_ms.is_none()).then(|| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("agent_id", &stream_filters.agent_id),
            ("action", &stream_filters.action),
            ("decision", &stream_filters.decision),
            ("event_type", &stream_filters.event_type),
            ("trace_id", &stream_filters.trace_id),
        ] {
            if let Some(value) = value {
                query.append_pair(name, value);
            }
        }
        if let Some(start) = stream_filters.start_ms {
            query.append_pair("start_ms", &start.to_string());
        }
        format!("{base}/v1/workspace/audit/stream?{}", query.finish())
    });
    let next_href = next.map(|c| {
        let mut extra = limit_kept.clone();
        extra.push(("cursor", c));
        search.href(&base, "/dashboard/audit", &extra)
    });
    Ok(render(&AuditPage {
        first_href: cursor.map(|_| search.href(&base, "/dashboard/audit", &limit_kept)),
        next_href,
        csv_href: search.href(
            &base,
            "/dashboard/audit/export",
            &[("format", "csv".into())],
        ),
        json_href: search.href(
            &base,
            "/dashboard/audit/export",
            &[("format", "json".into())],
        ),
        stream_href,
        filtered: search.is_set(),
        decision_options: options(&["allow", "deny", "challenge"], &search.decision),
        search,
        events,
        shell,
    }))
}

#[derive(Template)]
#[template(path = "audit_event.html", config = "src/http/templates/askama.toml")]
struct EventPage {
    shell: Shell,
    event: api::AuditEvent,
    details: String,
    agent_href: Option<String>,
    trace_href: Option<String>,
    /// The policy challenge the event names: its id and its page.
    challenge: Option<(String, String)>,
    /// The policy's page, at the version the event names when it names one.
    policy_href: Option<String>,
    /// The policy version the event was decided under (from its details, or found by its hash).
    policy_version: Option<i64>,
    /// The policy's test bench, filled in with the event's recorded request.
    bench_href: Option<String>,
}

/// The policy challenge an event names: a decision that raised or used one (`challenge_id`,
/// `approval.challenge_id`), an approval (`challenge_id`). Only policy challenges (`pch_...`):
/// an agent's attestation challenge has no page.
fn named_challenge(details: &serde_json::Value) -> Option<&str> {
    [
        &details["challenge_id"],
        &details["approval"]["challenge_id"],
    ]
    .into_iter()
    .filter_map(serde_json::Value::as_str)
    .find(|id| id.starts_with("pch_") && id.len() <= 200)
}

/// The version of `policy_id` an event was decided under: the `policy_version` its details
/// record, else the version whose hash is the event's `policy_hash` (events that recorded no
/// version). `None` for the built-in default (never synced) and a hash no version has.
pub(super) async fn decided_version(
    ctx: &Context,
    workspace_id: &str,
    event: &api::AuditEvent,
    policy_id: &str,
) -> Result<Option<i64>, ApiError> {
    if let Some(version) = event.details["policy_version"].as_i64().filter(|v| *v > 0) {
        return Ok(Some(version));
    }
    let Some(hash) = event.policy_hash.as_deref() else {
        return Ok(None);
    };
    Ok(ctx
        .store
        .policy_versions(workspace_id, policy_id)
        .await?
        .into_iter()
        .find(|v| v.hash == hash)
        .map(|v| v.version))
}

/// One audit event: every field and its details.
#[utoipa::path(get, path = "/dashboard/audit/{event_id}", tag = "dashboard",
    params(("event_id" = String, Path)),
    responses((status = 200, description = "HTML page of the event"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read the audit trail"),
        (status = 404, description = "HTML page: `unknown_event`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn event_page(
    State(ctx): State<SharedContext>,
    Path(event_id): Path<String>,
    Person(principal): Person,
) -> PageResult {
    Ok(event_detail(&ctx, &principal, &event_id).await?)
}

async fn event_detail(
    ctx: &Context,
    principal: &Principal,
    event_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AuditRead)?;
    let (workspace_id, _) = principal.membership()?;
    let event = summary::event(ctx, &workspace_id, event_id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found("unknown_event", "no such audit event in this workspace")
        })?;
    let shell = shell(ctx, principal, Section::Audit).await?;
    let base = &shell.base;
    let challenge = person_requires(principal, Need::ChallengesRead)
        .is_ok()
        .then(|| named_challenge(&event.details))
        .flatten()
        .map(|id| (id.to_owned(), format!("{base}/dashboard/approvals/{id}")));
    let policy = match event.policy_id.as_deref() {
        Some(policy_id) if person_requires(principal, Need::PoliciesRead).is_ok() => Some((
            policy_id,
            decided_version(ctx, &workspace_id, &event, policy_id).await?,
        )),
        _ => None,
    };
    let policy_href = policy.map(|(id, version)| match version {
        Some(v) => format!("{base}/dashboard/policies/{id}?version={v}"),
        None => format!("{base}/dashboard/policies/{id}"),
    });
    let bench_href = policy
        .filter(|_| event.event_type == "decision.check")
        .map(|(id, _)| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("event", &event.event_id);
            format!("{base}/dashboard/policies/{id}/test?{}", query.finish())
        });
    Ok(render(&EventPage {
        challenge,
        policy_version: policy.and_then(|(_, v)| v),
        policy_href,
        bench_href,
        details: serde_json::to_string_pretty(&event.details).unwrap_or_default(),
        agent_href: event
            .agent_id
            .as_ref()
            .map(|id| format!("{base}/dashboard/agents/{id}")),
        trace_href: event.trace_id.as_ref().map(|t| {
            Search {
                trace_id: t.clone(),
                ..Search::default()
            }
            .href(base, "/dashboard/audit", &[])
        }),
        event,
        shell,
    }))
}

/// The events of a search as a file: `format` `csv` or `json` (the same rows and shapes as
/// `POST /v1/workspace/audit/export`), `limit` up to 10,000 (default 1,000), newest first.
#[utoipa::path(get, path = "/dashboard/audit/export", tag = "dashboard",
    params(("format" = Option<String>, Query, description = "`csv` or `json` (default)"),
        ("agent_id" = Option<String>, Query), ("action" = Option<String>, Query),
        ("decision" = Option<String>, Query), ("event_type" = Option<String>, Query), ("trace_id" = Option<String>, Query),
        ("from" = Option<String>, Query), ("until" = Option<String>, Query),
        ("limit" = Option<i64>, Query, description = "1 to 10,000, default 1,000")),
    responses((status = 200, description = "an attachment: `text/csv` or `application/json`"),
        NotLoggedIn,
        (status = 400, description = "HTML page: a filter, the format or the limit is not valid"),
        (status = 403, description = "HTML page: the role may not read the audit trail")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn export(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<ExportQuery>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(export_file(&ctx, principal, query).await?)
}

/// The export's query: the search, how many events (the newest), and the format.
#[derive(Deserialize)]
pub struct ExportQuery {
    #[serde(flatten)]
    search: Search,
    limit: Option<Positive>,
    format: Option<String>,
}

async fn export_file(
    ctx: &Context,
    principal: &Principal,
    query: ExportQuery,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AuditRead)?;
    let (workspace_id, _) = principal.membership()?;
    let search = query.search.checked()?;
    let limit = query.limit.map(|l| l.0);
    let csv = match query.format.as_deref().map_or("", str::trim) {
        "" | "json" => false,
        "csv" => true,
        _ => return Err(ApiError::invalid("format", "must be `json` or `csv`")),
    };
    let items =
        crate::http::audit::export_events(ctx, workspace_id, search.filters()?, limit).await?;
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
        (
            [(
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"audit-events.json\"",
            )],
            Json(AuditExportResponse {
                ok: true,
                count: items.len(),
                items,
            }),
        )
            .into_response()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_local_fields_read_as_utc() {
        assert_eq!(
            time_ms("from", "2023-11-14T22:13:20.123Z").ok(),
            Some(Some(1_700_000_000_123))
        );
        assert_eq!(
            time_ms("from", "2023-11-14T22:13").ok(),
            Some(Some(1_699_999_980_000))
        );
        assert_eq!(
            time_ms("until", "2023-11-14").ok(),
            Some(Some(1_699_920_000_000))
        );
        assert_eq!(time_ms("from", "").ok(), Some(None));
        assert!(time_ms("from", "yesterday").is_err());
    }

    #[test]
    fn links_keep_the_search() {
        let read = |query: &str| {
            super::super::extract::typed::<Paged<Search>>(query.as_bytes())
                .and_then(|q| Ok((q.cursor(), q.limit(), q.filters.checked()?)))
        };
        let (cursor, limit, search) =
            read("agent_id=agt_1&decision=+deny+&from=2025-01-01&cursor=c&limit=5&x=1").unwrap();
        assert_eq!((cursor.as_deref(), limit), (Some("c"), Some(5)));
        assert_eq!(
            search.href(
                "/acp",
                "/dashboard/audit/export",
                &[("format", "csv".into())]
            ),
            "/acp/dashboard/audit/export?agent_id=agt_1&decision=deny&from=2025-01-01&format=csv"
        );
        assert!(search.is_set() && !Search::default().is_set());
        assert!(read(&format!("action={}", "a".repeat(201))).is_err());
        let err = read("limit=0").unwrap_err();
        assert_eq!(err.code, "invalid_limit", "{}", err.message);
        assert!(err.message.contains("from 1 to 200"), "{}", err.message);
    }
}
