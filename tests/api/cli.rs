//! The first hour with the `acp` binary, as a new user meets it: each command's help shows its
//! own flags; one `--output text|json` flag, unknown values refused; a closed stdout is no
//! panic; admin commands never create a database; a first start that fails creates nothing
//! (and one that succeeds shows its key); `acp serve` knows the variables the docs use; the
//! CI example applies with the hash it reviewed.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::both_engines;
use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_acp");

/// The binary with none of the caller's `ACP_` variables, in `dir`.
fn acp_in(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ACP_") {
            command.env_remove(&name);
        }
    }
    command.current_dir(dir).kill_on_drop(true);
    command
}

async fn run_in(dir: &Path, args: &[&str]) -> Output {
    acp_in(dir).args(args).output().await.unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The options of a help text that carry no description (on their line, or on the next line
/// when clap puts long descriptions under their flags).
fn undocumented(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().map(str::trim).collect();
    let mut missing = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !l.starts_with('-') {
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        // `-h, --help  Print help`, `--flag <VALUE>  text`: a flag alone has no text.
        let flag_words = words
            .iter()
            .take_while(|w| w.starts_with('-') || w.starts_with('<'))
            .count();
        let next = lines.get(i + 1).copied().unwrap_or("");
        if flag_words == words.len() && (next.is_empty() || next.starts_with('-')) {
            missing.push((*l).to_owned());
        }
    }
    missing
}

#[tokio::test]
async fn each_command_shows_only_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let commands: &[&[&str]] = &[
        &["serve"],
        &["admin", "workspace", "create"],
        &["admin", "workspace", "list"],
        &["admin", "add-member"],
        &["admin", "api-key", "create"],
        &["admin", "outbox", "list"],
        &["healthcheck"],
        &["openapi"],
        &["policy", "validate"],
        &["policy", "fmt"],
        &["policy", "compile"],
        &["policy", "test"],
        &["sync"],
        &["admin", "keys", "rotate"],
        &["admin", "keys", "list"],
        &["admin", "vault", "rewrap"],
        &["admin", "backup"],
        &["admin", "restore"],
    ];
    for command in commands {
        let out = run_in(dir.path(), &[*command, &["--help"]].concat()).await;
        assert!(out.status.success(), "{command:?}: {}", text(&out));
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let serve = command == &["serve"];
        // The server's settings are `serve`'s alone.
        for flag in [
            "--signature-window-secs",
            "--login-limit-per-ip",
            "--email-url",
        ] {
            assert_eq!(help.contains(flag), serve, "{command:?} and {flag}: {help}");
        }
        let admin = command[0] == "admin";
        assert_eq!(
            help.contains("--database-url"),
            admin || serve,
            "{command:?}: {help}"
        );
        assert!(
            undocumented(&help).is_empty(),
            "{command:?}: {:?}",
            undocumented(&help)
        );
    }
    let out = run_in(dir.path(), &["sync", "--help"]).await;
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(help.lines().count() < 30, "{help}");
    assert!(
        help.lines()
            .any(|l| l.contains("--policy-name <NAME>") && l.contains("The policy's display name")),
        "{help}"
    );
    assert!(help.contains("Exit codes"), "{help}");
    // Help is no error; a bad command line is exit 1 (2 means "changes found" to `acp sync`).
    let out = run_in(dir.path(), &["sync", "--no-such-flag"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!dir.path().join("data").exists());
}

/// The commands that work on the database directly (never through the server).
const ADMIN_COMMANDS: &[&[&str]] = &[
    &["admin", "outbox", "list"],
    &["admin", "workspace", "create", "team"],
    &["admin", "workspace", "list"],
    &[
        "admin",
        "add-member",
        "--workspace",
        "ws_x",
        "--email",
        "a@example.com",
    ],
    &["admin", "api-key", "create", "--workspace", "ws_x"],
    &["admin", "keys", "list"],
    &["admin", "keys", "rotate"],
];

#[tokio::test]
async fn one_output_flag_and_unknown_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut commands: Vec<&[&str]> = vec![
        &["policy", "validate", "spec.yaml"],
        &["policy", "compile", "spec.yaml"],
        &["policy", "test", "spec.yaml"],
        &[
            "sync",
            "spec.yaml",
            "--server",
            "http://127.0.0.1:1",
            "--token",
            "t",
        ],
        &["healthcheck"],
    ];
    commands.extend_from_slice(ADMIN_COMMANDS);
    for command in &commands {
        let out = run_in(dir.path(), &[*command, &["--output", "xml"]].concat()).await;
        assert_eq!(out.status.code(), Some(1), "{command:?}: {}", text(&out));
        assert!(
            text(&out).contains("invalid value 'xml' for '--output"),
            "{command:?}: {}",
            text(&out)
        );
        // The old flag is gone: there is one way to ask for JSON.
        let out = run_in(dir.path(), &[*command, &["--json"]].concat()).await;
        assert_eq!(out.status.code(), Some(1), "{command:?}: {}", text(&out));
    }
    // JSON where it is asked for, also for errors.
    let out = run_in(
        dir.path(),
        &[
            "healthcheck",
            "--url",
            "http://127.0.0.1:1",
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["ok"].as_bool(), report["ready"].as_bool()),
        (Some(false), Some(false))
    );
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "agent_groups: [{name: a, memberz: []}]\n").unwrap();
    let out = run_in(
        dir.path(),
        &["policy", "validate", "spec.yaml", "--output", "json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["errors"][0]["path"], "agent_groups[0].memberz",
        "{report}"
    );
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/finance-refunds.yaml");
    let out = run_in(
        dir.path(),
        &["policy", "validate", shipped, "--output", "json"],
    )
    .await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["policy_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
}

/// Runs `args` with stdout closed before the command writes; answers the exit code and stderr.
async fn with_stdout_closed(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut child = acp_in(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    (status.code().unwrap_or(-1), stderr)
}

#[tokio::test]
async fn a_closed_stdout_ends_the_output_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    // The OpenAPI document is larger than a pipe's buffer: the write meets the closed pipe.
    let (code, stderr) = with_stdout_closed(dir.path(), &["openapi"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/finance-refunds.yaml");
    for args in [
        &["policy", "compile", shipped][..],
        &["policy", "test", shipped, "--output", "json"][..],
        &["--help"][..],
    ] {
        let (code, stderr) = with_stdout_closed(dir.path(), args, &[]).await;
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn admin_commands_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let commands = ADMIN_COMMANDS;
    for command in commands {
        let out = run_in(dir.path(), command).await;
        assert_eq!(out.status.code(), Some(1), "{command:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(
                "no database at sqlite:./data/acp.db (start `acp serve` first or pass --database-url)"
            ),
            "{command:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{command:?}: nothing is reported");
        assert!(
            !dir.path().join("data").exists(),
            "{command:?} created ./data"
        );

        // Another SQLite file that is not there, given by flag or variable.
        let elsewhere = format!("sqlite:{}/other/acp.db", dir.path().display());
        let out = run_in(
            dir.path(),
            &[*command, &["--database-url", &elsewhere]].concat(),
        )
        .await;
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out).contains(&format!("no database at {elsewhere}")),
            "{}",
            text(&out)
        );
        let out = acp_in(dir.path())
            .args(*command)
            .env("ACP_DATABASE_URL", &elsewhere)
            .output()
            .await
            .unwrap();
        assert!(
            text(&out).contains(&format!("no database at {elsewhere}")),
            "{}",
            text(&out)
        );
        assert!(!dir.path().join("other").exists());
    }
    // A server that does not answer is named too, without its password.
    let out = run_in(
        dir.path(),
        &[
            "outbox",
            "list",
            "--database-url",
            "postgres://acp:hunter2@127.0.0.1:1/acp",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("postgres://acp:***@127.0.0.1:1/acp"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// On Postgres, a database `acp serve` never set up is not one either: nothing is created in it.
#[cfg(acp_postgres)]
#[tokio::test]
async fn admin_commands_never_set_up_a_postgres_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(Engine::Postgres).await;
    let out = run_in(
        dir.path(),
        &[
            "admin",
            "workspace",
            "create",
            "team",
            "--database-url",
            &db.url,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "no acp database at {}",
            acp::secret::redact_url(&db.url)
        )),
        "{}",
        text(&out)
    );
    assert_eq!(postgres_tables(&db.url).await, 0, "no schema was made");
    db.drop_database().await;
}

/// `acp serve` on `db_url` with `env`; answers the process and its stdout and stderr lines as
/// they come.
fn serve(
    dir: &Path,
    db_url: &str,
    addr: &str,
    env: &[(&str, &str)],
) -> (
    Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut child = acp_in(dir)
        .args(["serve", "--addr", addr, "--database-url", db_url])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let forward = |stream: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
        rx
    };
    let out = forward(Box::new(child.stdout.take().unwrap()));
    let err = forward(Box::new(child.stderr.take().unwrap()));
    (child, out, err)
}

/// The lines until one starts with `until` (included), or every line when the stream ends.
async fn lines_until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    until: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
        let done = line.starts_with(until);
        seen.push(line);
        if done {
            break;
        }
    }
    seen
}

/// A first start that fails (no master key on Postgres, a bad one on SQLite, the port taken)
/// creates nothing: the next start creates the default workspace and shows its key.
async fn a_failed_first_start_creates_nothing(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(engine).await;
    let bad_key: &[(&str, &str)] = match engine {
        Engine::Postgres => &[],
        Engine::Sqlite => &[("ACP_MASTER_KEY", "c2hvcnQ=")],
    };
    let (mut child, mut out, mut err) = serve(dir.path(), &db.url, "127.0.0.1:0", bad_key);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    let stderr = lines_until(&mut err, "\u{0}").await.join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ACP_MASTER_KEY"), "{stderr}");
    let stdout = lines_until(&mut out, "\u{0}").await;
    assert!(
        stdout.is_empty(),
        "no key was shown, none was made: {stdout:?}"
    );
    if engine == Engine::Sqlite {
        let file = db.url.trim_start_matches("sqlite:");
        assert!(!Path::new(file).exists(), "no database file was made");
    } else {
        assert_eq!(
            postgres_tables(&db.url).await,
            0,
            "the database was not touched"
        );
    }

    // The port is taken: the database may be prepared, but no workspace is bootstrapped.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let master = [("ACP_MASTER_KEY", TEST_MASTER_KEY)];
    let (mut child, mut out, mut err) = serve(dir.path(), &db.url, &addr, &master);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    let stderr = lines_until(&mut err, "\u{0}").await.join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(lines_until(&mut out, "\u{0}").await.is_empty());
    drop(taken);

    // The first start that works creates the default workspace and shows its key once.
    let (mut child, mut out, _err) = serve(dir.path(), &db.url, "127.0.0.1:0", &master);
    let stdout = lines_until(&mut out, "acp listening on").await;
    let all = stdout.join("\n");
    assert!(all.contains("Created the default workspace ws_"), "{all}");
    let key = stdout
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("svc_test_"))
        .unwrap_or_else(|| panic!("the key is shown: {all}"))
        .to_owned();
    let base = stdout
        .last()
        .unwrap()
        .strip_prefix("acp listening on ")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let res = reqwest::Client::new()
        .get(format!("{base}/v1/agents"))
        .header("X-Service-Api-Key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the shown key works");
    // The banner's admin commands name this database, so they work from any folder.
    let more = stdout
        .iter()
        .find_map(|l| l.strip_prefix("More keys: "))
        .unwrap_or_else(|| panic!("{all}"))
        .replace(" [--live]", "");
    assert!(
        more.ends_with(&format!("--database-url {}", db.url)),
        "{more}"
    );
    let args: Vec<&str> = more.split_whitespace().skip(1).collect();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = run_in(
        elsewhere.path(),
        &[&args[..], &["--output", "json"]].concat(),
    )
    .await;
    assert!(out.status.success(), "{more}: {}", text(&out));
    let made: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(made["api_key"]["key"]
        .as_str()
        .unwrap()
        .starts_with("svc_test_"));
    child.kill().await.ok();
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_start_on_sqlite_creates_nothing() {
    a_failed_first_start_creates_nothing(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_start_on_postgres_creates_nothing() {
    a_failed_first_start_creates_nothing(Engine::Postgres).await;
}

/// `acp serve` warns about a misspelt `ACP_` variable, and not about those the docs, the
/// examples and `acp sync` use.
async fn serve_knows_the_documented_variables(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(engine).await;
    let env = [
        ("ACP_MASTER_KEY", TEST_MASTER_KEY),
        ("ACP_API_KEY", "svc_test_x"),
        ("ACP_URL", "http://127.0.0.1:8080"),
        ("ACP_SERVER", "http://127.0.0.1:8080"),
        ("ACP_TOKEN", "svc_pat_x"),
        ("ACP_WORKSPACE", "ws_x"),
        ("ACP_DATABSE_URL", "sqlite:typo.db"),
    ];
    let (mut child, mut out, mut err) = serve(dir.path(), &db.url, "127.0.0.1:0", &env);
    lines_until(&mut out, "acp listening on").await;
    child.kill().await.ok();
    let stderr = lines_until(&mut err, "\u{0}").await.join("\n");
    assert!(
        stderr.contains("ACP_DATABSE_URL"),
        "the typo is named: {stderr}"
    );
    for (name, _) in &env[1..6] {
        assert!(!stderr.contains(name), "{name} is not a typo: {stderr}");
    }
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_knows_the_documented_variables_on_sqlite() {
    serve_knows_the_documented_variables(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_knows_the_documented_variables_on_postgres() {
    serve_knows_the_documented_variables(Engine::Postgres).await;
}

both_engines! {
    async fn the_home_page_leads_to_the_dashboard(app) {
        let res = app.client.get(app.url("/")).send().await.unwrap();
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()["location"], "/dashboard");
        // Not logged in, the dashboard sends on to the login page.
        let res = app.client.get(app.url("/dashboard")).send().await.unwrap();
        assert_eq!((res.status().as_u16(), res.headers()["location"].to_str().unwrap()), (303, "/login"));
    }
}

both_engines! {
    async fn the_ci_example_applies_the_hash_it_reviewed(app) {
        let agent = app.active_agent("fin").await;
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let (_, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ci"})).await).await;
        let token = pat["token"].as_str().unwrap().to_owned();
        let dir = tempfile::tempdir().unwrap();
        let spec = |allowed: &str| format!(
            "reusable_policy_blocks:\n  ops:\n    actions:\n      allow: [{allowed}]\nagent_groups:\n- name: team\n  members: [{}]\nbindings:\n- group: team\n  blocks: [ops]\ntests:\n- name: reads\n  agent: {{id: {}}}\n  action: {allowed}\n  expect: {{decision: allow}}\n- name: other\n  agent: {{id: {}}}\n  action: nothing\n  expect: {{decision: deny}}\n",
            agent.id, agent.id, agent.id
        );
        let reviewed = dir.path().join("reviewed.yaml");
        std::fs::write(&reviewed, spec("read")).unwrap();
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, spec("write")).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ci-policy-sync.sh");

        // `acp` for the script: after the dry run, someone else applies another spec.
        let wrapper = dir.path().join("acp-racing");
        std::fs::write(&wrapper, format!(
            "#!/usr/bin/env bash\n\"{BIN}\" \"$@\"\ncode=$?\ncase \" $* \" in *\" --dry-run \"*) \"{BIN}\" sync \"{}\" --apply >/dev/null || exit 99 ;; esac\nexit $code\n",
            other.display()
        )).unwrap();
        let bash = |bin: String| {
            let app = app.clone();
            let token = token.clone();
            let reviewed = reviewed.clone();
            async move {
                let mut command = Command::new("bash");
                for (name, _) in std::env::vars_os() {
                    if name.to_string_lossy().starts_with("ACP_") {
                        command.env_remove(&name);
                    }
                }
                let out = command
                    .arg(script)
                    .arg(&reviewed)
                    .env("ACP_BIN", bin)
                    .env("ACP_SERVER", &app.base)
                    .env("ACP_TOKEN", &token)
                    .env("CI_APPLY", "1")
                    .env("GITHUB_SHA", uuid::Uuid::new_v4().to_string())
                    .output()
                    .await
                    .unwrap();
                (out.status.code(), text(&out))
            }
        };
        std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

        // The policy changes between the dry run and the apply: exit 3, the change is kept.
        let (code, out) = bash(wrapper.display().to_string()).await;
        assert_eq!(code, Some(3), "{out}");
        assert!(out.contains("--expect-hash sha256:"), "the dry run names the hash: {out}");
        assert!(out.contains("sync_conflict"), "{out}");
        let write = check_action(&app, &agent, "write").await;
        assert_eq!(write, "allow", "the other apply was not reverted");
        assert_eq!(check_action(&app, &agent, "read").await, "deny");

        // Nobody in between: the reviewed spec is applied.
        let (code, out) = bash(BIN.to_owned()).await;
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("applied: version"), "{out}");
        assert_eq!(check_action(&app, &agent, "read").await, "allow");
        let (code, out) = bash(BIN.to_owned()).await;
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("is up to date"), "{out}");

        // `acp sync --output json | head`: the closed pipe is no panic; the exit code stays.
        std::fs::write(&reviewed, spec("deploy")).unwrap();
        let sync = ["sync", reviewed.to_str().unwrap(), "--output", "json"];
        let (code, stderr) = with_stdout_closed(
            dir.path(), &sync, &[("ACP_SERVER", &app.base), ("ACP_TOKEN", &token)],
        ).await;
        assert_eq!(code, 2, "changes found: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

async fn check_action(app: &TestApp, agent: &TestAgent, action: &str) -> String {
    let (s, body) = status_json(
        app.post(
            "/v1/check",
            &json!({"agent_id": agent.id, "action": action}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    body["decision"].as_str().unwrap().to_owned()
}

/// How many tables the Postgres database at `url` has.
#[cfg_attr(
    not(acp_postgres),
    allow(dead_code, reason = "used only by the tests built with acp_postgres")
)]
async fn postgres_tables(url: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let tables = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    tables
}

#[tokio::test]
async fn healthcheck_reports_a_ready_server_and_its_path_prefix() {
    let app = TestApp::spawn(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    for base in [app.base.clone(), format!("{}/", app.base)] {
        let out = run_in(dir.path(), &["healthcheck", "--url", &base]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n");
    }
    // Under a prefix the server does not have, `/readyz` is not found: not ready.
    let out = run_in(
        dir.path(),
        &["healthcheck", "--url", &format!("{}/api", app.base)],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "not ready: HTTP 404\n"
    );
    let out = run_in(dir.path(), &["healthcheck", "--url", "ftp://127.0.0.1:1"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

/// `acp serve` on `db_url` with `env` that must stop by itself: its exit code and stderr (it
/// fails the test if the server starts instead).
async fn refused_start(dir: &Path, db_url: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let run = acp_in(dir)
        .args(["serve", "--addr", "127.0.0.1:0", "--database-url", db_url])
        .envs(env.iter().copied())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the server refused to start instead of serving")
        .unwrap();
    assert!(out.stdout.is_empty(), "{}", text(&out));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a refused start must leave as it was: the sealed signing keys and sink secrets.
async fn sealed_state(db_url: &str) -> (Vec<String>, Vec<String>) {
    use acp::store::{AuditStore, CredentialStore};
    let store = acp::store::SqlStore::open(db_url, &Default::default())
        .await
        .unwrap();
    let keys = store.signing_keys(0).await.unwrap();
    let sinks = store.all_sinks().await.unwrap();
    store.close().await;
    (
        keys.into_iter()
            .map(|k| format!("{}:{}", k.kid, k.private_key.expose()))
            .collect(),
        sinks
            .into_iter()
            .map(|s| format!("{}:{}", s.id, s.secret_sealed))
            .collect(),
    )
}

const OTHER_MASTER_KEY: &str = "bmV3LW1hc3Rlci1rZXktb2YtdGhlLWFjcC10ZXN0cyE=";

both_engines! {
    /// A server whose master key does not open every sealed item (a JWT signing key, an audit
    /// sink's secret) refuses to start with the way out, and writes nothing.
    async fn a_master_key_that_opens_not_every_sealed_item_is_refused_at_start(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let (s, sink) = status_json(owner.post("/v1/workspace/audit/sinks", &json!({"name": "siem", "url": "https://siem.example.com/", "enabled": false})).await).await;
        assert_eq!(s, 200, "{sink}");
        let dir = tempfile::tempdir().unwrap();
        let before = sealed_state(&app.db_url).await;
        assert_eq!(before.0.len(), 1, "one JWT signing key, sealed with the test key");

        // Another key opens nothing: refused, naming the JWT key and the way out.
        let (code, stderr) = refused_start(dir.path(), &app.db_url, &[("ACP_MASTER_KEY", OTHER_MASTER_KEY)]).await;
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("sealed item(s) this master key cannot open (first: the JWT signing key `acp-"), "{stderr}");
        assert!(stderr.contains("acp admin vault rewrap --from-key OLD_KEY"), "{stderr}");
        assert_eq!(sealed_state(&app.db_url).await, before, "nothing was written");

        // The JWT key sealed again with the other key, the sink's secret not: still refused.
        let store = acp::store::SqlStore::open(&app.db_url, &Default::default()).await.unwrap();
        let (old, new) = (acp::secret::MasterKey::from_base64(TEST_MASTER_KEY).unwrap(), acp::secret::MasterKey::from_base64(OTHER_MASTER_KEY).unwrap());
        {
            use acp::store::CredentialStore;
            for k in store.signing_keys(0).await.unwrap() {
                let seed = old.open(k.private_key.expose(), &k.kid).unwrap();
                let sealed = acp::secret::Secret::new(new.seal(&seed, &k.kid).unwrap());
                acp::store::apply_one(&store, acp::store::Change::new(acp::store::CredentialOp::ResealSigningKey { kid: k.kid.clone(), previous: k.private_key.clone(), sealed })).await.unwrap();
            }
        }
        store.close().await;
        let before = sealed_state(&app.db_url).await;
        let (code, stderr) = refused_start(dir.path(), &app.db_url, &[("ACP_MASTER_KEY", OTHER_MASTER_KEY)]).await;
        assert_eq!(code, Some(1), "{stderr}");
        let sink_id = sink["sink"]["sink_id"].as_str().unwrap();
        assert!(stderr.contains(&format!("(first: the signing secret of audit sink `{sink_id}`)")), "{stderr}");
        assert_eq!(sealed_state(&app.db_url).await, before, "nothing was written");

        // `acp admin restore` checks the sinks' secrets of a backup too (SQLite: Postgres has pg_dump).
        if app.db_url.starts_with("sqlite:") {
            let backup = dir.path().join("b.db").display().to_string();
            let out = run_in(dir.path(), &["admin", "backup", &backup, "--database-url", &app.db_url]).await;
            assert!(out.status.success(), "{}", text(&out));
            let target = format!("sqlite:{}", dir.path().join("restored").join("acp.db").display());
            let out = acp_in(dir.path()).args(["admin", "restore", &backup, "--database-url", &target])
                .env("ACP_MASTER_KEY", OTHER_MASTER_KEY).output().await.unwrap();
            assert_eq!(out.status.code(), Some(1), "{}", text(&out));
            assert!(text(&out).contains(&format!("does not open the signing secret of audit sink `{sink_id}`")), "{}", text(&out));
        }
    }
}

/// SQLite keeps its master key in a file beside the database, made on the first start. A
/// database that holds sealed data is never given a new one: without its key file the server
/// refuses to start, writes no key file, and starts again once the file is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_key_file_is_not_replaced_by_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(Engine::Sqlite).await;
    let file = Path::new(db.url.trim_start_matches("sqlite:")).with_file_name("acp-master.key");
    let (mut child, mut out, _err) = serve(dir.path(), &db.url, "127.0.0.1:0", &[]);
    lines_until(&mut out, "acp listening on").await;
    crate::replicas::sigterm(&mut child).await;
    let key = std::fs::read(&file).expect("the first start made the key file");
    let before = sealed_state(&db.url).await;
    assert_eq!(before.0.len(), 1);

    std::fs::remove_file(&file).unwrap();
    let (code, stderr) = refused_start(dir.path(), &db.url, &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no master key file at"), "{stderr}");
    assert!(
        stderr.contains("item(s) sealed with a master key (first: the JWT signing key `acp-"),
        "{stderr}"
    );
    assert!(stderr.contains("no key file was written"), "{stderr}");
    assert!(!file.exists(), "no key file was written");
    assert_eq!(sealed_state(&db.url).await, before);

    // With the file back, it starts.
    std::fs::write(&file, &key).unwrap();
    let (mut child, mut out, _err) = serve(dir.path(), &db.url, "127.0.0.1:0", &[]);
    let started = lines_until(&mut out, "acp listening on").await;
    assert!(
        started
            .last()
            .is_some_and(|l| l.starts_with("acp listening on")),
        "{started:?}"
    );
    crate::replicas::sigterm(&mut child).await;
    assert_eq!(std::fs::read(&file).unwrap(), key);
}
