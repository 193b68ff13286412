//! `/mcp/{name}`: the MCP gateway's agent side over Streamable HTTP (`POST` a message, `GET` the
//! session's stream, `DELETE` the session), and the protected resource's metadata (RFC 9728)
//! that a refusal's `WWW-Authenticate` points at.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{BoxStream, StreamExt as _};

use crate::api::ErrorBody;
use crate::context::SharedContext;
use crate::domain::mcp::ServerName;
use crate::enforce::EnforceError;
use crate::error::ApiError;
use crate::mcp::gateway::{self, Caller, Reply};

use super::extract::AppPath;
use super::headers::bearer_token;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// A refusal, with `WWW-Authenticate` when it is about the credential: where the resource's
/// metadata is (and, for a missing scope, which scope would do).
fn refusal(ctx: &SharedContext, name: &str, err: EnforceError) -> Response {
    let api: ApiError = err.into();
    // The name goes into the header only as a server name (no quote, no comma).
    let named = ServerName::parse(name).is_ok();
    let challenge = match api.code.as_ref() {
        _ if !named => None,
        "invalid_credential" => Some(format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}\"",
            metadata_url(ctx, name)
        )),
        "insufficient_scope" => Some(format!(
            "Bearer error=\"insufficient_scope\", scope=\"{} {}:{name}\", resource_metadata=\"{}\"",
            gateway::SCOPE,
            gateway::SCOPE,
            metadata_url(ctx, name)
        )),
        _ => None,
    };
    let mut response = api.into_response();
    if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn metadata_url(ctx: &SharedContext, name: &str) -> String {
    format!(
        "{}/.well-known/oauth-protected-resource/mcp/{name}",
        ctx.public_url
    )
}

/// The caller, or the refusal to answer.
async fn caller(ctx: &SharedContext, name: &str, headers: &HeaderMap) -> Result<Caller, Response> {
    let caller = gateway::authenticate(ctx, name, bearer_token(headers), session_header(headers))
        .await
        .map_err(|e| refusal(ctx, name, e))?;
    // A version the client names must be one the gateway speaks: a handshake's within a
    // session, the sessionless revision without one.
    if let Some(version) = headers.get(VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default();
        let spoken = if session_header(headers).is_some() {
            gateway::protocol_versions()
                .iter()
                .any(|v| v.as_str() == version)
        } else {
            gateway::speaks(version)
        };
        if !spoken {
            return Err(refusal(
                ctx,
                name,
                EnforceError::malformed(
                    "unsupported_protocol_version",
                    format!("the gateway does not speak MCP protocol version `{version}`"),
                ),
            ));
        }
    }
    Ok(caller)
}

