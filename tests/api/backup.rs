//! `acp admin backup` and `acp admin restore` with the real binary: a backup taken under load holds every
//! event answered before it started; restore refuses while a server uses the database, and puts
//! the backup back once it is stopped; the refusals leave everything as it was.
//!
//! These tests are SQLite-only by nature: the commands copy an SQLite file, and Postgres is
//! backed up with `pg_dump` (docs/operations.md). That case is not skipped: it is asserted as
//! the clear error both commands answer for a Postgres URL.

use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{ConnectOptions, Connection};
use tokio::process::{Child, Command};

use crate::helpers::*;
use crate::replicas::start_replica;

/// Runs `acp` with none of the caller's `ACP_` variables but the test master key.
async fn acp(args: &[&str]) -> Output {
    acp_with_key(args, TEST_MASTER_KEY).await
}

async fn acp_with_key(args: &[&str], master_key: &str) -> Output {
    acp_command(master_key)
        .args(args)
        .output()
        .await
        .expect("run acp")
}

/// [`acp`] run in the folder `dir` (for relative paths).
async fn acp_in(dir: &Path, args: &[&str]) -> Output {
    acp_command(TEST_MASTER_KEY)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .expect("run acp")
}

/// `acp` with none of the caller's `ACP_` variables but `master_key`.
fn acp_command(master_key: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_acp"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ACP_") {
            command.env_remove(&name);
        }
    }
    command.env("ACP_MASTER_KEY", master_key).kill_on_drop(true);
    command
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command failed with exit code 1 and this in its message (and printed nothing on stdout).
fn assert_refused(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(out), stderr(out));
    assert!(
        stderr(out).starts_with("error: ") && stderr(out).contains(needle),
        "`{needle}` in {}",
        stderr(out)
    );
    assert!(stdout(out).is_empty(), "{}", stdout(out));
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}{}", stdout(out), stderr(out));
    serde_json::from_slice(&out.stdout).expect("json output")
}

/// `PRAGMA integrity_check` of an SQLite file, read without changing it.
async fn integrity(path: &Path) -> Vec<String> {
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(true)
        .connect()
        .await
        .unwrap();
    let found = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    found
}

