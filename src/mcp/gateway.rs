//! `/mcp/{name}`: the gateway an agent reaches a registered MCP server through. To the agent
//! it is an MCP server (Streamable HTTP), to the upstream an MCP client: every `tools/call`,
//! `resources/read` and `prompts/get` is decided as a check of the calling agent before
//! anything reaches the upstream; the upstream's credentials are filled in from the vault on
//! every request and scrubbed from everything that comes back.
//!
//! Messages are read and relayed as JSON, and only the parts the gateway acts on are read
//! through the official SDK's model (`rmcp::model`: the handshake's parameters, a tool call's
//! parameters, the results the gateway makes itself). A proxy must pass on methods, fields and
//! revisions it does not model unchanged, which re-serialising every message through typed
//! structures would not do (unknown fields dropped, defaults added); the SDK's own transports
//! and service loop own the connection and answer messages themselves, which a relay cannot
//! let them do.

use std::sync::Arc;
use std::time::Instant;

use futures::stream::{BoxStream, StreamExt as _};
use futures::FutureExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, InitializeRequestParams, MetaObject,
    ProtocolVersion, ResultType,
};
use serde_json::{json, Map, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::{Context, SharedContext};
use crate::domain::ids::PolicyId;
use crate::domain::mcp::ServerName;
use crate::domain::RiskTier;
use crate::enforce::credentials::standing_under;
use crate::enforce::{EnforceError, EnforceResult};
use crate::net::egress::{
    self, EgressError, Injected, Leak, Opened, Outbound, ProxyCall, Scrubber,
};
use crate::policy::cache::{LoadedPolicy, View};
use crate::policy::check::{check_for_agent, AgentCheck, Effect};
use crate::secret::{random_base62, sha256_hex};
use crate::store::{
    AuditRecord, Change, McpOp, McpServerRecord, McpSessionRecord, Op, ServerRef, StoreError,
};
use crate::time::now_ms;
use crate::vault::agent::Scene;

/// The handshake revisions the gateway speaks (both with `initialize` and sessions).
pub fn protocol_versions() -> [ProtocolVersion; 2] {
    [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25]
}

/// The revision the gateway serves without a session: each request names its version in
/// `MCP-Protocol-Version` and in its `_meta`, with the client's capabilities, and
/// `server/discover` takes the handshake's place. Such requests go upstream the same way.
pub const SESSIONLESS: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// Whether the gateway speaks protocol version `version`: a handshake's or the sessionless one.
pub fn speaks(version: &str) -> bool {
    version == SESSIONLESS.as_str() || protocol_versions().iter().any(|v| v.as_str() == version)
}

/// How a message comes: within a session (the `Mcp-Session-Id` it names; none before the
/// handshake), or without one in the sessionless revision, with its routing headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era<'a> {
    Session(Option<&'a str>),
    Sessionless(Routing),
}

/// The sessionless revision's routing headers of one message, as the agent sent them
/// (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`; names in lower case), so that boxes on the way
/// route without reading the body. The gateway checks the method's and the name's against the
/// body it decides on, and passes them all on to the upstream, which checks each
/// `Mcp-Param-*` against its own tools' annotations (which the gateway does not hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routing(Vec<(String, String)>);

impl Routing {
    /// The most routing headers one message carries.
    const MAX: usize = 64;

    /// Whether a header of this name (lower case) is a routing header.
    pub fn names(header: &str) -> bool {
        header == "mcp-method" || header == "mcp-name" || header.starts_with("mcp-param-")
    }

    /// Adds a header; each may come once.
    pub fn push(&mut self, name: &str, value: &str) -> EnforceResult<()> {
        if self.0.iter().any(|(n, _)| n == name) {
            return Err(malformed(format!(
                "the `{name}` header is sent more than once"
            )));
        }
        if self.0.len() == Self::MAX {
            return Err(malformed(format!(
                "at most {} `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` headers",
                Self::MAX
            )));
        }
        self.0.push((name.to_owned(), value.to_owned()));
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The headers' method and name are the body's: what goes on to the upstream is those two
    /// (the name only where the method has one) and, on a `tools/call`, the `Mcp-Param-*`.
    fn checked(self, message: &Value) -> EnforceResult<Routing> {
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return Err(malformed(format!(
                "a response without a session: the revision {SESSIONLESS} has no requests of the server's to answer"
            )));
        };
        if method.starts_with("tasks/") || message.pointer("/params/requestState").is_some() {
            // The upstream tells agents apart by their sessions only; without one, a task or
            // a request's state would be any agent's.
            return Err(malformed(format!(
                "`{method}` carries upstream state (a task or `requestState`), which the gateway relays only within a session"
            )));
        }
        self.check(method, message)?;
        let key = name_key(method);
        Ok(Routing(
            self.0
                .into_iter()
                .filter(|(name, _)| match name.as_str() {
                    "mcp-method" => true,
                    "mcp-name" => key.is_some(),
                    _ => method == "tools/call",
                })
                .collect(),
        ))
    }

    fn check(&self, method: &str, message: &Value) -> EnforceResult<()> {
        match self.get("mcp-method") {
            None => {
                return Err(malformed(format!(
                    "`{method}` without the `Mcp-Method` header the revision {SESSIONLESS} asks for"
                )))
            }
            Some(header) if header != method => {
                return Err(malformed(format!(
                    "the `Mcp-Method` header `{header}` is not the body's method `{method}`"
                )))
            }
            Some(_) => {}
        }
        let Some(key) = name_key(method) else {
            return Ok(());
        };
        let Some(expected) = message
            .pointer(&format!("/params/{key}"))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        match self.get("mcp-name").map(header_text) {
            None => Err(malformed(format!(
                "`{method}` without the `Mcp-Name` header the revision {SESSIONLESS} asks for"
            ))),
            Some(Some(name)) if name == expected => Ok(()),
            Some(_) => Err(malformed(format!(
                "the `Mcp-Name` header is not the body's `{key}`"
            ))),
        }
    }
}

/// The parameter a method's `Mcp-Name` repeats, if it has one.
fn name_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// A routing header's text: as sent, or the UTF-8 inside `=?base64?...?=` (how a value with
/// characters a header cannot carry is sent). By hand: the SDK keeps its own reader private.
fn header_text(value: &str) -> Option<String> {
    use base64::Engine as _;
    match value
        .strip_prefix("=?base64?")
        .and_then(|inner| inner.strip_suffix("?="))
    {
        Some(inner) => base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// How long a session lives, however it is used.
pub const SESSION_TTL_MS: i64 = 24 * 60 * 60 * 1000;
/// The most open sessions an agent keeps: opening one more ends its oldest.
pub const MAX_SESSIONS_PER_AGENT: i64 = 64;
/// JSON-RPC: URL elicitation required (the 2025-11-25 revision).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
/// The scope every credential that reaches any of the workspace's servers holds.
pub const SCOPE: &str = "mcp";

/// The authenticated caller of `/mcp/{name}`: an agent, by a credential minted for it.
pub struct Caller {
    pub workspace_id: String,
    pub agent_id: String,
    pub credential_id: String,
    pub server: McpServerRecord,
    view: View,
    /// The credential's hash: a listening stream checks it again as it lasts.
    credential_hash: String,
    /// The current version of the server's secret set, read with the credential (the
    /// upstream's credentials kept for it need no read of their own).
    set_version: Option<i64>,
    /// The hash of the session id the request named, and that session as read with the
    /// credential (anyone's, open or ended, or none: [`session_of`] judges it).
    session: Option<(String, Option<McpSessionRecord>)>,
}

/// The refusal of a caller who presented no usable credential.
pub fn invalid_credential(why: &str) -> EnforceError {
    EnforceError::unauthenticated(
        "invalid_credential",
        format!("{why}: present `Authorization: Bearer <credential>`, a credential minted for the agent with the scope `mcp` or `mcp:<server>`"),
    )
}

fn unknown_server(name: &str) -> EnforceError {
    EnforceError::not_found(
        "unknown_mcp_server",
        format!("this workspace has no MCP server named `{name}`"),
    )
}

/// The resource a credential for server `name` is for (RFC 8707): its audience, when set,
/// must be this URL or the service's own.
pub fn resource_url(ctx: &Context, name: &str) -> String {
    format!("{}/mcp/{name}", ctx.public_url)
}

/// The protected-resource metadata (RFC 9728) of server `name`'s gateway path.
pub fn resource_metadata(ctx: &Context, name: &str) -> EnforceResult<Value> {
    let name = ServerName::parse(name).map_err(|_| unknown_server(name))?;
    Ok(json!({
        "resource": resource_url(ctx, name.as_str()),
        "authorization_servers": [ctx.public_url],
        "bearer_methods_supported": ["header"],
        "scopes_supported": [SCOPE, format!("{SCOPE}:{}", name.as_str())],
        "resource_name": format!("acp MCP gateway: {}", name.as_str()),
    }))
}

/// Who calls: the bearer credential's agent, still standing (not revoked, by itself or the kill
/// switch; not expired; its agent neither suspended nor revoked), with the scope `mcp` or
/// `mcp:<name>`, for server `name` of its workspace. The credential, the kill switch, the server
/// and the session named by `session_id` are read in one statement: a message waits on one
/// round trip for them.
pub async fn authenticate(
    ctx: &Context,
    name: &str,
    bearer: Option<&str>,
    session_id: Option<&str>,
) -> EnforceResult<Caller> {
    let token = bearer
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid_credential("no credential"))?;
    let credential_hash = sha256_hex(token.as_bytes());
    // A name that is no server name is looked up as one no server has.
    let parsed = ServerName::parse(name).ok();
    let server_name = parsed.as_ref().map_or("", ServerName::as_str);
    let session_hash = session_id
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|id| sha256_hex(id.as_bytes()));
    let gate = ctx
        .store
        .mcp_gate(&credential_hash, server_name, session_hash.as_deref())
        .await?
        .ok_or_else(|| invalid_credential("unknown credential"))?;
    let credential = gate.credential;
    let view = ctx
        .caches
        .view(ctx.store.as_ref(), &credential.workspace_id)
        .await?;
    if let Some(reason) = standing_under(ctx, &view, &gate.kill_switch, &credential).await? {
        return Err(invalid_credential(&format!(
            "the credential is {}",
            reason.replace('_', " ")
        )));
    }
    if credential.one_time {
        return Err(invalid_credential(
            "a one-time credential cannot hold an MCP session",
        ));
    }
    let server = gate.server.ok_or_else(|| unknown_server(name))?;
    if let Some(audience) = credential.audience.as_deref() {
        if audience != resource_url(ctx, &server.name) && audience != ctx.public_url {
            return Err(invalid_credential(
                "the credential was minted for another audience",
            ));
        }
    }
    let scoped = format!("{SCOPE}:{}", server.name);
    if !credential.scopes.iter().any(|s| s == SCOPE || *s == scoped) {
        return Err(EnforceError::forbidden(
            "insufficient_scope",
            format!("the credential's scopes include neither `{SCOPE}` nor `{scoped}`"),
        ));
    }
    Ok(Caller {
        workspace_id: credential.workspace_id,
        agent_id: credential.agent_id,
        credential_id: credential.id,
        server,
        view,
        credential_hash,
        set_version: gate.auth_set_version,
        session: session_hash.map(|hash| (hash, gate.session)),
    })
}

/// What the gateway answers a message with.
pub enum Reply {
    /// A notification or a response, taken (202).
    Accepted,
    /// One JSON-RPC message (`application/json`).
    Message(Value),
    /// Server-sent events, each one JSON-RPC message (`text/event-stream`).
    Stream(BoxStream<'static, Value>),
}

/// The reply, and the session a handshake opened (its id, for `Mcp-Session-Id`).
pub struct Answer {
    pub reply: Reply,
    pub session_id: Option<String>,
}

fn malformed(why: impl Into<String>) -> EnforceError {
    EnforceError::malformed("invalid_mcp_message", why.into())
}

/// A session id the agent presents: its own open session on this server, or 404.
async fn session_of(ctx: &Context, caller: &Caller, id: Option<&str>) -> EnforceResult<Session> {
    let id = id.map(str::trim).filter(|s| !s.is_empty()).ok_or_else(|| {
        EnforceError::malformed(
            "missing_mcp_session",
            "this request needs the `Mcp-Session-Id` the handshake answered; start with `initialize`",
        )
    })?;
    let unknown = || {
        EnforceError::not_found(
            "unknown_mcp_session",
            "no such open session of this agent on this server; start again with `initialize`",
        )
    };
    let id_hash = sha256_hex(id.as_bytes());
    // Read with the credential, unless the caller was authenticated for another id.
    let record = match &caller.session {
        Some((hash, read)) if *hash == id_hash => read.clone(),
        _ => ctx.store.mcp_session(&id_hash).await?,
    };
    let record = record
        .filter(|s| {
            s.agent_id == caller.agent_id
                && s.server_id == caller.server.id
                && s.ended_at.is_none()
                && s.expires_at > now_ms()
        })
        .ok_or_else(unknown)?;
    Session::of(ctx, record)
}

fn sealed_context(id_hash: &str) -> String {
    format!("mcp-session:{id_hash}")
}

struct Session {
    record: McpSessionRecord,
    /// The upstream's session id, opened.
    upstream: Option<String>,
}

impl Session {
    /// The session of this record, its upstream session id opened.
    fn of(ctx: &Context, record: McpSessionRecord) -> EnforceResult<Session> {
        let upstream = match &record.upstream_session {
            Some(sealed) => Some(
                String::from_utf8(
                    ctx.master_key
                        .open(sealed, &sealed_context(&record.id_hash))
                        .map_err(EnforceError::Internal)?,
                )
                .map_err(|e| EnforceError::Internal(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Session { record, upstream })
    }
}

/// A JSON-RPC message as the gateway tells them apart.
enum Message<'a> {
    Request { id: &'a Value, method: &'a str },
    Notification,
    Response,
}

fn classify(message: &Value) -> EnforceResult<Message<'_>> {
    let object = message
        .as_object()
        .ok_or_else(|| malformed("a JSON-RPC message is one JSON object (batches are not part of the protocol's revisions the gateway speaks)"))?;
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(malformed("`jsonrpc` must be \"2.0\""));
    }
    match (object.get("method"), object.get("id")) {
        (Some(Value::String(method)), Some(id)) if id.is_string() || id.is_i64() || id.is_u64() => {
            Ok(Message::Request { id, method })
        }
        (Some(Value::String(method)), None) if method.starts_with("notifications/") => {
            Ok(Message::Notification)
        }
        (Some(Value::String(method)), None) => Err(malformed(format!(
            "`{method}` without an `id`: only `notifications/...` methods are sent as notifications"
        ))),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            Ok(Message::Response)
        }
        _ => Err(malformed(
            "not a JSON-RPC request, notification or response",
        )),
    }
}

/// `POST /mcp/{name}`: one message from the agent.
pub async fn post(
    ctx: &SharedContext,
    caller: Caller,
    era: Era<'_>,
    body: &[u8],
) -> EnforceResult<Answer> {
    let message: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not JSON: {e}")))?;
    let kind = classify(&message)?;
    if let Message::Request {
        method: "initialize",
        id,
    } = kind
    {
        let id = id.clone();
        return initialize(ctx, caller, id, &message).await;
    }
    let (link, session) = match era {
        Era::Session(id) => {
            let session = session_of(ctx, &caller, id).await?;
            (
                Upstream::of(ctx, &caller.server, caller.set_version, &session).await?,
                Some(session),
            )
        }
        Era::Sessionless(routing) => {
            let routing = routing.checked(&message)?;
            (Upstream::sessionless(ctx, &caller, routing).await?, None)
        }
    };
    let (id, method) = match kind {
        Message::Request { id, method } => (id.clone(), method.to_owned()),
        Message::Notification | Message::Response => {
            let mut opened = within(deadline(ctx), link.send(ctx, "POST", Some(&message))).await?;
            if let Some(session) = session.as_ref().filter(|s| lost(&opened, s)) {
                return Err(session_lost(ctx, &caller, session).await);
            }
            if !(200..300).contains(&opened.status) {
                let _ = opened.body().await;
                return Err(upstream_refused(opened.status));
            }
            return Ok(Answer {
                reply: Reply::Accepted,
                session_id: None,
            });
        }
    };
    let judged = match method.as_str() {
        "tools/call" => Some(Judged::tool_call(&caller, &message)?),
        "resources/read" => Some(Judged::resource_read(&caller, &message)?),
        "prompts/get" => Some(Judged::prompt_get(&caller, &message)?),
        _ => None,
    };
    let mut after = After::default();
    after.sessionless = session.is_none().then_some(match method.as_str() {
        "server/discover" => Sessionless::Discover,
        m if cacheable(m) => Sessionless::Cacheable,
        _ => Sessionless::Other,
    });
    if method == "tools/list" {
        after.tools = Some(Reachable::load(ctx, &caller).await?);
    }
    if let Some(judged) = judged {
        let mut decision = judged.decide(ctx, &caller).await?;
        if decision.decision == "allow" && !decision.warnings.is_empty() {
            // An argument the policy reads as a number sent otherwise (`"amount": "5000"`)
            // was read as absent; the tool may well read it as the number. The agent writes
            // these arguments itself, so such a call is refused rather than forwarded.
            decision.decision = "deny".into();
            decision.reason_codes = vec!["argument_type_mismatch".into()];
            decision.reasons = decision
                .warnings
                .iter()
                .map(|w| w.message.clone())
                .collect();
        }
        match decision.decision.as_str() {
            "allow" => {
                after.decided = Some(Box::new(Outcome {
                    ctx: ctx.clone(),
                    judged,
                    decision,
                    caller: CallerFacts::of(&caller),
                    started: Instant::now(),
                }));
            }
            _ => {
                // The sessionless revision has no elicitation the server starts (a challenge is
                // the error result with the status link there).
                let url_elicitation = session.as_ref().is_some_and(|s| s.record.url_elicitation);
                let refusal = judged.refusal(&decision, url_elicitation, session.is_none());
                judged.record(ctx, &CallerFacts::of(&caller), &decision, None);
                return Ok(Answer {
                    reply: Reply::Message(reply_to(&id, refusal)),
                    session_id: None,
                });
            }
        }
    }
    let until = deadline(ctx);
    let opened = within(until, link.send(ctx, "POST", Some(&message))).await;
    let opened = match opened {
        Ok(opened) => opened,
        Err(err) => {
            after.failed(&err);
            return Err(err);
        }
    };
    if let Some(session) = session.as_ref().filter(|s| lost(&opened, s)) {
        let err = session_lost(ctx, &caller, session).await;
        after.failed(&err);
        return Err(err);
    }
    if session.is_none() && !(200..300).contains(&opened.status) && !answered_json(&opened) {
        // An upstream of the handshake's revisions only refuses a request without a session
        // (in plain text); a JSON-RPC error of the revision's own is relayed as an answer.
        let mut opened = opened;
        let _ = opened.body().await;
        if method == "server/discover" {
            // A JSON-RPC error to the probe is what tells the agent's client to fall back to
            // `initialize` (and a session).
            return Ok(Answer {
                reply: Reply::Message(reply_to(
                    &id,
                    Err(json!({
                        "code": -32601,
                        "message": format!(
                            "the upstream MCP server does not speak the sessionless revision {SESSIONLESS} (it answered HTTP {}); start with `initialize`",
                            opened.status
                        ),
                    })),
                )),
                session_id: None,
            });
        }
        let err = EnforceError::Upstream {
            code: "upstream_unavailable",
            message: format!(
                "the upstream MCP server answered HTTP {} to a request of the sessionless revision {SESSIONLESS}; if it speaks only the handshake revisions, start with `initialize`",
                opened.status
            ),
            timeout: false,
        };
        after.failed(&err);
        return Err(err);
    }
    let witness = Witness::of(ctx, &caller, &method, after.decided.as_deref());
    relay(link.answering(opened, witness), id, after, until).await
}

/// The longest the gateway waits for the upstream's answer (or, for a stream, its start)
/// before it answers 504: the egress timeout, but at most 25 seconds, so that the 504 comes
/// before the server's 30-second request timeout. A stream, once begun, is bounded per event
/// by the egress timeout.
fn deadline(ctx: &Context) -> tokio::time::Instant {
    let wait = ctx.config.vault_proxy_timeout_secs.clamp(1, 25);
    tokio::time::Instant::now() + std::time::Duration::from_secs(wait)
}

/// `work`, unless `until` comes first: then `upstream_timeout`.
async fn within<T>(
    until: tokio::time::Instant,
    work: impl std::future::Future<Output = EnforceResult<T>>,
) -> EnforceResult<T> {
    match tokio::time::timeout_at(until, work).await {
        Ok(done) => done,
        Err(_) => Err(upstream_error(EgressError::Timeout)),
    }
}

/// Whether the upstream no longer knows the session (404 to a request that carried its id).
fn lost(opened: &Opened, session: &Session) -> bool {
    opened.status == 404 && session.upstream.is_some()
}

/// The upstream ended its session: so does the gateway, and the agent is told to start again
/// (404, as the transport has a server say it).
async fn session_lost(ctx: &Context, caller: &Caller, session: &Session) -> EnforceError {
    let reason = "upstream_session_ended";
    let op = McpOp::EndSession {
        id_hash: session.record.id_hash.clone(),
        agent_id: caller.agent_id.clone(),
        at: now_ms(),
        reason,
    };
    let event = audit::state_change(
        "mcp.session.ended",
        "mcp_upstream_session_ended",
        Some(&caller.workspace_id),
        Some(&caller.agent_id),
        &Actor::Agent(caller.agent_id.clone()),
        json!({"server": caller.server.name, "server_id": caller.server.id, "reason": reason}),
    );
    if let Err(err) = ctx.writer.commit(Change::new(op).audited(event)).await {
        tracing::warn!(error = %err, "an MCP session the upstream ended was not marked ended");
    }
    EnforceError::not_found(
        "unknown_mcp_session",
        "the upstream ended this session; start again with `initialize`",
    )
}

/// The JSON-RPC answer to request `id`: a result, or an error (`Err`).
fn reply_to(id: &Value, answer: Result<Value, Value>) -> Value {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

fn upstream_refused(status: u16) -> EnforceError {
    EnforceError::Upstream {
        code: "upstream_unavailable",
        message: format!("the upstream MCP server answered HTTP {status}"),
        timeout: false,
    }
}

/// An egress failure, as the agent is told it.
fn upstream_error(err: EgressError) -> EnforceError {
    let message = err.to_string();
    match err {
        EgressError::Timeout => EnforceError::Upstream {
            code: "upstream_timeout",
            message,
            timeout: true,
        },
        EgressError::DestinationNotAllowed(_) => {
            EnforceError::forbidden("destination_not_allowed", message)
        }
        _ => EnforceError::Upstream {
            code: "upstream_unavailable",
            message,
            timeout: false,
        },
    }
}

/// The handshake: forwarded to the upstream, and on its answer a session of the agent's own
/// is opened (the upstream's session id sealed in it).
async fn initialize(
    ctx: &SharedContext,
    caller: Caller,
    id: Value,
    message: &Value,
) -> EnforceResult<Answer> {
    let params: InitializeRequestParams =
        serde_json::from_value(message.get("params").cloned().unwrap_or(Value::Null))
            .map_err(|e| malformed(format!("`initialize` parameters: {e}")))?;
    let url_elicitation = params
        .capabilities
        .elicitation
        .as_ref()
        .is_some_and(|e| e.url.is_some());
    let link = Upstream::open(ctx, &caller.server, caller.set_version).await?;
    let until = deadline(ctx);
    let mut opened = within(until, link.send(ctx, "POST", Some(message))).await?;
    if !(200..300).contains(&opened.status) {
        let _ = opened.body().await;
        return Err(upstream_refused(opened.status));
    }
    let upstream_session = opened.header("mcp-session-id").map(str::to_owned);
    let witness = Witness::of(ctx, &caller, "initialize", None);
    let mut answering = link.answering(opened, witness);
    let answer = within(until, answering.response(&id)).await?;
    let Some(result) = answer.get("result") else {
        // The upstream refused the handshake: its error goes to the agent, no session opens.
        return Ok(Answer {
            reply: Reply::Message(answer),
            session_id: None,
        });
    };
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !protocol_versions().iter().any(|v| v.as_str() == version) {
        let supported: Vec<String> = protocol_versions().iter().map(|v| v.to_string()).collect();
        return Ok(Answer {
            reply: Reply::Message(reply_to(
                &id,
                Err(json!({
                    "code": -32602,
                    "message": format!("the gateway does not speak protocol version `{version}`"),
                    "data": {"supported": supported, "requested": params.protocol_version},
                })),
            )),
            session_id: None,
        });
    }
    let session_id = format!("mcps_{}", random_base62(40));
    let id_hash = sha256_hex(session_id.as_bytes());
    let sealed = upstream_session
        .map(|s| ctx.master_key.seal(s.as_bytes(), &sealed_context(&id_hash)))
        .transpose()
        .map_err(EnforceError::Internal)?;
    let now = now_ms();
    let record = McpSessionRecord {
        id_hash,
        workspace_id: caller.workspace_id.clone(),
        server_id: caller.server.id.clone(),
        agent_id: caller.agent_id.clone(),
        credential_id: caller.credential_id.clone(),
        protocol_version: version.clone(),
        url_elicitation,
        upstream_session: sealed,
        created_at: now,
        expires_at: now + SESSION_TTL_MS,
        ended_at: None,
        ended_reason: None,
    };
    let event = audit::state_change(
        "mcp.session.opened",
        "mcp_initialize",
        Some(&caller.workspace_id),
        Some(&caller.agent_id),
        &Actor::Agent(caller.agent_id.clone()),
        json!({
            "server": caller.server.name, "server_id": caller.server.id,
            "cred_id": caller.credential_id, "protocol_version": version,
            "url_elicitation": url_elicitation,
        }),
    );
    let change = Change::new(McpOp::OpenSession {
        session: record,
        max: MAX_SESSIONS_PER_AGENT,
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        Err(StoreError::AgentNotActive) => {
            return Err(invalid_credential(
                "the credential or its agent was cut off meanwhile",
            ))
        }
        Err(err) => return Err(err.into()),
    }
    Ok(Answer {
        reply: Reply::Message(answer),
        session_id: Some(session_id),
    })
}

/// `DELETE /mcp/{name}`: the agent ends its session, here and upstream.
pub async fn delete(
    ctx: &SharedContext,
    caller: Caller,
    session_id: Option<&str>,
) -> EnforceResult<()> {
    let session = session_of(ctx, &caller, session_id).await?;
    let op = McpOp::EndSession {
        id_hash: session.record.id_hash.clone(),
        agent_id: caller.agent_id.clone(),
        at: now_ms(),
        reason: "ended_by_agent",
    };
    let event = audit::state_change(
        "mcp.session.ended",
        "mcp_delete_session",
        Some(&caller.workspace_id),
        Some(&caller.agent_id),
        &Actor::Agent(caller.agent_id.clone()),
        json!({"server": caller.server.name, "server_id": caller.server.id, "reason": "ended_by_agent"}),
    );
    ctx.writer.commit(Change::new(op).audited(event)).await?;
    // The upstream's session ends too, when it has one; what it answers changes nothing here.
    if session.upstream.is_some() {
        let ended = async {
            let link = Upstream::of(ctx, &caller.server, caller.set_version, &session).await?;
            link.send(ctx, "DELETE", None).await
        };
        if let Err(err) = ended.await {
            tracing::info!(server = %caller.server.name, error = %err, "the upstream MCP session was not ended");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Upstream sessions of sessions acp ended

/// How often each replica looks for sessions acp ended whose upstream session is still open.
pub const CLOSE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// The most closed upstream in one round, and at once.
const CLOSE_BATCH: i64 = 64;
const CLOSE_AT_ONCE: usize = 8;

/// Ends upstream, as the agent's own `DELETE` would, the upstream sessions of the sessions acp
/// ended for its own reasons (the agent suspended or revoked, the kill switch's revoke-all, a
/// newer session in its place), whichever replica ended them; runs until the task is stopped.
/// The store holds what is still to close, so sessions a replica ended while none was running
/// this are closed by the next round of any replica. Each is sent at most once: a replica that
/// stops between its claim and the `DELETE` leaves that one to the upstream's own expiry.
pub async fn close_ended_sessions(ctx: SharedContext) {
    let mut ticks = tokio::time::interval(CLOSE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = close_ended_round(&ctx).await {
            tracing::warn!(error = %err, "ended MCP sessions could not be read for closing upstream");
        }
    }
}

/// One round of [`close_ended_sessions`]: the number of upstream sessions it ended.
pub async fn close_ended_round(ctx: &SharedContext) -> EnforceResult<usize> {
    let due = ctx.store.mcp_sessions_to_close(CLOSE_BATCH).await?;
    let closed = futures::stream::iter(due)
        .map(|record| close_upstream(ctx, record))
        .buffer_unordered(CLOSE_AT_ONCE)
        .filter(|closed| std::future::ready(*closed))
        .count()
        .await;
    Ok(closed)
}

/// Claims the session (another replica may have), then sends its upstream a `DELETE` once:
/// what the upstream answers, or that it could not be reached, changes nothing here (its own
/// sessions expire by its own rules). `true` when this replica sent it.
async fn close_upstream(ctx: &SharedContext, record: McpSessionRecord) -> bool {
    let claim = McpOp::ClaimUpstreamClose {
        id_hash: record.id_hash.clone(),
        at: now_ms(),
    };
    match ctx.writer.commit(Change::new(claim)).await {
        Ok(_) => {}
        Err(StoreError::NotFound) => return false,
        Err(err) => {
            tracing::warn!(error = %err, "an ended MCP session could not be claimed for closing upstream");
            return false;
        }
    }
    let sent = async {
        let server = ctx
            .store
            .mcp_server(&record.workspace_id, ServerRef::Id(&record.server_id))
            .await?
            .ok_or_else(|| unknown_server(&record.server_id))?;
        // Changed since the session ended: its URL or credentials may no longer be those that
        // reached the upstream session.
        if record
            .ended_at
            .is_none_or(|ended| server.updated_at > ended)
        {
            return Err(EnforceError::Internal(
                "the server changed after the session ended".into(),
            ));
        }
        let session = Session::of(ctx, record)?;
        let link = Upstream::of(ctx, &server, None, &session).await?;
        let mut opened = within(deadline(ctx), link.send(ctx, "DELETE", None)).await?;
        let _ = opened.body().await;
        EnforceResult::Ok((server.name, opened.status))
    };
    match sent.await {
        Ok((server, status)) => {
            tracing::debug!(%server, status, "an upstream MCP session of an ended session was ended");
        }
        Err(err) => {
            tracing::info!(error = %err, "the upstream MCP session of an ended session was not ended");
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------
// The listening stream (`GET`)

/// How often a listening stream reads its session and credential (still standing?) and, for a
/// client that takes URL elicitations, its challenges (decided?). The stream reads the store,
/// not this process's memory, so that a decision or a revocation on any replica reaches it.
const LISTEN_POLL: std::time::Duration = std::time::Duration::from_secs(2);
/// The longest a listening stream waits for the upstream's next bytes: servers keep an idle
/// stream up with a comment every 15 seconds or so.
const LISTEN_IDLE: std::time::Duration = std::time::Duration::from_secs(60);
/// The longest a listening stream lasts; the client opens another.
pub const LISTEN_MAX: std::time::Duration = std::time::Duration::from_secs(60 * 60);
/// Challenges decided this long before a stream opened are announced on it too: the client
/// that reconnects after a person decided still hears of it.
const LISTEN_LOOKBACK_MS: i64 = 60_000;

/// `GET /mcp/{name}`: the session's stream of what the server sends outside any request's
/// answer: the upstream's own stream relayed (its requests of the client, its notifications;
/// scrubbed like every answer), and `notifications/elicitation/complete` for each challenge
/// this session was sent as a URL elicitation once a person decides it. It ends when the
/// session or the credential ends, when the upstream ends its stream, after [`LISTEN_MAX`], or
/// when the server shuts down. `slot` is the stream's place among the server's live streams,
/// held for as long as it lasts.
pub async fn listen(
    ctx: &SharedContext,
    caller: Caller,
    session_id: Option<&str>,
    slot: crate::context::StreamSlot,
) -> EnforceResult<BoxStream<'static, Value>> {
    let session = session_of(ctx, &caller, session_id).await?;
    let opened_at = now_ms();
    let upstream = upstream_stream(ctx, &caller, &session).await?;
    let state = Listening {
        ctx: ctx.clone(),
        prefix: format!("mcp.{}.", caller.server.name),
        caller,
        session: session.record,
        upstream,
        since: opened_at - LISTEN_LOOKBACK_MS,
        announced: std::collections::HashSet::new(),
        queue: std::collections::VecDeque::new(),
        ticks: tokio::time::interval(LISTEN_POLL),
        until: tokio::time::Instant::now() + LISTEN_MAX,
        closing: ctx.closing.subscribe(),
        _slot: slot,
    };
    Ok(futures::stream::unfold(state, |mut state| async move {
        let next = state.next().await?;
        Some((next, state))
    })
    .boxed())
}

/// The upstream's own stream of the session, when it offers one: `None` when it answers 405
/// (the transport lets a server offer none) or the server's profile does not let the gateway
/// `GET` its URL.
async fn upstream_stream(
    ctx: &SharedContext,
    caller: &Caller,
    session: &Session,
) -> EnforceResult<Option<Answering>> {
    let link = Upstream::of(ctx, &caller.server, caller.set_version, session).await?;
    let out = match link.render("GET", None) {
        Ok(out) => out,
        Err(err) => {
            tracing::debug!(server = %caller.server.name, error = %err, "no upstream stream: the profile does not allow GET");
            return Ok(None);
        }
    };
    let opened = within(deadline(ctx), dispatch(ctx, &out)).await?;
    if lost(&opened, session) {
        return Err(session_lost(ctx, caller, session).await);
    }
    let witness = Witness::of(ctx, caller, "stream", None);
    let mut answering = link.answering(opened.idle_for(LISTEN_IDLE), witness);
    match answering.opened.status {
        405 => Ok(None),
        200..=299 if answering.is_stream() => Ok(Some(answering)),
        status => {
            let _ = answering.opened.body().await;
            Err(upstream_refused(status))
        }
    }
}

struct Listening {
    ctx: SharedContext,
    caller: Caller,
    session: McpSessionRecord,
    /// The actions of this server's calls (`mcp.<server>.`).
    prefix: String,
    upstream: Option<Answering>,
    /// Challenges decided since then are announced.
    since: i64,
    announced: std::collections::HashSet<String>,
    queue: std::collections::VecDeque<Value>,
    ticks: tokio::time::Interval,
    until: tokio::time::Instant,
    closing: tokio::sync::watch::Receiver<bool>,
    _slot: crate::context::StreamSlot,
}

impl Listening {
    /// The stream's next message; `None` when it ends.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(message) = self.queue.pop_front() {
                return Some(message);
            }
            // A stream opened while the server began shutting down ends at once.
            if *self.closing.borrow() {
                return None;
            }
            let upstream = async {
                match self.upstream.as_mut() {
                    Some(answering) => answering.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.closing.changed() => return None,
                _ = tokio::time::sleep_until(self.until) => return None,
                next = upstream => match next {
                    Ok(Some(message)) => self.queue.push_back(message),
                    Ok(None) => return None,
                    Err(err) => {
                        tracing::info!(server = %self.caller.server.name, error = %err, "the upstream's MCP stream ended");
                        return None;
                    }
                },
                _ = self.ticks.tick() => {
                    match self.look().await {
                        Ok(true) => {}
                        Ok(false) => return None,
                        Err(err) => {
                            tracing::warn!(error = %err, "an MCP stream could not read its session; ending it");
                            return None;
                        }
                    }
                }
            }
        }
    }

    /// Reads the session and the credential (`false`: the stream is over) and queues the
    /// completions of challenges decided since the last look.
    async fn look(&mut self) -> EnforceResult<bool> {
        let ctx = &self.ctx;
        // The session, the credential and the kill switch in one read.
        let gate = ctx
            .store
            .mcp_gate(
                &self.caller.credential_hash,
                &self.caller.server.name,
                Some(&self.session.id_hash),
            )
            .await?;
        let Some(gate) = gate else {
            return Ok(false);
        };
        let open = gate
            .session
            .is_some_and(|s| s.ended_at.is_none() && s.expires_at > now_ms());
        let standing = standing_under(ctx, &self.caller.view, &gate.kill_switch, &gate.credential)
            .await?
            .is_none();
        if !open || !standing {
            return Ok(false);
        }
        if !self.session.url_elicitation {
            return Ok(true);
        }
        let decided = ctx
            .store
            .policy_challenges(&crate::store::ChallengeQuery {
                workspace_id: self.caller.workspace_id.clone(),
                agent_id: Some(self.caller.agent_id.clone()),
                decided: true,
                now: now_ms(),
                limit: 50,
                ..Default::default()
            })
            .await?;
        for challenge in decided {
            let fresh = challenge.created_at >= self.session.created_at
                && challenge.decided_at.is_some_and(|at| at >= self.since)
                && challenge.action.starts_with(&self.prefix);
            if fresh && self.announced.insert(challenge.id.clone()) {
                self.queue.push_back(json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/elicitation/complete",
                    "params": {"elicitationId": challenge.id},
                }));
            }
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// The upstream

/// The server's upstream credentials: its secret set's version opened now or kept from a
/// message of the last half minute (see [`egress::InjectedCache`]). `known`: the set's current
/// version, read with the caller (then nothing more is read while it is kept); without it, the
/// set is read now.
async fn material(
    ctx: &Context,
    server: &McpServerRecord,
    auth: &crate::store::McpServerAuth,
    known: Option<i64>,
) -> EnforceResult<Arc<Injected>> {
    if let Some(version) = known {
        let key = (auth.secret_set_id.clone(), version, auth.profile.clone());
        if let Some(kept) = ctx.mcp_materials.get(&key) {
            return Ok(kept);
        }
    }
    let set_ref = crate::vault::sets::set_ref(&json!(auth.secret_set_id))?;
    let set = crate::vault::sets::live_set(ctx, &server.workspace_id, &set_ref).await?;
    let key = (set.id.clone(), set.current_version, auth.profile.clone());
    if let Some(kept) = ctx.mcp_materials.get(&key) {
        return Ok(kept);
    }
    let scene = Scene::of_set(ctx, &server.workspace_id, set).await?;
    let profile = scene.profile(&auth.profile)?;
    let keys = profile.keys();
    let secrets: std::collections::BTreeMap<String, String> =
        crate::vault::sets::open_entries(ctx, &scene.set, &scene.version)?
            .into_iter()
            .filter(|(k, _)| keys.contains(k))
            .collect();
    // The scrubber knows every secret the calls inject.
    let material = Arc::new(Injected {
        scrubber: Arc::new(Scrubber::of(&secrets)),
        profile,
        secrets,
    });
    ctx.mcp_materials.insert(key, material.clone());
    Ok(material)
}

/// Where and how the upstream is called for one message: its URL, the profile that fills in
/// its credentials (with the secrets they need), its session and protocol version.
struct Upstream {
    server: McpServerRecord,
    auth: Option<Arc<Injected>>,
    session: Option<String>,
    version: Option<String>,
    /// The sessionless revision's routing headers, passed on.
    routing: Routing,
    scrubber: Arc<Scrubber>,
}

impl Upstream {
    /// For the handshake: no session yet. `known`: the current version of the server's secret
    /// set, when it was read with the caller.
    async fn open(
        ctx: &Context,
        server: &McpServerRecord,
        known: Option<i64>,
    ) -> EnforceResult<Upstream> {
        let auth = match &server.auth {
            None => None,
            Some(auth) => Some(material(ctx, server, auth, known).await?),
        };
        let scrubber = auth
            .as_ref()
            .map(|m| m.scrubber.clone())
            .unwrap_or_default();
        Ok(Upstream {
            server: server.clone(),
            auth,
            session: None,
            version: None,
            routing: Routing::default(),
            scrubber,
        })
    }

    /// In the sessionless revision: the version named on every request, no session.
    async fn sessionless(
        ctx: &Context,
        caller: &Caller,
        routing: Routing,
    ) -> EnforceResult<Upstream> {
        let mut link = Upstream::open(ctx, &caller.server, caller.set_version).await?;
        link.version = Some(SESSIONLESS.to_string());
        link.routing = routing;
        Ok(link)
    }

    /// Within a session.
    async fn of(
        ctx: &Context,
        server: &McpServerRecord,
        known: Option<i64>,
        session: &Session,
    ) -> EnforceResult<Upstream> {
        let mut link = Upstream::open(ctx, server, known).await?;
        link.session = session.upstream.clone();
        link.version = Some(session.record.protocol_version.clone());
        Ok(link)
    }

    fn headers(&self, method: &str) -> Vec<(String, String)> {
        // A `GET` opens a stream and carries no body; every other call may be answered either way.
        let mut headers = if method == "GET" {
            vec![("Accept".to_owned(), "text/event-stream".to_owned())]
        } else {
            vec![
                ("Content-Type".to_owned(), "application/json".to_owned()),
                (
                    "Accept".to_owned(),
                    "application/json, text/event-stream".to_owned(),
                ),
            ]
        };
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id".into(), session.clone()));
        }
        if let Some(version) = &self.version {
            headers.push(("MCP-Protocol-Version".into(), version.clone()));
        }
        headers.extend(self.routing.0.iter().cloned());
        headers
    }

    fn render(&self, method: &str, body: Option<Vec<u8>>) -> EnforceResult<Outbound> {
        let headers = self.headers(method);
        match &self.auth {
            None => {
                Outbound::https(method, &self.server.url, headers, body).map_err(upstream_error)
            }
            Some(material) => {
                let (profile, secrets) = (&material.profile, &material.secrets);
                let call = ProxyCall {
                    method: method.to_owned(),
                    url: self.server.url.clone(),
                    headers,
                    body,
                };
                let target =
                    egress::target(profile, &call).map_err(|e| EnforceError::Upstream {
                        code: "upstream_unavailable",
                        message: format!(
                            "the server's profile does not let the gateway make this call: {e}"
                        ),
                        timeout: false,
                    })?;
                egress::render(profile, &call, &target, secrets).map_err(upstream_error)
            }
        }
    }

    async fn send(
        &self,
        ctx: &Context,
        method: &str,
        message: Option<&Value>,
    ) -> EnforceResult<Opened> {
        let body = message
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| EnforceError::Internal(e.to_string()))?;
        dispatch(ctx, &self.render(method, body)?).await
    }

    /// The upstream's answer, to be read message by message and scrubbed of this server's
    /// credentials; what is found is reported to `witness`.
    fn answering(&self, opened: Opened, witness: Witness) -> Answering {
        Answering {
            opened,
            scrubber: self.scrubber.clone(),
            parser: EventParser::default(),
            leaks: Vec::new(),
            witness,
        }
    }
}

/// Who hears of the secrets scrubbed from an upstream's answer: an `mcp.leak_scrubbed` event
/// (each key, where and in which form it came back; never the value), committed before the
/// message that held it goes on to the agent, as the vault proxy's leaks are: the upstream
/// echoed a credential, which the trail must hold whatever happens next.
struct Witness {
    ctx: SharedContext,
    caller: CallerFacts,
    /// The agent's request the answer is to (`tools/call`, `initialize`, ...), or `stream`
    /// for the session's stream.
    method: String,
    /// The decided call's action and trace id, when the answer is to one.
    action: Option<String>,
    trace_id: Option<String>,
    profile: Option<String>,
    host: String,
}

impl Witness {
    fn of(ctx: &SharedContext, caller: &Caller, method: &str, decided: Option<&Outcome>) -> Self {
        Witness {
            ctx: ctx.clone(),
            caller: CallerFacts::of(caller),
            method: method.to_owned(),
            action: decided.map(|o| o.judged.action.clone()),
            trace_id: decided.map(|o| o.decision.trace_id.clone()),
            profile: caller.server.auth.as_ref().map(|a| a.profile.clone()),
            host: reqwest::Url::parse(&caller.server.url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
        }
    }

    async fn report(&self, leaks: &[Leak]) -> EnforceResult<()> {
        let caller = &self.caller;
        let details = json!({
            "server": caller.server, "server_id": caller.server_id,
            "profile": self.profile, "host": self.host, "method": self.method,
            "leaks": leaks
                .iter()
                .map(|l| json!({"key": l.key, "place": l.place, "form": l.form}))
                .collect::<Vec<_>>(),
        });
        let mut event = audit::state_change(
            "mcp.leak_scrubbed",
            self.action.as_deref().unwrap_or(&self.method),
            Some(&caller.workspace_id),
            Some(&caller.agent_id),
            &Actor::Agent(caller.agent_id.clone()),
            details,
        );
        event.trace_id = self.trace_id.clone();
        self.ctx
            .writer
            .commit(Change::default().audited(event))
            .await?;
        Ok(())
    }
}

/// A rendered call, to the addresses of its host checked now.
async fn dispatch(ctx: &Context, out: &Outbound) -> EnforceResult<Opened> {
    let destination = ctx
        .egress
        .destination_of(out)
        .await
        .map_err(upstream_error)?;
    ctx.egress
        .open(out, &destination)
        .await
        .map_err(upstream_error)
}

/// The upstream's answer to one message, read message by message: a JSON body, or the events
/// of a stream; each message scrubbed (see [`Answering::read`]) and its leaks reported before
/// it is passed on.
struct Answering {
    opened: Opened,
    scrubber: Arc<Scrubber>,
    parser: EventParser,
    /// Found in the message being read, not reported yet.
    leaks: Vec<Leak>,
    witness: Witness,
}

impl Answering {
    fn is_stream(&self) -> bool {
        self.opened.header("content-type").is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
    }

    /// The response to request `id`: the JSON body, or the stream's message that answers it
    /// (whatever the stream carries before it is not relayed: the handshake's stream holds
    /// nothing the agent waits for).
    async fn response(&mut self, id: &Value) -> EnforceResult<Value> {
        if self.is_stream() {
            while let Some(message) = self.next().await? {
                if answers(&message, id) {
                    return Ok(message);
                }
            }
            return Err(no_answer());
        }
        let body = self.opened.body().await.map_err(upstream_error)?;
        let not_mcp = |why: String| EnforceError::Upstream {
            code: "upstream_unavailable",
            message: why,
            timeout: false,
        };
        let message = self
            .read(&body, "message")
            .await?
            .map_err(|e| not_mcp(format!("the upstream's answer is not JSON: {e}")))?;
        if answers(&message, id) {
            Ok(message)
        } else {
            Err(not_mcp(
                "the upstream's answer is not the response to the request".into(),
            ))
        }
    }

    /// The stream's next message to relay for request `id`: responses to other requests are
    /// not passed on. `None` at the stream's end.
    async fn next_for(&mut self, id: &Value) -> EnforceResult<Option<Value>> {
        loop {
            match self.next().await? {
                Some(m) if m.get("method").is_none() && !answers(&m, id) => continue,
                other => return Ok(other),
            }
        }
    }

    /// The stream's next message (`None` at its end).
    async fn next(&mut self) -> EnforceResult<Option<Value>> {
        loop {
            if let Some(data) = self.parser.next_data() {
                match self.read(data.as_bytes(), "event").await? {
                    Ok(message) => return Ok(Some(message)),
                    // An event that is not a message (a priming event, say) is not relayed.
                    Err(_) => continue,
                }
            }
            match self.opened.chunk().await.map_err(upstream_error)? {
                Some(chunk) => self.parser.feed(chunk),
                None => return Ok(None),
            }
        }
    }
}

/// The upstream's stream ended before the response.
fn no_answer() -> EnforceError {
    EnforceError::Upstream {
        code: "upstream_unavailable",
        message: "the upstream's stream ended without answering".into(),
        timeout: false,
    }
}

/// Whether `message` is the response to request `id` (a result or an error, no method).
fn answers(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id)
        && message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

impl Answering {
    /// A message scrubbed as it came, read, and scrubbed again as it will be sent (reading
    /// undoes the JSON escapes of its strings, which may have hidden a secret's other
    /// spellings); whatever was found reported before the message is returned. The outer
    /// error is the report's; the inner one says the message is not JSON.
    async fn read(
        &mut self,
        bytes: &[u8],
        place: &str,
    ) -> EnforceResult<Result<Value, serde_json::Error>> {
        let scrubbed = self.scrubber.scrub(bytes, place, &mut self.leaks);
        let message = serde_json::from_slice::<Value>(scrubbed.as_deref().unwrap_or(bytes))
            .and_then(|message| {
                match self
                    .scrubber
                    .scrub(message.to_string().as_bytes(), place, &mut self.leaks)
                {
                    Some(again) => serde_json::from_slice(&again),
                    None => Ok(message),
                }
            });
        if !self.leaks.is_empty() {
            let leaks = std::mem::take(&mut self.leaks);
            self.witness.report(&leaks).await?;
        }
        Ok(message)
    }
}

/// The events of a byte stream, fed as the bytes arrive: cut at each blank line here (a cut is
/// looked for only in what is new, so a large event in small pieces costs its length), and each
/// event read on its own by the SDK's own event parser (`sse-stream`), so that one malformed
/// event is dropped without the ones around it.
#[derive(Default)]
struct EventParser {
    pending: std::collections::VecDeque<String>,
    /// The start of an event not complete yet.
    buffer: Vec<u8>,
}

impl EventParser {
    fn feed(&mut self, chunk: Vec<u8>) {
        // A blank line may have begun in the last three bytes already held.
        let mut i = self.buffer.len().saturating_sub(3);
        self.buffer.extend_from_slice(&chunk);
        let mut start = 0;
        while i < self.buffer.len() {
            match event_end(&self.buffer[i..]) {
                Some(len) => {
                    let end = i + len;
                    if let Some(data) = event_data(&self.buffer[start..end]) {
                        self.pending.push_back(data);
                    }
                    start = end;
                    i = end;
                }
                None => i += 1,
            }
        }
        self.buffer.drain(..start);
    }

    fn next_data(&mut self) -> Option<String> {
        self.pending.pop_front()
    }
}

/// The length of the line end and blank line that `rest` starts with, if it does: `\r\n\r\n`,
/// `\n\r\n`, `\n\n` or `\r\r` (the event stream's line ends are CRLF, LF or CR).
fn event_end(rest: &[u8]) -> Option<usize> {
    [&b"\r\n\r\n"[..], b"\n\r\n", b"\n\n", b"\r\r"]
        .into_iter()
        .find(|end| rest.starts_with(end))
        .map(<[u8]>::len)
}

/// The data of one complete event (`None` for one without data, or that does not parse).
fn event_data(event: &[u8]) -> Option<String> {
    let stream = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(
        event,
    ))]);
    let mut events = sse_stream::SseStream::from_bytes_stream(stream);
    // The bytes are in memory: the event is ready at once.
    match events.next().now_or_never() {
        Some(Some(Ok(event))) => event.data,
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions

/// A request the gateway decides: the check's action and context, and what the audit event
/// says of it.
struct Judged {
    /// `tools/call`, `resources/read` or `prompts/get`.
    method: &'static str,
    action: String,
    context: Map<String, Value>,
    /// The tool, resource or prompt, and the name its event gives it (`tool`, `uri`, `prompt`).
    target: String,
    target_key: &'static str,
    /// `mcp.tool.called`, `mcp.resource.read` or `mcp.prompt.got`.
    event_type: &'static str,
    /// Argument names and JSON types (values only when the server records them); tool calls
    /// only.
    arguments: Option<Value>,
}

impl Judged {
    fn params(message: &Value) -> Value {
        message.get("params").cloned().unwrap_or(Value::Null)
    }

    fn tool_call(caller: &Caller, message: &Value) -> EnforceResult<Judged> {
        let params: CallToolRequestParams = serde_json::from_value(Self::params(message))
            .map_err(|e| malformed(format!("`tools/call` parameters: {e}")))?;
        let tool = params.name.to_string();
        let arguments = params.arguments.unwrap_or_default();
        let mut context = Map::new();
        flatten(&mut context, "", &arguments, 0)?;
        context.insert("mcp_server".into(), json!(caller.server.name));
        context.insert("mcp_tool".into(), json!(tool));
        context.insert(
            "mcp_arguments_sha256".into(),
            json!(arguments_digest(&arguments)),
        );
        let described: Map<String, Value> = arguments
            .iter()
            .map(|(name, value)| {
                let kind = json!(json_type(value));
                let described = if caller.server.record_arguments {
                    json!({"type": kind, "value": value})
                } else {
                    json!({"type": kind})
                };
                (name.clone(), described)
            })
            .collect();
        Ok(Judged {
            method: "tools/call",
            action: format!("mcp.{}.{tool}", caller.server.name),
            context,
            target: tool,
            target_key: "tool",
            event_type: "mcp.tool.called",
            arguments: Some(Value::Object(described)),
        })
    }

    fn resource_read(caller: &Caller, message: &Value) -> EnforceResult<Judged> {
        Self::named(
            caller,
            message,
            "resources/read",
            ("uri", "uri"),
            "mcp.resource.read",
        )
    }

    fn prompt_get(caller: &Caller, message: &Value) -> EnforceResult<Judged> {
        Self::named(
            caller,
            message,
            "prompts/get",
            ("name", "prompt"),
            "mcp.prompt.got",
        )
    }

    /// A request of `method` for what its parameter `param` names, decided as
    /// `mcp.<server>.<method with a dot>` with it in the context under `key`.
    fn named(
        caller: &Caller,
        message: &Value,
        method: &'static str,
        (param, key): (&'static str, &'static str),
        event_type: &'static str,
    ) -> EnforceResult<Judged> {
        let target = Self::params(message)
            .get(param)
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("`{method}` needs `params.{param}`")))?
            .to_owned();
        let mut context = Map::new();
        context.insert(key.into(), json!(target));
        context.insert("mcp_server".into(), json!(caller.server.name));
        Ok(Judged {
            method,
            action: format!("mcp.{}.{}", caller.server.name, method.replace('/', ".")),
            context,
            target,
            target_key: key,
            event_type,
            arguments: None,
        })
    }

    /// The check, made as the agent's own (no nonce: the credential authenticates each
    /// request); an allow uses up a person's approval of the same request.
    async fn decide(&self, ctx: &Context, caller: &Caller) -> EnforceResult<api::DecisionResponse> {
        let effect = Effect {
            op: Op::Nothing,
            audit: Vec::new(),
        };
        Ok(check_for_agent(
            ctx,
            caller.view.clone(),
            None,
            &Actor::Agent(caller.agent_id.clone()),
            api::CheckRequest {
                agent_id: caller.agent_id.clone(),
                action: self.action.clone(),
                context: Some(Value::Object(self.context.clone())),
                email: None,
                policy_id: None,
            },
            AgentCheck::Act(&effect),
        )
        .await?)
    }

    /// The answer to a denied or challenged request: for a tool call, a result marked
    /// `isError` (or, to a client that takes URL elicitations, the challenge as one); for the
    /// other methods a JSON-RPC error.
    fn refusal(
        &self,
        decision: &api::DecisionResponse,
        url_elicitation: bool,
        sessionless: bool,
    ) -> Result<Value, Value> {
        let decision_json = serde_json::to_value(decision).unwrap_or(Value::Null);
        let link = decision.challenge.as_ref().map(|c| c.url.clone());
        let text = match (decision.decision.as_str(), &link) {
            ("challenge", Some(url)) => format!(
                "acp holds `{}` for a person's approval ({}); follow {url}, then make the same call again",
                self.action,
                decision.reason_codes.join(", "),
            ),
            _ => format!(
                "acp denied `{}`: {}",
                self.action,
                if decision.reason_codes.is_empty() {
                    "denied".to_owned()
                } else {
                    decision.reason_codes.join(", ")
                }
            ),
        };
        if decision.decision == "challenge" && url_elicitation {
            if let (Some(url), Some(id)) = (&link, &decision.challenge_id) {
                return Err(json!({
                    "code": URL_ELICITATION_REQUIRED,
                    "message": "This request needs a person's approval.",
                    "data": {"elicitations": [{
                        "mode": "url", "elicitationId": id, "url": url, "message": text,
                    }], "acp/decision": decision_json},
                }));
            }
        }
        if self.method != "tools/call" {
            return Err(json!({
                "code": -32603,
                "message": text,
                "data": {"acp/decision": decision_json},
            }));
        }
        let mut meta = Map::new();
        meta.insert("acp/decision".into(), decision_json);
        if let Some(url) = link {
            meta.insert("acp/approval_status_url".into(), json!(url));
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        // The result type belongs to the sessionless revision; the handshake's have none.
        result.result_type = sessionless.then_some(ResultType::COMPLETE);
        result.meta = Some(MetaObject(meta));
        Ok(serde_json::to_value(result).unwrap_or(Value::Null))
    }

    /// Records the call (`mcp.tool.called`, `mcp.resource.read` or `mcp.prompt.got`) beside
    /// the answer, committed with the writer's next batch: the decision itself was committed
    /// before anything was forwarded.
    fn record(
        &self,
        ctx: &Context,
        caller: &CallerFacts,
        decision: &api::DecisionResponse,
        upstream: Option<(f64, Option<bool>, Option<&str>)>,
    ) {
        let mut details = json!({
            "server": caller.server, "server_id": caller.server_id,
            "outcome": decision.decision,
        });
        details[self.target_key] = json!(self.target);
        if let Some(arguments) = &self.arguments {
            details["arguments"] = arguments.clone();
        }
        if let Some((latency_ms, is_error, error)) = upstream {
            details["upstream_latency_ms"] = json!((latency_ms * 1000.0).round() / 1000.0);
            if let Some(is_error) = is_error {
                details["is_error"] = json!(is_error);
            }
            if let Some(error) = error {
                details["error"] = json!(error);
            }
        }
        if let Some(id) = &decision.challenge_id {
            details["challenge_id"] = json!(id);
        }
        let mut event: AuditRecord = audit::state_change(
            self.event_type,
            &self.action,
            Some(&caller.workspace_id),
            Some(&caller.agent_id),
            &Actor::Agent(caller.agent_id.clone()),
            details,
        );
        event.trace_id = Some(decision.trace_id.clone());
        event.decision = Some(decision.decision.clone());
        let writer = ctx.writer.clone();
        crate::observe::mcp_call(
            &caller.server,
            &self.target,
            self.method,
            &decision.decision,
        );
        ctx.background.spawn(async move {
            if let Err(e) = writer.commit_lazily(Change::default().audited(event)).await {
                tracing::error!(error = %e, "an MCP call's event was not recorded");
            }
        });
    }
}

/// What the call's event names of its caller, kept past the request.
struct CallerFacts {
    workspace_id: String,
    agent_id: String,
    server: String,
    server_id: String,
}

impl CallerFacts {
    fn of(caller: &Caller) -> Self {
        CallerFacts {
            workspace_id: caller.workspace_id.clone(),
            agent_id: caller.agent_id.clone(),
            server: caller.server.name.clone(),
            server_id: caller.server.id.clone(),
        }
    }
}

/// The JSON type of a value, as the audit trail names it.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// How deep nested arguments are read into the context.
const MAX_DEPTH: usize = 4;

/// A tool call's arguments as a check's context reads them: top-level scalars under their own
/// names, nested objects' fields under dotted names, arrays of strings as lists; other arrays
/// and nulls are left out (the policy language compares none of them).
/// Two arguments that would read as one field (`{"a": {"b": 1}, "a.b": 2}`) are refused: the
/// policy would see one of them and the tool both.
fn flatten(
    context: &mut Map<String, Value>,
    prefix: &str,
    object: &Map<String, Value>,
    depth: usize,
) -> EnforceResult<()> {
    for (name, value) in object {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let kept = match value {
            Value::Bool(_) | Value::Number(_) | Value::String(_) => Some(value.clone()),
            Value::Array(items) if items.iter().all(Value::is_string) => Some(value.clone()),
            Value::Object(inner) if depth < MAX_DEPTH => {
                flatten(context, &key, inner, depth + 1)?;
                None
            }
            _ => None,
        };
        if let Some(value) = kept {
            if context.insert(key.clone(), value).is_some() {
                return Err(malformed(format!(
                    "the arguments name the field `{key}` twice (once nested, once with a dot in its name)"
                )));
            }
        }
    }
    Ok(())
}

/// SHA-256 of the arguments' canonical JSON (keys sorted): in the context, so that a person's
/// approval of a call is the approval of exactly those arguments, whatever the policy reads of
/// them.
fn arguments_digest(arguments: &Map<String, Value>) -> String {
    let canonical = acp_engine::spec::sort_keys(Value::Object(arguments.clone()));
    sha256_hex(canonical.to_string().as_bytes())
}

// ---------------------------------------------------------------------------------------------
// Relaying the upstream's answer

/// What is done with the upstream's answer to the agent's request: passed on as it is
/// (scrubbed); after an allowed decision, stamped with its trace id and recorded; a tool list,
/// less the tools the agent may never call.
#[derive(Default)]
struct After {
    decided: Option<Box<Outcome>>,
    tools: Option<Reachable>,
    /// Answers without a session: each is this agent's, to be cached by its client only (but
    /// `server/discover`'s, whose versions are narrowed to those the gateway speaks).
    sessionless: Option<Sessionless>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sessionless {
    Discover,
    /// A method whose answer a client may keep (`ttlMs`, `cacheScope`; public when absent).
    Cacheable,
    Other,
}

/// Whether `method`'s answer is one a client of the sessionless revision may cache.
fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "prompts/get"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Whether the upstream answered a JSON body (a JSON-RPC message, whatever its status).
fn answered_json(opened: &Opened) -> bool {
    opened
        .header("content-type")
        .is_some_and(|t| t.trim_start().starts_with("application/json"))
}

/// What the current policy lets an agent reach of a server's tools (`tools/list`).
struct Reachable {
    policy: Arc<LoadedPolicy>,
    groups: Vec<String>,
    status: &'static str,
    tier: RiskTier,
    server: String,
}

impl Reachable {
    async fn load(ctx: &Context, caller: &Caller) -> EnforceResult<Reachable> {
        let agent = ctx
            .caches
            .agent_in(ctx.store.as_ref(), &caller.view, &caller.agent_id)
            .await?
            .ok_or_else(|| invalid_credential("the credential's agent is gone"))?;
        let policy = ctx
            .caches
            .policy(ctx.store.as_ref(), &caller.view, PolicyId::DEFAULT)
            .await?
            .ok_or_else(|| EnforceError::Internal("the workspace has no default policy".into()))?;
        let context = Value::Null;
        let groups = acp_engine::evaluate::groups_of(
            &policy.compiled,
            &agent.facts("", acp_engine::ContextFields::new(&context), None, (0, 0)),
        );
        Ok(Reachable {
            policy,
            groups,
            status: agent.agent.status.as_str(),
            tier: agent.agent.risk_tier,
            server: caller.server.name.clone(),
        })
    }

    /// Drops from a `tools/list` result the tools every call of which the policy denies.
    fn filter(&self, message: &mut Value) {
        let Some(tools) = message
            .pointer_mut("/result/tools")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        tools.retain(|tool| {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                return true;
            };
            let action = format!("mcp.{}.{name}", self.server);
            !self
                .policy
                .reach()
                .never_allowed(&self.groups, self.status, self.tier, &action)
        });
    }
}

struct Outcome {
    ctx: SharedContext,
    judged: Judged,
    decision: api::DecisionResponse,
    caller: CallerFacts,
    started: Instant,
}

impl After {
    /// The upstream's response to the request, on its way to the agent.
    fn answered(&mut self, message: &mut Value) {
        if let Some(reachable) = self.tools.take() {
            reachable.filter(message);
        }
        if let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) {
            match self.sessionless {
                Some(Sessionless::Discover) => {
                    if let Some(versions) = result
                        .get_mut("supportedVersions")
                        .and_then(Value::as_array_mut)
                    {
                        versions.retain(|v| v.as_str().is_some_and(speaks));
                    }
                }
                Some(Sessionless::Cacheable) => {
                    result.insert("cacheScope".into(), json!("private"));
                }
                Some(Sessionless::Other) if result.contains_key("cacheScope") => {
                    result.insert("cacheScope".into(), json!("private"));
                }
                Some(Sessionless::Other) | None => {}
            }
        }
        let Some(outcome) = self.decided.take() else {
            return;
        };
        let latency = outcome.started.elapsed().as_secs_f64() * 1000.0;
        let is_error = message
            .pointer("/result/isError")
            .and_then(Value::as_bool)
            .or(message.get("result").map(|_| false));
        let error = message.get("error").map(|_| "jsonrpc_error");
        if let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) {
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("acp/trace_id".into(), json!(outcome.decision.trace_id));
            }
        }
        outcome.judged.record(
            &outcome.ctx,
            &outcome.caller,
            &outcome.decision,
            Some((latency, is_error, error)),
        );
    }

    /// The upstream did not answer.
    fn failed(&mut self, err: &EnforceError) {
        let Some(outcome) = self.decided.take() else {
            return;
        };
        let code = match err {
            EnforceError::Upstream { code, .. } => *code,
            _ => "failed",
        };
        let latency = outcome.started.elapsed().as_secs_f64() * 1000.0;
        outcome.judged.record(
            &outcome.ctx,
            &outcome.caller,
            &outcome.decision,
            Some((latency, None, Some(code))),
        );
    }
}

impl Drop for After {
    /// An agent that went away before the answer came: the allowed call is recorded all the
    /// same, as unanswered.
    fn drop(&mut self) {
        if self.decided.is_some() {
            self.failed(&EnforceError::Upstream {
                code: "no_answer",
                message: String::new(),
                timeout: false,
            });
        }
    }
}

/// The upstream's answer to request `id`, to the agent: a JSON body as one message, an event
/// stream as events (requests the upstream makes of the agent on it relayed as they come),
/// ending with the response.
async fn relay(
    mut answering: Answering,
    id: Value,
    mut after: After,
    until: tokio::time::Instant,
) -> EnforceResult<Answer> {
    // Without a session, the revision answers its JSON-RPC errors with an HTTP error status:
    // they are relayed as the answer they are.
    let relayed_error = after.sessionless.is_some() && answered_json(&answering.opened);
    if !(200..300).contains(&answering.opened.status) && !relayed_error {
        let _ = answering.opened.body().await;
        let err = upstream_refused(answering.opened.status);
        after.failed(&err);
        return Err(err);
    }
    // The first message decides the answer's form: the response alone (a JSON body, or a
    // stream that carries nothing before it: the common case) is answered as one JSON message;
    // a request or notification of the upstream's first, and the answer is a stream that
    // relays them as they come and ends with the response.
    let first = if answering.is_stream() {
        within(until, answering.next_for(&id)).await
    } else {
        within(until, answering.response(&id)).await.map(Some)
    };
    let first = match first.and_then(|m| m.ok_or_else(no_answer)) {
        Ok(mut message) if answers(&message, &id) => {
            after.answered(&mut message);
            return Ok(Answer {
                reply: Reply::Message(message),
                session_id: None,
            });
        }
        Ok(message) => message,
        Err(err) => {
            after.failed(&err);
            return Err(err);
        }
    };
    struct State {
        answering: Answering,
        id: Value,
        after: After,
        first: Option<Value>,
        done: bool,
    }
    let state = State {
        answering,
        id,
        after,
        first: Some(first),
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        if let Some(first) = state.first.take() {
            return Some((first, state));
        }
        if state.done {
            return None;
        }
        let next = state.answering.next_for(&state.id).await;
        let message = match next.and_then(|m| m.ok_or_else(no_answer)) {
            Ok(mut message) => {
                if answers(&message, &state.id) {
                    state.after.answered(&mut message);
                    state.done = true;
                }
                message
            }
            Err(err) => {
                state.after.failed(&err);
                state.done = true;
                reply_to(
                    &state.id,
                    Err(json!({"code": -32603, "message": err.to_string()})),
                )
            }
        };
        Some((message, state))
    });
    Ok(Answer {
        reply: Reply::Stream(stream.boxed()),
        session_id: None,
    })
}

