//! Load benchmark for `POST /v1/verify` and `POST /v1/telemetry/heartbeat`, next to raw Ed25519
//! verification throughput and a `GET /healthz` baseline, all measured in the same run.
//!
//! Run with `cargo build --release && cargo bench --bench load`. The benchmark starts the real
//! release binary (`target/release/acp`, or `ACP_BIN`) on a fresh temporary SQLite file, or on
//! the empty Postgres database named by `ACP_BENCH_DATABASE_URL`, listening on 127.0.0.1 only.
//! It registers and attests one agent, signs every request before the clock starts (so client
//! signing is not measured), drives each endpoint with a fixed number of concurrent clients for
//! a bounded number of requests or seconds, prints markdown tables and stops the server.
//!
//! Settings (environment):
//! - `ACP_BIN`: the server binary (default `target/release/acp`)
//! - `ACP_BENCH_DATABASE_URL`: an empty Postgres database (default: a temporary SQLite file)
//! - `ACP_BENCH_CONCURRENCY`: concurrent requests in flight (default 32)
//! - `ACP_BENCH_REQUESTS`: requests per endpoint at most (default 100000)
//! - `ACP_BENCH_SECS`: seconds per endpoint at most (default 10)
//! - `ACP_BENCH_CRYPTO_SECS`: seconds per raw Ed25519 measurement (default 3)
//! - `ACP_BENCH_CLIENT_THREADS`: worker threads of the load client's runtime (default 1)
//! - `ACP_BENCH_SERVER_WORKERS`: worker threads of both servers compared, the bare endpoint's
//!   runtime and the `acp` server's (`TOKIO_WORKER_THREADS`) (default 2)
//! - `ACP_BENCH_PAIRS_ONLY`: `1` runs only the interleaved pairs below (for quick comparisons)
//! - `ACP_BENCH_PAIRS`: interleaved bare/check pairs run after the phases (default 9): the
//!   machine's speed drifts between phases, so the ratio of `/v1/check` to the bare endpoint is
//!   read off pairs run back to back, in alternating order, as their median
//! - `ACP_BENCH_PAIR_SECS`: seconds per side of a pair (default 2): short sides keep the two
//!   halves of a pair close in time, many pairs keep the median steady
//! - `ACP_BENCH_BATCH_PAIRS`: interleaved pairs of single checks and batches of 100 checks
//!   (`POST /v1/check/batch`), compared in decisions per second (default 5; 0 skips them)
//! - `ACP_BENCH_SPEC`: the policy installed, `large` (1,000 groups, 10,000 members, 1,000
//!   bindings; default) or `huge` (10,000 groups, 100,000 members, 10,000 bindings)
//! - `ACP_BENCH_API_KEY`: the API key of the oldest workspace of a database that is not empty
//!   (one seeded by `scripts/seed-large.sh`, made by `acp serve` with this key as
//!   `ACP_BOOTSTRAP_API_KEY` and, on Postgres, the bench's master key below); without it the
//!   database must be empty and the bench bootstraps it with a key of its own

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::Rng;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

#[path = "common/mod.rs"]
mod common;

const HEARTBEAT_PATH: &str = "/v1/telemetry/heartbeat";
/// The request a backend asks `/v1/verify` about (a made-up agent call).
const VERIFIED_METHOD: &str = "POST";
const VERIFIED_PATH: &str = "/v1/orders";
const VERIFIED_BODY: &[u8] = br#"{"sku":"A-1042","quantity":3,"note":"benchmark"}"#;
/// The master key the bench's server runs with (Postgres has no key file next to the
/// database); a seeded database for `ACP_BENCH_API_KEY` is made with it too.
const BENCH_MASTER_KEY: &str = "YmVuY2gtbWFzdGVyLWtleS1vZi10aGUtYWNwLWxvYWQ=";
/// Checks per request of the batch phases.
const BATCH_SIZE: usize = 100;
/// How long to wait for the server to print its address.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

// ---- settings -----------------------------------------------------------------------------

struct Settings {
    bin: PathBuf,
    database_url: Option<String>,
    concurrency: usize,
    requests: usize,
    duration: Duration,
    crypto_duration: Duration,
    client_threads: usize,
    pairs: usize,
    pair_duration: Duration,
    server_workers: usize,
    pairs_only: bool,
    batch_pairs: usize,
    huge_spec: bool,
    api_key: Option<String>,
}

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            let n: u64 = text
                .trim()
                .parse()
                .with_context(|| format!("{name} must be a positive integer, got `{text}`"))?;
            if n == 0 {
                bail!("{name} must be at least 1");
            }
            Ok(n)
        }
        _ => Ok(default),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        let bin = match std::env::var_os("ACP_BIN") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/acp"),
        };
        if !bin.is_file() {
            bail!(
                "no server binary at `{}`: run `cargo build --release` first, or set ACP_BIN",
                bin.display()
            );
        }
        let database_url = std::env::var("ACP_BENCH_DATABASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty());
        Ok(Self {
            bin,
            database_url,
            concurrency: to_usize(env_number("ACP_BENCH_CONCURRENCY", 32)?),
            requests: to_usize(env_number("ACP_BENCH_REQUESTS", 100_000)?),
            duration: Duration::from_secs(env_number("ACP_BENCH_SECS", 10)?),
            crypto_duration: Duration::from_secs(env_number("ACP_BENCH_CRYPTO_SECS", 3)?),
            client_threads: to_usize(env_number("ACP_BENCH_CLIENT_THREADS", 1)?),
            pairs: to_usize(env_number("ACP_BENCH_PAIRS", 9)?),
            pair_duration: Duration::from_secs(env_number("ACP_BENCH_PAIR_SECS", 2)?),
            server_workers: to_usize(env_number("ACP_BENCH_SERVER_WORKERS", 2)?),
            pairs_only: env_number("ACP_BENCH_PAIRS_ONLY", 0)? != 0,
            batch_pairs: match std::env::var("ACP_BENCH_BATCH_PAIRS").ok().as_deref() {
                Some("0") => 0,
                _ => to_usize(env_number("ACP_BENCH_BATCH_PAIRS", 5)?),
            },
            huge_spec: match std::env::var("ACP_BENCH_SPEC").ok().as_deref() {
                None | Some("" | "large") => false,
                Some("huge") => true,
                Some(other) => bail!("ACP_BENCH_SPEC must be `large` or `huge`, got `{other}`"),
            },
            api_key: std::env::var("ACP_BENCH_API_KEY")
                .ok()
                .filter(|k| !k.trim().is_empty()),
        })
    }
}