/// Waits until the server at `base` answers `/readyz` (it then also handles SIGTERM: the
/// listening line is printed just before the signal handler is in place).
async fn ready(base: &str) {
    for _ in 0..100 {
        if let Ok(res) = reqwest::get(format!("{base}/readyz")).await {
            if res.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{base} never became ready");
}

/// SIGTERM, then wait for a clean exit.
async fn stop(server: &mut Child) {
    crate::replicas::sigterm(server).await;
}

/// Registers and attests an agent over HTTP; answers its id.
async fn active_agent(client: &reqwest::Client, base: &str, key: &str) -> String {
    use base64::Engine as _;
    use ed25519_dalek::Signer;
    let agent = TestAgent::new();
    let res = client
        .post(format!("{base}/v1/agents/register"))
        .header("X-Service-Api-Key", key)
        .json(&json!({"name": "loader", "public_key": agent.public_key_b64()}))
        .send()
        .await
        .unwrap();
    let (status, reg) = status_json(res).await;
    assert_eq!(status, 200, "{reg}");
    let challenge = base64::engine::general_purpose::STANDARD
        .decode(reg["challenge"].as_str().unwrap())
        .unwrap();
    let res = client
        .post(format!("{base}/v1/agents/attest"))
        .json(
            &json!({"agent_id": reg["agent_id"], "challenge_id": reg["challenge_id"],
            "signature": b64(&agent.key.sign(&challenge).to_bytes())}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    reg["agent_id"].as_str().unwrap().to_owned()
}

/// One request of the load: what identifies its audit event, and when it was sent and answered.
#[derive(Debug, Clone)]
struct Answered {
    /// `trace:ID` for a check, `agent:ID` for a registration.
    event: String,
    sent: Instant,
    answered: Instant,
}

/// Every event of the workspace, paged through the audit API, as `trace:ID` and (for
/// registrations) `agent:ID`.
async fn all_events(client: &reqwest::Client, base: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let res = client
            .get(format!(
                "{base}/v1/workspace/audit/events?limit=200&cursor={cursor}"
            ))
            .header("X-Service-Api-Key", key)
            .send()
            .await
            .unwrap();
        let (status, page) = status_json(res).await;
        assert_eq!(status, 200, "{page}");
        for e in page["items"].as_array().unwrap() {
            if let Some(trace) = e["trace_id"].as_str() {
                out.push(format!("trace:{trace}"));
            }
            if e["event_type"] == "agent.registered" {
                out.push(format!("agent:{}", e["agent_id"].as_str().unwrap()));
            }
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => return out,
        }
    }
}

/// Keeps sending decisions and registrations until `stop`, recording each 2xx.
fn start_load(
    base: &str,
    key: &str,
    agent_id: &str,
    stop: Arc<AtomicBool>,
    answered: Arc<Mutex<Vec<Answered>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for n in 0..4 {
        let (base, key, agent_id) = (base.to_owned(), key.to_owned(), agent_id.to_owned());
        let (stop, answered) = (stop.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                // Three deciders and one registrar: both write audit events.
                let event = if n < 3 {
                    let res = client
                        .post(format!("{base}/v1/check"))
                        .header("X-Service-Api-Key", &key)
                        .json(&json!({"agent_id": agent_id, "action": "read"}))
                        .send()
                        .await;
                    let Ok(res) = res else { continue };
                    if !res.status().is_success() {
                        continue;
                    }
                    let body: Value = res.json().await.unwrap();
                    format!("trace:{}", body["trace_id"].as_str().unwrap())
                } else {
                    let agent = TestAgent::new();
                    let res = client
                        .post(format!("{base}/v1/agents/register"))
                        .header("X-Service-Api-Key", &key)
                        .json(&json!({"name": "load", "public_key": agent.public_key_b64()}))
                        .send()
                        .await;
                    let Ok(res) = res else { continue };
                    if !res.status().is_success() {
                        continue;
                    }
                    let body: Value = res.json().await.unwrap();
                    format!("agent:{}", body["agent_id"].as_str().unwrap())
                };
                answered.lock().unwrap().push(Answered {
                    event,
                    sent,
                    answered: Instant::now(),
                });
            }
        }));
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_restores_every_event_committed_before_it() {
    let db = TestDb::new(Engine::Sqlite).await;
    let db_path = db.url.strip_prefix("sqlite:").unwrap().to_owned();
    let folder = Path::new(&db_path).parent().unwrap().to_owned();
    // Backups go outside the database's folder.
    let backups = tempfile::tempdir().unwrap();
    let file = backups.path().join("backup.db");
    let file_arg = file.display().to_string();
    let key = random_api_key();
    let (mut server, base) = start_replica(&db.url, &key).await;
    let client = reqwest::Client::new();
    let agent_id = active_agent(&client, &base, &key).await;

    let stop_load = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Mutex::new(Vec::new()));
    let load = start_load(&base, &key, &agent_id, stop_load.clone(), answered.clone());
    // Some load answered before the backup starts, however slow the machine (bounded wait).
    let loading = Instant::now();
    while answered.lock().unwrap().len() < 20 && loading.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let backup_started = Instant::now();
    let out = acp(&[
        "admin",
        "backup",
        &file_arg,
        "--database-url",
        &db.url,
        "--output",
        "json",
    ])
    .await;
    let backup_ended = Instant::now();
    let made = json_of(&out);
    // And some sent and answered after it (bounded wait).
    let after = Instant::now();
    while !answered
        .lock()
        .unwrap()
        .iter()
        .any(|a| a.sent > backup_ended)
        && after.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_load.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    let committed: Vec<&Answered> = answered
        .iter()
        .filter(|a| a.answered < backup_started)
        .collect();
    let later: Vec<&Answered> = answered.iter().filter(|a| a.sent > backup_ended).collect();
    let during = answered.len() - committed.len() - later.len();
    eprintln!(
        "answered: {} before the backup, {during} while it ran, {} sent after it",
        committed.len(),
        later.len()
    );
    assert!(
        committed.len() >= 20,
        "load before the backup: {}",
        committed.len()
    );
    assert!(!later.is_empty(), "load after the backup");
    assert!(during > 0, "the backup ran while requests were answered");
    assert_eq!(made["ok"], true, "{made}");
    assert_eq!(made["file"], file_arg);
    assert!(made["bytes"].as_u64().unwrap() > 0);
    assert!(made["schema_version"].as_i64().unwrap() >= 19, "{made}");
    assert!(
        made["audit_events"].as_u64().unwrap() >= committed.len() as u64,
        "{made}"
    );
    assert_eq!(made["needs_master_key"], true);
    assert_eq!(integrity(&file).await, ["ok"]);
    // No temporary file is left beside the backup.
    let names = folder_names(backups.path());
    assert_eq!(names, ["backup.db"]);

    // The server still runs: restore refuses and changes nothing.
    let before = std::fs::read(&file).unwrap();
    let out = acp(&["admin", "restore", &file_arg, "--database-url", &db.url]).await;
    assert_refused(&out, "is in use");
    assert!(
        stderr(&out).contains("stop every server on it"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the backup is untouched"
    );
    let res = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(res.status(), 200, "the server serves on");

    stop(&mut server).await;
    let out = acp(&["admin", "restore", &file_arg, "--database-url", &db.url]).await;
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Restored `"), "{text}");
    assert!(
        text.contains("The master key opens its 1 JWT signing key(s)"),
        "{text}"
    );
    assert!(
        text.contains("The replaced database is kept as `"),
        "{text}"
    );
    assert_eq!(integrity(Path::new(&db_path)).await, ["ok"]);
    assert!(!Path::new(&format!("{db_path}-wal")).exists());
    let kept = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("acp.db.before-restore-"))
        .expect("the replaced database is kept");
    assert_eq!(integrity(&kept).await, ["ok"]);

    // The restored database serves every event answered before the backup started, and none
    // of those sent after it ended.
    let (mut again, base) = start_replica(&db.url, &key).await;
    ready(&base).await;
    let found: std::collections::HashSet<String> =
        all_events(&client, &base, &key).await.into_iter().collect();
    let missing: Vec<&str> = committed
        .iter()
        .filter(|a| !found.contains(&a.event))
        .map(|a| a.event.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} committed events missing: {missing:?}",
        missing.len(),
        committed.len()
    );
    assert!(
        later.iter().all(|a| !found.contains(&a.event)),
        "the restored database is the backup, not the database it replaced"
    );
    // Which the kept database still holds, write-ahead log included.
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&kept)
        .read_only(true)
        .immutable(true)
        .connect()
        .await
        .unwrap();
    let last = later.last().unwrap().event.clone();
    let (column, id) = last.split_once(':').unwrap();
    let column = if column == "trace" {
        "trace_id"
    } else {
        "agent_id"
    };
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM audit_events WHERE {column} = $1"
    ))
    .bind(id)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    assert!(n >= 1, "{last} in the kept database");
    stop(&mut again).await;
}

