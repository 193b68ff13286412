//! The console's MCP gateway: the workspace's registered servers (name, upstream, where agents
//! connect, the vault profile that authenticates the gateway, whether argument values are
//! recorded) and the latest tool calls with their decisions, for every member. Servers are
//! registered with the API or `acp mcp servers`.

use askama::Template;
use axum::extract::State;

use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::http::operator::person_requires;
use crate::http::pages::render;
use crate::mcp::servers;

use super::extract::{NotLoggedIn, PageResult, Person};
use super::{shell, Section, Shell};

#[derive(Template)]
#[template(path = "mcp.html", config = "src/http/templates/askama.toml")]
struct McpPage {
    shell: Shell,
    servers: Vec<ServerRow>,
    calls: Vec<servers::RecentCall>,
}

struct ServerRow {
    id: String,
    name: String,
    url: String,
    endpoint: String,
    /// `secret set profile`, or empty for none.
    auth: String,
    record_arguments: bool,
    registered: String,
    by: String,
}

/// The workspace's registered MCP servers.
#[utoipa::path(get, path = "/dashboard/mcp", tag = "dashboard",
    responses((status = 200, description = "HTML list of MCP servers"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read the MCP gateway")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn mcp_page(State(ctx): State<SharedContext>, Person(principal): Person) -> PageResult {
    person_requires(&principal, Need::McpRead)?;
    let (workspace_id, _) = principal.membership()?;
    let listed = servers::list(&ctx, &workspace_id).await?;
    let shell = shell(&ctx, &principal, Section::Mcp).await?;
    let servers = listed
        .into_iter()
        .map(|s| ServerRow {
            auth: s
                .auth
                .map(|a| format!("{} profile {}", a.secret_set_id, a.profile))
                .unwrap_or_default(),
            by: s.created_by_name.unwrap_or(s.created_by),
            id: s.server_id,
            name: s.name,
            url: s.url,
            endpoint: s.endpoint,
            record_arguments: s.record_arguments,
            registered: s.created_at,
        })
        .collect();
    let calls = servers::recent_calls(&ctx, &workspace_id).await?;
    Ok(render(&McpPage {
        shell,
        servers,
        calls,
    }))
}
