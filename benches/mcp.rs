//! The MCP gateway's benchmark: what `/mcp/{name}` adds to a tool call.
//!
//! It starts a real MCP server on loopback (the test suite's, built with the official Rust SDK,
//! over TLS with a CA of its own, requiring its own token) and an in-process acp server on a
//! temporary SQLite file (or the empty Postgres database named by `ACP_BENCH_DATABASE_URL`),
//! trusting that CA and allowing loopback, with the upstream registered as `bench` (its token in
//! a vault secret set) and a policy that allows the agent `mcp.bench.list_issues`. Two sessions
//! are opened, one straight to the upstream (with its token, as an agent holding it would) and
//! one through the gateway (with the agent's credential), and the same two in the sessionless
//! revision (2026-07-28, no session); then rounds of the same `tools/call` each of the four
//! ways, in an order that turns each round: p50 and p99 of each side and of the per-pair
//! difference within each revision.
//! Through the gateway, each call is a decision committed before it is forwarded, the token
//! filled in from the vault, the answer scrubbed and the call recorded.
//!
//! Run: `cargo bench --profile quick --bench mcp` (`ACP_BENCH_MCP_PAIRS`, default 300; with
//! `ACP_BENCH_MCP_PROBE` set, five `ping` and five `tools/list` each way are printed first:
//! what the relay costs without a decision).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops at the first failure"
)]

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde_json::json;

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/common/mcp.rs"]
mod mcp;
#[path = "../tests/api/mcp_upstream.rs"]
mod mcp_upstream;
#[path = "common/served.rs"]
mod served;
use served::{percentile, sorted};
#[path = "../tests/api/upstream.rs"]
mod upstream;

use acp::audit::Actor;
use mcp::McpClient;

const UPSTREAM_TOKEN: &str = "ghp_bench_0123456789abcdef";

/// One `tools/call` through `client`, timed in milliseconds.
async fn timed_call(client: &mut McpClient) -> Result<f64> {
    let t = Instant::now();
    let result = client
        .call("list_issues", json!({"repo": "acme/api"}))
        .await?;
    let took = t.elapsed().as_secs_f64() * 1000.0;
    if result["isError"] == json!(true) {
        bail!("the call failed: {result}");
    }
    Ok(took)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pairs: usize = match std::env::var("ACP_BENCH_MCP_PAIRS") {
        Ok(v) => v.parse().context("ACP_BENCH_MCP_PAIRS must be a number")?,
        Err(_) => 300,
    };
    let upstream = mcp_upstream::start(Some(UPSTREAM_TOKEN)).await;
    let served = served::Served::start(&upstream.ca_pem).await?;
    let (ctx, workspace_id, api_key, base) = (
        served.ctx.clone(),
        served.workspace_id.clone(),
        served.api_key.clone(),
        served.base.clone(),
    );

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
            .json(&json!({"agent_id": agent_id, "scopes": ["mcp:bench"], "ttl_seconds": 3600}))
            .send()
            .await?,
        "mint",
    )
    .await?;
    let credential = minted["credential"]["token"].as_str().context("token")?;

    let direct_http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(upstream.ca_pem.as_bytes())?)
        .build()?;
    let mut direct = McpClient::new(direct_http.clone(), upstream.url("/mcp"), UPSTREAM_TOKEN);
    direct.open("bench").await?;
    let mut gateway = McpClient::new(
        reqwest::Client::new(),
        format!("{base}/mcp/bench"),
        credential,
    );
    gateway.open("bench").await?;
    // The same both ways in the sessionless revision (2026-07-28).
    let mut direct_sessionless =
        McpClient::sessionless(direct_http, upstream.url("/mcp"), UPSTREAM_TOKEN);
    direct_sessionless.open("bench").await?;
    let mut gateway_sessionless = McpClient::sessionless(
        reqwest::Client::new(),
        format!("{base}/mcp/bench"),
        credential,
    );
    gateway_sessionless.open("bench").await?;

    if std::env::var("ACP_BENCH_MCP_PROBE").is_ok() {
        for method in ["ping", "tools/list"] {
            for _ in 0..5 {
                let t = Instant::now();
                gateway.request(method, json!({})).await?;
                let g = t.elapsed().as_secs_f64() * 1000.0;
                let t = Instant::now();
                direct.request(method, json!({})).await?;
                println!(
                    "{method}: gateway {g:.2} ms, direct {:.2} ms",
                    t.elapsed().as_secs_f64() * 1000.0
                );
            }
        }
    }
    let (mut straight, mut through, mut overhead) = (Vec::new(), Vec::new(), Vec::new());
    let (mut straight_sl, mut through_sl, mut overhead_sl) = (Vec::new(), Vec::new(), Vec::new());
    let warm = 20;
    for i in 0..pairs + warm {
        // The four sides in an order that turns each round: either revision first, either
        // way first within it.
        let mut took = [0.0; 4];
        for k in 0..4 {
            let side = (i + k) % 4;
            took[side] = match side {
                0 => timed_call(&mut direct).await?,
                1 => timed_call(&mut gateway).await?,
                2 => timed_call(&mut direct_sessionless).await?,
                _ => timed_call(&mut gateway_sessionless).await?,
            };
        }
        if i >= warm {
            straight.push(took[0]);
            through.push(took[1]);
            overhead.push(took[1] - took[0]);
            straight_sl.push(took[2]);
            through_sl.push(took[3]);
            overhead_sl.push(took[3] - took[2]);
        }
    }
    let (straight, through, overhead) = (sorted(straight), sorted(through), sorted(overhead));
    let (straight_sl, through_sl, overhead_sl) =
        (sorted(straight_sl), sorted(through_sl), sorted(overhead_sl));
    println!("## The MCP gateway: what it adds to a tool call");
    println!();
    println!(
        "Engine: {}; {pairs} rounds of `tools/call` each of four ways (after {warm} warm-up rounds), the order turning.",
        served.engine()
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
        (
            "straight to the MCP server, sessionless (2026-07-28)",
            &straight_sl,
        ),
        ("through `/mcp/bench`, sessionless", &through_sl),
        ("added by the gateway, sessionless (per pair)", &overhead_sl),
    ] {
        println!(
            "| {what} | {:.2} | {:.2} |",
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    }
    served.stop().await
}