/// A database a server made and left (stopped), in a folder of its own.
async fn stopped_server_database() -> (TestDb, String, String) {
    let db = TestDb::new(Engine::Sqlite).await;
    let key = random_api_key();
    let (mut server, base) = start_replica(&db.url, &key).await;
    ready(&base).await;
    stop(&mut server).await;
    let path = db.url.strip_prefix("sqlite:").unwrap().to_owned();
    (db, path, key)
}

fn folder_names(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_refuses_what_it_should_not_write() {
    let (db, path, _) = stopped_server_database().await;
    let folder = Path::new(&path).parent().unwrap().to_owned();
    let backups = tempfile::tempdir().unwrap();
    let file = backups.path().join("b.db");
    let file_arg = file.display().to_string();

    // No database: nothing is made, neither the database nor the backup.
    let empty = tempfile::tempdir().unwrap();
    let none = empty.path().join("none.db");
    let out = acp(&[
        "admin",
        "backup",
        &file_arg,
        "--database-url",
        &format!("sqlite:{}", none.display()),
    ])
    .await;
    assert_refused(&out, "no database at");
    assert!(folder_names(empty.path()).is_empty());
    assert!(!file.exists());

    // Text output: what was written, and what the master key has to do with it.
    let out = acp(&["admin", "backup", &file_arg, "--database-url", &db.url]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("to `{file_arg}`")), "{text}");
    assert!(text.contains("audit event(s), schema version"), "{text}");
    assert!(
        text.contains("master key, which is not in the backup"),
        "{text}"
    );
    let first = std::fs::read(&file).unwrap();

    // FILE exists: refused without --force, the file as it was.
    let out = acp(&["admin", "backup", &file_arg, "--database-url", &db.url]).await;
    assert_refused(&out, "exists: pass --force to replace it");
    assert_eq!(std::fs::read(&file).unwrap(), first);
    let made = json_of(
        &acp(&[
            "admin",
            "backup",
            &file_arg,
            "--force",
            "--database-url",
            &db.url,
            "--output",
            "json",
        ])
        .await,
    );
    assert_eq!(made["ok"], true);
    assert_eq!(integrity(&file).await, ["ok"]);

    // Not into the database itself, nor onto a folder or into one that is not there.
    let out = acp(&[
        "admin",
        "backup",
        &path,
        "--force",
        "--database-url",
        &db.url,
    ])
    .await;
    assert_refused(&out, "is the database itself");
    let folder_arg = folder.display().to_string();
    let out = acp(&["admin", "backup", &folder_arg, "--database-url", &db.url]).await;
    assert_refused(&out, "is a folder");
    let nowhere = folder.join("no-such-folder").join("b.db");
    let out = acp(&[
        "admin",
        "backup",
        &nowhere.display().to_string(),
        "--database-url",
        &db.url,
    ])
    .await;
    assert_refused(&out, "does not exist");
    assert!(!folder.join("no-such-folder").exists());

    // Postgres: its own tool, named with the docs.
    let out = acp(&[
        "admin",
        "backup",
        &file_arg,
        "--force",
        "--database-url",
        "postgres://acp@127.0.0.1:1/acp",
    ])
    .await;
    assert_refused(&out, "pg_dump");
    assert!(
        stderr(&out).contains("docs/operations.md"),
        "{}",
        stderr(&out)
    );

    // One output flag; and the database is found as the other admin commands find it.
    let out = acp(&["admin", "backup", &file_arg, "--output", "xml"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid value 'xml' for '--output"));
    let help = stdout(&acp(&["admin", "backup", "--help"]).await);
    assert!(
        help.contains("--database-url") && help.contains("--force"),
        "{help}"
    );
    assert!(!help.contains("--email-url"), "{help}");
    let config = folder.join("acp.toml");
    std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
    let made = json_of(
        &acp(&[
            "admin",
            "backup",
            &backups.path().join("c.db").display().to_string(),
            "--config",
            &config.display().to_string(),
            "--output",
            "json",
        ])
        .await,
    );
    assert_eq!(made["database"], path);
    assert_eq!(folder_names(backups.path()), ["b.db", "c.db"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_what_it_cannot_put_back_and_changes_nothing() {
    let (db, path, _) = stopped_server_database().await;
    let folder = Path::new(&path).parent().unwrap().to_owned();
    let backups = tempfile::tempdir().unwrap();
    let good = backups.path().join("good.db");
    json_of(
        &acp(&[
            "admin",
            "backup",
            &good.display().to_string(),
            "--database-url",
            &db.url,
            "--output",
            "json",
        ])
        .await,
    );
    let before = std::fs::read(&path).unwrap();
    let names_before = folder_names(&folder);
    let restore = |file: std::path::PathBuf| {
        let url = db.url.clone();
        async move {
            acp(&[
                "admin",
                "restore",
                &file.display().to_string(),
                "--database-url",
                &url,
            ])
            .await
        }
    };

    let out = restore(folder.join("nothing-here.db")).await;
    assert_refused(&out, "no backup at");

    let text = folder.join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just a text file with some words",
    )
    .unwrap();
    let out = restore(text.clone()).await;
    assert_refused(&out, "is not an SQLite database");

    // An SQLite database, but not one of acp.
    let other = folder.join("other.db");
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&other)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE things (id INTEGER PRIMARY KEY)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let out = restore(other.clone()).await;
    assert_refused(&out, "not one of acp");

    // A backup of a newer acp (one more migration than this one knows).
    let newer = folder.join("newer.db");
    std::fs::copy(&good, &newer).unwrap();
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&newer)
        .connect()
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99999, 'from the future', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("PRAGMA journal_mode = DELETE")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let out = restore(newer.clone()).await;
    assert_refused(&out, "has schema version 99999, newer than this acp's");
    assert!(stderr(&out).contains("restore it with the acp release that made it"));

    // A damaged backup: a page in the middle overwritten.
    let damaged = folder.join("damaged.db");
    let mut bytes = std::fs::read(&good).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 4096].fill(0xA5);
    std::fs::write(&damaged, bytes).unwrap();
    let out = restore(damaged.clone()).await;
    assert_refused(&out, "fails SQLite's integrity check");

    // Another master key: its sealed signing key does not open, nothing is replaced.
    let out = acp_with_key(
        &[
            "admin",
            "restore",
            &good.display().to_string(),
            "--database-url",
            &db.url,
        ],
        "b3RoZXItbWFzdGVyLWtleS1vZi10aGUtYWNwLXRlc3Q=",
    )
    .await;
    assert_refused(&out, "the master key does not open the JWT signing key");
    assert!(stderr(&out).contains("Nothing was changed"));

    // Postgres: pg_restore, named with the docs.
    let out = acp(&[
        "admin",
        "restore",
        &good.display().to_string(),
        "--database-url",
        "postgres://acp@127.0.0.1:1/acp",
    ])
    .await;
    assert_refused(&out, "pg_restore");
    assert!(stderr(&out).contains("docs/operations.md"));

    // Nothing changed: the database, and the folder (no temporary copy left behind).
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let mut expected = names_before.clone();
    expected.extend(["notes.txt", "other.db", "newer.db", "damaged.db"].map(str::to_owned));
    expected.sort();
    assert_eq!(folder_names(&folder), expected);

    // And the good one restores, --no-keep leaving no copy of the replaced database.
    let out = acp(&[
        "admin",
        "restore",
        &good.display().to_string(),
        "--database-url",
        &db.url,
        "--no-keep",
        "--output",
        "json",
    ])
    .await;
    let done = json_of(&out);
    assert_eq!(done["kept"], Value::Null, "{done}");
    assert_eq!(done["signing_keys_checked"], 1, "{done}");
    assert!(!folder_names(&folder)
        .iter()
        .any(|n| n.contains("before-restore")));
    assert_eq!(integrity(Path::new(&path)).await, ["ok"]);
}

/// The Postgres case of these SQLite-only commands, on a real Postgres database when the suite
/// has one: the same clear error, and the database untouched.
#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_both_commands_point_to_pg_dump() {
    let db = TestDb::new(Engine::Postgres).await;
    let key = random_api_key();
    let (mut server, base) = start_replica(&db.url, &key).await;
    ready(&base).await;
    stop(&mut server).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.db").display().to_string();
    let out = acp(&["admin", "backup", &file, "--database-url", &db.url]).await;
    assert_refused(&out, "back up Postgres with `pg_dump`");
    let out = acp(&["admin", "restore", &file, "--database-url", &db.url]).await;
    assert_refused(&out, "docs/operations.md");
    assert!(folder_names(dir.path()).is_empty());
    db.drop_database().await;
}

