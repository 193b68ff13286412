//! The MCP gateway's agent side, `/mcp/{name}`, in front of a real MCP server (the official
//! Rust SDK's, over TLS, requiring its own token): credentials and scopes, the resource
//! metadata, sessions bound to their agent, every tool call decided (allowed and forwarded,
//! denied, challenged then allowed once after a person's approval), resources and prompts
//! decided, the upstream's token injected and scrubbed, the audit trail and metrics, the kill
//! switch and suspension ending sessions. On both engines.

use reqwest::Response;
use serde_json::{json, Value};

use crate::each_engine;
use crate::helpers::*;
use crate::upstream::UpstreamServer;

const UPSTREAM_TOKEN: &str = "ghp_gateway-upstream-canary-0123456789";

async fn spawn(engine: Engine, upstream: &UpstreamServer) -> TestApp {
    let ca = upstream.ca_pem.clone().into_bytes();
    TestApp::spawn_with(engine, move |config| {
        config.vault_proxy_allow = vec!["127.0.0.1/32".parse().unwrap()];
        config.vault_proxy_ca_pem = Some(ca);
        config.vault_proxy_timeout_secs = 2;
    })
    .await
}

fn policy(agent_ids: &[&str]) -> Value {
    json!({
        "reusable_policy_blocks": {
            "github": {"actions": {
                "allow": ["mint_credential", "mcp.github.list_issues", "mcp.github.whoami", "mcp.github.fail", "mcp.github.slow",
                          "mcp.github.resources.read", "mcp.github.prompts.get"],
                "deny": ["mcp.github.delete_repo"]}},
            "money": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}},
                      "approval": {"approver_role": "admin"}}
        },
        "agent_groups": [{"name": "tools", "members": agent_ids}],
        "bindings": [
            {"group": "tools", "blocks": ["github"]},
            {"group": "tools", "blocks": ["money"], "actions": ["mcp.github.transfer"]}
        ]
    })
}

/// A workspace with the upstream registered as `github` (its token from the vault), an agent
/// under the policy above, and a credential for it with `scopes`.
struct Scene {
    app: TestApp,
    agent: TestAgent,
    credential: String,
}

