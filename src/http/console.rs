//! The console: the pages people run the control plane from, behind their session cookie.
//!
//! Every page shares one shell (`console.html`): the navigation (only the sections the
//! person's role may read), the workspace switcher and the person's role. Pages call the same
//! use cases as the API, and the server checks the role on every request with
//! [`person_requires`], the rule `Authorized<needs::X>` applies to the API; a refusal is a page
//! with the refusal's status (403 for a role that may not).
//!
//! Changes are plain HTML forms posted with the session cookie. A form carries the session's
//! CSRF token in a hidden `csrf` field; the server reads it as the `X-CSRF-Token` header and
//! applies [`super::session::csrf_refusal`] as for any cookie request (a cross-site request is
//! refused, token or not). Every change is audited by its use case with the person as actor.

use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::domain::FieldError;
use crate::error::ApiError;
use crate::identity::accounts::{self, Principal};

use super::operator::person_requires;
use super::pages::{error_page, login_url, render};
use super::session::authenticate_user;

/// Rows of a list page unless `limit` says otherwise.
pub(super) const PAGE_ROWS: i64 = 25;
/// Heartbeats and audit events on an agent's page, and denials on the overview.
pub(super) const RECENT_ROWS: i64 = 10;

/// What every console page shows around its content.
pub struct Shell {
    /// The path prefix the server runs under ("" at the root).
    pub(super) base: String,
    pub(super) email: String,
    pub(super) csrf: String,
    /// The person's role in the selected workspace.
    pub(super) role: &'static str,
    pub(super) has_selection: bool,
    pub(super) workspaces: Vec<WorkspaceRow>,
    pub(super) nav: Vec<NavItem>,
    /// Whether the role may suspend, resume, revoke and approve agents (the server checks
    /// again on every such request).
    pub(super) can_change_agents: bool,
    /// Whether the role may dry-run, apply and roll back policies (the server checks again on
    /// every such request).
    pub(super) can_sync_policies: bool,
}

pub(super) struct WorkspaceRow {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) role: &'static str,
    pub(super) selected: bool,
}

pub(super) struct NavItem {
    pub(super) href: String,
    pub(super) label: &'static str,
    pub(super) current: bool,
}

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Overview,
    Agents,
    Policies,
    Approvals,
    Audit,
    Vault,
    Credentials,
    Workspace,
}

/// A section of the navigation: its label, path, what a role needs to read it (`None`: anyone
/// logged in), and the link back to it from an error page.
struct SectionInfo {
    section: Section,
    label: &'static str,
    path: &'static str,
    need: Option<Need>,
    back: &'static str,
}

const SECTIONS: [SectionInfo; 8] = [
    SectionInfo {
        section: Section::Overview,
        label: "Overview",
        path: "/dashboard",
        need: None,
        back: "Back to the overview",
    },
    SectionInfo {
        section: Section::Agents,
        label: "Agents",
        path: "/dashboard/agents",
        need: Some(Need::AgentsRead),
        back: "Back to agents",
    },
    SectionInfo {
        section: Section::Policies,
        label: "Policies",
        path: "/dashboard/policies",
        need: Some(Need::PoliciesRead),
        back: "Back to policies",
    },
    SectionInfo {
        section: Section::Approvals,
        label: "Approvals",
        path: "/dashboard/approvals",
        need: Some(Need::ChallengesRead),
        back: "Back to approvals",
    },
    SectionInfo {
        section: Section::Audit,
        label: "Audit",
        path: "/dashboard/audit",
        need: Some(Need::AuditRead),
        back: "Back to the audit trail",
    },
    SectionInfo {
        section: Section::Vault,
        label: "Vault",
        path: "/dashboard/vault",
        need: Some(Need::VaultRead),
        back: "Back to the vault",
    },
    SectionInfo {
        section: Section::Credentials,
        label: "Credentials",
        path: "/dashboard/credentials",
        need: Some(Need::KillSwitchRead),
        back: "Back to credentials",
    },
    SectionInfo {
        section: Section::Workspace,
        label: "Workspace",
        path: "/dashboard/settings",
        need: Some(Need::WorkspaceRead),
        back: "Back to the workspace",
    },
];