/// `(device, inode)` of a file.
fn inode(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (m.dev(), m.ino())
}

/// `acp admin backup --force` onto the files of a running server's database, or anywhere in its
/// folder, is refused however the target is spelled: relative (`./`, `../`), through a symbolic
/// link to the file or to the folder, or as a hard link to it. Replacing the write-ahead log
/// loses acknowledged writes; replacing the lock file lets a restore run beside the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_refuses_the_databases_own_files_under_every_spelling() {
    let db = TestDb::new(Engine::Sqlite).await;
    let path = db.url.strip_prefix("sqlite:").unwrap().to_owned();
    let folder = Path::new(&path).parent().unwrap().to_owned();
    let folder_name = folder.file_name().unwrap().to_string_lossy().into_owned();
    let key = random_api_key();
    let (mut server, base) = start_replica(&db.url, &key).await;
    ready(&base).await;
    let files: Vec<String> = ["", "-wal", "-shm", "-lock"]
        .iter()
        .map(|s| format!("{path}{s}"))
        .collect();
    let inodes: Vec<(u64, u64)> = files.iter().map(|f| inode(Path::new(f))).collect();
    let names_before = folder_names(&folder);

    // Links elsewhere: to the log, to the lock file (a hard link), and to the whole folder.
    let outside = tempfile::tempdir().unwrap();
    let out_dir = outside.path();
    std::os::unix::fs::symlink(&files[1], out_dir.join("wal-link")).unwrap();
    std::fs::hard_link(&files[3], out_dir.join("lock-link")).unwrap();
    std::os::unix::fs::symlink(&folder, out_dir.join("data")).unwrap();
    std::fs::create_dir(folder.join("sub")).unwrap();
    let outside_names = folder_names(out_dir);

    let refused = |out: Output, needle: &str| assert_refused(&out, needle);
    let backup_in = |dir: std::path::PathBuf, target: String| {
        let url = db.url.clone();
        async move {
            acp_in(
                &dir,
                &[
                    "admin",
                    "backup",
                    &target,
                    "--force",
                    "--database-url",
                    &url,
                ],
            )
            .await
        }
    };
    let live = "a file of the live database";
    let inside = "is inside the database's folder";
    // Named plainly, relative to the folder, and from a sibling folder through `..`.
    refused(backup_in(folder.clone(), files[1].clone()).await, live);
    refused(backup_in(folder.clone(), "./acp.db-wal".into()).await, live);
    refused(backup_in(folder.clone(), "./acp.db-shm".into()).await, live);
    refused(backup_in(folder.clone(), "acp.db-lock".into()).await, live);
    refused(
        backup_in(folder.clone(), "./acp.db".into()).await,
        "is the database itself",
    );
    let dotted = format!("../{folder_name}/acp.db-lock");
    refused(backup_in(out_dir.to_owned(), dotted).await, live);
    let dotted = format!("{}/sub/../acp.db-wal", folder.display());
    refused(backup_in(out_dir.to_owned(), dotted).await, live);
    // Through links.
    refused(backup_in(out_dir.to_owned(), "wal-link".into()).await, live);
    refused(
        backup_in(out_dir.to_owned(), "lock-link".into()).await,
        live,
    );
    refused(
        backup_in(out_dir.to_owned(), "data/acp.db-shm".into()).await,
        live,
    );
    // Anywhere else in the folder: a new file, one in a subfolder, one through the link.
    refused(backup_in(folder.clone(), "backup.db".into()).await, inside);
    refused(
        backup_in(out_dir.to_owned(), format!("{}/sub/b.db", folder.display())).await,
        inside,
    );
    refused(
        backup_in(out_dir.to_owned(), "data/new.db".into()).await,
        inside,
    );
    refused(
        backup_in(out_dir.to_owned(), format!("../{folder_name}/new.db")).await,
        inside,
    );

    // Nothing was replaced or written, and the server serves on.
    let after: Vec<(u64, u64)> = files.iter().map(|f| inode(Path::new(f))).collect();
    assert_eq!(after, inodes);
    let mut expected = names_before.clone();
    expected.push("sub".into());
    expected.sort();
    assert_eq!(folder_names(&folder), expected);
    assert!(folder_names(&folder.join("sub")).is_empty());
    assert_eq!(folder_names(out_dir), outside_names);
    let res = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(res.status(), 200);
    // A file outside the folder is backed up as before.
    let out = backup_in(out_dir.to_owned(), "ok.db".into()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(integrity(&out_dir.join("ok.db")).await, ["ok"]);
    stop(&mut server).await;
}