#[cfg(test)]
mod event_tests {
    use super::{EnforceError, EventParser, Routing};
    use serde_json::{json, Value};

    fn fed(pieces: &[&[u8]]) -> Vec<String> {
        let mut parser = EventParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            parser.feed(piece.to_vec());
            while let Some(data) = parser.next_data() {
                out.push(data);
            }
        }
        out
    }

    #[test]
    fn events_are_cut_at_blank_lines_whatever_the_line_ends_and_pieces() {
        let whole: &[u8] =
            b"event: message\ndata: {\"a\":1}\n\ndata: two\r\n\r\ndata: three\r\rdata: four\n\r\n";
        let want = ["{\"a\":1}", "two", "three", "four"];
        assert_eq!(fed(&[whole]), want);
        // Byte by byte: the same events.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(fed(&bytes), want);
        // An event not complete yet waits for its blank line.
        assert_eq!(fed(&[b"data: x\n"]), Vec::<String>::new());
    }

    #[test]
    fn a_malformed_event_is_dropped_alone() {
        let events = fed(&[b"data: one\n\nthis line has no colon\n\ndata: three\n\n"]);
        assert_eq!(events.first().map(String::as_str), Some("one"));
        assert_eq!(events.last().map(String::as_str), Some("three"));
        // Priming events without data carry nothing to relay.
        assert_eq!(fed(&[b"id: 1\nretry: 500\n\n"]), Vec::<String>::new());
    }

    fn routed(headers: &[(&str, &str)]) -> Routing {
        let mut routing = Routing::default();
        for (name, value) in headers {
            routing.push(name, value).unwrap();
        }
        routing
    }

    #[test]
    fn routing_headers_must_say_what_the_body_says() {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_issues", "arguments": {}}});
        let code = |r: &Routing, m: &Value| {
            r.clone().checked(m).err().map(|e| match e {
                EnforceError::Refused(refusal) => refusal.code.into_owned(),
                other => other.to_string(),
            })
        };
        let ok = routed(&[("mcp-method", "tools/call"), ("mcp-name", "list_issues")]);
        assert_eq!(code(&ok, &call), None);
        // A name with characters a header cannot carry comes as base64.
        let encoded = routed(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?bGlzdF9pc3N1ZXM=?="),
        ]);
        assert_eq!(code(&encoded, &call), None);
        for bad in [
            routed(&[("mcp-method", "tools/call")]),
            routed(&[("mcp-method", "tools/list"), ("mcp-name", "list_issues")]),
            routed(&[("mcp-method", "tools/call"), ("mcp-name", "delete_repo")]),
            routed(&[
                ("mcp-method", "tools/call"),
                ("mcp-name", "=?base64?not base64?="),
            ]),
            routed(&[("mcp-name", "list_issues")]),
        ] {
            assert_eq!(
                code(&bad, &call).as_deref(),
                Some("invalid_mcp_message"),
                "{bad:?}"
            );
        }
        // A resource's name is its URI; a method without one needs only `Mcp-Method`.
        let read = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "repo://acme"}});
        assert_eq!(
            code(
                &routed(&[
                    ("mcp-method", "resources/read"),
                    ("mcp-name", "repo://acme")
                ]),
                &read
            ),
            None
        );
        let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
        assert_eq!(code(&routed(&[("mcp-method", "tools/list")]), &list), None);
        // Only what was checked goes on: the name where the method has one, the parameters
        // on a tool call.
        let extra = routed(&[
            ("mcp-method", "tools/list"),
            ("mcp-name", "delete_repo"),
            ("mcp-param-repo", "x"),
        ]);
        assert_eq!(
            extra.checked(&list).unwrap(),
            routed(&[("mcp-method", "tools/list")])
        );
        let with_param = routed(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "list_issues"),
            ("mcp-param-repo", "x"),
        ]);
        assert_eq!(with_param.clone().checked(&call).unwrap(), with_param);
        // Without a session there is nothing of the server's to answer, and no upstream state
        // (a task, a request's state) that only this agent could reach.
        let response = json!({"jsonrpc": "2.0", "id": 9, "result": {}});
        assert_eq!(
            code(&Routing::default(), &response).as_deref(),
            Some("invalid_mcp_message")
        );
        let task =
            json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "t1"}});
        assert_eq!(
            code(
                &routed(&[("mcp-method", "tasks/get"), ("mcp-name", "t1")]),
                &task
            )
            .as_deref(),
            Some("invalid_mcp_message")
        );
        let resumed = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "list_issues", "arguments": {}, "requestState": "abc"}});
        assert_eq!(code(&ok, &resumed).as_deref(), Some("invalid_mcp_message"));
        // Each header once, and not without bound.
        let mut twice = routed(&[("mcp-method", "tools/call")]);
        assert!(twice.push("mcp-method", "tools/call").is_err());
        let mut many = Routing::default();
        for n in 0..Routing::MAX {
            many.push(&format!("mcp-param-p{n}"), "v").unwrap();
        }
        assert!(many.push("mcp-param-one-more", "v").is_err());
    }
}