async fn scene(engine: Engine, upstream: &UpstreamServer, scopes: Value) -> Scene {
    let app = spawn(engine, upstream).await;
    let agent = app.active_agent("tool-user").await;
    app.apply_policy(policy(&[&agent.id])).await;
    let owner = app.login("owner@example.com").await;
    let (s, set) = status_json(
        owner
            .post(
                "/v1/vault/secret-sets",
                &json!({
                    "name": "github-mcp", "provider": "github", "environment": "production",
                    "entries": {"GITHUB_TOKEN": UPSTREAM_TOKEN},
                    "profiles": {"mcp": {"hosts": ["localhost"], "ports": [upstream.port],
                        "methods": ["POST", "GET", "DELETE"], "path_prefixes": ["/mcp"],
                        "inject": {"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}}}
                }),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{set}");
    let set_id = set["secret_set"]["secret_set_id"].as_str().unwrap();
    let (s, made) = status_json(
        owner
            .post(
                "/v1/mcp/servers",
                &json!({"name": "github", "url": upstream.url("/mcp"),
                        "auth": {"secret_set_id": set_id, "profile": "mcp"}}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let credential = mint(&app, &agent.id, scopes).await;
    Scene {
        app,
        agent,
        credential,
    }
}

async fn mint(app: &TestApp, agent_id: &str, scopes: Value) -> String {
    let (s, minted) = status_json(
        app.post(
            "/v1/identity/credentials/mint",
            &json!({"agent_id": agent_id, "scopes": scopes, "ttl_seconds": 900}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{minted}");
    minted["credential"]["token"].as_str().unwrap().to_owned()
}

/// An MCP client of the gateway, speaking JSON-RPC over Streamable HTTP by hand.
struct Client<'a> {
    app: &'a TestApp,
    credential: String,
    session: Option<String>,
    next_id: i64,
}

impl<'a> Client<'a> {
    fn new(app: &'a TestApp, credential: &str) -> Self {
        Client {
            app,
            credential: credential.to_owned(),
            session: None,
            next_id: 1,
        }
    }

    async fn send(&self, message: &Value) -> Response {
        let mut request = self
            .app
            .client
            .post(self.app.url("/mcp/github"))
            .bearer_auth(&self.credential)
            .header("Accept", "application/json, text/event-stream")
            .json(message);
        if let Some(session) = &self.session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        request.send().await.unwrap()
    }

    /// A request's response (read from a JSON body or the event stream).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let res = self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        assert_eq!(res.status(), 200, "{method}");
        response_of(res, id).await
    }

    async fn initialize(&mut self, url_elicitation: bool) -> Value {
        let capabilities = if url_elicitation {
            json!({"elicitation": {"url": {}}})
        } else {
            json!({})
        };
        let res = self
            .send(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "test", "version": "1"}}}),
            )
            .await;
        assert_eq!(res.status(), 200);
        let session = res
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        assert!(session.starts_with("mcps_"), "{session}");
        let answer = response_of(res, 0).await;
        self.session = Some(session);
        let res = self
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(res.status(), 202);
        answer
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }
}

/// The session's stream (`GET`), its messages read as they come.
struct Stream {
    res: Response,
    buffer: String,
}

impl Stream {
    async fn open(client: &Client<'_>) -> Stream {
        let res = client
            .app
            .client
            .get(client.app.url("/mcp/github"))
            .bearer_auth(&client.credential)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", client.session.as_deref().unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let kind = res.headers().get("content-type").unwrap().to_str().unwrap();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Stream {
            res,
            buffer: String::new(),
        }
    }

    /// The next message, `None` when the stream ends (at most 30 seconds of waiting: the
    /// stream reads its session every two).
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data = event.lines().find_map(|l| l.strip_prefix("data:"));
                if let Some(message) = data.and_then(|d| serde_json::from_str(d.trim()).ok()) {
                    return Some(message);
                }
                continue;
            }
            let wait = std::time::Duration::from_secs(30);
            let chunk = tokio::time::timeout(wait, self.res.chunk())
                .await
                .expect("the stream went silent");
            match chunk {
                Ok(Some(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// The next message that satisfies `wanted` (within 30 seconds).
    async fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        let wait = std::time::Duration::from_secs(30);
        let found = tokio::time::timeout(wait, async {
            loop {
                let message = self.next().await.expect("the stream ended");
                if wanted(&message) {
                    return message;
                }
            }
        });
        found.await.expect("no such message within 30 seconds")
    }
}

/// The JSON-RPC response with `id` in an answer: its JSON body, or the event that carries it.
async fn response_of(res: Response, id: i64) -> Value {
    let json = res
        .headers()
        .get("content-type")
        .is_some_and(|t| t.to_str().unwrap().starts_with("application/json"));
    let text = res.text().await.unwrap();
    if json {
        return serde_json::from_str(&text).unwrap();
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| m["id"] == json!(id) && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no response {id} in {text}"))
}

fn text_of(result: &Value) -> String {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

each_engine! {
    async fn credentials_scopes_and_the_resource_metadata(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, agent, credential } = scene(engine, &upstream, json!(["mcp:github"])).await;
        let metadata = format!("{}/.well-known/oauth-protected-resource/mcp/github", app.base);

        // No credential, an unknown one: 401 pointing at the resource metadata.
        for bearer in [None, Some("sct_not-a-credential")] {
            let mut request = app.client.post(app.url("/mcp/github")).json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
            if let Some(bearer) = bearer {
                request = request.bearer_auth(bearer);
            }
            let res = request.send().await.unwrap();
            let challenge = res.headers().get("www-authenticate").unwrap().to_str().unwrap().to_owned();
            assert!(challenge.starts_with("Bearer "), "{challenge}");
            assert!(challenge.contains(&format!("resource_metadata=\"{metadata}\"")), "{challenge}");
            assert_error(res, 401, "invalid_credential").await;
        }
        // The document is served.
        let (s, doc) = status_json(app.client.get(&metadata).send().await.unwrap()).await;
        assert_eq!(s, 200);
        assert_eq!(doc["resource"], format!("{}/mcp/github", app.base));
        assert_eq!(doc["authorization_servers"], json!([app.base]));
        assert_eq!(doc["scopes_supported"], json!(["mcp", "mcp:github"]));

        // A credential without the scope: 403 `insufficient_scope`, saying which would do.
        let unscoped = mint(&app, &agent.id, json!(["email:send"])).await;
        let res = Client::new(&app, &unscoped).send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await;
        let challenge = res.headers().get("www-authenticate").unwrap().to_str().unwrap().to_owned();
        assert!(challenge.contains("error=\"insufficient_scope\""), "{challenge}");
        assert_error(res, 403, "insufficient_scope").await;
        // A server of another name.
        let other = mint(&app, &agent.id, json!(["mcp:gitlab"])).await;
        assert_error(Client::new(&app, &other).send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await, 403, "insufficient_scope").await;
        let res = app.client.post(app.url("/mcp/nowhere")).bearer_auth(&credential).json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).send().await.unwrap();
        assert_error(res, 404, "unknown_mcp_server").await;

        // Without a session: 400, for a message and for the session's stream.
        assert_error(Client::new(&app, &credential).send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await, 400, "missing_mcp_session").await;
        let res = app.client.get(app.url("/mcp/github")).bearer_auth(&credential).send().await.unwrap();
        assert_error(res, 400, "missing_mcp_session").await;
        // Not JSON-RPC.
        assert_error(Client::new(&app, &credential).send(&json!([1, 2])).await, 400, "invalid_mcp_message").await;
        app.stop().await;
    }

    async fn tool_calls_are_decided(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, agent, credential } = scene(engine, &upstream, json!(["mcp"])).await;
        let mut client = Client::new(&app, &credential);
        let init = client.initialize(false).await;
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");

        // The upstream's list, less what this agent may never call: `delete_repo` is denied
        // whatever its arguments; `transfer` is allowed under some amounts.
        let tools = client.request("tools/list", json!({})).await;
        let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["list_issues", "transfer", "whoami", "fail", "slow"], "{tools}");

        // Allowed: forwarded with the upstream's token (the upstream refuses calls without
        // it), answered unchanged but for the trace id.
        let allowed = client.call("list_issues", json!({"repo": "acme/api"})).await;
        assert_eq!(text_of(&allowed), "open issues of \"acme/api\": #1, #2", "{allowed}");
        let trace_id = allowed["result"]["_meta"]["acp/trace_id"].as_str().unwrap().to_owned();
        assert_ne!(allowed["result"]["isError"], json!(true));

        // Denied: an error result naming the reason, the decision in `_meta`; nothing sent.
        let hits = upstream.hits();
        let denied = client.call("delete_repo", json!({"repo": "acme/api"})).await;
        assert_eq!(denied["result"]["isError"], true, "{denied}");
        assert!(text_of(&denied).contains("action_denied"), "{denied}");
        assert_eq!(denied["result"]["_meta"]["acp/decision"]["decision"], "deny");
        assert_eq!(upstream.hits(), hits, "a denied call never reaches the upstream");
        // A tool the policy does not name is denied too.
        let unnamed = client.call("whatever", json!({})).await;
        assert_eq!(unnamed["result"]["isError"], true, "{unnamed}");

        // The upstream's token never comes back, in any spelling.
        let leaky = client.call("whoami", json!({})).await;
        let text = text_of(&leaky);
        assert!(!text.contains(UPSTREAM_TOKEN) && !text.contains(&b64(UPSTREAM_TOKEN.as_bytes())), "{text}");
        assert!(text.contains("[REDACTED]"), "{text}");
        // ... and what came back is on the trail, committed before the answer: which key, where
        // (the upstream answers as a stream: in an `event`; a JSON answer is a `message`)
        // and in which form, tied to the call's trace, never the value.
        let leaky_trace = leaky["result"]["_meta"]["acp/trace_id"].as_str().unwrap();
        let leaks = audit_events(&app, &format!("event_type=mcp.leak_scrubbed&trace_id={leaky_trace}")).await;
        assert_eq!(leaks.len(), 1, "{leaks:?}");
        let leak = &leaks[0];
        assert_eq!(leak["action"], "mcp.github.whoami", "{leak}");
        assert_eq!(leak["agent_id"], json!(agent.id));
        assert_eq!(leak["details"]["server"], "github");
        assert_eq!(leak["details"]["profile"], "mcp");
        assert_eq!(leak["details"]["host"], "localhost");
        assert_eq!(leak["details"]["method"], "tools/call");
        let found: Vec<(&str, &str, &str)> = leak["details"]["leaks"].as_array().unwrap().iter()
            .map(|l| (l["key"].as_str().unwrap(), l["place"].as_str().unwrap(), l["form"].as_str().unwrap()))
            .collect();
        assert!(found.contains(&("GITHUB_TOKEN", "event", "raw")) && found.contains(&("GITHUB_TOKEN", "event", "base64")), "{leak}");
        assert!(!leak.to_string().contains(UPSTREAM_TOKEN));
        // An answer that holds no credential leaves no such event.
        assert!(audit_events(&app, &format!("event_type=mcp.leak_scrubbed&trace_id={trace_id}")).await.is_empty());
        // An upstream error result is relayed as it is.
        let failed = client.call("fail", json!({})).await;
        assert_eq!(failed["result"]["isError"], true);

        // Amounts: within the limit allowed; above it challenged, to a client without URL
        // elicitation as an error result with the status link, never the deciding link.
        let small = client.call("transfer", json!({"amount": 50, "currency": "USD", "to": "acct_1"})).await;
        assert_eq!(text_of(&small), "moved 50 to \"acct_1\"", "{small}");
        let hits = upstream.hits();
        let big = json!({"amount": 500, "currency": "USD", "to": "acct_1"});
        let held = client.call("transfer", big.clone()).await;
        assert_eq!(held["result"]["isError"], true, "{held}");
        let decision = &held["result"]["_meta"]["acp/decision"];
        assert_eq!(decision["decision"], "challenge");
        let challenge_id = decision["challenge_id"].as_str().unwrap().to_owned();
        let status_url = held["result"]["_meta"]["acp/approval_status_url"].as_str().unwrap();
        assert!(status_url.ends_with(&format!("/v1/policy-challenges/{challenge_id}/status")), "{status_url}");
        assert!(!held.to_string().contains("/v1/approval-links/"), "{held}");
        assert_eq!(upstream.hits(), hits);
        // A person approves; the same call is then allowed once.
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        let admin = app.login("admin@example.com").await;
        let (s, body) = status_json(admin.post(&format!("/v1/policy-challenges/{challenge_id}/decide"), &json!({"decision": "approve"})).await).await;
        assert_eq!(s, 200, "{body}");
        let approved = client.call("transfer", big.clone()).await;
        assert_eq!(text_of(&approved), "moved 500 to \"acct_1\"", "{approved}");
        let again = client.call("transfer", big.clone()).await;
        assert_eq!(again["result"]["isError"], true, "once only: {again}");
        // An approval is of exactly those arguments: one more argument is another call.
        let held = client.call("transfer", big.clone()).await;
        let id = held["result"]["_meta"]["acp/decision"]["challenge_id"].as_str().unwrap().to_owned();
        let (s, body) = status_json(admin.post(&format!("/v1/policy-challenges/{id}/decide"), &json!({"decision": "approve"})).await).await;
        assert_eq!(s, 200, "{body}");
        let other = client.call("transfer", json!({"amount": 500, "currency": "USD", "to": "acct_1", "memo": {"items": [1, 2]}})).await;
        assert_eq!(other["result"]["_meta"]["acp/decision"]["decision"], "challenge", "{other}");

        // Arguments that would hide one from the policy, or a number sent as text, are not
        // forwarded; nor is a decided method sent as a notification.
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
            "params": {"name": "transfer", "arguments": {"amount": 5, "currency": "USD", "to": {"bank": "a"}, "to.bank": "b"}}})).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        let texty = client.call("transfer", json!({"amount": "5000", "currency": "USD", "to": "acct_1"})).await;
        assert_eq!(texty["result"]["isError"], true, "{texty}");
        assert_eq!(texty["result"]["_meta"]["acp/decision"]["decision"], "deny", "{texty}");
        let hits = upstream.hits();
        let res = client.send(&json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "delete_repo", "arguments": {}}})).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        assert_eq!(upstream.hits(), hits);

        // A client that takes URL elicitations gets the challenge as -32042.
        let mut eliciting = Client::new(&app, &credential);
        eliciting.initialize(true).await;
        let held = eliciting.call("transfer", json!({"amount": 700, "currency": "USD", "to": "acct_2"})).await;
        assert_eq!(held["error"]["code"], -32042, "{held}");
        let elicitation = &held["error"]["data"]["elicitations"][0];
        assert_eq!(elicitation["mode"], "url");
        assert!(elicitation["elicitationId"].as_str().unwrap().starts_with("pch_"));
        assert!(elicitation["url"].as_str().unwrap().ends_with("/status"));

        // Resources and prompts are decided too.
        let read = client.request("resources/read", json!({"uri": "repo://acme"})).await;
        assert_eq!(read["result"]["contents"][0]["text"], "the contents of repo://acme", "{read}");
        let prompt = client.request("prompts/get", json!({"name": "triage"})).await;
        assert!(prompt["result"]["messages"].is_array(), "{prompt}");

        // The trail: each call's decision and its `mcp.tool.called`, argument names and types
        // only, with the trace id the result carried.
        let events = audit_events(&app, "event_type=mcp.tool.called&limit=100").await;
        let first = events.iter().find(|e| e["trace_id"] == json!(trace_id)).unwrap_or_else(|| panic!("{events:?}"));
        assert_eq!(first["details"]["tool"], "list_issues");
        assert_eq!(first["details"]["arguments"], json!({"repo": {"type": "string"}}));
        assert_eq!(first["details"]["outcome"], "allow");
        assert_eq!(first["details"]["is_error"], false);
        assert!(first["details"]["upstream_latency_ms"].is_number());
        assert!(!events.iter().any(|e| e.to_string().contains("acme/api")), "values are not recorded");
        assert!(events.iter().any(|e| e["details"]["tool"] == "delete_repo" && e["details"]["outcome"] == "deny"));
        let checks = audit_events(&app, &format!("event_type=decision.check&agent_id={}&limit=100", agent.id)).await;
        assert!(checks.iter().any(|e| e["trace_id"] == json!(trace_id)), "{checks:?}");
        assert!(!app.client.get(app.url("/v1/workspace/audit/events?limit=500")).header("X-Service-Api-Key", &app.key).send().await.unwrap().text().await.unwrap().contains(UPSTREAM_TOKEN));

        // The dry run of a policy change replays the recorded tool calls: allowing
        // `delete_repo` would have allowed the call denied above.
        let mut looser = policy(&[&agent.id]);
        looser["reusable_policy_blocks"]["github"]["actions"]["deny"] = json!([]);
        looser["reusable_policy_blocks"]["github"]["actions"]["allow"].as_array_mut().unwrap().push(json!("mcp.github.delete_repo"));
        let owner = app.login("owner@example.com").await;
        let (s, dry) = status_json(owner.post("/v1/policies/sync", &json!({"dry_run": true, "spec": looser})).await).await;
        assert_eq!(s, 200, "{dry}");
        let kinds = dry["diff"]["impact"]["kinds"].as_array().unwrap();
        let opened = kinds.iter().find(|k| k["kind"] == "deny_to_allow").unwrap_or_else(|| panic!("{dry}"));
        assert!(opened["examples"].as_array().unwrap().iter().any(|e| e["action"] == "mcp.github.delete_repo"), "{opened}");

        // The console lists the latest calls with their decisions.
        let page = owner.get("/dashboard/mcp").await.text().await.unwrap();
        assert!(page.contains("id=\"calls\""), "{page}");
        assert!(page.contains("<tr data-outcome=\"deny\">") && page.contains("<code>delete_repo</code>"), "{page}");
        assert!(page.contains(&trace_id), "{page}");
        // The overview lists the scrubbed leak beside the vault proxy's, by key and form only.
        let overview = owner.get("/dashboard").await.text().await.unwrap();
        assert!(overview.contains("id=\"leaks\"") && overview.contains("<td>MCP server github</td>"), "{overview}");
        assert!(overview.contains("GITHUB_TOKEN in event (base64)") && !overview.contains(UPSTREAM_TOKEN), "{overview}");

        // Metrics count calls by server, tool and outcome.
        let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        assert!(metrics.lines().any(|l| l.starts_with("acp_mcp_calls_total{") && l.contains("tool=\"list_issues\"") && l.contains("outcome=\"allow\"")), "{metrics}");
        // A denied call's made-up tool name takes no series of its own.
        assert!(!metrics.contains("tool=\"whatever\""), "{metrics}");
        app.stop().await;
    }

    async fn sessions_belong_to_their_agent_and_end(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, agent, credential } = scene(engine, &upstream, json!(["mcp"])).await;
        let mut client = Client::new(&app, &credential);
        client.initialize(false).await;
        let session = client.session.clone().unwrap();

        // Another agent presenting the session: 404.
        let other = app.active_agent("other").await;
        app.apply_policy(policy(&[&agent.id, &other.id])).await;
        let theirs = mint(&app, &other.id, json!(["mcp"])).await;
        let mut intruder = Client::new(&app, &theirs);
        intruder.session = Some(session.clone());
        assert_error(intruder.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 404, "unknown_mcp_session").await;

        // DELETE ends it; it is then unknown.
        let res = app.client.delete(app.url("/mcp/github")).bearer_auth(&credential).header("Mcp-Session-Id", &session).send().await.unwrap();
        assert_eq!(res.status(), 204);
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 404, "unknown_mcp_session").await;

        // Suspension ends the agent's sessions at once; a new credential after it is resumed
        // does not bring them back.
        let mut client = Client::new(&app, &credential);
        client.initialize(false).await;
        let (s, body) = status_json(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 401, "invalid_credential").await;
        let (s, body) = status_json(app.post(&format!("/v1/agents/{}/resume", agent.id), &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        client.credential = mint(&app, &agent.id, json!(["mcp"])).await;
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 404, "unknown_mcp_session").await;

        // Revoke-all: every session ends and the credentials are refused.
        client.session = None;
        client.initialize(false).await;
        let (s, body) = status_json(app.post("/v1/identity/kill-switch/revoke-all", &json!({"reason": "drill"})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 401, "invalid_credential").await;
        let fresh = mint(&app, &agent.id, json!(["mcp"])).await;
        client.credential = fresh;
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 404, "unknown_mcp_session").await;

        // Moving the server to another URL ends its sessions.
        let mut client = Client::new(&app, &client.credential);
        client.initialize(false).await;
        let owner = app.login("owner@example.com").await;
        let (s, body) = status_json(owner.post("/v1/mcp/servers/github", &json!({"url": upstream.url("/mcp/")})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_error(client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await, 404, "unknown_mcp_session").await;

        // The trail holds the sessions' opening and ending.
        let opened = audit_events(&app, "event_type=mcp.session.opened&limit=10").await;
        assert!(opened.len() >= 3, "{opened:?}");
        assert!(!opened.iter().any(|e| e.to_string().contains(&session)), "no session id in the trail");
        app.stop().await;
    }

    async fn the_upstream_credentials_follow_the_secret_set(engine) {
        // The set's current version is read with the credential on every message: a new
        // version's token is the one the next call carries, and a deleted set's none.
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp"])).await;
        let mut client = Client::new(&app, &credential);
        client.initialize(false).await;
        let listed = |answer: &Value| text_of(answer) == "open issues of \"acme/api\": #1, #2";
        let allowed = client.call("list_issues", json!({"repo": "acme/api"})).await;
        assert!(listed(&allowed), "{allowed}");

        let owner = app.login("owner@example.com").await;
        let (s, sets) = status_json(owner.get("/v1/vault/secret-sets").await).await;
        assert_eq!(s, 200, "{sets}");
        let set_id = sets["items"][0]["secret_set_id"].as_str().unwrap().to_owned();
        let put = |token: &str| json!({"set": {"GITHUB_TOKEN": token}});
        let (s, body) = status_json(owner.post(&format!("/v1/vault/secret-sets/{set_id}"), &put("not-the-token")).await).await;
        assert_eq!(s, 200, "{body}");
        // The upstream refuses the new token: the call is not answered by it.
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
            "params": {"name": "list_issues", "arguments": {"repo": "acme/api"}}})).await;
        let status = res.status().as_u16();
        let body = res.text().await.unwrap();
        assert!(status != 200 || !body.contains("open issues"), "{status} {body}");
        assert!(!body.contains("not-the-token"), "{body}");
        // The right token again, as a third version: answered at once.
        let (s, body) = status_json(owner.post(&format!("/v1/vault/secret-sets/{set_id}"), &put(UPSTREAM_TOKEN)).await).await;
        assert_eq!(s, 200, "{body}");
        let allowed = client.call("list_issues", json!({"repo": "acme/api"})).await;
        assert!(listed(&allowed), "{allowed}");

        // A deleted set fills in nothing: the call is refused before it leaves.
        let hits = upstream.hits();
        let (s, body) = status_json(owner.post(&format!("/v1/vault/secret-sets/{set_id}/delete"), &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "list_issues", "arguments": {"repo": "acme/api"}}})).await;
        assert_error(res, 404, "unknown_secret_set").await;
        // Destroyed: the same.
        let (s, body) = status_json(owner.post(&format!("/v1/vault/secret-sets/{set_id}/destroy"), &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call",
            "params": {"name": "list_issues", "arguments": {"repo": "acme/api"}}})).await;
        assert_error(res, 404, "unknown_secret_set").await;
        assert_eq!(upstream.hits(), hits, "nothing reached the upstream");
        app.stop().await;
    }

    async fn the_session_stream(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, agent, credential } = scene(engine, &upstream, json!(["mcp"])).await;
        let mut spec = policy(&[&agent.id]);
        spec["reusable_policy_blocks"]["github"]["actions"]["allow"].as_array_mut().unwrap().push(json!("mcp.github.ask_later"));
        app.apply_policy(spec).await;
        let mut client = Client::new(&app, &credential);
        client.initialize(true).await;
        let mut stream = Stream::open(&client).await;

        // The upstream asks the client for consent outside any request: the request comes on
        // the stream, the client's answer goes back by POST, and what the upstream then says
        // comes scrubbed of its token.
        let asked = client.call("ask_later", json!({})).await;
        assert_eq!(text_of(&asked), "asking", "{asked}");
        let request = stream.until(|m| m["method"] == "elicitation/create").await;
        assert_eq!(request["params"]["url"], "https://consent.example/ask", "{request}");
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept"}});
        assert_eq!(client.send(&answer).await.status(), 202);
        let said = stream.until(|m| m["method"] == "notifications/resources/updated").await;
        let uri = said["params"]["uri"].as_str().unwrap();
        assert!(uri.starts_with("repo://consent/accept?token="), "{said}");
        assert!(!uri.contains(UPSTREAM_TOKEN), "the token is scrubbed: {said}");
        let leaks = audit_events(&app, "event_type=mcp.leak_scrubbed").await;
        assert!(leaks.iter().any(|e| e["details"]["method"] == "stream" && e["details"]["leaks"][0]["place"] == "event"), "{leaks:?}");

        // A challenged call to a client that takes URL elicitations: once a person decides,
        // the stream says the elicitation is complete.
        let held = client.call("transfer", json!({"amount": 700, "currency": "USD", "to": "acct_2"})).await;
        assert_eq!(held["error"]["code"], -32042, "{held}");
        let challenge_id = held["error"]["data"]["elicitations"][0]["elicitationId"].as_str().unwrap().to_owned();
        app.grant(&app.workspace_id, "admin@example.com", "admin").await;
        let admin = app.login("admin@example.com").await;
        let (s, body) = status_json(admin.post(&format!("/v1/policy-challenges/{challenge_id}/decide"), &json!({"decision": "approve"})).await).await;
        assert_eq!(s, 200, "{body}");
        let complete = stream.until(|m| m["method"] == "notifications/elicitation/complete").await;
        assert_eq!(complete["params"]["elicitationId"], json!(challenge_id), "{complete}");
        assert!(complete.get("id").is_none(), "a notification: {complete}");

        // Another agent presenting the session: 404.
        let other = app.active_agent("other").await;
        let mut spec = policy(&[&agent.id, &other.id]);
        spec["reusable_policy_blocks"]["github"]["actions"]["allow"].as_array_mut().unwrap().push(json!("mcp.github.ask_later"));
        app.apply_policy(spec).await;
        let theirs = mint(&app, &other.id, json!(["mcp"])).await;
        let res = app.client.get(app.url("/mcp/github")).bearer_auth(&theirs).header("Mcp-Session-Id", client.session.as_deref().unwrap()).send().await.unwrap();
        assert_error(res, 404, "unknown_mcp_session").await;

        // The agent's suspension ends the stream, and the session's upstream session is ended
        // upstream (once) as the agent's own `DELETE` would.
        let deletes = upstream.deletes();
        let (s, body) = status_json(app.post(&format!("/v1/agents/{}/suspend", agent.id), &json!({})).await).await;
        assert_eq!(s, 200, "{body}");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while let Some(message) = stream.next().await {
                assert!(message.get("method").is_some(), "only the server's messages: {message}");
            }
        });
        ended.await.expect("the stream ends within 30 seconds");
        let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while upstream.deletes() == deletes {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        });
        closed.await.expect("the upstream session is ended within 30 seconds");
        assert_eq!(upstream.deletes(), deletes + 1);
        app.stop().await;
    }

    async fn upstream_failures(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp"])).await;
        let mut client = Client::new(&app, &credential);
        client.initialize(false).await;
        // Slower than the timeout (2 s): 504, and the allowed call recorded as timed out.
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": 4000}}})).await;
        assert_error(res, 504, "upstream_timeout").await;
        let mut recorded = Vec::new();
        for _ in 0..50 {
            recorded = audit_events(&app, "event_type=mcp.tool.called&limit=10").await;
            if !recorded.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(recorded[0]["details"]["tool"], "slow", "{recorded:?}");
        assert_eq!(recorded[0]["details"]["error"], "upstream_timeout", "{recorded:?}");
        // Gone: 502.
        drop(upstream);
        let res = client.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})).await;
        assert_error(res, 502, "upstream_unavailable").await;
        app.stop().await;
    }
}

