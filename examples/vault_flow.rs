//! The vault, end to end against a running server: an agent uses a secret it never holds.
//!
//! a. the owner (a personal access token) makes the secret set `payments-api` with the entries
//!    `API_TOKEN` and `ACCOUNT_ID` and a proxy profile `api` that may send `API_TOKEN` to the
//!    upstream's `/echo/` paths only, as `Authorization: Bearer ${API_TOKEN}`;
//! b. an agent registers and attests; the owner applies a policy whose `vault` block allows
//!    the vault's actions in `production` and proxying to the upstream's host, and grants the
//!    agent least privilege in two grants: `read` of `ACCOUNT_ID` only, and `proxy` +
//!    `mint_lease` of every key;
//! c. the pipeline (the API key) hands the agent a workflow lease for `read` and `proxy`;
//! d. the agent, with its own signed requests (as the public client sends them: no `agent_id`
//!    in the body, the set's number as `secret_set_id`), asks the policy, mints one-use request
//!    leases, reads `ACCOUNT_ID` (once), is refused `API_TOKEN`, and has acp call the upstream
//!    with `API_TOKEN` injected: the echo comes back with the token scrubbed out. The audit
//!    trail shows the call with its host, status and latency.
//!
//! Every step is checked; the example exits non-zero on the first answer that is not the
//! expected one. `scripts/vault-example.sh` runs it against a fresh server and the HTTPS echo
//! server `examples/https_echo.rs`; by hand:
//!
//! ```sh
//! cargo run --example https_echo -- /tmp/echo-ca.pem     # https_echo listening on https://localhost:PORT
//! ACP_VAULT_PROXY_CA_FILE=/tmp/echo-ca.pem ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 acp serve
//! ACP_URL=http://127.0.0.1:8080 ACP_API_KEY=svc_test_... ACP_TOKEN=svc_pat_... \
//!   UPSTREAM_URL=https://localhost:PORT cargo run --example vault_flow
//! ```
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use ed25519_dalek::SigningKey;
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;
use common::{answer_of, now_ms, register_and_attest, sign_request};

/// Not a secret in this demo: the agent may read it, and the example prints it.
const ACCOUNT_ID: &str = "acct_demo_1001";

/// The server, and the two kinds of people-side callers: the owner's personal access token and
/// the pipeline's API key.
struct Acp {
    http: reqwest::Client,
    base: String,
    api_key: String,
    token: String,
}

impl Acp {
    async fn as_owner(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        answer_of(
            self.http
                .post(format!("{}{path}", self.base))
                .bearer_auth(&self.token)
                .json(body)
                .send()
                .await?,
        )
        .await
    }

    async fn as_pipeline(&self, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.base);
        let request = match body {
            Some(body) => self.http.post(url).json(body),
            None => self.http.get(url),
        };
        answer_of(
            request
                .header("X-Service-Api-Key", &self.api_key)
                .send()
                .await?,
        )
        .await
    }
}

/// The agent: its own key, and requests it signs itself.
struct Agent {
    id: String,
    key: SigningKey,
}

impl Agent {
    /// A signed `POST`, as the public client sends it: the signer is the agent, so the body
    /// names no `agent_id`.
    async fn post(&self, acp: &Acp, path: &str, body: &Value) -> Result<(u16, Value)> {
        let bytes = serde_json::to_vec(body)?;
        let (ts, nonce) = (now_ms()?.to_string(), uuid::Uuid::new_v4().to_string());
        let signature = sign_request(&self.key, "POST", path, &ts, &nonce, &bytes);
        answer_of(
            acp.http
                .post(format!("{}{path}", acp.base))
                .header("Content-Type", "application/json")
                .header("X-Service-Agent-Id", &self.id)
                .header("X-Service-Timestamp", ts)
                .header("X-Service-Nonce", nonce)
                .header("X-Service-Signature", signature)
                .body(bytes)
                .send()
                .await?,
        )
        .await
    }
}

/// The answer of a step that must succeed.
fn ok(what: &str, (status, body): (u16, Value)) -> Result<Value> {
    if status != 200 {
        bail!("{what}: HTTP {status}: {body}");
    }
    Ok(body)
}

