//! The vault's benchmark: what the injecting proxy adds to a call, and how many secret reads a
//! server answers.
//!
//! It starts a real HTTPS upstream on loopback (the test suite's, with a CA of its own) and an
//! in-process acp server on a temporary SQLite file (or the empty Postgres database named by
//! `ACP_BENCH_DATABASE_URL`), trusting that CA and allowing loopback through the operator
//! allow-list, as an operator would configure it. Then, in one run:
//!
//! 1. **Proxy overhead.** Pairs of the same call, one straight to the upstream (a pooled HTTPS
//!    client, as an agent holding the key would make it) and one through
//!    `POST /v1/vault/proxy/request` (signed, with a request lease minted beforehand and not
//!    timed), in alternating order; p50 and p99 of each side and of the per-pair difference.
//!    Twice: to `/api/v1/charges`, which answers as an API does (nothing of the request's
//!    headers in it), then to `/echo/v1/charges`, which echoes the request, the injected key
//!    with it: the proxy scrubs it and commits the leak's event before it answers.
//! 2. **Secret reads.** `ACP_BENCH_CONCURRENCY` agents' clients read one key each through
//!    `POST /v1/vault/secrets/read` for `ACP_BENCH_READ_SECS`, each lease good for 100 reads
//!    (the mints, one per 100 reads, are inside the measured time).
//!
//! Run: `cargo bench --bench vault` (settings: `ACP_BENCH_PROXY_PAIRS`, default 300;
//! `ACP_BENCH_READ_SECS`, default 5; `ACP_BENCH_CONCURRENCY`, default 16).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops at the first failure"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use ed25519_dalek::SigningKey;
use rand::RngCore;
use serde_json::{json, Value};

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "common/served.rs"]
mod served;
use served::{percentile, sorted};
#[path = "../tests/api/upstream.rs"]
mod upstream;

use acp::audit::Actor;

fn env_number(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name} must be a number")),
        Err(_) => Ok(default),
    }
}

struct Agent {
    http: reqwest::Client,
    base: String,
    id: String,
    key: SigningKey,
}

impl Agent {
    /// The request, signed now, ready to send.
    fn signed(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        let bytes = serde_json::to_vec(body).expect("json");
        let mut nonce = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut nonce);
        let nonce = hex::encode(nonce);
        let timestamp = common::now_ms().expect("clock").to_string();
        let signature = common::sign_request(&self.key, "POST", path, &timestamp, &nonce, &bytes);
        self.http
            .post(format!("{}{path}", self.base))
            .header("Content-Type", "application/json")
            .header("X-Service-Agent-Id", &self.id)
            .header("X-Service-Timestamp", timestamp)
            .header("X-Service-Nonce", nonce)
            .header("X-Service-Signature", signature)
            .body(bytes)
    }

    async fn mint(&self, workflow_token: &str, action: &str, uses: i64) -> Result<String> {
        let body = json!({"workflow_lease_token": workflow_token, "secret_set_id": 1,
            "action": action, "uses": uses, "ttl_seconds": 900});
        let answer = common::json_of(
            self.signed("/v1/vault/leases/request/mint", &body)
                .send()
                .await?,
            "mint",
        )
        .await?;
        Ok(answer["request_lease_token"]
            .as_str()
            .context("token")?
            .to_owned())
    }
}

