//! Registered servers: the upstreams a workspace's agents reach through the gateway, each by
//! a name of its own (`/mcp/{name}`, actions `mcp.{name}.{tool}`), registered by owners and
//! admins and read by every member. A server's URL passes the vault proxy's egress rules (an
//! `https://` endpoint at a public address unless the operator's allow-list opens it), checked
//! when it is set and again at every call; its upstream authentication is a vault secret set's
//! proxy profile, checked to cover the URL.

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, names::ActorNames, Actor};
use crate::context::Context;
use crate::domain::ids::{self, McpServerId};
use crate::domain::mcp::ServerName;
use crate::enforce::{EnforceError, EnforceResult};
use crate::net::egress::{self, EgressError, ProxyCall};
use crate::store::{Change, McpOp, McpServerAuth, McpServerRecord, ServerRef, StoreError};
use crate::time::{iso, now_ms};
use crate::vault::agent::Scene;

/// Servers per workspace.
pub const MAX_SERVERS: i64 = 100;

fn unknown_server() -> EnforceError {
    EnforceError::not_found(
        "unknown_mcp_server",
        "this workspace has no such MCP server",
    )
}

/// A server named in a path: its id (`mcp_…`) or its name. Anything else names none.
fn server_ref(text: &str) -> EnforceResult<ServerRef<'_>> {
    if McpServerId::parse(text).is_some() {
        Ok(ServerRef::Id(text))
    } else if ServerName::parse(text).is_ok() {
        Ok(ServerRef::Name(text))
    } else {
        Err(unknown_server())
    }
}

/// The workspace's server named by `server` (id or name).
pub async fn find(
    ctx: &Context,
    workspace_id: &str,
    server: &str,
) -> EnforceResult<McpServerRecord> {
    ctx.store
        .mcp_server(workspace_id, server_ref(server)?)
        .await?
        .ok_or_else(unknown_server)
}

/// The store's refusals in the API's words.
fn refused(err: StoreError) -> EnforceError {
    match err {
        StoreError::NotFound => unknown_server(),
        StoreError::Conflict(code) if code == "mcp_server_exists" => EnforceError::conflict(
            "mcp_server_exists",
            "an MCP server of this workspace has that name",
        ),
        StoreError::Conflict(code) if code == "mcp_server_changed" => EnforceError::conflict(
            "mcp_server_changed",
            "the server was changed by someone else meanwhile; read it again and repeat the change",
        ),
        StoreError::Conflict(code) if code == "too_many_mcp_servers" => EnforceError::conflict(
            "too_many_mcp_servers",
            format!("a workspace has at most {MAX_SERVERS} MCP servers"),
        ),
        other => other.into(),
    }
}

/// The upstream's endpoint, checked as every endpoint a user registers is (and without a
/// query), and its host
/// resolved now against the egress rules (a name that does not resolve yet is let in: every
/// call checks again).
async fn checked_url(ctx: &Context, raw: &str) -> EnforceResult<String> {
    let url =
        egress::https_endpoint(raw.trim()).map_err(|why| EnforceError::invalid("url", why))?;
    // The URL is shown to every member and recorded in the audit trail: an upstream's
    // credential belongs in `auth`, never in a query.
    if url.query().is_some() {
        return Err(EnforceError::invalid(
            "url",
            "must not have a query (an upstream's credentials go in `auth`, from the vault)",
        ));
    }
    match ctx.egress.check_destination(url.as_str()).await {
        Err(EgressError::DestinationNotAllowed(_)) => Err(EnforceError::malformed(
            "destination_not_allowed",
            "`url`: its host is, or resolves to, an address that is not public (loopback, private, link-local or a cloud metadata service) and that the operator's allow-list does not open",
        )),
        _ => Ok(url.into()),
    }
}

/// The upstream authentication asked for: a live secret set of the workspace and a profile of
/// its current version that lets the gateway POST to `url` and whose injections the set holds.
async fn checked_auth(
    ctx: &Context,
    workspace_id: &str,
    auth: &api::McpServerAuthRequest,
    url: &str,
) -> EnforceResult<McpServerAuth> {
    let scene = Scene::load(ctx, workspace_id, &auth.secret_set_id).await?;
    let name = auth.profile.trim();
    let profile = scene.profile(name)?;
    let bad = |why: String| EnforceError::invalid("auth", format!("`{name}`: {why}"));
    let call = ProxyCall::from_json(&json!({ "method": "POST", "url": url }))
        .map_err(|e| bad(e.to_string()))?;
    egress::target(&profile, &call).map_err(|e| {
        bad(format!(
            "the profile does not let the gateway call the server's URL: {e}"
        ))
    })?;
    if let Some(missing) = profile
        .keys()
        .into_iter()
        .find(|k| !scene.version.keys.contains(k))
    {
        return Err(bad(format!(
            "the profile injects `{missing}`, which the secret set `{}` does not hold",
            scene.set.name
        )));
    }
    Ok(McpServerAuth {
        secret_set_id: scene.set.id,
        profile: name.to_owned(),
    })
}

