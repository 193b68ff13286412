//! A newcomer's first day through the real binary, on both engines: `acp serve --owner` makes
//! the first owner with the default workspace (the printed link is a working magic link, the
//! mail is in the outbox, `acp login --outbox` logs in with it, a later start adds nobody);
//! `acp agents new` makes an active agent and a private key file (never over an existing one);
//! `acp agents heartbeat` signs with that file; `acp check` answers by exit code under the
//! starter policy synced with `acp sync`; `acp challenges list|show|approve --reason` decide
//! from a terminal, the reason kept with the challenge and in the audit event.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::both_engines;
use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_acp");

/// A terminal in its own folder: the binary without the caller's `ACP_` variables, its own
/// credentials file.
struct Terminal {
    dir: tempfile::TempDir,
}

impl Terminal {
    fn new() -> Terminal {
        Terminal {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ACP_") {
                cmd.env_remove(&name);
            }
        }
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("ACP_CREDENTIALS", self.path("credentials.json"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str]) -> Ran {
        let out = self.command(args).output().await.expect("run acp");
        Ran {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A command that must succeed.
    async fn ok(&self, args: &[&str]) -> Ran {
        let ran = self.run(args).await;
        assert_eq!(ran.code, 0, "acp {args:?}: {ran:?}");
        ran
    }
}

/// `acp serve` of `db_url` in the terminal's folder, with `extra` flags; answers the process and
/// its start banner (stdout up to the line that says where it listens).
async fn serve(term: &Terminal, db_url: &str, addr: &str, extra: &[&str]) -> (Child, Vec<String>) {
    let mut args = vec!["serve", "--addr", addr, "--database-url", db_url];
    args.extend(extra);
    let mut child = term
        .command(&args)
        .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the server starts within a minute")
            .unwrap()
            .unwrap_or_else(|| panic!("the server stopped: {banner:?}"));
        let done = line.starts_with("acp listening on ");
        banner.push(line);
        if done {
            break;
        }
    }
    (child, banner)
}

fn base_of(banner: &[String]) -> String {
    banner
        .last()
        .unwrap()
        .strip_prefix("acp listening on ")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// `acp serve --owner` on an empty database makes the owner with the workspace and shows a
/// working login link; `acp login --outbox` logs in from the outbox; a later start with another
/// `--owner` says what to do and adds nobody.
async fn the_first_owner_comes_with_the_database(engine: Engine) {
    let term = Terminal::new();
    let db = TestDb::new(engine).await;
    if engine == Engine::Sqlite {
        // A malformed address stops the first start before anything is made.
        let ran = term
            .run(&[
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--database-url",
                &db.url,
                "--owner",
                "not-an-address",
            ])
            .await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.contains("owner"), "{ran:?}");
        assert!(!Path::new(db.url.trim_start_matches("sqlite:")).exists());
    }
    // One address for every start, so that the stored login stays the server's.
    let addr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    // The env twin, in capitals: the address is kept lower-cased.
    let mut first = term.command(&["serve", "--addr", &addr, "--database-url", &db.url]);
    first
        .env("ACP_OWNER", "Owner@Example.com")
        .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = first.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
    {
        let done = line.starts_with("acp listening on ");
        banner.push(line);
        if done {
            break;
        }
    }
    let all = banner.join("\n");
    let base = base_of(&banner);
    assert!(all.contains("Owner: owner@example.com."), "{all}");
    let link = banner
        .iter()
        .map(|l| l.trim())
        .find(|l| l.contains("/auth/verify-login?token=lgn_"))
        .unwrap_or_else(|| panic!("the login link is shown: {all}"))
        .to_owned();
    assert!(
        link.starts_with(&format!("{base}/auth/verify-login?token=")),
        "{link}"
    );
    let ws = all
        .split("Created the default workspace ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap()
        .to_owned();

    // The link is in the outbox, as every login link.
    let outbox = term
        .ok(&[
            "outbox",
            "list",
            "--database-url",
            &db.url,
            "--output",
            "json",
        ])
        .await
        .json();
    let mail = &outbox["items"][0];
    assert_eq!(mail["to"], json!(["owner@example.com"]), "{outbox}");
    assert!(mail["text"].as_str().unwrap().contains(&link), "{outbox}");

    // It is a magic link like any other: it sets the session of the workspace's owner.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = http.get(&link).send().await.unwrap();
    assert_eq!(res.status(), 303);
    let cookie = session_cookie_of(&res);
    let me: Value = http
        .get(format!("{base}/auth/me"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["user"]["email"], "owner@example.com", "{me}");
    assert_eq!(me["workspaces"][0]["workspace_id"], ws.as_str(), "{me}");
    assert_eq!(me["workspaces"][0]["role"], "owner", "{me}");
    // It works once.
    assert_eq!(
        http.get(&link).send().await.unwrap().status().as_u16() / 100,
        4
    );

    // From a terminal, without a browser: the link comes from the outbox.
    let ran = term
        .ok(&[
            "login",
            "--server",
            &base,
            "--email",
            "owner@example.com",
            "--outbox",
            "--database-url",
            &db.url,
        ])
        .await;
    assert!(ran.out.contains("Logged in"), "{ran:?}");
    let me = term.ok(&["whoami", "--output", "json"]).await.json();
    assert_eq!(me["workspaces"][0]["role"], "owner", "{me}");
    // And the first sync with it.
    let starter = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/starter.yaml");
    term.ok(&["sync", starter, "--apply"]).await;
    // Someone the outbox has no link for is told why.
    let ran = term
        .run(&[
            "login",
            "--server",
            &base,
            "--email",
            "stranger@example.com",
            "--outbox",
            "--database-url",
            &db.url,
        ])
        .await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.err.contains("no login link for stranger@example.com"),
        "{ran:?}"
    );
    child.kill().await.unwrap();

    // A later start naming someone else adds nobody, and says how to.
    let (mut child, banner) = serve(&term, &db.url, &addr, &["--owner", "other@example.com"]).await;
    let all = banner.join("\n");
    assert!(
        all.contains(&format!(
            "other@example.com is not a member of the default workspace {ws}"
        )),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "acp admin add-member --workspace {ws} --email other@example.com --role owner"
        )),
        "{all}"
    );
    assert!(!all.contains("Created the default workspace"), "{all}");
    let base = base_of(&banner);
    let members = term
        .ok(&["members", "list", "--server", &base, "--output", "json"])
        .await
        .json();
    let emails: Vec<&str> = members["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["email"].as_str())
        .collect();
    assert_eq!(emails, ["owner@example.com"], "{members}");
    child.kill().await.unwrap();

    // The owner themselves, and no --owner at all: nothing changes, nothing is recorded again.
    let (mut child, banner) = serve(&term, &db.url, &addr, &["--owner", "owner@example.com"]).await;
    assert!(
        banner.join("\n").contains(&format!(
            "owner@example.com is owner of the default workspace {ws}"
        )),
        "{banner:?}"
    );
    child.kill().await.unwrap();
    let (mut child, banner) = serve(&term, &db.url, &addr, &[]).await;
    let all = banner.join("\n");
    assert!(!all.contains("owner@example.com"), "{all}");
    let base = base_of(&banner);
    let created = term
        .ok(&[
            "audit",
            "search",
            "--server",
            &base,
            "--event-type",
            "workspace.created",
            "--output",
            "json",
        ])
        .await
        .json();
    assert_eq!(created["items"].as_array().unwrap().len(), 1, "{created}");
    let granted = term
        .ok(&[
            "audit",
            "search",
            "--server",
            &base,
            "--event-type",
            "membership.granted",
            "--output",
            "json",
        ])
        .await
        .json();
    assert_eq!(granted["items"].as_array().unwrap().len(), 1, "{granted}");
    assert!(
        !granted.to_string().contains("owner@example.com"),
        "{granted}"
    );
    child.kill().await.unwrap();
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_owner_comes_with_the_database_on_sqlite() {
    the_first_owner_comes_with_the_database(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_owner_comes_with_the_database_on_postgres() {
    the_first_owner_comes_with_the_database(Engine::Postgres).await;
}

/// A personal access token of an owner of the app's workspace.
async fn owner_token(app: &TestApp) -> String {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let (s, made) = status_json(
        owner
            .post(
                "/v1/auth/tokens",
                &json!({"name": "first-day", "expires_in_days": 1}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    made["token"].as_str().unwrap().to_owned()
}

/// `acp check` of `agent` with the app's key given as `--token`.
async fn check(
    term: &Terminal,
    app: &TestApp,
    agent: &str,
    action: &str,
    context: Option<&str>,
) -> Ran {
    let mut args = vec![
        "check", "--agent", agent, "--action", action, "--server", &app.base, "--token", &app.key,
    ];
    if let Some(context) = context {
        args.extend(["--context", context]);
    }
    term.run(&args).await
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

both_engines! {
    async fn a_first_agent_is_made_and_signs_from_the_terminal(app) {
        let pat = owner_token(&app).await;
        let term = Terminal::new();
        let file = term.path("first-agent.json");
        let key_file = file.to_str().unwrap();

        // With a person's token (the stored login or --token), as JSON.
        let made = term
            .ok(&["agents", "new", "first-agent", "--key-file", key_file, "--server", &app.base, "--token", &pat, "--output", "json"])
            .await
            .json();
        let agent_id = made["agent_id"].as_str().unwrap().to_owned();
        assert!(agent_id.starts_with("agt_"), "{made}");
        assert_eq!(made["status"], "active", "{made}");
        assert_eq!(mode_of(&file), 0o600);
        let stored: serde_json::Map<String, Value> =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let keys: Vec<&str> = stored.keys().map(String::as_str).collect();
        assert_eq!(keys, ["agent_id", "private_key", "public_key", "server"]);
        assert_eq!(stored["agent_id"], agent_id.as_str());
        assert_eq!(stored["server"], app.base.as_str());
        let (s, shown) = status_json(app.get(&format!("/v1/agents/{agent_id}")).await).await;
        assert_eq!(s, 200, "{shown}");
        assert_eq!(shown["agent"]["status"], "active", "{shown}");
        assert_eq!(shown["agent"]["name"], "first-agent", "{shown}");
        assert_eq!(shown["agent"]["public_key"], stored["public_key"], "{shown}");
        // The person is the actor of the registration.
        let registered = audit_events(&app, &format!("agent_id={agent_id}&event_type=agent.registered")).await;
        assert!(registered[0]["actor"].as_str().unwrap().starts_with("user:"), "{registered:?}");

        // An existing file is never overwritten, and nothing is registered.
        let before = std::fs::read(&file).unwrap();
        let ran = term
            .run(&["agents", "new", "second", "--key-file", key_file, "--server", &app.base, "--token", &pat])
            .await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.contains("exists"), "{ran:?}");
        assert_eq!(std::fs::read(&file).unwrap(), before);
        let (_, listed) = status_json(app.get("/v1/agents?name=second").await).await;
        assert_eq!(listed["items"], json!([]), "{listed}");

        // A refused registration leaves no file behind.
        let refused = term.path("refused.json");
        let ran = term
            .run(&["agents", "new", "refused", "--key-file", refused.to_str().unwrap(), "--server", &app.base, "--token", "svc_pat_notavalidtoken"])
            .await;
        assert_eq!(ran.code, 4, "{ran:?}");
        assert!(!refused.exists());

        // With the API key, and an inventory label: only the id on stdout.
        let labelled = term.path("labelled.json");
        let ran = term
            .run(&["agents", "new", "labelled", "--key-file", labelled.to_str().unwrap(), "--label", "dept=finance", "--server", &app.base])
            .await;
        assert_eq!(ran.code, 4, "no credential: {ran:?}");
        assert!(!labelled.exists());
        let mut cmd = term.command(&["agents", "new", "labelled", "--key-file", labelled.to_str().unwrap(), "--label", "dept=finance", "--server", &app.base]);
        let out = cmd.env("ACP_API_KEY", &app.key).output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let labelled_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(labelled_id.starts_with("agt_") && !labelled_id.contains('\n'), "{labelled_id}");
        let (_, inventory) = status_json(app.get("/v1/workspace/agents?label=dept=finance").await).await;
        assert_eq!(inventory["items"][0]["agent_id"], labelled_id.as_str(), "{inventory}");

        // The agent's side: a heartbeat signed with the file, to the file's server.
        let ran = term
            .ok(&["agents", "heartbeat", "--key-file", key_file, "--status", "degraded", "--latency-ms", "12"])
            .await;
        assert!(ran.out.contains("recorded"), "{ran:?}");
        let (_, recent) = status_json(app.get(&format!("/v1/telemetry/heartbeat/recent?agent_id={agent_id}")).await).await;
        assert_eq!(recent["items"][0]["status"], "degraded", "{recent}");
        // Signed again: a new nonce each time.
        term.ok(&["agents", "heartbeat", "--key-file", key_file]).await;
        // A key file others may read is refused.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let ran = term.run(&["agents", "heartbeat", "--key-file", key_file]).await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.contains("chmod 600"), "{ran:?}");
    }
}

both_engines! {
    async fn the_starter_policy_decides_by_exit_code_and_approvals_happen_in_the_terminal(app) {
        let pat = owner_token(&app).await;
        let term = Terminal::new();
        let key_file = term.path("agent.json");
        let agent_id = term
            .ok(&["agents", "new", "demo-agent", "--key-file", key_file.to_str().unwrap(), "--server", &app.base, "--token", &pat])
            .await
            .out
            .trim()
            .to_owned();
        let starter = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/starter.yaml");
        term.ok(&["sync", starter, "--apply", "--server", &app.base, "--token", &pat]).await;

        // A new agent with no labels matches: 0 allow, 9 challenge, 8 deny.
        let ran = check(&term, &app, &agent_id, "read_docs", None).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        assert!(ran.out.starts_with("decision      allow"), "{ran:?}");
        // The agent by its name, as by its id; a name no agent has is not found (6).
        let ran = check(&term, &app, "demo-agent", "read_docs", None).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        let ran = check(&term, &app, "no-such-agent", "read_docs", None).await;
        assert_eq!(ran.code, 6, "{ran:?}");
        let ran = check(&term, &app, &agent_id, "delete_database", None).await;
        assert_eq!(ran.code, 8, "{ran:?}");
        assert!(ran.out.contains("action_denied"), "{ran:?}");
        std::fs::write(term.path("refund.json"), r#"{"amount": 250, "currency": "USD"}"#).unwrap();
        let ran = check(&term, &app, &agent_id, "refund", Some("@refund.json")).await;
        assert_eq!(ran.code, 9, "{ran:?}");
        assert!(ran.out.contains("amount_requires_approval"), "{ran:?}");
        // JSON is the server's Decision; the exit code is the same.
        let json_args = ["check", "--agent", &agent_id, "--action", "refund", "--context", r#"{"amount": 250, "currency": "USD"}"#, "--server", &app.base, "--output", "json"];
        let mut cmd = term.command(&json_args);
        let out = cmd.env("ACP_API_KEY", &app.key).output().await.unwrap();
        assert_eq!(out.status.code(), Some(9));
        let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(decision["decision"], "challenge", "{decision}");
        let challenge_id = decision["challenge_id"].as_str().unwrap().to_owned();
        // Bad input is exit 1, an unknown agent 6, a key that is not valid 4.
        assert_eq!(term.run(&["check", "--agent", &agent_id, "--action", "x", "--context", "[1]", "--server", &app.base, "--token", &app.key]).await.code, 1);
        assert_eq!(term.run(&["check", "--agent", "agt_00000000000000000000000000000000", "--action", "x", "--server", &app.base, "--token", &app.key]).await.code, 6);
        assert_eq!(term.run(&["check", "--agent", &agent_id, "--action", "x", "--server", &app.base, "--token", &random_api_key()]).await.code, 4);

        // The owner reads the queue with the values the rule read, then the challenge.
        let ran = term.ok(&["challenges", "list", "--server", &app.base, "--token", &pat]).await;
        assert!(ran.out.contains("VALUES"), "{ran:?}");
        assert!(ran.out.contains("amount=250 currency=USD"), "{ran:?}");
        let ran = term.ok(&["challenges", "show", &challenge_id, "--server", &app.base, "--token", &pat]).await;
        for part in ["demo-agent (", "request       amount: 250", "currency: USD", "amounts over 100 USD need approval", "raised by     a backend", "pending ("] {
            assert!(ran.out.contains(part), "{part}: {ran:?}");
        }
        let shown = term.ok(&["challenges", "show", &challenge_id, "--server", &app.base, "--token", &pat, "--output", "json"]).await.json();
        assert_eq!(shown["challenge"]["raised_by"], "backend", "{shown}");
        assert_eq!(shown["challenge"]["decision_reason"], Value::Null, "{shown}");

        // Approved with a reason: kept with the challenge and in the audit event.
        let ran = term.ok(&["challenges", "approve", &challenge_id, "--reason", "known customer", "--server", &app.base, "--token", &pat]).await;
        assert!(ran.out.contains("approved"), "{ran:?}");
        let shown = term.ok(&["challenges", "show", &challenge_id, "--server", &app.base, "--token", &pat, "--output", "json"]).await.json();
        assert_eq!(shown["challenge"]["status"], "approved", "{shown}");
        assert_eq!(shown["challenge"]["decision_reason"], "known customer", "{shown}");
        assert!(shown["challenge"]["decided_by"].as_str().unwrap().starts_with("user:"), "{shown}");
        let ran = term.ok(&["challenges", "show", &challenge_id, "--server", &app.base, "--token", &pat]).await;
        assert!(ran.out.contains("reason        known customer"), "{ran:?}");
        let events = audit_events(&app, "event_type=approval.approved").await;
        assert_eq!(events[0]["details"]["challenge_id"], challenge_id.as_str(), "{events:?}");
        assert_eq!(events[0]["details"]["reason"], "known customer", "{events:?}");
        // The same request is now allowed once.
        assert_eq!(check(&term, &app, &agent_id, "refund", Some(r#"{"amount": 250, "currency": "USD"}"#)).await.code, 0);

        // A reason over 500 characters is refused; a decided challenge is a conflict.
        let long = "x".repeat(501);
        let ran = term.run(&["challenges", "deny", &challenge_id, "--reason", &long, "--server", &app.base, "--token", &pat]).await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.contains("invalid_reason"), "{ran:?}");
        let ran = term.run(&["challenges", "deny", &challenge_id, "--server", &app.base, "--token", &pat]).await;
        assert_eq!(ran.code, 3, "{ran:?}");
    }
}