/// The pinned release of the official MCP Python SDK the suite drives the gateway with.
const PYTHON_SDK: &str = "mcp==2.3.0";

/// An interpreter with the official MCP Python SDK: `ACP_TEST_PYTHON` when set, else a virtual
/// environment under `target/` made once (with `python3 -m venv` and pip, from PyPI) the first
/// time a test needs it.
async fn python_with_sdk() -> String {
    static PYTHON: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    PYTHON
        .get_or_init(|| async {
            if let Ok(python) = std::env::var("ACP_TEST_PYTHON") {
                return python;
            }
            let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/mcp-venv");
            let python = format!("{venv}/bin/python");
            let has_sdk = |python: String| async move {
                tokio::process::Command::new(python)
                    .args(["-c", "import mcp"])
                    .output()
                    .await
                    .is_ok_and(|o| o.status.success())
            };
            if !has_sdk(python.clone()).await {
                let made = tokio::process::Command::new("python3")
                    .args(["-m", "venv", venv])
                    .status()
                    .await
                    .expect("python3 makes the test's virtual environment");
                assert!(made.success(), "python3 -m venv {venv} failed");
                let installed = tokio::process::Command::new(format!("{venv}/bin/pip"))
                    .args(["install", "-q", "--disable-pip-version-check", PYTHON_SDK])
                    .status()
                    .await
                    .expect("pip installs the MCP Python SDK");
                assert!(installed.success(), "pip install {PYTHON_SDK} failed (PyPI must be reachable, or set ACP_TEST_PYTHON to an interpreter that has it)");
            }
            python
        })
        .await
        .clone()
}

