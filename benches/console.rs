//! Latency of the console's lists on a large workspace: the audit search
//! (`GET /v1/workspace/audit/events`) for each filter alone, the common pairs and pages deep
//! into the results, and the agents lists (`GET /v1/agents`, `GET /v1/workspace/agents`), through
//! the real HTTP API of the real binary, one request at a time, p50/p99 per filter. With
//! `ACP_CONSOLE_PART=access`, the access review's questions instead: the AuthZEN subject and
//! action searches and the effective permissions, on the seeded spec of 10,000 groups.
//!
//! The database is one `scripts/seed-large.sh` seeded (the bench knows the seeded values: the
//! rare and busy agents, the rare action and event type, the trace ids, the spec's groups).
//! Run:
//!
//! ```sh
//! ACP_BIN=target/quick/acp ACP_CONSOLE_DATABASE_URL=sqlite:/tmp/large.db \
//!   ACP_CONSOLE_API_KEY=svc_test_... ACP_CONSOLE_TOKEN=svc_pat_... cargo bench --bench console
//! ACP_CONSOLE_PART=access ACP_BIN=target/quick/acp ACP_CONSOLE_DATABASE_URL=sqlite:/tmp/large.db \
//!   ACP_CONSOLE_API_KEY=svc_test_... cargo bench --bench console
//! ```
//!
//! The lists' part replaces the default policy with groups of its own: run the access part
//! first on a freshly seeded database (it needs no events: `scripts/seed-large.sh URL 1000000 0`
//! seeds its agents and spec).
//!
//! Settings (environment):
//! - `ACP_BIN`: the server binary (default `target/release/acp`)
//! - `ACP_CONSOLE_DATABASE_URL`: the seeded database (required)
//! - `ACP_CONSOLE_PART`: `lists` (default) or `access`
//! - `ACP_CONSOLE_TOKEN`: a personal access token of an owner of the seeded workspace (required
//!   for the lists: the bench syncs the default policy's groups the agents list filters by,
//!   which takes a person; `owner_token` in `scripts/server.sh` makes one)
//! - `ACP_CONSOLE_API_KEY`: an API key of the seeded workspace, such as the
//!   `ACP_BOOTSTRAP_API_KEY` the database was first served with (required)
//! - `ACP_CONSOLE_EVENTS`: the number of events seeded (default 10000000; it locates the
//!   middle event the deep pages start from)
//! - `ACP_CONSOLE_REQUESTS`: measured requests per filter (default 200)
//! - `ACP_CONSOLE_WARMUP`: unmeasured requests before them (default 3, at least 1)
//! - `ACP_CONSOLE_SECS`: seconds per filter at most (default 10; at least 3 requests)
//! - `ACP_MASTER_KEY` is passed to the server (Postgres has no key file beside the database).
//!
//! The server's start is timed too: a binary with new migrations builds their indexes then.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde_json::Value;

/// Migrations building indexes over millions of rows run before the server listens.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which questions the bench asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The audit search and the agents lists.
    Lists,
    /// The access review on the seeded spec.
    Access,
}

struct Settings {
    bin: PathBuf,
    database_url: String,
    api_key: String,
    part: Part,
    /// A personal access token of an owner of the seeded workspace (the groups' policy sync;
    /// the lists only).
    token: String,
    events: u64,
    requests: usize,
    warmup: usize,
    secs: Duration,
}

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .with_context(|| format!("{name} must be a whole number, got `{text}`")),
        _ => Ok(default),
    }
}

fn required(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| anyhow!("set {name} (see the comment at the top of benches/console.rs)"))
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        let bin = match std::env::var_os("ACP_BIN") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/acp"),
        };
        if !bin.is_file() {
            bail!("no server binary at `{}`: set ACP_BIN", bin.display());
        }
        let part = match std::env::var("ACP_CONSOLE_PART").as_deref() {
            Err(_) | Ok("" | "lists") => Part::Lists,
            Ok("access") => Part::Access,
            Ok(other) => bail!("ACP_CONSOLE_PART is `lists` or `access`, not `{other}`"),
        };
        Ok(Self {
            bin,
            database_url: required("ACP_CONSOLE_DATABASE_URL")?,
            api_key: required("ACP_CONSOLE_API_KEY")?,
            token: match part {
                Part::Lists => required("ACP_CONSOLE_TOKEN")?,
                Part::Access => String::new(),
            },
            part,
            events: env_number("ACP_CONSOLE_EVENTS", 10_000_000)?.max(1),
            requests: usize::try_from(env_number("ACP_CONSOLE_REQUESTS", 200)?.max(1))?,
            warmup: usize::try_from(env_number("ACP_CONSOLE_WARMUP", 3)?.max(1))?,
            secs: Duration::from_secs(env_number("ACP_CONSOLE_SECS", 10)?.max(1)),
        })
    }
}

