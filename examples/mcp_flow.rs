//! The MCP gateway, end to end against a running server: an agent's tool calls decided.
//!
//! a. the owner (a personal access token) puts the upstream's token in a secret set with a
//!    proxy profile `mcp` that may send it to the upstream's `/mcp` only, and registers the
//!    upstream as the MCP server `github` with that profile as its authentication;
//! b. an agent registers and attests; the owner applies a policy that allows it
//!    `mcp.github.list_issues`, denies `mcp.github.delete_repo`, and lets it `transfer` up to
//!    100 USD, a person approving up to 1,000;
//! c. the pipeline (the API key) mints the agent a credential with the scope `mcp:github`;
//! d. the agent, as any MCP client would, opens a session at `/mcp/github` and calls: listing
//!    issues is forwarded (the upstream only answers calls that carry its token, which the agent
//!    never held); deleting a repository is refused with an error result naming the reason;
//!    a transfer of 500 USD is held for approval, with the challenge's status link;
//! e. the owner approves the challenge; the same transfer is then forwarded, once. The audit
//!    trail shows each call with its decision.
//!
//! Every step is checked; the example exits non-zero on the first answer that is not the
//! expected one. `scripts/mcp-example.sh` runs it against a fresh server and the MCP server
//! `examples/mcp_upstream.rs`; by hand:
//!
//! ```sh
//! MCP_UPSTREAM_TOKEN=ghp_example cargo run --example mcp_upstream -- /tmp/mcp-ca.pem
//! ACP_VAULT_PROXY_CA_FILE=/tmp/mcp-ca.pem ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 acp serve
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... ACP_TOKEN=svc_pat_... \
//!   UPSTREAM_URL=https://localhost:PORT/mcp UPSTREAM_TOKEN=ghp_example cargo run --example mcp_flow
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;
#[path = "common/mcp.rs"]
mod mcp;
use common::{answer_of, register_and_attest};

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

fn ok(what: &str, (status, body): (u16, Value)) -> Result<Value> {
    if status != 200 {
        bail!("{what}: HTTP {status}: {body}");
    }
    Ok(body)
}