/// Messages as server-sent events (`event: message`, the JSON-RPC message as its data), with a
/// comment now and then so that proxies keep an idle stream open.
fn events(messages: BoxStream<'static, serde_json::Value>) -> Response {
    let events = messages.map(|message| {
        Ok::<_, Infallible>(Event::default().event("message").data(message.to_string()))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn session_header(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

/// The sessionless revision's routing headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
fn routing(headers: &HeaderMap) -> Result<gateway::Routing, EnforceError> {
    let mut routing = gateway::Routing::default();
    for (name, value) in headers {
        if gateway::Routing::names(name.as_str()) {
            let value = value.to_str().map_err(|_| {
                EnforceError::malformed(
                    "invalid_mcp_message",
                    format!("the `{name}` header is not visible ASCII (send `=?base64?...?=`)"),
                )
            })?;
            routing.push(name.as_str(), value)?;
        }
    }
    Ok(routing)
}

fn version_header(headers: &HeaderMap) -> Option<&str> {
    headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok())
}

/// One JSON-RPC message from the agent to the server `name` (Streamable HTTP). Requests are
/// answered with one message (`application/json`) or a stream of them (`text/event-stream`,
/// ending with the response); notifications and responses with 202.
#[utoipa::path(post, path = "/mcp/{name}", tag = "mcp",
    params(("name" = String, Path, description = "The registered server's name")),
    request_body(content = serde_json::Value, description = "One JSON-RPC message", content_type = "application/json"),
    security(("agent_credential" = [])),
    responses(
        (status = 200, description = "The response (`application/json`), or server-sent events ending with it (`text/event-stream`); `initialize` answers `Mcp-Session-Id`. Without a session, `MCP-Protocol-Version: 2026-07-28` with `Mcp-Method` (and `Mcp-Name`) serves the sessionless revision (`server/discover` in place of `initialize`)"),
        (status = 202, description = "A notification or response, taken"),
        (status = 400, description = "`invalid_mcp_message`, `missing_mcp_session`, `unsupported_protocol_version`", body = ErrorBody),
        (status = 401, description = "`invalid_credential`, with `WWW-Authenticate` naming the resource metadata", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`, `destination_not_allowed`", body = ErrorBody),
        (status = 404, description = "`unknown_mcp_server`, `unknown_mcp_session`", body = ErrorBody),
        (status = 502, description = "`upstream_unavailable`", body = ErrorBody),
        (status = 504, description = "`upstream_timeout`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn post(
    State(ctx): State<SharedContext>,
    AppPath(name): AppPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match caller(&ctx, &name, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    // Sessionless when it names no session and the sessionless revision: only then are the
    // routing headers read (a session's messages are routed by its id).
    let era = match (session_header(&headers), version_header(&headers)) {
        (None, Some(v)) if v == gateway::SESSIONLESS.as_str() => match routing(&headers) {
            Ok(routing) => gateway::Era::Sessionless(routing),
            Err(err) => return refusal(&ctx, &name, err),
        },
        (session, _) => gateway::Era::Session(session),
    };
    let answer = match gateway::post(&ctx, caller, era, &body).await {
        Ok(answer) => answer,
        Err(err) => return refusal(&ctx, &name, err),
    };
    let mut response = match answer.reply {
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Message(message) => Json(message).into_response(),
        Reply::Stream(messages) => events(messages),
    };
    if let Some(id) = answer
        .session_id
        .and_then(|id| HeaderValue::from_str(&id).ok())
    {
        response.headers_mut().insert(SESSION_HEADER, id);
    }
    response
}

/// Ends the agent's session with server `name`, here and upstream.
#[utoipa::path(delete, path = "/mcp/{name}", tag = "mcp",
    params(("name" = String, Path, description = "The registered server's name")),
    security(("agent_credential" = [])),
    responses(
        (status = 204, description = "The session ended"),
        (status = 400, description = "`missing_mcp_session`", body = ErrorBody),
        (status = 401, description = "`invalid_credential`", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`", body = ErrorBody),
        (status = 404, description = "`unknown_mcp_server`, `unknown_mcp_session`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn delete(
    State(ctx): State<SharedContext>,
    AppPath(name): AppPath<String>,
    headers: HeaderMap,
) -> Response {
    let caller = match caller(&ctx, &name, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    match gateway::delete(&ctx, caller, session_header(&headers)).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => refusal(&ctx, &name, err),
    }
}

/// The session's stream of what the server sends outside any request's answer: the
/// upstream's own stream (its requests of the client, its notifications) and
/// `notifications/elicitation/complete` once a person decides a challenge this session was sent.
#[utoipa::path(get, path = "/mcp/{name}", tag = "mcp",
    params(("name" = String, Path, description = "The registered server's name")),
    security(("agent_credential" = [])),
    responses(
        (status = 200, description = "`text/event-stream`: one JSON-RPC message per event", content_type = "text/event-stream", body = String),
        (status = 400, description = "`missing_mcp_session`, `unsupported_protocol_version`", body = ErrorBody),
        (status = 401, description = "`invalid_credential`", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`", body = ErrorBody),
        (status = 404, description = "`unknown_mcp_server`, `unknown_mcp_session`", body = ErrorBody),
        (status = 429, description = "`too_many_streams`: the agent, or the server, holds the most live streams it may (`limit`, `retry_after`)", body = ErrorBody),
        (status = 502, description = "`upstream_unavailable`", body = ErrorBody),
        (status = 504, description = "`upstream_timeout`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    AppPath(name): AppPath<String>,
    headers: HeaderMap,
) -> Response {
    let caller = match caller(&ctx, &name, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    // Held by the stream for as long as it lasts, given back when it ends or its client leaves.
    let slot = match ctx.streams.acquire(format!("mcp:{}", caller.agent_id)) {
        Ok(slot) => slot,
        Err(full) => return ApiError::from(full).into_response(),
    };
    match gateway::listen(&ctx, caller, session_header(&headers), slot).await {
        Ok(messages) => events(messages),
        Err(err) => refusal(&ctx, &name, err),
    }
}

/// The protected-resource metadata (RFC 9728) of the gateway's path for server `name`: the
/// resource, the authorisation server (acp itself, which mints the credentials) and the scopes.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource/mcp/{name}", tag = "mcp",
    params(("name" = String, Path, description = "The registered server's name")),
    responses((status = 200, description = "`{resource, authorization_servers, bearer_methods_supported, scopes_supported, resource_name}`"),
        (status = 404, description = "`unknown_mcp_server` (the name is not a server name)", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn resource_metadata(
    State(ctx): State<SharedContext>,
    AppPath(name): AppPath<String>,
) -> Response {
    match gateway::resource_metadata(&ctx, &name) {
        Ok(document) => (
            [(header::CACHE_CONTROL, "public, max-age=300")],
            Json(document),
        )
            .into_response(),
        Err(err) => ApiError::from(err).into_response(),
    }
}