/// The official MCP Python SDK's client (`tests/clients/mcp_gateway_client.py`): what it saw.
async fn python_client(url: &str, credential: &str, mode: &str) -> Value {
    let python = python_with_sdk().await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/mcp_gateway_client.py"
    );
    let out = tokio::process::Command::new(&python)
        .args([script, url, credential, mode])
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run `{python}`: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python client failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

each_engine! {
    async fn the_official_python_client_connects(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp:github"])).await;
        let url = app.url("/mcp/github");
        let saw_the_same = |seen: &Value| {
            assert_eq!(seen["tools"], json!(["fail", "list_issues", "slow", "transfer", "whoami"]), "{seen}");
            assert_eq!(seen["allowed"]["text"], "open issues of \"acme/api\": #1, #2", "{seen}");
            assert_eq!(seen["allowed"]["is_error"], false);
            assert!(seen["allowed"]["trace_id"].as_str().unwrap().starts_with("trc_"), "{seen}");
            assert_eq!(seen["denied"]["is_error"], true, "{seen}");
            assert_eq!(seen["denied"]["decision"], "deny");
            assert_eq!(seen["challenged"]["is_error"], true, "{seen}");
            assert!(seen["challenged"]["status_url"].as_str().unwrap().ends_with("/status"), "{seen}");
            assert_eq!(seen["resource"], "the contents of repo://acme");
        };
        let seen = python_client(&url, &credential, "handshake").await;
        assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
        saw_the_same(&seen);
        // The client ended its session on the way out.
        let ended = audit_events(&app, "event_type=mcp.session.ended&limit=10").await;
        assert_eq!(ended.len(), 1, "{ended:?}");

        // The SDK's default client: `server/discover`, then the sessionless revision, every
        // request decided alike and no session opened.
        let seen = python_client(&url, &credential, "auto").await;
        assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
        saw_the_same(&seen);
        let opened = audit_events(&app, "event_type=mcp.session.opened&limit=10").await;
        assert_eq!(opened.len(), 1, "only the handshake opened a session: {opened:?}");
        // Recorded beside the answers, with the writer's next batch.
        let mut called = Vec::new();
        for _ in 0..50 {
            called = audit_events(&app, "event_type=mcp.tool.called&limit=20").await;
            if called.len() >= 6 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(called.len(), 6, "three calls each way: {called:?}");
        app.stop().await;
    }
}

/// One message of the sessionless revision: its version in the header and in `_meta` (with the
/// client's capabilities), its routing headers as given (`None`: as the body says).
async fn sessionless(
    app: &TestApp,
    credential: &str,
    message: Value,
    routing: Option<Vec<(&str, String)>>,
    url_elicitation: bool,
) -> Response {
    let mut message = message;
    let capabilities = if url_elicitation {
        json!({"elicitation": {"url": {}}})
    } else {
        json!({})
    };
    let params = message
        .as_object_mut()
        .unwrap()
        .entry("params")
        .or_insert_with(|| json!({}));
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let routing = routing.unwrap_or_else(|| {
        let mut headers = vec![("Mcp-Method", message["method"].as_str().unwrap().to_owned())];
        if let Some(name) = message["params"]["name"]
            .as_str()
            .or(message["params"]["uri"].as_str())
        {
            headers.push(("Mcp-Name", name.to_owned()));
        }
        headers
    });
    let mut request = app
        .client
        .post(app.url("/mcp/github"))
        .bearer_auth(credential)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .json(&message);
    for (name, value) in routing {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

each_engine! {
    async fn the_sessionless_revision(engine) {
        let upstream = crate::mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp:github"])).await;
        let ask = |id: i64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});

        // `server/discover` in place of the handshake: no session is opened.
        let res = sessionless(&app, &credential, ask(1, "server/discover", json!({})), None, false).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("mcp-session-id").is_none());
        let found = response_of(res, 1).await;
        let versions = found["result"]["supportedVersions"].as_array().unwrap();
        assert!(versions.contains(&json!("2026-07-28")), "{found}");
        assert!(!versions.contains(&json!("2025-03-26")), "only what the gateway speaks: {found}");

        // The tool list, without what the agent may never call, cached by its client only.
        let res = sessionless(&app, &credential, ask(2, "tools/list", json!({})), None, false).await;
        let tools = response_of(res, 2).await;
        let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"list_issues") && !names.contains(&"delete_repo"), "{tools}");
        assert_eq!(tools["result"]["cacheScope"], "private", "{tools}");

        // Allowed, forwarded with the upstream's token; a name sent as base64 reads the same.
        let call = |id: i64, name: &str, arguments: Value| ask(id, "tools/call", json!({"name": name, "arguments": arguments}));
        let res = sessionless(&app, &credential, call(3, "list_issues", json!({"repo": "acme/api"})), None, false).await;
        let allowed = response_of(res, 3).await;
        assert_eq!(text_of(&allowed), "open issues of \"acme/api\": #1, #2", "{allowed}");
        assert!(allowed["result"]["_meta"]["acp/trace_id"].as_str().unwrap().starts_with("trc_"));
        let encoded = vec![("Mcp-Method", "tools/call".to_owned()), ("Mcp-Name", format!("=?base64?{}?=", b64(b"list_issues")))];
        let res = sessionless(&app, &credential, call(4, "list_issues", json!({"repo": "acme/api"})), Some(encoded), false).await;
        assert_eq!(text_of(&response_of(res, 4).await), "open issues of \"acme/api\": #1, #2");

        // Denied: an error result of this revision (`resultType`), nothing sent upstream.
        let hits = upstream.hits();
        let res = sessionless(&app, &credential, call(5, "delete_repo", json!({"repo": "acme/api"})), None, false).await;
        let denied = response_of(res, 5).await;
        assert_eq!(denied["result"]["isError"], true, "{denied}");
        assert_eq!(denied["result"]["resultType"], "complete", "{denied}");
        assert_eq!(denied["result"]["_meta"]["acp/decision"]["decision"], "deny");
        assert_eq!(upstream.hits(), hits);

        // Challenged: the revision has no elicitation the server starts, so even a client that
        // takes URL elicitations gets the error result with the status link.
        let big = json!({"amount": 500, "currency": "USD", "to": "acct_1"});
        for (id, url_elicitation) in [(6, true), (7, false)] {
            let res = sessionless(&app, &credential, call(id, "transfer", big.clone()), None, url_elicitation).await;
            let held = response_of(res, id).await;
            assert_eq!(held["result"]["isError"], true, "{held}");
            assert_eq!(held["result"]["resultType"], "complete", "{held}");
            assert!(held["result"]["_meta"]["acp/approval_status_url"].as_str().unwrap().ends_with("/status"), "{held}");
        }
        // A task, a request's state, or a response is not relayed without a session.
        let task = json!({"jsonrpc": "2.0", "id": 13, "method": "tasks/get", "params": {"taskId": "t1"}});
        let res = sessionless(&app, &credential, task, Some(vec![("Mcp-Method", "tasks/get".to_owned()), ("Mcp-Name", "t1".to_owned())]), false).await;
        assert_error(res, 400, "invalid_mcp_message").await;

        // The routing headers must say what the body says.
        let res = sessionless(&app, &credential, call(8, "delete_repo", json!({})), Some(vec![("Mcp-Method", "tools/call".to_owned())]), false).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        let lying = vec![("Mcp-Method", "tools/call".to_owned()), ("Mcp-Name", "list_issues".to_owned())];
        let res = sessionless(&app, &credential, call(9, "delete_repo", json!({})), Some(lying), false).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        let res = sessionless(&app, &credential, call(10, "list_issues", json!({})), Some(vec![("Mcp-Method", "tools/list".to_owned())]), false).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        let res = sessionless(&app, &credential, call(11, "list_issues", json!({})), Some(vec![]), false).await;
        assert_error(res, 400, "invalid_mcp_message").await;
        assert_eq!(upstream.hits(), hits, "no refused message reached the upstream");

        // The sessionless revision is not spoken within a session.
        let res = app.client.post(app.url("/mcp/github")).bearer_auth(&credential)
            .header("Mcp-Session-Id", "mcps_whatever").header("MCP-Protocol-Version", "2026-07-28")
            .json(&ask(12, "tools/list", json!({}))).send().await.unwrap();
        assert_error(res, 400, "unsupported_protocol_version").await;

        // Every call is on the trail as any other; no session was opened.
        assert!(audit_events(&app, "event_type=mcp.session.opened&limit=10").await.is_empty());
        app.stop().await;
    }
}