/// The section's entry (the overview's for a section not in the navigation).
fn section_info(section: Section) -> &'static SectionInfo {
    SECTIONS
        .iter()
        .find(|s| s.section == section)
        .unwrap_or(&SECTIONS[0])
}

pub(super) fn base(ctx: &Context) -> String {
    ctx.config.path_prefix.clone().unwrap_or_default()
}

pub(super) async fn shell(
    ctx: &Context,
    principal: &Principal,
    current: Section,
) -> Result<Shell, ApiError> {
    let memberships = ctx.store.memberships(&principal.user.id).await?;
    let active = principal.workspace_id.as_deref();
    let role = principal.membership().ok().map(|(_, role)| role);
    let base = base(ctx);
    let nav = SECTIONS
        .iter()
        .filter(|s| match s.need {
            None => true,
            Some(need) => person_requires(principal, need).is_ok(),
        })
        .map(|s| NavItem {
            href: format!("{base}{}", s.path),
            label: s.label,
            current: s.section == current,
        })
        .collect();
    Ok(Shell {
        email: principal.user.email.clone(),
        csrf: principal.csrf_token.clone().unwrap_or_default(),
        role: role.map_or("no workspace selected", |r| r.as_str()),
        has_selection: role.is_some(),
        workspaces: memberships
            .iter()
            .map(|m| WorkspaceRow {
                id: m.workspace.id.clone(),
                name: m.workspace.name.clone(),
                role: m.role.as_str(),
                selected: role.is_some() && active == Some(m.workspace.id.as_str()),
            })
            .collect(),
        nav,
        can_change_agents: person_requires(principal, Need::AgentsChange).is_ok(),
        can_sync_policies: person_requires(principal, Need::PolicySync).is_ok()
            && principal.admin_of().is_ok(),
        base,
    })
}

pub(super) fn see_other(location: String) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// The integer parameters of the pages that take a page size, and of the versions diff.
pub(super) const LIMIT: &[(&str, i64, i64)] = &[("limit", 1, 200)];
pub(super) const VERSIONS: &[(&str, i64, i64)] = &[("from", 1, i64::MAX), ("to", 1, i64::MAX)];

/// A page's query, checked as the API checks its parameters, before anything else (a bad
/// query is a 400 page whether or not the person is logged in): no NUL in a name or value, and
/// each of `ints` (name, least, most) a whole number within its bounds.
fn checked_query(
    ctx: &Context,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
) -> Option<Response> {
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if value.contains('\0') || name.contains('\0') {
            return Some(error_page(
                ctx,
                ApiError::bad_request(
                    "invalid_query",
                    "a query parameter must not contain NUL characters",
                ),
            ));
        }
        if let Some((field, low, high)) = ints.iter().find(|(n, _, _)| *n == name) {
            if !value
                .parse::<i64>()
                .is_ok_and(|n| (*low..=*high).contains(&n))
            {
                return Some(error_page(
                    ctx,
                    FieldError::invalid(
                        *field,
                        format!("must be a whole number from {low} to {high}"),
                    )
                    .into(),
                ));
            }
        }
    }
    None
}

/// The person behind a page's GET, after its query was checked (see [`checked_query`]).
pub(super) async fn page_person(
    ctx: &Context,
    headers: &HeaderMap,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
) -> Result<Principal, Response> {
    if let Some(refused) = checked_query(ctx, query, ints) {
        return Err(refused);
    }
    person(ctx, &Method::GET, headers).await
}

/// The person behind a console request, by session cookie (tokens and API keys open no
/// pages), or the answer to send instead: the login page without a session, an error page
/// for a refused request (a failed CSRF check).
pub(super) async fn person(
    ctx: &Context,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    match authenticate_user(ctx, method, headers, &Uri::default()).await {
        Ok(principal) if principal.session_hash.is_some() => Ok(principal),
        Ok(_) => Err(see_other(login_url(ctx))),
        Err(err) if err.status == StatusCode::UNAUTHORIZED => Err(see_other(login_url(ctx))),
        Err(err) => Err(error_page(ctx, err)),
    }
}