#[tokio::main]
async fn main() -> Result<()> {
    let (base, api_key) = common::server_from_env()?;
    let token = std::env::var("ACP_TOKEN")
        .context("set ACP_TOKEN to an owner's personal access token (svc_pat_...)")?;
    let upstream = std::env::var("UPSTREAM_URL")
        .context("set UPSTREAM_URL to the MCP server, e.g. https://localhost:8443/mcp")?;
    let upstream_token =
        std::env::var("UPSTREAM_TOKEN").context("set UPSTREAM_TOKEN to the MCP server's token")?;
    let parsed = url::Url::parse(&upstream).context("UPSTREAM_URL is not a URL")?;
    let host = parsed.host_str().context("UPSTREAM_URL names no host")?;
    let port = parsed.port_or_known_default().unwrap_or(443);
    let http = reqwest::Client::new();
    let owner = |path: &str, body: Value| {
        let request = http
            .post(format!("{base}{path}"))
            .bearer_auth(&token)
            .json(&body);
        async move { answer_of(request.send().await?).await }
    };

    // a. The upstream's token in the vault, and the server registered with it.
    let set = ok(
        "secret set",
        owner(
            "/v1/vault/secret-sets",
            json!({"name": "github-mcp", "provider": "github", "environment": "production",
                   "entries": {"GITHUB_TOKEN": upstream_token},
                   "profiles": {"mcp": {"hosts": [host], "ports": [port], "methods": ["POST", "DELETE"],
                       "path_prefixes": [parsed.path()],
                       "inject": {"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}}}}),
        )
        .await?,
    )?;
    let set_id = set["secret_set"]["secret_set_id"].clone();
    let server = ok(
        "register the MCP server",
        owner(
            "/v1/mcp/servers",
            json!({"name": "github", "url": upstream, "auth": {"secret_set_id": set_id, "profile": "mcp"}}),
        )
        .await?,
    )?;
    let endpoint = server["server"]["endpoint"]
        .as_str()
        .context("endpoint")?
        .to_owned();
    println!("registered `github`: agents connect to {endpoint}");

    // b. The agent, and what it may do.
    let (agent_id, _key) =
        register_and_attest(&http, &base, &api_key, "issue-bot", json!({})).await?;
    ok(
        "apply the policy",
        owner(
            "/v1/policies/sync",
            json!({"spec": {
                "reusable_policy_blocks": {
                    "github": {"actions": {"allow": ["mint_credential", "mcp.github.list_issues"],
                                           "deny": ["mcp.github.delete_repo"]}},
                    "payments": {"amount": {"limits": {"USD": {"allow_up_to": 100, "challenge_up_to": 1000}}},
                                 "approval": {"approver_role": "owner"}}
                },
                "agent_groups": [{"name": "bots", "members": [agent_id]}],
                "bindings": [{"group": "bots", "blocks": ["github"]},
                             {"group": "bots", "blocks": ["payments"], "actions": ["mcp.github.transfer"]}]
            }}),
        )
        .await?,
    )?;

    // c. A credential for the agent, for this server only.
    let minted = ok(
        "mint",
        answer_of(
            http.post(format!("{base}/v1/identity/credentials/mint"))
                .header("X-Service-Api-Key", &api_key)
                .json(&json!({"agent_id": agent_id, "scopes": ["mcp:github"], "ttl_seconds": 900}))
                .send()
                .await?,
        )
        .await?,
    )?;
    let credential = minted["credential"]["token"]
        .as_str()
        .context("token")?
        .to_owned();

    // d. The agent's MCP session.
    let mut mcp = mcp::McpClient::new(http.clone(), endpoint, &credential);
    let init = mcp.open("issue-bot").await?;
    println!(
        "session open (protocol {})",
        init["result"]["protocolVersion"]
    );
    let allowed = mcp.call("list_issues", json!({"repo": "acme/api"})).await?;
    if allowed["isError"] == json!(true) || !text_of(&allowed).starts_with("open issues") {
        bail!("list_issues should be forwarded: {allowed}");
    }
    println!(
        "allowed: list_issues -> {:?} (trace {})",
        text_of(&allowed),
        allowed["_meta"]["acp/trace_id"]
    );
    let denied = mcp.call("delete_repo", json!({"repo": "acme/api"})).await?;
    if denied["isError"] != json!(true) || denied["_meta"]["acp/decision"]["decision"] != "deny" {
        bail!("delete_repo should be denied: {denied}");
    }
    println!("denied: delete_repo -> {:?}", text_of(&denied));
    let transfer = json!({"amount": 500, "currency": "USD", "to": "acct_42"});
    let held = mcp.call("transfer", transfer.clone()).await?;
    let challenge_id = held["_meta"]["acp/decision"]["challenge_id"]
        .as_str()
        .with_context(|| format!("transfer should be challenged: {held}"))?
        .to_owned();
    println!("challenged: transfer 500 USD -> {:?}", text_of(&held));

    // e. A person approves; the same call goes through once.
    ok(
        "approve",
        owner(
            &format!("/v1/policy-challenges/{challenge_id}/decide"),
            json!({"decision": "approve", "reason": "known recipient"}),
        )
        .await?,
    )?;
    let approved = mcp.call("transfer", transfer).await?;
    if approved["isError"] == json!(true) {
        bail!("the approved transfer should be forwarded: {approved}");
    }
    println!(
        "approved, then allowed: transfer -> {:?}",
        text_of(&approved)
    );

    // The trail: each call's event is committed beside its answer, with the writer's next
    // batch (within moments).
    let mut items = Vec::new();
    for _ in 0..50 {
        let (_, events) = answer_of(
            http.get(format!(
                "{base}/v1/workspace/audit/events?event_type=mcp.tool.called&limit=10"
            ))
            .header("X-Service-Api-Key", &api_key)
            .send()
            .await?,
        )
        .await?;
        items = events["items"].as_array().context("events")?.clone();
        if items.len() >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    if items.len() < 4 {
        bail!("expected four recorded calls, got {}", items.len());
    }
    for event in items.iter().rev() {
        println!(
            "audit: mcp.tool.called {} {}",
            event["details"]["tool"], event["details"]["outcome"]
        );
    }
    Ok(())
}
