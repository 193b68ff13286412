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

pub mod access;
pub mod agents;
pub mod approvals;
pub mod audit;
pub mod credentials;
pub mod extract;
pub mod mcp;
pub mod overview;
pub mod policies;
pub mod vault;
pub mod workspace;

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::error::ApiError;
use crate::identity::accounts::{self, Principal};

use self::extract::{PageResult, Posted};
use super::operator::person_requires;
use super::pages::{error_page, login_url, render};
use super::session::authenticate_user;

/// Every page and form of the console, a section per module. Each line: the paths and methods
/// (in the handlers' order) of one `routes!`; the test `router_lines_name_their_paths` holds
/// them to the OpenAPI document.
pub fn routes() -> OpenApiRouter<SharedContext> {
    OpenApiRouter::new()
        .routes(routes!(overview::dashboard)) // GET /dashboard
        .routes(routes!(switch_workspace)) // POST /dashboard/workspace
        .routes(routes!(agents::agents_page)) // GET /dashboard/agents
        .routes(routes!(agents::claim_agent)) // POST /dashboard/agents/claim
        .routes(routes!(agents::agent_page)) // GET /dashboard/agents/{agent_id}
        .routes(routes!(agents::confirm_agent_action, agents::agent_action)) // GET, POST /dashboard/agents/{agent_id}/{action}
        .routes(routes!(policies::policies_page)) // GET /dashboard/policies
        .routes(routes!(policies::policy_page)) // GET /dashboard/policies/{policy_id}
        .routes(routes!(policies::diff_page)) // GET /dashboard/policies/{policy_id}/diff
        .routes(routes!(policies::dry_run_form, policies::dry_run)) // GET, POST /dashboard/policies/{policy_id}/dry-run
        .routes(routes!(policies::apply)) // POST /dashboard/policies/{policy_id}/apply
        .routes(routes!(policies::confirm_rollback, policies::rollback)) // GET, POST /dashboard/policies/{policy_id}/rollback/{version}
        .routes(routes!(policies::bench_form, policies::bench_run)) // GET, POST /dashboard/policies/{policy_id}/test
        .routes(routes!(approvals::approvals_page)) // GET /dashboard/approvals
        .routes(routes!(approvals::challenge_page, approvals::decide)) // GET, POST /dashboard/approvals/{challenge_id}
        .routes(routes!(audit::audit_page)) // GET /dashboard/audit
        .routes(routes!(audit::export)) // GET /dashboard/audit/export
        .routes(routes!(audit::event_page)) // GET /dashboard/audit/{event_id}
        .routes(routes!(credentials::credentials_page)) // GET /dashboard/credentials
        .routes(routes!(credentials::minting)) // POST /dashboard/credentials/minting
        .routes(routes!(credentials::revoke_all)) // POST /dashboard/credentials/revoke-all
        .routes(routes!(credentials::confirm_revoke, credentials::revoke)) // GET, POST /dashboard/credentials/{cred_id}/revoke
        .routes(routes!(
            credentials::confirm_revoke_agent,
            credentials::revoke_agent
        )) // GET, POST /dashboard/credentials/agents/{agent_id}/revoke
        .routes(routes!(vault::vault_page, vault::create_set)) // GET, POST /dashboard/vault
        .routes(routes!(vault::set_page, vault::write_values)) // GET, POST /dashboard/vault/{secret_set_id}
        .routes(routes!(vault::confirm_lifecycle, vault::lifecycle)) // GET, POST /dashboard/vault/{secret_set_id}/{action}
        .routes(routes!(vault::confirm_rollback_set, vault::rollback_set)) // GET, POST /dashboard/vault/{secret_set_id}/rollback/{version}
        .routes(routes!(vault::add_grant)) // POST /dashboard/vault/{secret_set_id}/grants
        .routes(routes!(vault::revoke_set_grant)) // POST /dashboard/vault/{secret_set_id}/grants/{grant_id}/revoke
        .routes(routes!(vault::issue_set_lease)) // POST /dashboard/vault/{secret_set_id}/leases
        .routes(routes!(vault::revoke_set_lease)) // POST /dashboard/vault/{secret_set_id}/leases/{lease_id}/revoke
        .routes(routes!(mcp::mcp_page)) // GET /dashboard/mcp
        .routes(routes!(access::access_page)) // GET /dashboard/access
        .routes(routes!(workspace::workspace_page)) // GET /dashboard/settings
        .routes(routes!(workspace::save_member)) // POST /dashboard/settings/members
        .routes(routes!(
            workspace::confirm_remove_member,
            workspace::remove_member
        )) // GET, POST /dashboard/settings/members/{user_id}/remove
        .routes(routes!(workspace::create_api_key)) // POST /dashboard/settings/api-keys
        .routes(routes!(
            workspace::confirm_revoke_api_key,
            workspace::revoke_api_key
        )) // GET, POST /dashboard/settings/api-keys/{key_id}/revoke
        .routes(routes!(workspace::create_token)) // POST /dashboard/settings/tokens
        .routes(routes!(
            workspace::confirm_revoke_token,
            workspace::revoke_token
        )) // GET, POST /dashboard/settings/tokens/{token_id}/revoke
        .routes(routes!(workspace::save_settings)) // POST /dashboard/settings/approval
        .routes(routes!(workspace::save_retention)) // POST /dashboard/settings/retention
        .routes(routes!(workspace::create_workspace)) // POST /dashboard/settings/workspaces
}