/// The person behind a form posted to the console and the form's fields. The form's `csrf`
/// field counts as the `X-CSRF-Token` header, so the cookie request passes the same CSRF
/// check as any other.
pub(super) async fn form_person(
    ctx: &Context,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Principal, Vec<(String, String)>), Response> {
    let fields: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let mut headers = headers.clone();
    if !headers.contains_key("x-csrf-token") {
        if let Some(token) = field(&fields, "csrf").and_then(|t| HeaderValue::from_str(t).ok()) {
            headers.insert("x-csrf-token", token);
        }
    }
    let principal = person(ctx, &Method::POST, &headers).await?;
    Ok((principal, fields))
}

/// A console form's answer: the person behind the POST (see [`form_person`]), then `act` with
/// the form's fields, its error shown as a page of `section` (see [`answer`]).
pub(super) async fn form_answer(
    ctx: &Context,
    headers: &HeaderMap,
    body: &[u8],
    section: Section,
    act: impl AsyncFnOnce(&Principal, Vec<(String, String)>) -> Result<Response, ApiError>,
) -> Response {
    let (principal, fields) = match form_person(ctx, headers, body).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let result = act(&principal, fields).await;
    answer(ctx, &principal, section, result).await
}

/// A console page's answer: the person behind the GET (see [`page_person`]), then `show`, its
/// error shown as a page of `section` (see [`answer`]).
pub(super) async fn page_answer(
    ctx: &Context,
    headers: &HeaderMap,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
    section: Section,
    show: impl AsyncFnOnce(&Principal) -> Result<Response, ApiError>,
) -> Response {
    let principal = match page_person(ctx, headers, query, ints).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let result = show(&principal).await;
    answer(ctx, &principal, section, result).await
}

pub(super) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[derive(Template)]
#[template(path = "console_error.html", config = "src/http/templates/askama.toml")]
struct ConsoleError<'a> {
    shell: Shell,
    title: &'a str,
    code: &'a str,
    message: &'a str,
    back_href: String,
    back_label: &'a str,
}

/// The page's answer, or its error as a page inside the shell, with the error's status.
pub(super) async fn answer(
    ctx: &Context,
    principal: &Principal,
    section: Section,
    result: Result<Response, ApiError>,
) -> Response {
    let err = match result {
        Ok(response) => return response,
        Err(err) => err,
    };
    err.log_cause();
    let shell = match shell(ctx, principal, section).await {
        Ok(shell) => shell,
        Err(other) => return error_page(ctx, other),
    };
    let title = match err.status {
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::NOT_FOUND => "Not found",
        _ => "That did not work",
    };
    let info = section_info(section);
    let (back_href, back_label) = (format!("{}{}", shell.base, info.path), info.back);
    let mut response = render(&ConsoleError {
        shell,
        title,
        code: &err.code,
        message: &err.message,
        back_href,
        back_label,
    });
    if response.status().is_success() {
        *response.status_mut() = err.status;
    }
    // For the access log line, as an API error's answer carries it.
    response
        .extensions_mut()
        .insert(crate::error::ErrorCode(err.code.clone()));
    response
}

/// Selects the workspace the console shows (a form: `csrf`, `workspace_id`), then back to the
/// overview.
#[utoipa::path(post, path = "/dashboard/workspace", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and `workspace_id`"),
    responses((status = 303, description = "selected: to /dashboard (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`"), (status = 404, description = "HTML page: `unknown_workspace`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn switch_workspace(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (principal, fields) = match form_person(&ctx, &headers, &body).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let workspace_id = field(&fields, "workspace_id").unwrap_or("");
    let result = accounts::select_workspace(&ctx, &principal, workspace_id)
        .await
        .map(|()| see_other(format!("{}/dashboard", base(&ctx))))
        .map_err(ApiError::from);
    answer(&ctx, &principal, Section::Overview, result).await
}

// ---- select options shared by the sections ----------------------------------------------------

pub(super) struct SelectOption {
    pub(super) value: &'static str,
    pub(super) selected: bool,
}

pub(super) fn options(values: &[&'static str], chosen: &str) -> Vec<SelectOption> {
    values
        .iter()
        .map(|value| SelectOption {
            value,
            selected: *value == chosen,
        })
        .collect()
}
