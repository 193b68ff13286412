//! Test harness: spawns the application on a fresh database, and signs requests the way a
//! client library would (own canonical string, own Ed25519 key), never through server code.

use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use rand::RngCore;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Runs `$body` (an async block using `app: TestApp`) once per engine, as `sqlite` and
/// `postgres` tests inside a module named after the test.
#[macro_export]
macro_rules! both_engines {
    ($(#[$meta:meta])* async fn $name:ident($app:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports, reason = "a test body need not use the names of its file")]
            use super::*;
            async fn run($app: $crate::helpers::TestApp) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::helpers::TestApp::spawn($crate::helpers::Engine::Sqlite).await;
                run(app.clone()).await;
                app.stop().await;
            }

            #[cfg(acp_postgres)]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let app = $crate::helpers::TestApp::spawn($crate::helpers::Engine::Postgres).await;
                run(app.clone()).await;
                app.stop().await;
            }
        }
    };
}

/// Like [`both_engines!`], for a test that spawns its own server: its body gets the engine.
#[macro_export]
macro_rules! each_engine {
    ($(async fn $name:ident($engine:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports, reason = "a test body need not use the names of its file")]
            use super::*;
            async fn run($engine: $crate::helpers::Engine) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                run($crate::helpers::Engine::Sqlite).await;
            }

            #[cfg(acp_postgres)]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                run($crate::helpers::Engine::Postgres).await;
            }
        }
    )*};
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    #[cfg_attr(
        not(acp_postgres),
        allow(dead_code, reason = "used only by the tests built with acp_postgres")
    )]
    Postgres,
}

/// A fresh database for one test.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

#[cfg_attr(
    not(acp_postgres),
    allow(dead_code, reason = "used only by the tests built with acp_postgres")
)]
fn postgres_admin_url() -> String {
    std::env::var("ACP_TEST_POSTGRES_URL")
        .expect("ACP_TEST_POSTGRES_URL is set when Postgres tests are compiled")
}

impl TestDb {
    pub async fn new(engine: Engine) -> TestDb {
        match engine {
            Engine::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path: PathBuf = dir.path().join("acp.db");
                TestDb {
                    url: format!("sqlite:{}", path.display()),
                    _dir: Some(dir),
                }
            }
            Engine::Postgres => {
                use sqlx::Connection;
                let admin = postgres_admin_url();
                let name = format!("acp_t_{}", uuid::Uuid::now_v7().simple());
                let mut conn = sqlx::PgConnection::connect(&admin)
                    .await
                    .expect("connect to ACP_TEST_POSTGRES_URL");
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let base = admin
                    .rsplit_once('/')
                    .map_or(admin.as_str(), |(b, _)| b)
                    .to_owned();
                TestDb {
                    url: format!("{base}/{name}"),
                    _dir: None,
                }
            }
        }
    }

    /// Drops a Postgres test database (SQLite files go with their temp dir).
    pub async fn drop_database(&self) {
        if self._dir.is_some() {
            return;
        }
        use sqlx::Connection;
        let name = self.url.rsplit('/').next().unwrap_or_default().to_owned();
        if let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await;
        }
    }
}

/// A well-formed random API key.
/// The master key of every test server (a replica process on the same database needs it too:
/// with Postgres there is no key file to share).
pub const TEST_MASTER_KEY: &str = "dGVzdC1tYXN0ZXIta2V5LW9mLXRoZS1hY3AtdGVzdHM=";

pub fn random_api_key() -> String {
    format!("svc_test_{}", acp::secret::random_base62(43))
}

struct Running {
    stop: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    task: std::sync::Mutex<Option<JoinHandle<anyhow::Result<()>>>>,
    db: TestDb,
}

/// A running server with the default workspace's key.
#[derive(Clone)]
pub struct TestApp {
    pub base: String,
    pub key: String,
    pub workspace_id: String,
    pub client: reqwest::Client,
    pub db_url: String,
    /// The real SMTP server this app delivers mail to.
    pub smtp: crate::smtp::SmtpSink,
    running: std::sync::Arc<Running>,
}

impl TestApp {
    pub async fn spawn(engine: Engine) -> TestApp {
        Self::spawn_with(engine, |_| {}).await
    }