// ---- the server process -------------------------------------------------------------------

/// The running server; killed on drop if it was not stopped cleanly.
struct Server {
    child: Child,
    base: String,
    log_path: PathBuf,
}

impl Server {
    fn start(
        settings: &Settings,
        database_url: &str,
        api_key: &str,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create `{}`", log_path.display()))?;
        let mut command = Command::new(&settings.bin);
        // The benchmark's own settings are not the server's (it would warn about them).
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ACP_") {
                command.env_remove(&name);
            }
        }
        command
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--database-url",
                database_url,
            ])
            .env("ACP_BOOTSTRAP_API_KEY", api_key)
            // Postgres has no key file next to the database.
            .env("ACP_MASTER_KEY", BENCH_MASTER_KEY)
            .env("ACP_SIGNATURE_WINDOW_SECS", "3600")
            // Far above any rate measured here (one key drives every phase), so the key's
            // token bucket is spent on every request but never refuses one.
            .env("ACP_API_KEY_RATE_LIMIT", "1000000")
            .env("TOKIO_WORKER_THREADS", settings.server_workers.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start `{}`", settings.bin.display()))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            bail!("the server's stdout was not captured");
        };
        let (found, address) = mpsc::channel::<String>();
        // Reads stdout for the address, then keeps draining it so the server never blocks.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("acp listening on ") {
                    let base = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = found.send(base);
                }
            }
        });
        let mut server = Server {
            child,
            base: String::new(),
            log_path,
        };
        match address.recv_timeout(STARTUP_TIMEOUT) {
            Ok(base) if base.starts_with("http://127.0.0.1:") => server.base = base,
            Ok(base) => bail!("the server listens on `{base}`, not on 127.0.0.1"),
            Err(_) => bail!(
                "the server printed no `acp listening on` line within {}s; its log:\n{}",
                STARTUP_TIMEOUT.as_secs(),
                server.log_tail()
            ),
        }
        Ok(server)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM, then up to 40 s for the graceful drain, then SIGKILL. Answers how it ended.
    fn stop(mut self) -> anyhow::Result<String> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if sent {
            let deadline = Instant::now() + Duration::from_secs(40);
            while Instant::now() < deadline {
                if let Some(status) = self.child.try_wait()? {
                    return Ok(format!("stopped by SIGTERM ({status})"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.child.kill()?;
        let status = self.child.wait()?;
        Ok(format!(
            "did not stop on SIGTERM within 40 s; killed ({status})"
        ))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- CPU accounting (Linux /proc) ---------------------------------------------------------

/// User + system CPU seconds used so far by process `pid` ("self" for this one).
/// The resident memory of process `pid`, in MiB (`VmRSS` of `/proc/PID/status`).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

fn cpu_seconds(pid: &str, ticks_per_sec: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after `) `.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_sec)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds used by the whole machine so far (all cores; `/proc/stat`, idle and iowait
/// excluded).
fn machine_cpu_seconds(ticks_per_sec: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...; guest time is already in user.
    let busy: f64 = values.iter().take(8).sum::<f64>()
        - values.get(3).copied().unwrap_or(0.0)
        - values.get(4).copied().unwrap_or(0.0);
    Some(busy / ticks_per_sec)
}

/// Cores busy on the machine over one second (nothing of the benchmark running).
async fn background_cpu() -> Option<f64> {
    let ticks = clock_ticks();
    let started = Instant::now();
    let before = machine_cpu_seconds(ticks)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = machine_cpu_seconds(ticks)?;
    Some((after - before) / started.elapsed().as_secs_f64())
}

struct CpuMeter {
    server_pid: String,
    ticks: f64,
}

/// CPU seconds used so far by the server, this process and the whole machine.
#[derive(Clone, Copy)]
struct CpuSample {
    server: Option<f64>,
    client: Option<f64>,
    machine: Option<f64>,
}

/// Cores busy on average between two samples.
#[derive(Clone, Copy, Default)]
struct CpuUse {
    server: Option<f64>,
    client: Option<f64>,
    /// Everything else on the machine (other processes, the kernel outside both).
    other: Option<f64>,
}

impl CpuMeter {
    fn sample(&self) -> CpuSample {
        CpuSample {
            server: cpu_seconds(&self.server_pid, self.ticks),
            client: cpu_seconds("self", self.ticks),
            machine: machine_cpu_seconds(self.ticks),
        }
    }

    fn between(before: CpuSample, after: CpuSample, secs: f64) -> CpuUse {
        let rate = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| (b - a) / secs);
        let server = rate(before.server, after.server);
        let client = rate(before.client, after.client);
        let machine = rate(before.machine, after.machine);
        let other = match (machine, server, client) {
            (Some(m), Some(s), Some(c)) => Some((m - s - c).max(0.0)),
            _ => None,
        };
        CpuUse {
            server,
            client,
            other,
        }
    }
}

// ---- setup --------------------------------------------------------------------------------

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn canonical(method: &str, path: &str, timestamp: &str, nonce: &str, body_sha256: &str) -> String {
    format!("{method}\n{path}\n{timestamp}\n{nonce}\n{body_sha256}")
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn new_api_key() -> String {
    let body: String = OsRng
        .sample_iter(&Alphanumeric)
        .take(43)
        .map(char::from)
        .collect();
    format!("svc_test_{body}")
}

async fn post_json(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
    body: &Value,
) -> anyhow::Result<Value> {
    let mut request = client.post(url).json(body);
    if let Some(key) = api_key {
        request = request.header("X-Service-Api-Key", key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("POST {url} answered {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("POST {url} answered non-JSON: {text}"))
}

fn field<'a>(value: &'a Value, name: &str) -> anyhow::Result<&'a str> {
    value
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("no string `{name}` in {value}"))
}

/// Registers an agent in the key's workspace and attests it; answers its id.
async fn register_agent(
    client: &reqwest::Client,
    server: &Server,
    api_key: &str,
    key: &SigningKey,
) -> anyhow::Result<String> {
    let registered = post_json(
        client,
        &server.url("/v1/agents/register"),
        Some(api_key),
        &json!({
            "name": "load-bench-agent",
            "public_key": B64.encode(key.verifying_key().as_bytes()),
        }),
    )
    .await
    .context(
        "registering the agent (with ACP_BENCH_DATABASE_URL and no ACP_BENCH_API_KEY, the database must be empty so \
         that the server bootstraps it with the benchmark's API key)",
    )?;
    let agent_id = field(&registered, "agent_id")?.to_owned();
    let challenge = B64
        .decode(field(&registered, "challenge")?)
        .context("the challenge is not base64")?;
    let attested = post_json(
        client,
        &server.url("/v1/agents/attest"),
        None,
        &json!({
            "agent_id": agent_id,
            "challenge_id": field(&registered, "challenge_id")?,
            "signature": B64.encode(key.sign(&challenge).to_bytes()),
        }),
    )
    .await
    .context("attesting the agent")?;
    if field(&attested, "status")? != "active" {
        bail!("the attested agent is not active: {attested}");
    }
    Ok(agent_id)
}

// ---- pre-signed requests ------------------------------------------------------------------

/// A request ready to send: extra headers and the exact body bytes.
#[derive(Clone)]
struct Prepared {
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

fn verify_requests(key: &SigningKey, agent_id: &str, api_key: &str, n: usize) -> Vec<Prepared> {
    let body_sha256 = hex_sha256(VERIFIED_BODY);
    (0..n)
        .map(|_| {
            let timestamp = now_ms();
            let nonce = uuid::Uuid::now_v7().to_string();
            let text = canonical(
                VERIFIED_METHOD,
                VERIFIED_PATH,
                &timestamp.to_string(),
                &nonce,
                &body_sha256,
            );
            let body = json!({
                "agent_id": agent_id,
                "method": VERIFIED_METHOD,
                "path": VERIFIED_PATH,
                "timestamp_ms": timestamp,
                "nonce": nonce,
                "body_sha256": body_sha256,
                "signature_b64": B64.encode(key.sign(text.as_bytes()).to_bytes()),
            });
            Prepared {
                headers: vec![("x-service-api-key", api_key.to_owned())],
                body: body.to_string().into_bytes(),
            }
        })
        .collect()
}

fn heartbeat_requests(key: &SigningKey, agent_id: &str, n: usize) -> Vec<Prepared> {
    let body = json!({ "agent_id": agent_id, "status": "ok", "latency_ms": 12.5 })
        .to_string()
        .into_bytes();
    let body_sha256 = hex_sha256(&body);
    (0..n)
        .map(|_| {
            let timestamp = now_ms().to_string();
            let nonce = uuid::Uuid::now_v7().to_string();
            let text = canonical("POST", HEARTBEAT_PATH, &timestamp, &nonce, &body_sha256);
            let signature = B64.encode(key.sign(text.as_bytes()).to_bytes());
            Prepared {
                headers: vec![
                    ("x-service-agent-id", agent_id.to_owned()),
                    ("x-service-timestamp", timestamp),
                    ("x-service-nonce", nonce),
                    ("x-service-signature", signature),
                ],
                body: body.clone(),
            }
        })
        .collect()
}

// ---- the load driver ----------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// 200 is enough.
    Status,
    /// 200 and `"valid": true`.
    Valid,
    /// 200 and `"decision": "allow"`.
    Allow,
    /// 200 and every result of a batch `"decision": "allow"`.
    BatchAllow,
}

/// The fields of an answer that the load client checks (an escaped string fails to parse and
/// counts as invalid).
#[derive(serde::Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    decision: Option<&'a str>,
    #[serde(default)]
    valid: Option<bool>,
    #[serde(borrow, default)]
    results: Vec<Answer<'a>>,
}

#[derive(Default)]
struct WorkerResult {
    latencies_us: Vec<u64>,
    non_200: u64,
    invalid: u64,
    transport_errors: u64,
    first_failure: Option<String>,
}

struct PhaseResult {
    name: String,
    sent: usize,
    elapsed: Duration,
    latencies_us: Vec<u64>,
    non_200: u64,
    invalid: u64,
    transport_errors: u64,
    first_failure: Option<String>,
    cpu: CpuUse,
}

impl PhaseResult {
    fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Nearest-rank percentile, in milliseconds.
    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let rank = (p / 100.0 * self.latencies_us.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies_us.len()) - 1;
        self.latencies_us[index] as f64 / 1000.0
    }
}

async fn send_one(
    client: &reqwest::Client,
    url: &str,
    request: Option<Prepared>,
    check: Check,
    out: &mut WorkerResult,
) {
    let started = Instant::now();
    let builder = match request {
        None => client.get(url),
        Some(prepared) => {
            let mut builder = client
                .post(url)
                .header("content-type", "application/json")
                .body(prepared.body);
            for (name, value) in prepared.headers {
                builder = builder.header(name, value);
            }
            builder
        }
    };
    let outcome = match builder.send().await {
        Ok(response) => {
            let status = response.status();
            response.bytes().await.map(|body| (status, body))
        }
        Err(e) => Err(e),
    };
    out.latencies_us
        .push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    match outcome {
        Err(e) => {
            out.transport_errors += 1;
            out.first_failure.get_or_insert_with(|| e.to_string());
        }
        Ok((status, body)) if status != reqwest::StatusCode::OK => {
            out.non_200 += 1;
            out.first_failure
                .get_or_insert_with(|| format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        Ok((_, body)) => {
            if check != Check::Status {
                // Only the field that tells, read in place: the client's work per answer is
                // the same for every endpoint, and small beside the server's.
                let parsed = serde_json::from_slice::<Answer<'_>>(&body).ok();
                let valid = match check {
                    Check::Valid => parsed.and_then(|a| a.valid) == Some(true),
                    Check::BatchAllow => parsed.is_some_and(|a| {
                        a.results.len() == BATCH_SIZE
                            && a.results.iter().all(|r| r.decision == Some("allow"))
                    }),
                    _ => parsed.and_then(|a| a.decision) == Some("allow"),
                };
                if !valid {
                    out.invalid += 1;
                    out.first_failure
                        .get_or_insert_with(|| String::from_utf8_lossy(&body).into_owned());
                }
            }
        }
    }
}

/// Runs `concurrency` workers; each sends its share of `requests` (or `count` GETs when
/// `requests` is `None`) one after the other until its share is done or `deadline` passes.
#[allow(
    clippy::too_many_arguments,
    reason = "one phase of the run, described by its settings"
)]
async fn run_phase(
    name: &str,
    client: &reqwest::Client,
    url: String,
    requests: Option<Vec<Prepared>>,
    count: usize,
    check: Check,
    concurrency: usize,
    duration: Duration,
    cpu: &CpuMeter,
) -> anyhow::Result<PhaseResult> {
    let mut shares: Vec<Vec<Prepared>> = (0..concurrency).map(|_| Vec::new()).collect();
    let mut counts = vec![count / concurrency; concurrency];
    for slot in counts.iter_mut().take(count % concurrency) {
        *slot += 1;
    }
    if let Some(requests) = requests {
        counts = vec![0; concurrency];
        for (i, request) in requests.into_iter().enumerate() {
            shares[i % concurrency].push(request);
            counts[i % concurrency] += 1;
        }
    }
    let before = cpu.sample();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for (share, n) in shares.into_iter().zip(counts) {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = WorkerResult {
                latencies_us: Vec::with_capacity(n),
                ..WorkerResult::default()
            };
            let mut share = share.into_iter();
            for _ in 0..n {
                if Instant::now() >= deadline {
                    break;
                }
                send_one(&client, &url, share.next(), check, &mut out).await;
            }
            out
        }));
    }
    let mut result = PhaseResult {
        name: name.to_owned(),
        sent: 0,
        elapsed: Duration::ZERO,
        latencies_us: Vec::new(),
        non_200: 0,
        invalid: 0,
        transport_errors: 0,
        first_failure: None,
        cpu: CpuUse::default(),
    };
    for task in tasks {
        let out = task.await.context("a load worker panicked")?;
        result.latencies_us.extend(out.latencies_us);
        result.non_200 += out.non_200;
        result.invalid += out.invalid;
        result.transport_errors += out.transport_errors;
        if result.first_failure.is_none() {
            result.first_failure = out.first_failure;
        }
    }
    result.elapsed = started.elapsed();
    result.cpu = CpuMeter::between(before, cpu.sample(), result.elapsed.as_secs_f64().max(1e-9));
    result.sent = result.latencies_us.len();
    result.latencies_us.sort_unstable();
    Ok(result)
}

/// A few requests per connection so the timed phases start with a warm pool.
async fn warm_up(client: &reqwest::Client, server: &Server, concurrency: usize) {
    let url = server.url("/healthz");
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut sink = WorkerResult::default();
            for _ in 0..20 {
                send_one(&client, &url, None, Check::Status, &mut sink).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

// ---- raw Ed25519 --------------------------------------------------------------------------

struct CryptoSample {
    message: Vec<u8>,
    signature: Signature,
    signature_b64: String,
}

fn crypto_samples(key: &SigningKey, n: usize) -> Vec<CryptoSample> {
    let body_sha256 = hex_sha256(VERIFIED_BODY);
    (0..n)
        .map(|_| {
            let nonce = uuid::Uuid::now_v7().to_string();
            let message = canonical(
                VERIFIED_METHOD,
                VERIFIED_PATH,
                &now_ms().to_string(),
                &nonce,
                &body_sha256,
            )
            .into_bytes();
            let signature = key.sign(&message);
            CryptoSample {
                signature_b64: B64.encode(signature.to_bytes()),
                message,
                signature,
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
enum CryptoMode {
    /// `verify_strict` with an already parsed key and signature.
    StrictOnly,
    /// What the server does per request: decode the base64 key, decompress it, refuse weak
    /// keys, decode the base64 signature, `verify_strict`.
    AsServer,
}

/// Verifications per second on the calling thread, and how many failed (should be 0).
fn crypto_rate(
    key: &VerifyingKey,
    samples: &[CryptoSample],
    mode: CryptoMode,
    duration: Duration,
) -> (f64, u64) {
    let key_b64 = B64.encode(key.as_bytes());
    let mut done: u64 = 0;
    let mut failed: u64 = 0;
    let started = Instant::now();
    while started.elapsed() < duration {
        for sample in samples {
            let ok = match mode {
                CryptoMode::StrictOnly => key
                    .verify_strict(
                        std::hint::black_box(&sample.message),
                        std::hint::black_box(&sample.signature),
                    )
                    .is_ok(),
                CryptoMode::AsServer => verify_as_server(
                    std::hint::black_box(&key_b64),
                    std::hint::black_box(&sample.message),
                    std::hint::black_box(&sample.signature_b64),
                ),
            };
            if !ok {
                failed += 1;
            }
            done += 1;
        }
    }
    (done as f64 / started.elapsed().as_secs_f64(), failed)
}

fn verify_as_server(key_b64: &str, message: &[u8], signature_b64: &str) -> bool {
    let Ok(raw_key) = B64.decode(key_b64) else {
        return false;
    };
    let Ok(raw_key) = <[u8; 32]>::try_from(raw_key.as_slice()) else {
        return false;
    };
    let Ok(key) = VerifyingKey::from_bytes(&raw_key) else {
        return false;
    };
    if key.is_weak() {
        return false;
    }
    let Ok(raw_sig) = B64.decode(signature_b64) else {
        return false;
    };
    let Ok(raw_sig) = <[u8; 64]>::try_from(raw_sig.as_slice()) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(&raw_sig))
        .is_ok()
}

struct CryptoResult {
    label: &'static str,
    threads: usize,
    rate: f64,
    failed: u64,
}

fn crypto_bench(key: &SigningKey, cores: usize, duration: Duration) -> Vec<CryptoResult> {
    let samples = crypto_samples(key, 1000);
    let verifying = key.verifying_key();
    let mut results = Vec::new();
    for (label, mode) in [
        (
            "`verify_strict` (key and signature pre-parsed)",
            CryptoMode::StrictOnly,
        ),
        (
            "base64 decode + key decompression + `verify_strict` (the server's per-request work)",
            CryptoMode::AsServer,
        ),
    ] {
        let (rate, failed) = crypto_rate(&verifying, &samples, mode, duration);
        results.push(CryptoResult {
            label,
            threads: 1,
            rate,
            failed,
        });
    }
    if cores > 1 {
        let (rate, failed) = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..cores)
                .map(|_| {
                    scope.spawn(|| {
                        crypto_rate(&verifying, &samples, CryptoMode::StrictOnly, duration)
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().ok())
                .fold((0.0, 0), |(r, f), (rate, failed)| (r + rate, f + failed))
        });
        results.push(CryptoResult {
            label: "`verify_strict` (key and signature pre-parsed)",
            threads: cores,
            rate,
            failed,
        });
    }
    results
}

// ---- report -------------------------------------------------------------------------------

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn cores_used(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{v:.2}"))
}

fn print_report(
    settings: &Settings,
    engine: &str,
    cores: usize,
    phases: &[PhaseResult],
    crypto: &[CryptoResult],
    notes: &[String],
) {
    let mut out = String::new();
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    out.push_str(&format!("\n## acp load benchmark: {engine}, {date}\n\n"));
    out.push_str(&format!(
        "Machine: {} ({cores} logical cores, shared by the server and the load client). \
         Concurrency {}, at most {} requests or {} s per endpoint ({} s per side of a pair), load client on {} runtime thread(s), \
         {} worker thread(s) in each server.\n\n",
        cpu_model(),
        settings.concurrency,
        settings.requests,
        settings.duration.as_secs(),
        settings.pair_duration.as_secs(),
        settings.client_threads,
        settings.server_workers,
    ));
    out.push_str("| endpoint | requests | seconds | req/s | p50 ms | p90 ms | p99 ms | max ms | non-200 | invalid | transport errors | server CPU (cores) | client CPU (cores) | other CPU (cores) |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for p in phases {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} |\n",
            p.name,
            p.sent,
            p.elapsed.as_secs_f64(),
            p.rate(),
            p.percentile_ms(50.0),
            p.percentile_ms(90.0),
            p.percentile_ms(99.0),
            p.percentile_ms(100.0),
            p.non_200,
            p.invalid,
            p.transport_errors,
            cores_used(p.cpu.server),
            cores_used(p.cpu.client),
            cores_used(p.cpu.other),
        ));
    }
    out.push_str("\nRaw Ed25519 verification in the same process, server idle, same kind of message (the canonical string of a signed request):\n\n");
    out.push_str("| operation | threads | verifications/s | per verification µs | failures |\n");
    out.push_str("|---|---:|---:|---:|---:|\n");
    for c in crypto {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {} |\n",
            c.label,
            c.threads,
            c.rate,
            1e6 * c.threads as f64 / c.rate.max(1e-9),
            c.failed
        ));
    }
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            out.push_str(&format!("- {note}\n"));
        }
    }
    print!("{out}");
    let _ = std::io::stdout().flush();
}

