//! The MCP gateway's benchmark: what `/mcp/{name}` adds to a tool call.
//!
//! It starts a real MCP server on loopback (the test suite's, built with the official Rust SDK,
//! over TLS with a CA of its own, requiring its own token) and an in-process acp server on a
//! temporary SQLite file (or the empty Postgres database named by `ACP_BENCH_DATABASE_URL`),
//! trusting that CA and allowing loopback, with the upstream registered as `bench` (its token in
//! a vault secret set) and a policy that allows the agent `mcp.bench.list_issues`. Two sessions
//! are opened, one straight to the upstream (with its token, as an agent holding it would) and
//! one through the gateway (with the agent's credential); then pairs of the same `tools/call`,
//! one each way, in alternating order: p50 and p99 of each side and of the per-pair difference.
//! Through the gateway, each call is a decision committed before it is forwarded, the token
//! filled in from the vault, the answer scrubbed and the call recorded.
//!
//! Run: `cargo bench --profile quick --bench mcp` (`ACP_BENCH_MCP_PAIRS`, default 300).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops at the first failure"
)]

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../tests/api/mcp_upstream.rs"]
mod mcp_upstream;
#[path = "../tests/api/upstream.rs"]
mod upstream;

use acp::audit::Actor;

const MASTER_KEY: &str = "9pt6wChGrj9fIlNeGz7qy3cv4caw0MidFMP3XvbV9KU=";
const UPSTREAM_TOKEN: &str = "ghp_bench_0123456789abcdef";

/// One MCP session: its endpoint, the bearer it sends, its id once open.
struct Session {
    http: reqwest::Client,
    url: String,
    bearer: String,
    id: Option<String>,
    next: i64,
}