    /// Spawns with configuration adjusted by `tune`.
    pub async fn spawn_with(
        engine: Engine,
        tune: impl FnOnce(&mut acp::config::Config),
    ) -> TestApp {
        let db = TestDb::new(engine).await;
        let key = random_api_key();
        let smtp = crate::smtp::SmtpSink::start().await;
        let mut config = acp::config::Config::for_database(&db.url).expect("config");
        config.email_url = smtp.url();
        config.email_from = "acp@example.test".into();
        config.addr = "127.0.0.1:0".parse().expect("addr");
        config.bootstrap_api_key = Some(acp::secret::Secret::new(key.clone()));
        config.master_key = Some(acp::secret::Secret::new(TEST_MASTER_KEY.to_owned()));
        config.shutdown_grace_secs = 5;
        // The tests log people in to test other things than who may sign up: anyone may here.
        // `signup.rs` tests the default (`invite`), `domains:` and `open`.
        config.signup = acp::domain::Signup::Open;
        tune(&mut config);
        let app = acp::app::App::build(config).await.expect("build app");
        let workspace_id = app
            .bootstrap
            .as_ref()
            .expect("first start bootstraps")
            .workspace_id
            .clone();
        let base = format!(
            "http://{}{}",
            app.local_addr(),
            app.context().config.path_prefix.clone().unwrap_or_default()
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));
        TestApp {
            base,
            key,
            workspace_id,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            db_url: db.url.clone(),
            smtp,
            running: std::sync::Arc::new(Running {
                stop: std::sync::Mutex::new(Some(stop)),
                task: std::sync::Mutex::new(Some(task)),
                db,
            }),
        }
    }

    /// Graceful shutdown, then the test database is dropped.
    pub async fn stop(&self) {
        let stop = self.running.stop.lock().unwrap().take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let task = self.running.task.lock().unwrap().take();
        if let Some(task) = task {
            task.await.expect("server task").expect("server run");
        }
        self.running.db.drop_database().await;
    }

    /// The same server and workspace, with another API key of it.
    pub fn with_key(&self, key: &str) -> TestApp {
        TestApp {
            key: key.to_owned(),
            ..self.clone()
        }
    }

    /// The same workspace and key, talking to another server (a replica) at `base`.
    pub fn at(&self, base: String) -> TestApp {
        TestApp {
            base,
            ..self.clone()
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST JSON with this workspace's key.
    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.post_as(&self.key, path, body).await
    }

    pub async fn post_as(&self, key: &str, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .header("X-Service-Api-Key", key)
            .json(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.get_as(&self.key, path).await
    }

    pub async fn get_as(&self, key: &str, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .header("X-Service-Api-Key", key)
            .send()
            .await
            .expect("request")
    }

    /// A second workspace and its key, made with the real CLI against the same database.
    pub async fn other_workspace(&self) -> (String, String) {
        let ws = run_cli(
            &self.db_url,
            &["admin", "workspace", "create", "other", "--output", "json"],
        )
        .await;
        let ws_id = ws["workspace"]["workspace_id"]
            .as_str()
            .expect("workspace id")
            .to_owned();
        let key = run_cli(
            &self.db_url,
            &[
                "admin",
                "api-key",
                "create",
                "--workspace",
                &ws_id,
                "--output",
                "json",
            ],
        )
        .await;
        (
            ws_id,
            key["api_key"]["key"].as_str().expect("key").to_owned(),
        )
    }

    /// Registers (with this workspace's key) and attests a new agent.
    pub async fn active_agent(&self, name: &str) -> TestAgent {
        let agent = TestAgent::new();
        let id = agent.register(self, Some(&self.key), name).await;
        let res = agent.attest_latest(self).await;
        assert_eq!(res.status(), StatusCode::OK, "attest");
        TestAgent { id, ..agent }
    }
}

/// Runs the `acp` binary on the database at `db_url` (as `ACP_DATABASE_URL`) and parses its
/// JSON output (pass `--output json`).
pub async fn run_cli(db_url: &str, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
        .args(args)
        .env("ACP_DATABASE_URL", db_url)
        .env_remove("ACP_BOOTSTRAP_API_KEY")
        .output()
        .await
        .expect("run acp");
    assert!(
        out.status.success(),
        "acp {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json output")
}

/// Runs one SQL statement directly on the test database at `db_url` (a count to check, a row
/// changed as another replica or an operator would); answers the first column of its first row,
/// if it has one.
pub async fn run_sql(db_url: &str, sql: &str) -> Option<i64> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(db_url)
        .await
        .expect("connect to the test database");
    let found = sqlx::query_scalar(sql)
        .fetch_optional(&mut conn)
        .await
        .expect("run sql");
    conn.close().await.expect("close");
    found
}