// ---- main ---------------------------------------------------------------------------------

/// Writes the large (or huge) policy straight into the server's database (as a sync would:
/// the huge spec's text is over the limit a sync takes) as the next version of `pol_default`,
/// and waits until the server serves it; answers its version.
async fn install_large_policy(
    client: &reqwest::Client,
    server: &Server,
    api_key: &str,
    agent_id: &str,
    database_url: &str,
    huge: bool,
) -> anyhow::Result<i64> {
    let agent: Value = client
        .get(server.url(&format!("/v1/agents/{agent_id}")))
        .header("x-service-api-key", api_key)
        .send()
        .await?
        .json()
        .await?;
    let workspace_id = agent["agent"]["workspace_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no workspace in {agent}"))?
        .to_owned();
    let spec = if huge {
        common::with_member(common::huge_spec(), agent_id)
    } else {
        common::large_spec_with_member(agent_id)
    };
    let (version, compiled_in) = common::install_policy(database_url, &workspace_id, &spec).await?;
    eprintln!(
        "load: the bench policy compiled in {:.2} s",
        compiled_in.as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer: Value = client
            .post(server.url("/v1/check"))
            .header("x-service-api-key", api_key)
            .json(&json!({"agent_id": agent_id, "action": "refund", "context": {"amount": 50, "currency": "USD"}}))
            .send()
            .await?
            .json()
            .await?;
        if answer["policy_version"] == json!(version) {
            if answer["decision"] != json!("allow") {
                bail!("the bench policy answers {answer}");
            }
            return Ok(version);
        }
        if Instant::now() > deadline {
            bail!("the server did not pick up the bench policy: {answer}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The policy the bench installs, in words.
fn spec_name(settings: &Settings) -> &'static str {
    if settings.huge_spec {
        "10,000 groups / 100,000 members / 10,000 bindings"
    } else {
        "1,000 groups / 10,000 members / 1,000 bindings"
    }
}

/// The checks of `singles` in batches of [`BATCH_SIZE`] (`POST /v1/check/batch` bodies).
fn batches_of(singles: &[Prepared]) -> anyhow::Result<Vec<Prepared>> {
    singles
        .chunks_exact(BATCH_SIZE)
        .map(|chunk| {
            let checks = chunk
                .iter()
                .map(|p| serde_json::from_slice::<Value>(&p.body))
                .collect::<Result<Vec<Value>, _>>()?;
            Ok(Prepared {
                headers: chunk[0].headers.clone(),
                body: serde_json::to_vec(&json!({ "checks": checks }))?,
            })
        })
        .collect()
}

/// The median of `values` (none when empty).
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

/// A bare axum JSON endpoint on its own runtime with as many workers as the server's: it parses
/// the same body and answers a small JSON object, nothing else.
fn start_bare_server(workers: usize) -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let app = axum::Router::new().route(
                "/bare",
                axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
                    axum::Json(
                        json!({"ok": true, "decision": "allow", "agent_id": body.get("agent_id")}),
                    )
                }),
            );
            let _ = axum::serve(listener, app).await;
        });
    });
    Ok(format!("http://{addr}/bare"))
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let settings = Settings::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.client_threads)
        .enable_all()
        .build()
        .context("cannot start the client runtime")?;
    runtime.block_on(run(settings))
}