/// The console's routes; with the server's context, each wrapped in
/// [`extract::show_failures`], which shows a handler's error as a page of its section (without,
/// for the OpenAPI document alone, bare).
pub fn router(ctx: Option<&SharedContext>) -> OpenApiRouter<SharedContext> {
    let routes = routes();
    match ctx {
        Some(ctx) => routes.route_layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            extract::show_failures,
        )),
        None => routes,
    }
}

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
    Access,
    Vault,
    Mcp,
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

const SECTIONS: [SectionInfo; 10] = [
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
        section: Section::Access,
        label: "Access",
        path: "/dashboard/access",
        need: Some(Need::PoliciesRead),
        back: "Back to access",
    },
    SectionInfo {
        section: Section::Vault,
        label: "Vault",
        path: "/dashboard/vault",
        need: Some(Need::VaultRead),
        back: "Back to the vault",
    },
    SectionInfo {
        section: Section::Mcp,
        label: "MCP",
        path: "/dashboard/mcp",
        need: Some(Need::McpRead),
        back: "Back to the MCP gateway",
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

/// The section of a console route (the overview's for `/dashboard` itself and the paths no
/// section holds), by the route's path as the router matched it.
/// `prefix` is the path the server runs under ("" at the root).
pub(super) fn section_at(prefix: &str, matched: &str) -> Section {
    let path = matched.strip_prefix(prefix).unwrap_or(matched);
    SECTIONS
        .iter()
        .filter(|s| {
            path.strip_prefix(s.path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
        .max_by_key(|s| s.path.len())
        .map_or(Section::Overview, |s| s.section)
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
    posted: Posted<SwitchForm>,
) -> PageResult {
    let workspace_id = posted.form.workspace_id.as_deref().unwrap_or("");
    accounts::select_workspace(&ctx, &posted.person, workspace_id).await?;
    Ok(see_other(format!("{}/dashboard", base(&ctx))))
}

/// The workspace switcher's form: the workspace to show.
#[derive(serde::Deserialize)]
pub struct SwitchForm {
    workspace_id: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_belongs_to_the_section_whose_path_it_is_under() {
        for (prefix, matched, section) in [
            ("", "/dashboard", Section::Overview),
            ("", "/dashboard/workspace", Section::Overview),
            ("", "/dashboard/agents", Section::Agents),
            ("", "/dashboard/agents/{agent_id}/{action}", Section::Agents),
            (
                "",
                "/dashboard/vault/{secret_set_id}/grants",
                Section::Vault,
            ),
            ("", "/dashboard/settings/api-keys", Section::Workspace),
            (
                "",
                "/dashboard/credentials/agents/{agent_id}/revoke",
                Section::Credentials,
            ),
            ("/acp", "/acp/dashboard/audit/{event_id}", Section::Audit),
            // A path that only starts like a section's is not in it.
            ("", "/dashboard/auditors", Section::Overview),
        ] {
            assert_eq!(section_at(prefix, matched), section, "{prefix}{matched}");
        }
    }
}