/// An agent as a client library holds it: its own key, its own signing code.
#[derive(Clone)]
pub struct TestAgent {
    pub key: SigningKey,
    pub id: String,
    /// `(agent_id, challenge_id, challenge)` of the last registration.
    pub last_challenge: std::sync::Arc<std::sync::Mutex<Option<(String, String, String)>>>,
}

pub fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

pub fn random_nonce() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A signed request as a client builds it.
pub struct Signed {
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
    pub body_sha256: String,
}

impl TestAgent {
    pub fn new() -> TestAgent {
        let mut seed = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut seed);
        TestAgent {
            key: SigningKey::from_bytes(&seed),
            id: String::new(),
            last_challenge: Default::default(),
        }
    }

    pub fn public_key_b64(&self) -> String {
        b64(self.key.verifying_key().as_bytes())
    }

    /// Registers; answers the agent id and remembers the challenge.
    pub async fn register(&self, app: &TestApp, api_key: Option<&str>, name: &str) -> String {
        let mut req = app
            .client
            .post(app.url("/v1/agents/register"))
            .json(&json!({"name": name, "public_key": self.public_key_b64(), "key_type": "ed25519", "metadata": {"team": "t"}}));
        if let Some(k) = api_key {
            req = req.header("X-Service-Api-Key", k);
        }
        let res = req.send().await.expect("register");
        assert_eq!(res.status(), StatusCode::OK);
        let body: Value = res.json().await.expect("json");
        let id = body["agent_id"].as_str().expect("agent_id").to_owned();
        *self.last_challenge.lock().unwrap() = Some((
            id.clone(),
            body["challenge_id"]
                .as_str()
                .expect("challenge_id")
                .to_owned(),
            body["challenge"].as_str().expect("challenge").to_owned(),
        ));
        id
    }

    /// Signs the decoded bytes of the last challenge and attests.
    pub async fn attest_latest(&self, app: &TestApp) -> Response {
        let (agent_id, challenge_id, challenge) = self
            .last_challenge
            .lock()
            .unwrap()
            .clone()
            .expect("registered");
        let bytes = B64.decode(challenge).expect("challenge base64");
        let signature = b64(&self.key.sign(&bytes).to_bytes());
        app.client
            .post(app.url("/v1/agents/attest"))
            .json(&json!({"agent_id": agent_id, "challenge_id": challenge_id, "signature": signature}))
            .send()
            .await
            .expect("attest")
    }

    /// Signature over `METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body))`.
    pub fn sign(
        &self,
        method: &str,
        path: &str,
        timestamp: &str,
        nonce: &str,
        body: &[u8],
    ) -> Signed {
        let body_sha256 = sha256_hex(body);
        let canonical = format!("{method}\n{path}\n{timestamp}\n{nonce}\n{body_sha256}");
        Signed {
            timestamp: timestamp.to_owned(),
            nonce: nonce.to_owned(),
            signature: b64(&self.key.sign(canonical.as_bytes()).to_bytes()),
            body_sha256,
        }
    }

    /// A heartbeat body for `agent_id`, signed now with `nonce` for `POST /v1/telemetry/heartbeat`.
    pub fn signed_heartbeat(&self, agent_id: &str, nonce: &str) -> (Vec<u8>, Signed) {
        let body =
            serde_json::to_vec(&json!({"agent_id": agent_id, "status": "ok", "latency_ms": 1}))
                .expect("json");
        let signed = self.sign(
            "POST",
            "/v1/telemetry/heartbeat",
            &now_ms().to_string(),
            nonce,
            &body,
        );
        (body, signed)
    }

    /// Sends a signed POST with a fresh timestamp and nonce.
    pub async fn signed_post(&self, app: &TestApp, path: &str, body: &Value) -> Response {
        let bytes = serde_json::to_vec(body).expect("json");
        let s = self.sign("POST", path, &now_ms().to_string(), &random_nonce(), &bytes);
        self.send_signed(app, path, &self.id, &s, bytes).await
    }

    /// Sends a signed GET (an empty body) with a fresh timestamp and nonce.
    pub async fn signed_get(&self, app: &TestApp, path: &str) -> Response {
        let s = self.sign("GET", path, &now_ms().to_string(), &random_nonce(), b"");
        app.client
            .get(app.url(path))
            .header("X-Service-Agent-Id", &self.id)
            .header("X-Service-Timestamp", &s.timestamp)
            .header("X-Service-Nonce", &s.nonce)
            .header("X-Service-Signature", &s.signature)
            .send()
            .await
            .expect("signed request")
    }

    pub async fn send_signed(
        &self,
        app: &TestApp,
        path: &str,
        agent_id: &str,
        s: &Signed,
        body: Vec<u8>,
    ) -> Response {
        app.client
            .post(app.url(path))
            .header("Content-Type", "application/json")
            .header("X-Service-Agent-Id", agent_id)
            .header("X-Service-Timestamp", &s.timestamp)
            .header("X-Service-Nonce", &s.nonce)
            .header("X-Service-Signature", &s.signature)
            .body(body)
            .send()
            .await
            .expect("signed request")
    }
}

