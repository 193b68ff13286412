//! A real MCP server for the gateway's tests, its example and its benchmark: built with the
//! official Rust SDK (`rmcp`, Streamable HTTP with sessions), served over TLS on loopback by
//! [`crate::upstream`]'s server at `/mcp`. With a token, every request must carry
//! `Authorization: Bearer <token>` (401 otherwise), so a call that reaches a tool proves the
//! gateway injected it.
//!
//! Tools: `list_issues {repo}`, `delete_repo {repo}`, `transfer {amount, to}` (a text echoing
//! them), `whoami` (the bearer token it was called with, raw and in base64: what a leaky
//! upstream does), `fail` (a result marked `isError`), `slow {ms}` (sleeps first), `ask_later`
//! (answers at once, then asks the client for consent by URL elicitation outside any request,
//! on the session's own stream, and tells what it heard as an update of resource
//! `repo://consent/<action>?token=<the token it was called with>`). Resources:
//! `repo://{name}` read back. Prompts: `triage`.

#![allow(
    dead_code,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "shared by the tests, an example and a benchmark; they stop at the first failure"
)]

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::Router;
use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListToolsResult,
    PaginatedRequestParams, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceContents, ResourceUpdatedNotificationParam,
    Role, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use crate::upstream::UpstreamServer;

#[derive(Clone, Default)]
pub struct Tools {
    /// Speaks only the revisions with a handshake (`initialize`), as servers built before the
    /// sessionless revision do.
    handshake_only: bool,
}

fn schema(properties: Value) -> Arc<Map<String, Value>> {
    let Value::Object(object) = json!({"type": "object", "properties": properties}) else {
        unreachable!("a literal object")
    };
    Arc::new(object)
}

/// The bearer token the request was called with ("" without one).
fn bearer(context: &RequestContext<RoleServer>) -> String {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim_start_matches("Bearer ")
        .to_owned()
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

impl ServerHandler for Tools {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.handshake_only {
            std::borrow::Cow::Owned(vec![
                ProtocolVersion::V_2025_06_18,
                ProtocolVersion::V_2025_11_25,
            ])
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let repo = json!({"repo": {"type": "string"}});
        Ok(ListToolsResult {
            tools: vec![
                Tool::new(
                    "list_issues",
                    "The repository's open issues",
                    schema(repo.clone()),
                ),
                Tool::new("delete_repo", "Deletes a repository", schema(repo)),
                Tool::new(
                    "transfer",
                    "Moves money",
                    schema(json!({"amount": {"type": "number"}, "to": {"type": "string"}})),
                ),
                Tool::new(
                    "whoami",
                    "The token this server was called with",
                    schema(json!({})),
                ),
                Tool::new("fail", "Always fails", schema(json!({}))),
                Tool::new(
                    "slow",
                    "Sleeps first",
                    schema(json!({"ms": {"type": "integer"}})),
                ),
                Tool::new(
                    "ask_later",
                    "Asks the client for consent, later",
                    schema(json!({})),
                ),
            ],
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let arg = |name: &str| args.get(name).cloned().unwrap_or(Value::Null);
        let result = match request.name.as_ref() {
            "list_issues" => text(format!("open issues of {}: #1, #2", arg("repo"))),
            "delete_repo" => text(format!("deleted {}", arg("repo"))),
            "transfer" => text(format!("moved {} to {}", arg("amount"), arg("to"))),
            "whoami" => {
                let token = bearer(&context);
                let b64 = base64::engine::general_purpose::STANDARD.encode(&token);
                text(format!("called with {token} ({b64})"))
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it failed")]),
            "ask_later" => {
                let peer = context.peer.clone();
                let token = bearer(&context);
                tokio::spawn(async move {
                    // After the call's answer: outside any request, on the session's stream.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let asked = ElicitRequestParams::UrlElicitationParams {
                        meta: None,
                        message: "consent, please".into(),
                        url: "https://consent.example/ask".into(),
                        elicitation_id: "consent-1".into(),
                    };
                    let heard = match peer.create_elicitation(asked).await {
                        Ok(answer) => format!("{:?}", answer.action).to_lowercase(),
                        Err(_) => "failed".into(),
                    };
                    let update = ResourceUpdatedNotificationParam::new(format!(
                        "repo://consent/{heard}?token={token}"
                    ));
                    let _ = peer.notify_resource_updated(update).await;
                });
                text("asking")
            }
            "slow" => {
                let ms = arg("ms").as_u64().unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ))
            }
        };
        Ok(result.into())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            format!("the contents of {}", request.uri),
            request.uri.clone(),
        )])
        .into())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("triage with {}", request.name),
        )])
        .into())
    }
}

/// The MCP server at `https://localhost:{port}/mcp`, requiring `token` when given.
pub async fn start(token: Option<&str>) -> UpstreamServer {
    start_with(token, false).await
}

/// The same server speaking only the revisions with a handshake.
#[allow(
    dead_code,
    reason = "the benchmark and the example include this module and start only the other"
)]
pub async fn start_handshake_only(token: Option<&str>) -> UpstreamServer {
    start_with(token, true).await
}

async fn start_with(token: Option<&str>, handshake_only: bool) -> UpstreamServer {
    let mut config = StreamableHttpServerConfig::default();
    config.allowed_hosts = vec!["localhost".into(), "127.0.0.1".into()];
    let service = StreamableHttpService::new(
        move || Ok(Tools { handshake_only }),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut router = Router::new().nest_service("/mcp", service);
    if let Some(token) = token {
        let expected = format!("Bearer {token}");
        router = router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let expected = expected.clone();
                async move {
                    let authorised = request
                        .headers()
                        .get("authorization")
                        .is_some_and(|v| v.as_bytes() == expected.as_bytes());
                    if authorised {
                        next.run(request).await
                    } else {
                        (StatusCode::UNAUTHORIZED, "no or the wrong token").into_response()
                    }
                }
            },
        ));
    }
    UpstreamServer::start_with(router).await
}