impl Session {
    async fn open(http: reqwest::Client, url: String, bearer: &str) -> Result<Session> {
        let mut session = Session {
            http,
            url,
            bearer: bearer.to_owned(),
            id: None,
            next: 1,
        };
        session
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}),
            )
            .await?;
        let res = session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        if res.status() != 202 {
            bail!("initialized: {}", res.status());
        }
        Ok(session)
    }

    async fn send(&self, message: &Value) -> Result<reqwest::Response> {
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.bearer)
            .header("Accept", "application/json, text/event-stream")
            .json(message);
        if let Some(id) = &self.id {
            request = request
                .header("Mcp-Session-Id", id)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        Ok(request.send().await?)
    }

    /// A request, answered (read to the end of its body or stream).
    async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next;
        self.next += 1;
        let res = self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        if let Some(session) = res.headers().get("mcp-session-id") {
            self.id = Some(session.to_str()?.to_owned());
        }
        let status = res.status();
        let text = res.text().await?;
        if !status.is_success() {
            bail!("{method}: {status} {text}");
        }
        serde_json::from_str::<Value>(&text)
            .ok()
            .or_else(|| {
                text.lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                    .find(|m| m["id"] == json!(id))
            })
            .with_context(|| format!("{method}: no response in {text}"))
    }

    /// One `tools/call`, timed in milliseconds.
    async fn timed_call(&mut self) -> Result<f64> {
        let t = Instant::now();
        let answer = self
            .request(
                "tools/call",
                json!({"name": "list_issues", "arguments": {"repo": "acme/api"}}),
            )
            .await?;
        let took = t.elapsed().as_secs_f64() * 1000.0;
        if answer["result"]["isError"] == json!(true) || answer.get("error").is_some() {
            bail!("the call failed: {answer}");
        }
        Ok(took)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pairs: usize = match std::env::var("ACP_BENCH_MCP_PAIRS") {
        Ok(v) => v.parse().context("ACP_BENCH_MCP_PAIRS must be a number")?,
        Err(_) => 300,
    };
    let upstream = mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
    let dir = tempfile::tempdir()?;
    let database_url = std::env::var("ACP_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| format!("sqlite:{}/acp.db", dir.path().display()));
    let mut config =
        acp::config::Config::for_database(&database_url).map_err(anyhow::Error::msg)?;
    config.addr = "127.0.0.1:0".parse()?;
    config.email_url = "outbox".into();
    config.master_key = Some(acp::secret::Secret::new(MASTER_KEY.to_owned()));
    config.vault_proxy_allow = vec!["127.0.0.1/32".parse()?];
    config.vault_proxy_ca_pem = Some(upstream.ca_pem.clone().into_bytes());
    let app = acp::app::App::build(config).await?;
    let ctx = app.context().clone();
    let bootstrap = app.bootstrap.as_ref().context("a fresh database")?;
    let workspace_id = bootstrap.workspace_id.clone();
    let api_key = bootstrap
        .generated_key
        .as_ref()
        .context("generated key")?
        .expose()
        .to_owned();
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));

    // The scene: an agent, its policy, the upstream's token in a set, the server registered.
    let http = reqwest::Client::new();
    let (agent_id, _key) =
        common::register_and_attest(&http, &base, &api_key, "bench", json!({})).await?;
    let actor = Actor::Cli;
    acp::policy::sync::sync(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(json!({"spec": {
            "reusable_policy_blocks": {"tools": {"actions": {"allow": ["mint_credential", "mcp.bench.list_issues"]}}},
            "agent_groups": [{"name": "bench", "members": [agent_id]}],
            "bindings": [{"group": "bench", "blocks": ["tools"]}],
        }}))?,
        None,
    )
    .await
    .map_err(|e| anyhow::anyhow!("policy: {e}"))?;
    let set = acp::vault::sets::create_set(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(json!({
            "name": "bench-mcp", "provider": "github", "environment": "production",
            "entries": {"TOKEN": UPSTREAM_TOKEN},
            "profiles": {"mcp": {"hosts": ["localhost"], "ports": [upstream.port], "methods": ["POST", "DELETE"],
                "path_prefixes": ["/mcp"], "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}}}}
        }))?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("set: {e}"))?;
    acp::mcp::servers::create(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(json!({"name": "bench", "url": upstream.url("/mcp"),
            "auth": {"secret_set_id": set.secret_set_id, "profile": "mcp"}}))?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("server: {e}"))?;
    let minted = common::json_of(
        http.post(format!("{base}/v1/identity/credentials/mint"))
            .header("X-Service-Api-Key", &api_key)
            .json(&json!({"agent_id": agent_id, "scopes": ["mcp:bench"], "ttl_seconds": 86400}))
            .send()
            .await?,
        "mint",
    )
    .await?;
    let credential = minted["credential"]["token"].as_str().context("token")?;

    let direct_http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(upstream.ca_pem.as_bytes())?)
        .build()?;
    let mut direct = Session::open(direct_http, upstream.url("/mcp"), UPSTREAM_TOKEN).await?;
    let mut gateway = Session::open(
        reqwest::Client::new(),
        format!("{base}/mcp/bench"),
        credential,
    )
    .await?;

    let (mut straight, mut through, mut overhead) = (Vec::new(), Vec::new(), Vec::new());
    let warm = 20;
    for i in 0..pairs + warm {
        let (d, g) = if i % 2 == 0 {
            let d = direct.timed_call().await?;
            (d, gateway.timed_call().await?)
        } else {
            let g = gateway.timed_call().await?;
            (direct.timed_call().await?, g)
        };
        if i >= warm {
            straight.push(d);
            through.push(g);
            overhead.push(g - d);
        }
    }
    let (straight, through, overhead) = (sorted(straight), sorted(through), sorted(overhead));
    println!("## The MCP gateway: what it adds to a tool call");
    println!();
    println!(
        "Engine: {}; {pairs} pairs of `tools/call` (after {warm} warm-up pairs), alternating.",
        if database_url.starts_with("postgres") {
            "Postgres"
        } else {
            "SQLite (synchronous=FULL)"
        }
    );
    println!();
    println!("| call | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for (what, v) in [
        ("straight to the MCP server (HTTPS, its session)", &straight),
        (
            "through `/mcp/bench` (decided, token injected, scrubbed, recorded)",
            &through,
        ),
        ("added by the gateway (per pair)", &overhead),
    ] {
        println!(
            "| {what} | {:.2} | {:.2} |",
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    }
    let _ = stop.send(());
    server.await??;
    Ok(())
}