/// An approval link's page as a browser reads it, as `who` (logged in) or anonymously.
pub async fn approval_page(app: &TestApp, link: &str, who: Option<&Browser>) -> String {
    let mut req = app.client.get(link).header("Accept", "text/html");
    if let Some(b) = who {
        req = req.header("Cookie", &b.cookie);
    }
    req.send().await.expect("page").text().await.expect("text")
}

/// Decides through an approval link (`approve` or `deny`), as `who` (logged in) or anonymously.
pub async fn decide_by_link(
    app: &TestApp,
    link: &str,
    who: Option<&Browser>,
    decision: &str,
) -> Response {
    let mut req = app.client.post(link).json(&json!({"decision": decision}));
    if let Some(b) = who {
        req = req.header("Cookie", &b.cookie);
    }
    req.send().await.expect("decision")
}

/// Reads a response's status and JSON body.
pub async fn status_json(res: Response) -> (StatusCode, Value) {
    let status = res.status();
    let text = res.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Asserts an error answer: status, envelope with this code and a message.
pub async fn assert_error(res: Response, status: u16, code: &str) -> Value {
    let (got, body) = status_json(res).await;
    assert_eq!(got.as_u16(), status, "status for {code}: {body}");
    assert_eq!(body["error"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    body
}

/// The audit events of the app's workspace, newest first.
pub async fn audit_events(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, body) = status_json(
        app.get(&format!("/v1/workspace/audit/events?{query}"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().expect("items").clone()
}

/// The audit events of `query` once `ready` holds of them: for events committed beside an
/// answer rather than before it (a proxied call's outcome). Waits up to ten seconds, then
/// fails with what it found.
pub async fn audit_events_once(
    app: &TestApp,
    query: &str,
    ready: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let events = audit_events(app, query).await;
        if ready(&events) {
            return events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the events of {query} never became ready: {events:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A logged-in browser: its session cookie and CSRF token.
#[derive(Clone)]
pub struct Browser {
    pub cookie: String,
    pub csrf: String,
    pub app: TestApp,
}

impl TestApp {
    /// Gives `email` a role in a workspace with the real CLI.
    pub async fn grant(&self, workspace_id: &str, email: &str, role: &str) {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args([
                "admin",
                "add-member",
                "--database-url",
                &self.db_url,
                "--workspace",
                workspace_id,
                "--email",
                email,
                "--role",
                role,
            ])
            .output()
            .await
            .expect("run acp");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Asks for a login link and answers the link read from the message the SMTP server got.
    pub async fn request_login_link(&self, email: &str) -> String {
        let before = self.smtp.messages().len();
        let res = self
            .client
            .post(self.url("/auth/start-login"))
            .json(&json!({"email": email}))
            .send()
            .await
            .expect("start-login");
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let messages = self.smtp.wait_for(before + 1).await;
        let message = messages.last().expect("message");
        assert_eq!(message.rcpt, vec![email.to_lowercase()]);
        crate::smtp::login_link(message)
    }

    /// Applies `spec` as the workspace's default policy, as its owner (owner@example.com) does
    /// it from a browser session.
    pub async fn apply_policy(&self, spec: Value) {
        self.grant(&self.workspace_id, "owner@example.com", "owner")
            .await;
        let owner = self.login("owner@example.com").await;
        let (s, body) = status_json(
            owner
                .post("/v1/policies/sync", &json!({"spec": spec}))
                .await,
        )
        .await;
        assert_eq!(s, 200, "{body}");
    }

    /// The whole magic-link login, as a browser does it.
    pub async fn login(&self, email: &str) -> Browser {
        let link = self.request_login_link(email).await;
        let res = self.client.get(&link).send().await.expect("follow link");
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        let cookie = session_cookie_of(&res);
        let me: Value = self
            .client
            .get(self.url("/auth/me"))
            .header("Cookie", &cookie)
            .send()
            .await
            .expect("me")
            .json()
            .await
            .expect("json");
        Browser {
            cookie,
            csrf: me["csrf_token"].as_str().expect("csrf").to_owned(),
            app: self.clone(),
        }
    }
}

/// `acp_session=...` from a response's Set-Cookie.
pub fn session_cookie_of(res: &Response) -> String {
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("acp_session="))
        .and_then(|v| v.split(';').next())
        .expect("session cookie")
        .to_owned()
}

impl Browser {
    pub async fn get(&self, path: &str) -> Response {
        self.app
            .client
            .get(self.app.url(path))
            .header("Cookie", &self.cookie)
            .send()
            .await
            .expect("get")
    }

    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.app
            .client
            .post(self.app.url(path))
            .header("Cookie", &self.cookie)
            .header("X-CSRF-Token", &self.csrf)
            .json(body)
            .send()
            .await
            .expect("post")
    }
}

/// What one run of the binary did: its exit code and what it wrote.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub out: String,
    pub err: String,
}

impl Ran {
    /// Standard output as JSON (the test fails with the run when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

pub const BIN: &str = env!("CARGO_BIN_EXE_acp");

/// A terminal: the binary with none of the caller's `ACP_` variables, its own (empty)
/// credentials file, and the server and token given.
pub struct Term {
    _dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Term {
    pub fn new(server: Option<&str>, token: Option<&str>) -> Term {
        let dir = tempfile::tempdir().unwrap();
        let mut env = vec![(
            "ACP_CREDENTIALS".to_owned(),
            dir.path().join("credentials.json").display().to_string(),
        )];
        if let Some(server) = server {
            env.push(("ACP_SERVER".into(), server.into()));
        }
        if let Some(token) = token {
            env.push(("ACP_TOKEN".into(), token.into()));
        }
        Term { _dir: dir, env }
    }

    pub async fn run(&self, args: &[&str]) -> Ran {
        let mut cmd = tokio::process::Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ACP_") {
                cmd.env_remove(&name);
            }
        }
        let out = cmd
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A command that must succeed, with `--output json`.
    pub async fn json(&self, args: &[&str]) -> Value {
        let ran = self.run(&[args, &["--output", "json"]].concat()).await;
        assert_eq!(ran.code, 0, "acp {args:?}: {ran:?}");
        ran.json()
    }
}

/// A personal access token of `email` (given `role` in the app's workspace first).
pub async fn token_of(app: &TestApp, email: &str, role: &str) -> String {
    app.grant(&app.workspace_id, email, role).await;
    let person = app.login(email).await;
    let (s, made) = status_json(
        person
            .post(
                "/v1/auth/tokens",
                &json!({"name": format!("{role} terminal")}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    made["token"].as_str().unwrap().to_owned()
}