each_engine! {
    async fn an_upstream_of_the_handshake_only(engine) {
        let upstream = crate::mcp_upstream::start_handshake_only(Some(UPSTREAM_TOKEN)).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp:github"])).await;
        // The upstream's own JSON-RPC errors are relayed (it names the revisions it speaks):
        // the agent's client falls back to the handshake and a session, as the SDK's default
        // client does.
        let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
        let res = sessionless(&app, &credential, probe, None, false).await;
        assert_eq!(res.status(), 200);
        let answer = response_of(res, 1).await;
        assert_eq!(answer["error"]["data"]["supported"], json!(["2025-06-18", "2025-11-25"]), "{answer}");
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_issues", "arguments": {"repo": "acme/api"}}});
        let res = sessionless(&app, &credential, call.clone(), None, false).await;
        assert!(response_of(res, 2).await["error"]["code"].is_i64());
        let seen = python_client(&app.url("/mcp/github"), &credential, "auto").await;
        assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
        assert_eq!(seen["allowed"]["text"], "open issues of \"acme/api\": #1, #2", "{seen}");
        assert_eq!(seen["denied"]["decision"], "deny", "{seen}");
        app.stop().await;
    }
}

each_engine! {
    async fn an_upstream_that_answers_in_plain_text(engine) {
        // A server of the handshake revisions before the sessionless one knew of it: every
        // request without a session is a 400 in plain text.
        let router = axum::Router::new().route(
            "/mcp",
            axum::routing::post(|| async { (axum::http::StatusCode::BAD_REQUEST, "Bad Request: Session ID is required") }),
        );
        let upstream = crate::upstream::UpstreamServer::start_with(router).await;
        let Scene { app, credential, .. } = scene(engine, &upstream, json!(["mcp:github"])).await;
        // The probe is answered -32601, saying to start with `initialize`: clients fall back.
        let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
        let res = sessionless(&app, &credential, probe, None, false).await;
        assert_eq!(res.status(), 200);
        let answer = response_of(res, 1).await;
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("initialize"), "{answer}");
        // Any other request: 502, saying the same.
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
        let res = sessionless(&app, &credential, call, None, false).await;
        let body = assert_error(res, 502, "upstream_unavailable").await;
        assert!(body["message"].as_str().unwrap().contains("initialize"), "{body}");
        app.stop().await;
    }
}