/// `pairs` pairs (after `warm` more) of the same call to `url`, straight and through the proxy,
/// in alternating order: the sorted milliseconds straight, through the proxy, and added.
async fn overhead_pairs(
    agent: &Agent,
    workflow_token: &str,
    direct_client: &reqwest::Client,
    url: &str,
    pairs: usize,
    warm: usize,
) -> Result<[Vec<f64>; 3]> {
    let call = json!({"method": "POST", "url": url, "body": "{\"amount\":5}",
        "headers": {"Content-Type": "application/json"}});
    let (mut direct, mut proxied, mut overhead) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs + warm {
        let token = agent.mint(workflow_token, "proxy", 1).await?;
        let request = agent.signed(
            "/v1/vault/proxy/request",
            &json!({"request_lease_token": token, "secret_set_id": 1, "profile": "api", "request": call}),
        );
        let straight = direct_client
            .post(url)
            .header("Authorization", "Bearer sk_bench_0123456789abcdef")
            .header("Content-Type", "application/json")
            .body("{\"amount\":5}");
        let time_direct = || async {
            let t = Instant::now();
            let res = straight.send().await?;
            let ok = res.status().is_success();
            res.bytes().await?;
            if !ok {
                bail!("direct call failed");
            }
            Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64() * 1000.0)
        };
        let time_proxy = || async {
            let t = Instant::now();
            let res = request.send().await?;
            let status = res.status();
            let body = res.bytes().await?;
            if !status.is_success() {
                bail!(
                    "proxy call failed: {status} {}",
                    String::from_utf8_lossy(&body)
                );
            }
            Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64() * 1000.0)
        };
        let (d, p) = if i % 2 == 0 {
            let d = time_direct().await?;
            (d, time_proxy().await?)
        } else {
            let p = time_proxy().await?;
            (time_direct().await?, p)
        };
        if i >= warm {
            direct.push(d);
            proxied.push(p);
            overhead.push(p - d);
        }
    }
    Ok([sorted(direct), sorted(proxied), sorted(overhead)])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pairs = env_number("ACP_BENCH_PROXY_PAIRS", 300)? as usize;
    let read_secs = env_number("ACP_BENCH_READ_SECS", 5)?;
    let concurrency = env_number("ACP_BENCH_CONCURRENCY", 16)? as usize;

    let upstream = upstream::UpstreamServer::start().await;
    let served = served::Served::start(&upstream.ca_pem).await?;
    let (ctx, workspace_id, api_key, base) = (
        served.ctx.clone(),
        served.workspace_id.clone(),
        served.api_key.clone(),
        served.base.clone(),
    );

    // The scene: an agent, a policy allowing the vault, a set, grants, a workflow lease.
    let http = reqwest::Client::new();
    let (agent_id, key) =
        common::register_and_attest(&http, &base, &api_key, "bench", json!({})).await?;
    let actor = Actor::Cli;
    let host = "localhost";
    acp::policy::sync::sync(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(json!({"spec": {
            "global_guardrails": {"vault": {"proxy_hosts": [host]}},
            "reusable_policy_blocks": {"all": {"vault": {"allow": ["*"]}}},
            "agent_groups": [{"name": "bench", "members": [agent_id]}],
            "bindings": [{"group": "bench", "blocks": ["all"]}],
        }}))?,
        None,
    )
    .await
    .map_err(|e| anyhow::anyhow!("policy: {e}"))?;
    acp::vault::sets::create_set(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(json!({
            "name": "bench", "provider": "echo", "environment": "production",
            "entries": {"TOKEN": "sk_bench_0123456789abcdef", "ACCOUNT": "acct_bench"},
            "profiles": {"api": {"hosts": [host], "ports": [upstream.port], "path_prefixes": ["/echo/", "/api/"],
                "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}}}}
        }))?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("set: {e}"))?;
    acp::vault::sets::create_grant(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(
            json!({"secret_set_id": 1, "agent_id": agent_id, "allowed_keys": "*",
            "allowed_actions": ["read", "proxy", "mint_lease"]}),
        )?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("grant: {e}"))?;
    let workflow = acp::vault::leases::issue_workflow(
        &ctx,
        &workspace_id,
        &actor,
        serde_json::from_value(
            json!({"agent_id": agent_id, "secret_set_id": 1, "purpose": "bench",
            "actions": ["read", "proxy"], "ttl_seconds": 86400}),
        )?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("workflow lease: {e}"))?;
    let agent = Arc::new(Agent {
        http: reqwest::Client::new(),
        base: base.clone(),
        id: agent_id,
        key,
    });
    let workflow_token = workflow.workflow_lease_token;

    // 1. The proxy's overhead, in pairs: an ordinary answer, then one that leaks the key.
    let direct_client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(upstream.ca_pem.as_bytes())?)
        .build()?;
    let warm = 20;
    let ordinary = overhead_pairs(
        &agent,
        &workflow_token,
        &direct_client,
        &upstream.url("/api/v1/charges"),
        pairs,
        warm,
    )
    .await?;
    let leaking = overhead_pairs(
        &agent,
        &workflow_token,
        &direct_client,
        &upstream.url("/echo/v1/charges"),
        pairs,
        warm,
    )
    .await?;

    // 2. Secret reads.
    let deadline = Instant::now() + Duration::from_secs(read_secs);
    let reads = Arc::new(AtomicUsize::new(0));
    let mints = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (agent, workflow_token, reads, mints) = (
            agent.clone(),
            workflow_token.clone(),
            reads.clone(),
            mints.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut token = agent.mint(&workflow_token, "read", 100).await?;
            mints.fetch_add(1, Ordering::Relaxed);
            let mut left = 100;
            while Instant::now() < deadline {
                if left == 0 {
                    token = agent.mint(&workflow_token, "read", 100).await?;
                    mints.fetch_add(1, Ordering::Relaxed);
                    left = 100;
                }
                let body =
                    json!({"request_lease_token": token, "secret_set_id": 1, "keys": ["ACCOUNT"]});
                let res = agent.signed("/v1/vault/secrets/read", &body).send().await?;
                if !res.status().is_success() {
                    bail!("read failed: {}", res.text().await?);
                }
                res.bytes().await?;
                left -= 1;
                reads.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let reads = reads.load(Ordering::Relaxed);

    println!("## The vault's proxy and secret reads");
    println!();
    println!(
        "Engine: {}; {} proxy pairs (after {warm} warm-up pairs); reads with {concurrency} concurrent clients for {read_secs} s.",
        served.engine(),
        pairs
    );
    println!();
    println!("| call | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for (what, [direct, proxied, overhead]) in [
        ("an API's answer", &ordinary),
        (
            "an answer that echoes the key (scrubbed, its leak recorded first)",
            &leaking,
        ),
    ] {
        for (side, v) in [
            ("straight to the upstream (HTTPS, pooled)", direct),
            ("through `POST /v1/vault/proxy/request`", proxied),
            ("**added by the proxy** (per pair)", overhead),
        ] {
            println!(
                "| {what}: {side} | {:.2} | {:.2} |",
                percentile(v, 50.0),
                percentile(v, 99.0)
            );
        }
    }
    println!();
    println!(
        "Secret reads: {reads} in {elapsed:.1} s = **{:.0} reads/s** ({} request leases minted within the time).",
        reads as f64 / elapsed,
        mints.load(Ordering::Relaxed)
    );
    served.stop().await
}
