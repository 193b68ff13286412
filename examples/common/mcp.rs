//! An MCP client by hand, as the examples and the gateway's benchmark use it: JSON-RPC
//! messages POSTed over Streamable HTTP with a bearer, the session's id once the handshake
//! answered it, and each request's response read from a JSON body or the event stream that
//! carries it.
#![allow(
    dead_code,
    reason = "shared by an example and a benchmark, each using a part"
)]

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

pub struct McpClient {
    pub http: reqwest::Client,
    pub url: String,
    pub bearer: String,
    pub session: Option<String>,
    /// Speaks the sessionless revision (2026-07-28): no handshake, each request naming its
    /// version and routing headers.
    pub sessionless: bool,
    next_id: i64,
}

impl McpClient {
    pub fn new(http: reqwest::Client, url: String, bearer: &str) -> McpClient {
        McpClient {
            http,
            url,
            bearer: bearer.to_owned(),
            session: None,
            sessionless: false,
            next_id: 1,
        }
    }

    /// A client of the sessionless revision: `server/discover` instead of the handshake.
    pub fn sessionless(http: reqwest::Client, url: String, bearer: &str) -> McpClient {
        McpClient {
            sessionless: true,
            ..McpClient::new(http, url, bearer)
        }
    }

    /// The handshake (revision 2025-11-25) and its `notifications/initialized`: answers the
    /// `initialize` response (in the sessionless revision, `server/discover`'s).
    pub async fn open(&mut self, name: &str) -> Result<Value> {
        if self.sessionless {
            return self.request("server/discover", json!({})).await;
        }
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": name, "version": "1.0"}}),
            )
            .await?;
        let res = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        if res.status() != 202 {
            bail!("initialized: HTTP {}", res.status());
        }
        Ok(init)
    }

    pub async fn post(&self, message: &Value) -> Result<reqwest::Response> {
        let mut message = message.clone();
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.bearer)
            .header("Accept", "application/json, text/event-stream");
        if self.sessionless {
            // The revision's version and the client's capabilities ride every request; the
            // method and the name are repeated as headers.
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            request = request
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", &method);
            let name = match method.as_str() {
                "tools/call" | "prompts/get" => message["params"]["name"].as_str(),
                "resources/read" => message["params"]["uri"].as_str(),
                _ => None,
            };
            if let Some(name) = name {
                request = request.header("Mcp-Name", name);
            }
            if let Some(object) = message.as_object_mut() {
                let params = object.entry("params").or_insert_with(|| json!({}));
                if let Some(params) = params.as_object_mut() {
                    let meta = params.entry("_meta").or_insert_with(|| json!({}));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.insert(
                            "io.modelcontextprotocol/protocolVersion".into(),
                            json!("2026-07-28"),
                        );
                        meta.insert(
                            "io.modelcontextprotocol/clientCapabilities".into(),
                            json!({}),
                        );
                    }
                }
            }
        }
        request = request.json(&message);
        if let Some(session) = &self.session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        Ok(request.send().await?)
    }

    /// Sends a request and answers its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let res = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        if let Some(session) = res.headers().get("mcp-session-id") {
            self.session = Some(session.to_str()?.to_owned());
        }
        let status = res.status();
        let text = res.text().await?;
        if !status.is_success() {
            bail!("{method}: HTTP {status}: {text}");
        }
        // A JSON body, or server-sent events one of which answers the request.
        let response = match serde_json::from_str::<Value>(&text) {
            Ok(message) => Some(message),
            Err(_) => text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m["id"] == json!(id) && m.get("method").is_none()),
        };
        response.with_context(|| format!("{method}: no response in {text}"))
    }

    /// A `tools/call`: its result.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Result<Value> {
        let answer = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await?;
        answer
            .get("result")
            .cloned()
            .with_context(|| format!("{tool}: no result: {answer}"))
    }
}