/// Commits `op` with its audit event.
async fn commit(
    ctx: &Context,
    actor: &Actor,
    server: &McpServerRecord,
    (event_type, action): (&str, &str),
    details: Value,
    op: McpOp,
) -> EnforceResult<()> {
    let mut details = details;
    details["server_id"] = json!(server.id);
    details["name"] = json!(server.name);
    let event = audit::state_change(
        event_type,
        action,
        Some(&server.workspace_id),
        None,
        actor,
        details,
    );
    ctx.writer
        .commit(Change::new(op).audited(event))
        .await
        .map_err(refused)?;
    Ok(())
}

/// What a server's registration says, for its audit events (never a secret: the auth is a
/// reference to the vault).
fn settings(server: &McpServerRecord) -> Value {
    json!({
        "url": server.url,
        "auth": server.auth.as_ref().map(|a| json!({"secret_set_id": a.secret_set_id, "profile": a.profile})),
        "record_arguments": server.record_arguments,
    })
}

/// The servers as the API shows them, with who registered each (one lookup for all).
async fn views(
    ctx: &Context,
    workspace_id: &str,
    servers: Vec<McpServerRecord>,
) -> EnforceResult<Vec<api::McpServer>> {
    let names = ActorNames::lookup(
        ctx.store.as_ref(),
        workspace_id,
        servers.iter().map(|s| s.created_by.as_str()),
    )
    .await?;
    Ok(servers
        .into_iter()
        .map(|s| api::McpServer {
            endpoint: format!("{}/mcp/{}", ctx.public_url.trim_end_matches('/'), s.name),
            created_by_name: names.get(&s.created_by),
            server_id: s.id,
            name: s.name,
            url: s.url,
            auth: s.auth.map(|a| api::McpServerAuth {
                secret_set_id: a.secret_set_id,
                profile: a.profile,
            }),
            record_arguments: s.record_arguments,
            created_at: iso(s.created_at),
            created_by: s.created_by,
            updated_at: iso(s.updated_at),
        })
        .collect())
}

async fn view(ctx: &Context, server: McpServerRecord) -> EnforceResult<api::McpServer> {
    let workspace_id = server.workspace_id.clone();
    views(ctx, &workspace_id, vec![server])
        .await?
        .pop()
        .ok_or_else(|| EnforceError::internal("the server went missing"))
}

pub async fn list(ctx: &Context, workspace_id: &str) -> EnforceResult<Vec<api::McpServer>> {
    let servers = ctx.store.mcp_servers(workspace_id).await?;
    views(ctx, workspace_id, servers).await
}

pub async fn get(ctx: &Context, workspace_id: &str, server: &str) -> EnforceResult<api::McpServer> {
    view(ctx, find(ctx, workspace_id, server).await?).await
}

/// Registers a server (owners and admins).
pub async fn create(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::CreateMcpServerRequest,
) -> EnforceResult<api::McpServer> {
    let name = ServerName::parse(req.name.trim())?;
    let url = checked_url(ctx, &req.url).await?;
    let auth = match &req.auth {
        Some(auth) => Some(checked_auth(ctx, workspace_id, auth, &url).await?),
        None => None,
    };
    let now = now_ms();
    let server = McpServerRecord {
        id: ids::new_id(ids::MCP_SERVER),
        workspace_id: workspace_id.to_owned(),
        name: name.into_string(),
        url,
        auth,
        record_arguments: req.record_arguments.unwrap_or(false),
        created_at: now,
        created_by: actor.label(),
        updated_at: now,
    };
    let op = McpOp::CreateServer {
        server: server.clone(),
        max: MAX_SERVERS,
    };
    let details = settings(&server);
    commit(
        ctx,
        actor,
        &server,
        ("mcp.server.created", "create_mcp_server"),
        details,
        op,
    )
    .await?;
    view(ctx, server).await
}