async fn run(settings: Settings) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let dir = tempfile::Builder::new()
        .prefix("acp-load-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let (database_url, engine) = match &settings.database_url {
        Some(url) if url.starts_with("sqlite:") => (url.clone(), "SQLite"),
        Some(url) => (url.clone(), "Postgres"),
        None => (
            format!("sqlite:{}", dir.path().join("acp.db").display()),
            "SQLite",
        ),
    };
    let api_key = settings.api_key.clone().unwrap_or_else(new_api_key);
    let background_before = background_cpu().await;
    eprintln!("load: starting {} on {engine} ...", settings.bin.display());
    let server = Server::start(&settings, &database_url, &api_key, dir.path())?;
    let outcome = drive(&settings, &server, &api_key, cores, engine, &database_url).await;
    let log_tail = server.log_tail();
    let stopped = server.stop();
    match (&outcome, &stopped) {
        (Ok(_), Ok(how)) => eprintln!("load: server {how}"),
        (_, Err(e)) => eprintln!("load: stopping the server failed: {e:#}"),
        (Err(_), _) => eprintln!("load: server log (last lines):\n{log_tail}"),
    }
    let (phases, crypto, mut notes) = outcome?;
    if let Ok(how) = stopped {
        notes.push(format!("Server {how}."));
    }
    let background_after = background_cpu().await;
    notes.push(format!(
        "Machine CPU busy with other work, over 1 s with no server: {} cores before the run, {} after.",
        cores_used(background_before),
        cores_used(background_after)
    ));
    print_report(&settings, engine, cores, &phases, &crypto, &notes);
    let failures: u64 = phases
        .iter()
        .map(|p| p.non_200 + p.invalid + p.transport_errors)
        .sum();
    if failures > 0 {
        bail!("{failures} requests failed; see the table");
    }
    Ok(())
}