/// The running server; killed on drop.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(settings: &Settings) -> anyhow::Result<(Self, Duration)> {
        let mut command = Command::new(&settings.bin);
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if name_text.starts_with("ACP_") && name_text != "ACP_MASTER_KEY" {
                command.env_remove(&name);
            }
        }
        command
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--database-url",
                &settings.database_url,
            ])
            .env("TOKIO_WORKER_THREADS", "2")
            // A search page spends a token per evaluation: the bench measures answers, not the
            // key's rate.
            .env("ACP_API_KEY_RATE_LIMIT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let started = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start `{}`", settings.bin.display()))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            bail!("the server's stdout was not captured");
        };
        let (found, address) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("acp listening on ") {
                    let _ = found.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
            }
        });
        let mut server = Server {
            child,
            base: String::new(),
        };
        match address.recv_timeout(STARTUP_TIMEOUT) {
            Ok(base) if base.starts_with("http://127.0.0.1:") => server.base = base,
            Ok(base) => bail!("the server listens on `{base}`, not on 127.0.0.1"),
            Err(_) => bail!("the server printed no `acp listening on` line"),
        }
        Ok((server, started.elapsed()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The seeded ids (`scripts/seed-large.sh`): a prefix and 32 hex digits of the number.
fn seeded(prefix: &str, n: u64) -> String {
    format!("{prefix}{n:032x}")
}

/// The id of seeded agent `n` (`agt_5eed` and 28 hex digits: a valid agent id).
fn seeded_agent(n: u64) -> String {
    format!("agt_5eed{n:028x}")
}

struct Client {
    http: reqwest::Client,
    base: String,
    api_key: String,
    /// A personal access token, sent instead of the API key.
    token: Option<String>,
}

impl Client {
    /// Sends a case's request: a GET, or a POST of its body with the API key.
    async fn ask(&self, c: &Case) -> anyhow::Result<Value> {
        match &c.body {
            None => self.get(&c.path).await,
            Some(body) => self.post(&c.path, body).await,
        }
    }

    async fn get(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let response = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .header("x-service-api-key", &self.api_key)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() {
            bail!("GET {path_and_query}: {status} {body}");
        }
        Ok(body)
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let request = self.http.post(format!("{}{path}", self.base));
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request.header("x-service-api-key", &self.api_key),
        };
        let response = request.json(body).send().await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if !status.is_success() {
            bail!("POST {path}: {status} {answer}");
        }
        Ok(answer)
    }
}

/// The default policy's groups the agents list filters by: explicit members, selectors on the
/// seeded labels (`rare`: 10 agents, `team-7`: 5 %) and on the seeded metadata (`env` prod:
/// 33 %, `n` = 77777: one agent). Applied before the cases (a no-op when already there).
fn groups_spec() -> Value {
    // Members are 10 well-formed ids no agent has, so the case measures the lookups of an
    // explicit member list.
    let members: Vec<String> = (1..=10).map(|n| seeded("agt_", n)).collect();
    serde_json::json!({"spec": {"agent_groups": [
        {"name": "picked", "members": members},
        {"name": "rare-label", "selectors": [{"labels": {"rare": "true"}}]},
        {"name": "team-7", "selectors": [{"labels": {"team-7": "true"}}]},
        {"name": "prod-meta", "selectors": [{"metadata": {"env": "prod"}}]},
        {"name": "one-meta", "selectors": [{"metadata": {"n": "77777"}}]}
    ]}})
}

/// One measured filter: its label, the path and query (and body, for a POST), where its answer
/// lists its items, and the fewest items an answer holds.
struct Case {
    label: String,
    path: String,
    body: Option<Value>,
    items: &'static str,
    min_items: usize,
}

fn case(label: &str, path: String, min_items: usize) -> Case {
    Case {
        label: label.to_owned(),
        path,
        body: None,
        items: "items",
        min_items,
    }
}

/// A case POSTing `body`, its items in `items`.
fn posted(label: &str, path: &str, body: Value, items: &'static str, min_items: usize) -> Case {
    Case {
        label: label.to_owned(),
        path: path.to_owned(),
        body: Some(body),
        items,
        min_items,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

async fn measure(client: &Client, settings: &Settings, c: &Case) -> anyhow::Result<String> {
    let mut items = 0;
    for _ in 0..settings.warmup {
        let body = client.ask(c).await?;
        items = body[c.items].as_array().map_or(0, Vec::len);
    }
    if items < c.min_items {
        bail!(
            "{}: {items} items, expected at least {}",
            c.label,
            c.min_items
        );
    }
    let mut times = Vec::with_capacity(settings.requests);
    let started = Instant::now();
    while times.len() < settings.requests && (times.len() < 3 || started.elapsed() < settings.secs)
    {
        let t = Instant::now();
        client.ask(c).await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(format!(
        "| {} | {} | {} | {} | {} | {} |",
        c.label,
        times.len(),
        items,
        ms(percentile(&times, 50.0)),
        ms(percentile(&times, 99.0)),
        ms(times.last().copied().unwrap_or_default()),
    ))
}

/// A cursor this server issued for the answer's last item.
fn next_cursor(body: &Value) -> anyhow::Result<String> {
    body["next_cursor"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no next_cursor in {body}"))
}

/// Measures each case and prints its row of the table.
async fn measure_all(client: &Client, settings: &Settings, cases: &[Case]) {
    println!("| filter | requests | items | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for c in cases {
        match measure(client, settings, c).await {
            Ok(row) => println!("{row}"),
            // A request the server gave up on (`408` after 30 s) is a result too.
            Err(e) => println!(
                "| {} | failed: {} | | | | |",
                c.label,
                e.to_string().replace('|', "/")
            ),
        }
    }
}

async fn run(settings: &Settings) -> anyhow::Result<()> {
    let (server, startup) = Server::start(settings)?;
    println!(
        "server `{}` on `{}` listening after {:.1} s (migrations included)\n",
        settings.bin.display(),
        acp::secret::redact_url(&settings.database_url),
        startup.as_secs_f64()
    );
    let client = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?,
        base: server.base.clone(),
        api_key: settings.api_key.clone(),
        token: None,
    };
    match settings.part {
        Part::Lists => lists(&client, settings).await?,
        Part::Access => access(&client, settings).await?,
    }
    drop(server);
    Ok(())
}

/// The access review's questions on the seeded spec (`examples/seed_policy.rs`): 10,000 groups
/// of 10 seeded agents (agents 11 to 100,010), group `k` bound to `block_{k % 10}`, each block
/// allowing `read_<b>` and `list`, challenging `deploy_<b>`, denying `drop_<b>`, and refunds
/// up to 100 + b USD (challenged up to 1,000).
async fn access(client: &Client, settings: &Settings) -> anyhow::Result<()> {
    let member = seeded_agent(11);
    let outsider = seeded_agent(500_000);
    // The seeded spec is the current policy once the server has read it.
    let probe = serde_json::json!({"agent_id": member, "action": "read_0"});
    let mut allowed = false;
    for _ in 0..600 {
        let answer = client.post("/v1/check", &probe).await?;
        if answer["decision"] == "allow" {
            allowed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if !allowed {
        bail!("seeded agent 11 is not allowed `read_0`: is the seeded spec the current policy?");
    }
    let subject = "/access/v1/search/subject";
    let action = "/access/v1/search/action";
    let search = |name: &str, properties: Value| {
        serde_json::json!({
            "subject": {"type": "agent"},
            "action": {"name": name},
            "resource": {"type": "payment", "properties": properties}
        })
    };
    let of_agent = |id: &str| {
        serde_json::json!({
            "subject": {"type": "agent", "id": id},
            "resource": {"type": "payment", "properties": {"amount": 50, "currency": "USD"}}
        })
    };
    let none = Value::Object(serde_json::Map::new());
    // The second page of `read_0`'s holders, through the token of the first.
    let first = client
        .post(subject, &search("read_0", none.clone()))
        .await?;
    let token = first["page"]["next_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow!("no next_token in {first}"))?
        .to_owned();
    let mut second = search("read_0", none.clone());
    second["page"] = serde_json::json!({"token": token});
    let mut thousand = search("list", none.clone());
    thousand["page"] = serde_json::json!({"limit": 1000});
    let cases = [
        posted(
            "subject search: read_0 (1,000 groups, 10,000 members), first page",
            subject,
            search("read_0", none.clone()),
            "results",
            50,
        ),
        posted(
            "subject search: read_0, second page",
            subject,
            second,
            "results",
            50,
        ),
        posted(
            "subject search: list (10,000 groups, 100,000 members), first page",
            subject,
            search("list", none.clone()),
            "results",
            50,
        ),
        posted(
            "subject search: list, a page of 1,000",
            subject,
            thousand,
            "results",
            1000,
        ),
        posted(
            "subject search: refund 50 USD, first page",
            subject,
            search(
                "refund",
                serde_json::json!({"amount": 50, "currency": "USD"}),
            ),
            "results",
            50,
        ),
        posted(
            "subject search: deploy_0 (challenged), first page",
            &format!("{subject}?include=challenge"),
            search("deploy_0", none.clone()),
            "results",
            50,
        ),
        posted(
            "subject search: drop_0 (denied to all)",
            subject,
            search("drop_0", none),
            "results",
            0,
        ),
        posted(
            "action search: a member of group_0",
            action,
            of_agent(&member),
            "results",
            3,
        ),
        posted(
            "action search: an agent of no group",
            action,
            of_agent(&outsider),
            "results",
            0,
        ),
        case(
            "effective permissions: a member of group_0",
            format!("/v1/access/agents/{member}"),
            0,
        ),
        case("who may: read_0", "/v1/access/actions/read_0".into(), 0),
    ];
    measure_all(client, settings, &cases).await;
    Ok(())
}

/// The audit search and the agents lists.
async fn lists(client: &Client, settings: &Settings) -> anyhow::Result<()> {
    let audit = "/v1/workspace/audit/events";
    let rare_agent = seeded_agent(3);
    let busy_agent = seeded_agent(11);
    let middle = settings.events / 2;
    // The middle of the 30 days (from the newest event): pages deep into the results start
    // after the last event before it, through the cursor the server gives for it.
    let newest = client.get(&format!("{audit}?limit=1")).await?;
    let newest_at = newest["items"][0]["created_at"]
        .as_str()
        .and_then(acp::time::parse_iso)
        .ok_or_else(|| anyhow!("no events: {newest}"))?;
    let at = newest_at - 15 * 86_400_000;
    let deep = next_cursor(&client.get(&format!("{audit}?end_ms={at}&limit=1")).await?)?;
    // A day and an hour in the middle of the 30 days.
    let (day_start, day_end) = (at - 43_200_000, at + 43_200_000);
    let (hour_start, hour_end) = (at - 1_800_000, at + 1_800_000);
    let month_start = newest_at - 31 * 86_400_000;
    // A cursor in the middle of the agents list: the one after agent 50,000's page of one.
    let middle_agent = client.get("/v1/agents?name=agent-50000&limit=1").await?;
    let agent_at = middle_agent["items"][0]["created_at"]
        .as_str()
        .and_then(acp::time::parse_iso)
        .ok_or_else(|| anyhow!("no agent-50000: {middle_agent}"))?;
    let agent_deep = acp::audit::encode_cursor(
        agent_at,
        middle_agent["items"][0]["agent_id"]
            .as_str()
            .unwrap_or_default(),
    );
    // A cursor 10 pages into the busy agent's events.
    let mut busy_deep = String::new();
    for _ in 0..10 {
        let cursor = if busy_deep.is_empty() {
            String::new()
        } else {
            format!("&cursor={busy_deep}")
        };
        let page = client
            .get(&format!("{audit}?agent_id={busy_agent}&limit=200{cursor}"))
            .await?;
        busy_deep = next_cursor(&page)?;
    }

    // A sync needs a person: the token of an owner of the seeded workspace.
    let owner = Client {
        http: client.http.clone(),
        base: client.base.clone(),
        api_key: String::new(),
        token: Some(settings.token.clone()),
    };
    owner.post("/v1/policies/sync", &groups_spec()).await?;

    let cases = [
        case("audit: no filter", audit.to_owned(), 50),
        case(
            "audit: no filter, limit 200",
            format!("{audit}?limit=200"),
            200,
        ),
        case(
            "audit: agent_id (rare, 10 events)",
            format!("{audit}?agent_id={rare_agent}"),
            1,
        ),
        case(
            "audit: agent_id (busy, 0.08 %)",
            format!("{audit}?agent_id={busy_agent}"),
            50,
        ),
        case(
            "audit: action (rare, 1 in 200,000)",
            format!("{audit}?action=payments.wire.large"),
            1,
        ),
        case(
            "audit: action (common, 4.5 %)",
            format!("{audit}?action=payments.refund"),
            50,
        ),
        case(
            "audit: decision=allow (81 %)",
            format!("{audit}?decision=allow"),
            50,
        ),
        case(
            "audit: decision=challenge (1.8 %)",
            format!("{audit}?decision=challenge"),
            50,
        ),
        case(
            "audit: trace_id",
            format!("{audit}?trace_id={}", seeded("trc_", middle + 17)),
            1,
        ),
        case(
            "audit: event_type (rare, 1 in 100,000)",
            format!("{audit}?event_type=agent.suspended"),
            50,
        ),
        case(
            "audit: event_type (0.1 %)",
            format!("{audit}?event_type=credential.revoked"),
            50,
        ),
        case(
            "audit: event_type (common, 90 %)",
            format!("{audit}?event_type=decision.check"),
            50,
        ),
        case(
            "audit: start_ms+end_ms (one hour)",
            format!("{audit}?start_ms={hour_start}&end_ms={hour_end}"),
            50,
        ),
        case(
            "audit: start_ms (last day)",
            format!("{audit}?start_ms={day_start}"),
            50,
        ),
        case(
            "audit: end_ms (older than the middle)",
            format!("{audit}?end_ms={at}"),
            50,
        ),
        case(
            "audit: agent (busy) + event_type (0.4 %)",
            format!("{audit}?agent_id={busy_agent}&event_type=vault.secret.read"),
            1,
        ),
        case(
            "audit: agent (rare) + event_type decision.check",
            format!("{audit}?agent_id={rare_agent}&event_type=decision.check"),
            1,
        ),
        case(
            "audit: agent (busy) + decision=challenge",
            format!("{audit}?agent_id={busy_agent}&decision=challenge"),
            50,
        ),
        case(
            "audit: agent (busy) + action",
            format!("{audit}?agent_id={busy_agent}&action=payments.refund"),
            50,
        ),
        case(
            "audit: agent (busy) + one day",
            format!("{audit}?agent_id={busy_agent}&start_ms={day_start}&end_ms={day_end}"),
            50,
        ),
        case(
            "audit: agent (busy) + action + one day",
            format!("{audit}?agent_id={busy_agent}&action=payments.refund&start_ms={day_start}&end_ms={day_end}"),
            1,
        ),
        case(
            "audit: agent (busy) + action + one hour",
            format!("{audit}?agent_id={busy_agent}&action=payments.refund&start_ms={hour_start}&end_ms={hour_end}"),
            0,
        ),
        case(
            "audit: agent (rare) + action + 30 days",
            format!("{audit}?agent_id={rare_agent}&action=payments.refund&start_ms={month_start}&end_ms={day_end}"),
            0,
        ),
        case(
            "audit: action + decision=deny",
            format!("{audit}?action=payments.refund&decision=deny"),
            50,
        ),
        case(
            "audit: event_type decision.check + decision=challenge",
            format!("{audit}?event_type=decision.check&decision=challenge"),
            50,
        ),
        case(
            "audit: event_type (0.1 %) + one day",
            format!("{audit}?event_type=credential.revoked&start_ms={day_start}&end_ms={day_end}"),
            50,
        ),
        case(
            "audit: trace_id + agent_id",
            format!(
                "{audit}?trace_id={}&agent_id={busy_agent}",
                seeded("trc_", middle + 17)
            ),
            0,
        ),
        case(
            "audit: cursor (middle of 30 days)",
            format!("{audit}?cursor={deep}"),
            50,
        ),
        case(
            "audit: cursor (middle) + event_type (0.1 %)",
            format!("{audit}?cursor={deep}&event_type=credential.revoked"),
            50,
        ),
        case(
            "audit: cursor (middle) + decision=challenge",
            format!("{audit}?cursor={deep}&decision=challenge"),
            50,
        ),
        case(
            "audit: cursor (page 11) + agent (busy)",
            format!("{audit}?agent_id={busy_agent}&cursor={busy_deep}"),
            50,
        ),
        case("agents: no filter", "/v1/agents".into(), 50),
        case("agents: limit 200", "/v1/agents?limit=200".into(), 200),
        case(
            "agents: status=active (83 %)",
            "/v1/agents?status=active".into(),
            50,
        ),
        case(
            "agents: status=revoked (2 %)",
            "/v1/agents?status=revoked".into(),
            50,
        ),
        case(
            "agents: status=suspended (5 %)",
            "/v1/agents?status=suspended".into(),
            50,
        ),
        case(
            "agents: name (rare agent)",
            "/v1/agents?name=rare-agent-3".into(),
            1,
        ),
        case("agents: name", "/v1/agents?name=agent-77777".into(), 1),
        case(
            "agents: name + status",
            "/v1/agents?name=agent-77777&status=active".into(),
            1,
        ),
        case(
            "agents: cursor (middle)",
            format!("/v1/agents?cursor={agent_deep}"),
            50,
        ),
        case(
            "agents: cursor (middle) + status=revoked",
            format!("/v1/agents?cursor={agent_deep}&status=revoked"),
            50,
        ),
        case(
            "agents: label=rare (10)",
            "/v1/agents?label=rare".into(),
            10,
        ),
        case(
            "agents: group, 10 members (none exist)",
            "/v1/agents?group=picked".into(),
            0,
        ),
        case(
            "agents: group, label selector (10)",
            "/v1/agents?group=rare-label".into(),
            10,
        ),
        case(
            "agents: group, label selector (5 %)",
            "/v1/agents?group=team-7".into(),
            50,
        ),
        case(
            "agents: group, metadata selector (33 %)",
            "/v1/agents?group=prod-meta".into(),
            50,
        ),
        case(
            "agents: group, metadata selector (1)",
            "/v1/agents?group=one-meta".into(),
            1,
        ),
        case("agents: seen=hour (4 %)", "/v1/agents?seen=hour".into(), 50),
        case(
            "agents: seen=never (10 %)",
            "/v1/agents?seen=never".into(),
            50,
        ),
        case(
            "agents: seen=stale (few)",
            "/v1/agents?seen=stale".into(),
            0,
        ),
        case(
            "agents: label=team-7 (5 %)",
            "/v1/agents?label=team-7".into(),
            50,
        ),
        case(
            "agents: label=prod (33 %)",
            "/v1/agents?label=prod".into(),
            50,
        ),
        case(
            "agents: label=prod + status=revoked",
            "/v1/agents?label=prod&status=revoked".into(),
            50,
        ),
        case(
            "inventory: no filter (a page of 200)",
            "/v1/workspace/agents".into(),
            200,
        ),
        case(
            "inventory: limit 500",
            "/v1/workspace/agents?limit=500".into(),
            500,
        ),
        case(
            "inventory: label=rare",
            "/v1/workspace/agents?label=rare".into(),
            10,
        ),
        case(
            "inventory: label=team-7 (5 %)",
            "/v1/workspace/agents?label=team-7".into(),
            200,
        ),
        case(
            "inventory: environment=prod",
            "/v1/workspace/agents?environment=prod".into(),
            200,
        ),
    ];
    measure_all(client, settings, &cases).await;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let settings = Settings::from_env()?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(&settings))
}