/// Changes a server's name, URL, upstream authentication or argument recording (owners and
/// admins); an absent field stays. A new URL is checked against the authentication it will
/// have (the one sent, else the one it has).
pub async fn update(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    server: &str,
    req: api::UpdateMcpServerRequest,
) -> EnforceResult<api::McpServer> {
    let before = find(ctx, workspace_id, server).await?;
    let mut after = before.clone();
    if let Some(name) = &req.name {
        after.name = ServerName::parse(name.trim())?.into_string();
    }
    if let Some(url) = &req.url {
        after.url = checked_url(ctx, url).await?;
    }
    match &req.auth {
        Some(Some(auth)) => {
            after.auth = Some(checked_auth(ctx, workspace_id, auth, &after.url).await?)
        }
        Some(None) => after.auth = None,
        // The authentication kept must still cover a URL that moved.
        None if after.url != before.url => {
            if let Some(auth) = &before.auth {
                let kept = api::McpServerAuthRequest {
                    secret_set_id: json!(auth.secret_set_id),
                    profile: auth.profile.clone(),
                };
                let checked = checked_auth(ctx, workspace_id, &kept, &after.url).await;
                after.auth = Some(checked.map_err(|why| {
                    EnforceError::invalid(
                        "auth",
                        format!(
                            "the server's authentication does not hold for the new URL ({why}); send a new `auth` with the URL, or `null` to remove it"
                        ),
                    )
                })?);
            }
        }
        None => {}
    }
    if let Some(record) = req.record_arguments {
        after.record_arguments = record;
    }
    // Written only if nobody changed the server since it was read here.
    after.updated_at = now_ms().max(before.updated_at + 1);
    let details = json!({ "before": settings(&before), "after": settings(&after), "previous_name": before.name });
    let op = McpOp::UpdateServer {
        // Sessions with the upstream as it was end: another URL or credentials is another
        // upstream, which must not be sent the old one's session.
        end_sessions: after.url != before.url || after.auth != before.auth,
        server: after.clone(),
        read_at: before.updated_at,
    };
    commit(
        ctx,
        actor,
        &after,
        ("mcp.server.updated", "update_mcp_server"),
        details,
        op,
    )
    .await?;
    view(ctx, after).await
}

/// Removes a server (owners and admins): its path answers `unknown_mcp_server` from now on.
pub async fn delete(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    server: &str,
) -> EnforceResult<()> {
    let found = find(ctx, workspace_id, server).await?;
    let op = McpOp::DeleteServer {
        workspace_id: workspace_id.to_owned(),
        server_id: found.id.clone(),
        at: now_ms(),
    };
    let details = settings(&found);
    commit(
        ctx,
        actor,
        &found,
        ("mcp.server.deleted", "delete_mcp_server"),
        details,
        op,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_a_server_by_id_or_name_only() {
        let id = ids::new_id(ids::MCP_SERVER);
        assert_eq!(server_ref(&id).unwrap(), ServerRef::Id(&id));
        assert_eq!(server_ref("github").unwrap(), ServerRef::Name("github"));
        for nothing in ["GitHub", "mcp_123", "", "a/b"] {
            let err = server_ref(nothing).unwrap_err();
            assert!(
                matches!(&err, EnforceError::Refused(r) if r.code == "unknown_mcp_server"),
                "{nothing}: {err:?}"
            );
        }
    }
}

/// A tool call as the console lists it (from its `mcp.tool.called` event).
#[derive(Debug, Clone, PartialEq)]
pub struct RecentCall {
    pub at: String,
    pub agent_id: String,
    pub server: String,
    pub tool: String,
    /// `allow`, `deny` or `challenge`.
    pub outcome: String,
    /// Upstream latency in ms, for forwarded calls.
    pub latency_ms: Option<f64>,
    /// The upstream result's `isError`, or what went wrong reaching it.
    pub result: String,
    pub trace_id: String,
}

/// How many tool calls the console lists.
pub const RECENT_CALLS: i64 = 50;

/// The workspace's latest tool calls through the gateway, newest first.
pub async fn recent_calls(ctx: &Context, workspace_id: &str) -> EnforceResult<Vec<RecentCall>> {
    let events = ctx
        .store
        .audit_events(&crate::store::AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_type: Some("mcp.tool.called".into()),
            limit: RECENT_CALLS,
            ..Default::default()
        })
        .await?;
    Ok(events
        .into_iter()
        .map(|e| {
            let d = e.details.value();
            let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let result = match (d.get("is_error").and_then(Value::as_bool), d.get("error")) {
                (_, Some(Value::String(error))) => error.clone(),
                (Some(true), _) => "error result".into(),
                (Some(false), _) => "ok".into(),
                _ => String::new(),
            };
            RecentCall {
                at: iso(e.created_at),
                agent_id: e.agent_id.unwrap_or_default(),
                server: text("server"),
                tool: text("tool"),
                outcome: text("outcome"),
                latency_ms: d.get("upstream_latency_ms").and_then(Value::as_f64),
                result,
                trace_id: e.trace_id.unwrap_or_default(),
            }
        })
        .collect())
}