type Outcome = (Vec<PhaseResult>, Vec<CryptoResult>, Vec<String>);

async fn drive(
    settings: &Settings,
    server: &Server,
    api_key: &str,
    cores: usize,
    engine: &str,
    database_url: &str,
) -> anyhow::Result<Outcome> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(settings.concurrency)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()?;
    let rss_started = rss_mib(server.pid());
    let key = SigningKey::generate(&mut OsRng);
    let agent_id = register_agent(&client, server, api_key, &key).await?;
    eprintln!("load: agent {agent_id} registered and attested on {engine}");

    let n = settings.requests;
    let started = Instant::now();
    let verify = verify_requests(&key, &agent_id, api_key, n);
    let heartbeats = heartbeat_requests(&key, &agent_id, n);
    // The first verify request is held back and sent again after the run: it must be a replay.
    let replay = verify.first().map(|p| p.body.clone());
    let policy_version = install_large_policy(
        &client,
        server,
        api_key,
        &agent_id,
        database_url,
        settings.huge_spec,
    )
    .await?;
    eprintln!(
        "load: policy of {} live as version {policy_version}",
        spec_name(settings)
    );
    // At rest with the policy loaded: give the server a moment to settle first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_rest = rss_mib(server.pid());
    // Refunds of varying amounts (0.01 to 90.00) in two currencies, all within the agent's
    // allowance: no two consecutive checks are the same request.
    // With `unique`, each also carries an order reference of its own, a context field that no
    // two checks share: no check then finds its context or its decision in the server's caches.
    let refunds = |unique: bool| {
        (0..n)
            .map(|i| {
                let amount = (i % 9000) as f64 / 100.0 + 0.01;
                let currency = if i % 2 == 0 { "USD" } else { "EUR" };
                let mut context = json!({"amount": amount, "currency": currency});
                if unique {
                    context["order"] = json!(format!("ord-{i:08}"));
                }
                let body = serde_json::to_vec(&json!({
                    "agent_id": agent_id, "action": "refund", "context": context
                }))?;
                Ok(Prepared {
                    headers: vec![("x-service-api-key", api_key.to_owned())],
                    body,
                })
            })
            .collect::<anyhow::Result<Vec<Prepared>>>()
    };
    let checks = refunds(false)?;
    let unique_checks = refunds(true)?;
    // The bare endpoint gets the very same requests (it ignores the key), and its answers are
    // checked the same way (it answers `"decision": "allow"`): the client does the same work
    // for both.
    let bare_requests = checks.clone();
    let bare_url = start_bare_server(settings.server_workers)?;
    eprintln!(
        "load: pre-signed {} requests in {:.1} s",
        2 * n,
        started.elapsed().as_secs_f64()
    );

    let crypto = if settings.pairs_only {
        Vec::new()
    } else {
        eprintln!("load: raw Ed25519 ...");
        crypto_bench(&key, cores, settings.crypto_duration)
    };

    let cpu = CpuMeter {
        server_pid: server.pid().to_string(),
        ticks: clock_ticks(),
    };
    let c = settings.concurrency;
    let mut phases = Vec::new();
    warm_up(&client, server, c).await;
    // The bare endpoint and `/v1/check`, run once here and again in the pairs below.
    let compared = [
        (
            "POST bare axum JSON endpoint (baseline, same worker threads as the server)",
            bare_url,
            &bare_requests,
            Check::Allow,
        ),
        (
            if settings.huge_spec {
                "POST /v1/check (10,000 bindings, audit durable)"
            } else {
                "POST /v1/check (1,000 bindings, audit durable)"
            },
            server.url("/v1/check"),
            &checks,
            Check::Allow,
        ),
    ];
    // One phase named `label` against `url`.
    let run = |label: String,
               url: String,
               requests: Option<Vec<Prepared>>,
               check: Check,
               duration: Duration| {
        let (client, cpu) = (&client, &cpu);
        async move { run_phase(&label, client, url, requests, n, check, c, duration, cpu).await }
    };
    // One phase of `settings.duration` against the server.
    let phase =
        |label: &'static str, path: &'static str, requests: Option<Vec<Prepared>>, check| {
            eprintln!("load: {label} ...");
            run(
                label.to_owned(),
                server.url(path),
                requests,
                check,
                settings.duration,
            )
        };
    // One of the compared endpoints, run as a phase named `label`.
    let run_compared = |label: String, which: usize, duration: Duration| {
        let (_, url, requests, check) = &compared[which];
        run(
            label,
            url.clone(),
            Some((*requests).clone()),
            *check,
            duration,
        )
    };
    // Every phase once, unless only the pairs are asked for; the replay check needs the
    // verify phase.
    let replay = if settings.pairs_only {
        None
    } else {
        phases.push(phase("GET /healthz (baseline)", "/healthz", None, Check::Status).await?);
        for (which, (name, ..)) in compared.iter().enumerate() {
            eprintln!("load: {name} ...");
            phases.push(run_compared((*name).to_owned(), which, settings.duration).await?);
        }
        phases.push(
            phase(
                "POST /v1/check, each with an order reference of its own (nothing cached but the agent and policy)",
                "/v1/check",
                Some(unique_checks),
                Check::Allow,
            )
            .await?,
        );
        phases.push(phase("POST /v1/verify", "/v1/verify", Some(verify), Check::Valid).await?);
        phases.push(
            phase(
                "POST /v1/telemetry/heartbeat",
                HEARTBEAT_PATH,
                Some(heartbeats),
                Check::Status,
            )
            .await?,
        );
        replay
    };
    // The throughput target, read off interleaved pairs (see `ACP_BENCH_PAIRS`).
    let mut ratios = Vec::with_capacity(settings.pairs);
    for pair in 1..=settings.pairs {
        eprintln!("load: pair {pair} of {} ...", settings.pairs);
        let mut rates = [0.0; 2];
        let order = if pair % 2 == 1 { [0, 1] } else { [1, 0] };
        for which in order {
            let phase = run_compared(
                format!("pair {pair}: {}", compared[which].0),
                which,
                settings.pair_duration,
            )
            .await?;
            rates[which] = phase.rate();
            phases.push(phase);
        }
        ratios.push(100.0 * rates[1] / rates[0].max(1e-9));
    }

    // Decisions per second through batches of 100 against single checks, in interleaved pairs.
    let batches = batches_of(&checks)?;
    // The two sides: (label, path, requests, answer check, decisions per request).
    let sides = [
        (
            "POST /v1/check (one decision per request)".to_owned(),
            "/v1/check",
            &checks,
            Check::Allow,
            1.0,
        ),
        (
            format!("POST /v1/check/batch ({BATCH_SIZE} decisions per request)"),
            "/v1/check/batch",
            &batches,
            Check::BatchAllow,
            BATCH_SIZE as f64,
        ),
    ];
    let (mut single_rates, mut batch_rates, mut gains) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 1..=settings.batch_pairs {
        eprintln!("load: batch pair {pair} of {} ...", settings.batch_pairs);
        let mut rates = [0.0; 2];
        let order = if pair % 2 == 1 { [0, 1] } else { [1, 0] };
        for which in order {
            let (label, path, requests, check, per_request) = &sides[which];
            let phase = run(
                format!("batch pair {pair}: {label}"),
                server.url(path),
                Some((*requests).clone()),
                *check,
                settings.pair_duration,
            )
            .await?;
            rates[which] = phase.rate() * per_request;
            phases.push(phase);
        }
        single_rates.push(rates[0]);
        batch_rates.push(rates[1]);
        gains.push(rates[1] / rates[0].max(1e-9));
    }

    let mut notes = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mib = |m: Option<f64>| m.map_or_else(|| "unknown".to_owned(), |m| format!("{m:.0} MiB"));
    notes.push(format!(
        "Server resident memory: {} once started, {} at rest with the policy of {} loaded, {} at rest after the run.",
        mib(rss_started),
        mib(rss_rest),
        spec_name(settings),
        mib(rss_mib(server.pid()))
    ));
    // The caches' own report (their gauges follow the change poll, about once a second).
    if let Ok(text) = async {
        client
            .get(server.url("/metrics"))
            .send()
            .await?
            .text()
            .await
    }
    .await
    {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("acp_cache_entries{") || l.starts_with("acp_cache_bytes{"))
            .collect();
        notes.push(format!(
            "Caches after the run (/metrics): {}.",
            lines.join(", ")
        ));
    }
    if let (Some(single), Some(batch), Some(gain)) =
        (median(&single_rates), median(&batch_rates), median(&gains))
    {
        let listed: Vec<String> = gains.iter().map(|g| format!("{g:.2}×")).collect();
        notes.push(format!(
            "Decisions per second, in {} interleaved pairs: single checks median {single:.0}, \
             batches of {BATCH_SIZE} median {batch:.0}; batch/single per pair {}; median {gain:.2}×.",
            gains.len(),
            listed.join(", ")
        ));
    }
    if let Some(median) = median(&ratios) {
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.1} %")).collect();
        notes.push(format!(
            "`/v1/check` throughput as a share of the bare endpoint's, in {} interleaved pairs \
             (alternating order): {}; median {:.1} %.",
            ratios.len(),
            listed.join(", "),
            median
        ));
    }
    for p in &phases {
        if let Some(failure) = &p.first_failure {
            notes.push(format!("{}: first failure: {failure}", p.name));
        }
        // With SQLite nothing else should run; with Postgres the database is the "other" CPU.
        if let (None, Some(other)) = (&settings.database_url, p.cpu.other) {
            if other > 0.25 {
                notes.push(format!(
                    "WARNING: other processes kept {other:.2} cores busy during {}; the machine was \
                     not quiet and these numbers understate the server.",
                    p.name
                ));
            }
        }
    }
    if let Some(body) = replay {
        let answer = client
            .post(server.url("/v1/verify"))
            .header("content-type", "application/json")
            .header("x-service-api-key", api_key)
            .body(body)
            .send()
            .await?
            .text()
            .await?;
        let reason = serde_json::from_str::<Value>(&answer)
            .ok()
            .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned));
        if reason.as_deref() == Some("replay_detected") {
            notes.push(
                "Sanity check: re-sending the first verified request answered `valid: false`, \
                 `replay_detected` (its nonce was recorded)."
                    .into(),
            );
        } else {
            notes.push(format!(
                "Sanity check FAILED: re-sending the first verified request answered {answer}"
            ));
        }
    }
    Ok((phases, crypto, notes))
}