/// The answer of a step that must be refused with this status and code.
fn refused(what: &str, (status, body): (u16, Value), want: u16, code: &str) -> Result<()> {
    if status != want || body["error"] != code {
        bail!("{what}: expected HTTP {want} `{code}`, got HTTP {status}: {body}");
    }
    Ok(())
}

fn text<'a>(value: &'a Value, what: &str) -> Result<&'a str> {
    value
        .as_str()
        .with_context(|| format!("{what} is missing: {value}"))
}

#[tokio::main]
async fn main() -> Result<()> {
    let (base, api_key) = common::server_from_env()?;
    let token = std::env::var("ACP_TOKEN")
        .context("set ACP_TOKEN to an owner's personal access token (svc_pat_...)")?;
    let upstream = std::env::var("UPSTREAM_URL")
        .context("set UPSTREAM_URL to the HTTPS echo server, e.g. https://localhost:8443")?;
    let upstream = upstream.trim_end_matches('/').to_owned();
    let parsed = url::Url::parse(&upstream).context("UPSTREAM_URL is not a URL")?;
    let host = parsed
        .host_str()
        .context("UPSTREAM_URL names no host")?
        .to_owned();
    let port = parsed
        .port_or_known_default()
        .context("UPSTREAM_URL names no port")?;
    let acp = Acp {
        http: reqwest::Client::new(),
        base,
        api_key,
        token,
    };
    // The secret the agent uses without holding: made here, so the example can check that no
    // answer the agent gets ever carries it.
    let api_token = format!("sk_demo_{}", uuid::Uuid::new_v4().simple());

    // a. The owner makes the set, with a profile saying where `API_TOKEN` may go, and how.
    let made = ok(
        "create the secret set",
        acp.as_owner(
            "/v1/vault/secret-sets",
            &json!({"name": "payments-api", "provider": "example", "environment": "production",
                "entries": {"API_TOKEN": api_token, "ACCOUNT_ID": ACCOUNT_ID},
                "profiles": {"api": {"hosts": [host], "ports": [port], "path_prefixes": ["/echo/"],
                    "inject": {"headers": {"Authorization": "Bearer ${API_TOKEN}"}}}}}),
        )
        .await?,
    )?;
    if made.to_string().contains(&api_token) {
        bail!("the secret set's answer carries a value: {made}");
    }
    let set = &made["secret_set"];
    let number = set["number"].as_i64().context("the set's number")?;
    println!(
        "a. owner: secret set `payments-api` ({} number {number}, version {}), keys {}, profile `api`: \
         Authorization: Bearer ${{API_TOKEN}} to https://{host}/echo/ only",
        text(&set["secret_set_id"], "secret_set_id")?,
        set["version"],
        set["keys"]
    );

    // b. The agent registers and attests; the policy lets it use the vault; two grants give it
    //    no more than it needs.
    let (agent_id, key) = register_and_attest(
        &acp.http,
        &acp.base,
        &acp.api_key,
        "payments-agent",
        json!({"team": "payments"}),
    )
    .await?;
    let agent = Agent { id: agent_id, key };
    let spec = json!({
        "global_guardrails": {"vault": {"environments": ["production"]}},
        "reusable_policy_blocks": {"payments": {"vault": {
            "allow": ["mint_lease", "read", "proxy"], "proxy_hosts": [host]}}},
        "agent_groups": [{"name": "payers", "members": [agent.id]}],
        "bindings": [{"group": "payers", "blocks": ["payments"]}],
    });
    let applied = ok(
        "apply the policy",
        acp.as_owner(
            "/v1/policies/sync",
            &json!({"dry_run": false, "spec": spec}),
        )
        .await?,
    )?;
    if applied["dry_run"] != false || applied["applied"] != true {
        bail!("the policy was not applied: {applied}");
    }
    println!(
        "b. owner: policy {} version {} applied: group `payers` = [{}] may mint_lease, read, proxy \
         (to {host} only) in production",
        text(&applied["policy_id"], "policy_id")?,
        applied["version"],
        agent.id
    );
    let mut grants = Vec::new();
    for (keys, actions) in [
        (json!(["ACCOUNT_ID"]), json!(["read"])),
        (json!("*"), json!(["proxy", "mint_lease"])),
    ] {
        let granted = ok(
            "grant the set",
            acp.as_owner(
                "/v1/vault/grants",
                &json!({"secret_set_id": number, "agent_id": agent.id,
                    "allowed_keys": keys, "allowed_actions": actions}),
            )
            .await?,
        )?;
        grants.push(text(&granted["grant"]["grant_id"], "grant_id")?.to_owned());
    }
    println!(
        "   grants: {} = read of ACCOUNT_ID only; {} = proxy + mint_lease of every key",
        grants[0], grants[1]
    );

    // c. The pipeline hands the agent a workflow lease for this job.
    let workflow = ok(
        "issue the workflow lease",
        acp.as_pipeline(
            "/v1/vault/leases/workflow",
            Some(&json!({"agent_id": agent.id, "secret_set_id": number,
                "purpose": "charge customer A-1001", "actions": ["read", "proxy"], "ttl_seconds": 600})),
        )
        .await?,
    )?;
    let workflow_token = text(&workflow["workflow_lease_token"], "workflow_lease_token")?;
    println!(
        "c. pipeline: workflow lease {} for read + proxy, until {}",
        text(&workflow["lease_id"], "lease_id")?,
        text(&workflow["expires_at"], "expires_at")?
    );

    // d. The agent, with its own signed requests.
    let charges = format!("{upstream}/echo/charges");
    let call = json!({"method": "POST", "url": charges,
        "headers": {"Content-Type": "application/json"},
        "body": "{\"amount\":4200,\"currency\":\"usd\",\"order\":\"A-1001\"}"});
    for (step, what, ask) in [
        (
            "d. agent: ",
            "read ACCOUNT_ID",
            json!({"secret_set_id": number, "action": "read", "keys": ["ACCOUNT_ID"]}),
        ),
        (
            "   ",
            "proxy POST /echo/charges",
            json!({"secret_set_id": number, "action": "proxy", "profile": "api", "request": call}),
        ),
    ] {
        let eval = ok(
            "policy eval",
            agent.post(&acp, "/v1/vault/policy/eval", &ask).await?,
        )?;
        if eval["decision"] != "allow" {
            bail!("policy eval of {what}: {eval}");
        }
        println!(
            "{step}policy eval of {what}: {} {} (nothing consumed)",
            text(&eval["decision"], "decision")?,
            eval["reason_codes"]
        );
    }

    let mint = |action: &str, keys: Option<Value>| {
        let mut body = json!({"workflow_lease_token": workflow_token, "secret_set_id": number,
            "action": action});
        if let Some(keys) = keys {
            body["keys"] = keys;
        }
        body
    };
    let read = |lease: &str, key: &str| json!({"request_lease_token": lease, "secret_set_id": number, "keys": [key]});
    const MINT: &str = "/v1/vault/leases/request/mint";
    const READ: &str = "/v1/vault/secrets/read";

    // A one-use lease to read ACCOUNT_ID: one read, and no second.
    let minted = ok(
        "mint a read lease",
        agent
            .post(&acp, MINT, &mint("read", Some(json!(["ACCOUNT_ID"]))))
            .await?,
    )?;
    let lease = text(&minted["request_lease_token"], "request_lease_token")?;
    let secrets = ok(
        "read ACCOUNT_ID",
        agent.post(&acp, READ, &read(lease, "ACCOUNT_ID")).await?,
    )?;
    if secrets["secrets"] != json!({"ACCOUNT_ID": ACCOUNT_ID}) {
        bail!("read ACCOUNT_ID: {secrets}");
    }
    println!(
        "   read lease {} ({} use): ACCOUNT_ID = {ACCOUNT_ID}",
        text(&minted["lease_id"], "lease_id")?,
        minted["uses_left"]
    );
    refused(
        "a second read of a one-use lease",
        agent.post(&acp, READ, &read(lease, "ACCOUNT_ID")).await?,
        409,
        "lease_used",
    )?;
    println!("   the same lease again: HTTP 409 lease_used");

    // API_TOKEN: no grant lets this agent read it, neither when minting nor when reading.
    refused(
        "a read lease for API_TOKEN",
        agent
            .post(&acp, MINT, &mint("read", Some(json!(["API_TOKEN"]))))
            .await?,
        403,
        "key_not_granted",
    )?;
    let minted = ok(
        "mint a read lease for the granted keys",
        agent.post(&acp, MINT, &mint("read", None)).await?,
    )?;
    let lease = text(&minted["request_lease_token"], "request_lease_token")?;
    refused(
        "read API_TOKEN",
        agent.post(&acp, READ, &read(lease, "API_TOKEN")).await?,
        403,
        "key_not_granted",
    )?;
    let again = ok(
        "read ACCOUNT_ID after a refusal",
        agent.post(&acp, READ, &read(lease, "ACCOUNT_ID")).await?,
    )?;
    if again["secrets"]["ACCOUNT_ID"] != ACCOUNT_ID {
        bail!("read ACCOUNT_ID after a refusal: {again}");
    }
    println!(
        "   API_TOKEN: a lease for it is refused HTTP 403 key_not_granted, and so is reading it \
         with a lease for the granted keys (whose use the refusal did not spend: ACCOUNT_ID read)"
    );

    // The proxy: acp makes the call with API_TOKEN injected, and scrubs it from the answer.
    let minted = ok(
        "mint a proxy lease",
        agent.post(&acp, MINT, &mint("proxy", None)).await?,
    )?;
    let lease = text(&minted["request_lease_token"], "request_lease_token")?;
    let answer = ok(
        "proxy POST /echo/charges",
        agent
            .post(
                &acp,
                "/v1/vault/proxy/request",
                &json!({"request_lease_token": lease, "secret_set_id": number,
                    "profile": "api", "request": call}),
            )
            .await?,
    )?;
    if answer.to_string().contains(&api_token) {
        bail!("the proxy's answer carries the token: {answer}");
    }
    if answer["status"] != 200 {
        bail!("the upstream answered {}: {answer}", answer["status"]);
    }
    let echoed: Value = serde_json::from_str(text(&answer["body"], "the upstream's body")?)
        .context("the echo is not JSON")?;
    if echoed["method"] != "POST" || echoed["path"] != "/echo/charges" {
        bail!("the upstream did not get the call: {echoed}");
    }
    let authorization = text(
        &echoed["headers"]["authorization"],
        "the echoed Authorization",
    )?;
    if authorization != "Bearer [REDACTED]" {
        bail!("the echoed Authorization header is `{authorization}`, not `Bearer [REDACTED]`");
    }
    println!(
        "   proxy POST {charges}: upstream HTTP {}; it echoed `Authorization: {authorization}` \
         (acp injected API_TOKEN and scrubbed it from the answer: the agent never sees it)",
        answer["status"]
    );

    // The audit trail: the call with its host, status and latency, and never the token.
    let trail = ok(
        "audit events",
        acp.as_pipeline(
            "/v1/workspace/audit/events?event_type=vault.proxy.request",
            None,
        )
        .await?,
    )?;
    if trail.to_string().contains(&api_token) {
        bail!("the audit trail carries the token");
    }
    let event = trail["items"]
        .as_array()
        .and_then(|items| items.iter().find(|e| e["trace_id"] == answer["trace_id"]))
        .with_context(|| format!("no vault.proxy.request event for the call: {trail}"))?;
    let details = &event["details"];
    let latency = details["latency_ms"]
        .as_f64()
        .with_context(|| format!("no latency in {event}"))?;
    if details["host"] != host.as_str() || details["status"] != 200 {
        bail!("the audited call: {event}");
    }
    println!(
        "   audit {}: {} {} {}{} -> {} in {latency:.1} ms, keys {}, actor {}",
        text(&event["event_type"], "event_type")?,
        text(&event["trace_id"], "trace_id")?,
        text(&details["method"], "method")?,
        text(&details["host"], "host")?,
        text(&details["path"], "path")?,
        details["status"],
        details["keys"],
        text(&event["actor"], "actor")?
    );
    println!("the agent used API_TOKEN without ever holding it");
    Ok(())
}
