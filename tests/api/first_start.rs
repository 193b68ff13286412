//! The first start as the real binary shows it. The API key made on the first start of an empty
//! database appears exactly once in the process's whole output (stdout and stderr, with the
//! pretty or the JSON log format, at any log level) and never in a log line; a start that
//! failed first shows nothing, and the retry shows it once; a later start never shows it again;
//! a key supplied in `ACP_BOOTSTRAP_API_KEY` is never shown. And the master key: a server that
//! finds sealed data its master key cannot open refuses to start and writes no key file.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::helpers::*;

const OTHER_MASTER_KEY: &str = "bmV3LW1hc3Rlci1rZXktb2YtdGhlLWFjcC10ZXN0cyE=";

/// A running `acp serve`: its stdout lines as they come, its stderr read to the end.
struct Server {
    child: Child,
    stdout: UnboundedReceiver<String>,
    stderr: JoinHandle<Vec<String>>,
}

/// Everything a process printed, once it ended.
struct Output {
    code: Option<i32>,
    stdout: Vec<String>,
    stderr: Vec<String>,
}

impl Output {
    fn all(&self) -> String {
        [self.stdout.join("\n"), self.stderr.join("\n")].join("\n")
    }
}

/// `acp serve` in `dir` on `db_url` and `addr`, with none of the caller's `ACP_` variables but
/// `env`.
fn serve(dir: &Path, db_url: &str, addr: &str, env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_acp"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ACP_") {
            command.env_remove(&name);
        }
    }
    let mut child = command
        .args(["serve", "--addr", addr, "--database-url", db_url])
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn acp serve");
    let (tx, stdout) = tokio::sync::mpsc::unbounded_channel();
    let out = child.stdout.take().expect("stdout");
    tokio::spawn(async move {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    let err = child.stderr.take().expect("stderr");
    let stderr = tokio::spawn(async move {
        let mut lines = BufReader::new(err).lines();
        let mut all = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push(line);
        }
        all
    });
    Server {
        child,
        stdout,
        stderr,
    }
}

impl Server {
    /// The stdout lines up to the server's address (included), and that address; `None` when
    /// the process ended first.
    async fn listening(&mut self) -> (Vec<String>, Option<String>) {
        let mut seen = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.recv())
                .await
                .expect("the server started or stopped in time");
            let Some(line) = line else {
                return (seen, None);
            };
            seen.push(line.clone());
            if let Some(rest) = line.strip_prefix("acp listening on ") {
                let base = rest
                    .split_whitespace()
                    .next()
                    .expect("an address")
                    .to_owned();
                return (seen, Some(base));
            }
        }
    }

    /// Stops the server with SIGTERM and answers all it printed, `before` the lines already
    /// read from stdout.
    async fn stop(mut self, before: Vec<String>) -> Output {
        crate::replicas::sigterm(&mut self.child).await;
        self.ended(before).await
    }

    /// Waits for the process to end by itself and answers all it printed.
    async fn ended(mut self, mut before: Vec<String>) -> Output {
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the server ended in time")
            .expect("wait for the server");
        while let Some(line) = self.stdout.recv().await {
            before.push(line);
        }
        Output {
            code: status.code(),
            stdout: before,
            stderr: self.stderr.await.expect("stderr"),
        }
    }
}

/// A start that must fail: all it printed.
async fn refused(dir: &Path, db_url: &str, addr: &str, env: &[(&str, &str)]) -> Output {
    let mut server = serve(dir, db_url, addr, env);
    let (seen, base) = server.listening().await;
    assert!(base.is_none(), "the server started: {seen:?}");
    let out = server.ended(seen).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    out
}

/// The master key settings of a run: the key file (SQLite only) or `ACP_MASTER_KEY`.
fn master(engine: Engine, key_file: bool) -> Vec<(&'static str, &'static str)> {
    if key_file && engine == Engine::Sqlite {
        Vec::new()
    } else {
        vec![("ACP_MASTER_KEY", TEST_MASTER_KEY)]
    }
}

async fn the_first_key_appears_once(engine: Engine) {
    // With each log format, at the default level and with every line on.
    for (format, level, key_file) in [("pretty", None, true), ("json", Some("trace"), false)] {
        let dir = tempfile::tempdir().unwrap();
        let db = TestDb::new(engine).await;
        let mut env = master(engine, key_file);
        env.push(("ACP_LOG_FORMAT", format));
        if let Some(level) = level {
            env.push(("ACP_LOG", level));
        }

        // A start that fails (the port is taken) shows no key and makes none.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let failed = refused(dir.path(), &db.url, &addr, &env).await;
        assert!(
            failed.all().contains(&format!("cannot listen on {addr}")),
            "{}",
            failed.all()
        );
        assert!(!failed.all().contains("svc_"), "{}", failed.all());
        drop(taken);

        // The retry makes the workspace and shows its key: once in all the output, on stdout.
        let mut server = serve(dir.path(), &db.url, "127.0.0.1:0", &env);
        let (seen, base) = server.listening().await;
        let base = base.unwrap_or_else(|| panic!("{seen:?}"));
        let key = seen
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with("svc_test_"))
            .unwrap_or_else(|| panic!("the key is shown: {seen:?}"))
            .to_owned();
        // The key works, and the request that uses it is logged (every line, with `trace`).
        let res = reqwest::Client::new()
            .get(format!("{base}/v1/agents"))
            .header("X-Service-Api-Key", &key)
            .header("x-request-id", "req-with-the-key")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let first = server.stop(seen).await;
        assert_eq!(first.code, Some(0), "{}", first.all());
        let all = first.all();
        // The whole key, and its random part alone (a log that cut the prefix off).
        let random = key.trim_start_matches("svc_test_");
        assert_eq!(all.matches(&key).count(), 1, "{format}: {all}");
        assert_eq!(all.matches(random).count(), 1, "{format}: {all}");
        assert_eq!(
            first.stdout.iter().filter(|l| l.contains(random)).count(),
            1
        );
        assert!(
            first.stderr.iter().all(|l| !l.contains(random)),
            "a log line has the key"
        );
        assert!(
            first.stderr.iter().any(|l| l.contains("req-with-the-key")),
            "the request was logged: {format}"
        );
        if format == "json" {
            for line in &first.stderr {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            }
        }

        // A later start never shows it again.
        let mut server = serve(dir.path(), &db.url, "127.0.0.1:0", &env);
        let (seen, base) = server.listening().await;
        assert!(base.is_some(), "{seen:?}");
        let again = server.stop(seen).await;
        assert!(
            !again.all().contains(random),
            "{format}: shown again: {}",
            again.all()
        );
        assert!(
            again.all().contains("Get an API key with"),
            "{}",
            again.all()
        );
        db.drop_database().await;
    }

    // A key the operator supplied is never printed back.
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(engine).await;
    let supplied = random_api_key();
    let mut env = master(engine, false);
    env.push(("ACP_BOOTSTRAP_API_KEY", &supplied));
    let mut server = serve(dir.path(), &db.url, "127.0.0.1:0", &env);
    let (seen, base) = server.listening().await;
    assert!(base.is_some(), "{seen:?}");
    let out = server.stop(seen).await;
    assert!(
        out.stdout
            .iter()
            .any(|l| l == "Its API key is the one in ACP_BOOTSTRAP_API_KEY."),
        "{}",
        out.all()
    );
    assert!(!out.all().contains(&supplied[9..]), "{}", out.all());
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_key_appears_once_on_sqlite() {
    the_first_key_appears_once(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_key_appears_once_on_postgres() {
    the_first_key_appears_once(Engine::Postgres).await;
}

/// The files in `dir`, by name, sorted; not SQLite's own write-ahead log and shared memory
/// files, which come and go with the connections.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with("-wal") && !name.ends_with("-shm"))
        .collect();
    names.sort();
    names
}

/// SQLite keeps its master key in `acp-master.key` beside the database. Once the database holds
/// sealed data (the JWT signing key, from the first start on), a start whose key cannot open it
/// is refused and writes no key file: not with another key file, not with another
/// `ACP_MASTER_KEY`, not with none. With the right key back, it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_cannot_open_the_sealed_data_writes_no_key_file() {
    let cwd = tempfile::tempdir().unwrap();
    let db = TestDb::new(Engine::Sqlite).await;
    let db_file = Path::new(db.url.trim_start_matches("sqlite:")).to_owned();
    let folder = db_file.parent().unwrap().to_owned();
    let key_file = folder.join("acp-master.key");

    let mut server = serve(cwd.path(), &db.url, "127.0.0.1:0", &[]);
    let (seen, base) = server.listening().await;
    assert!(base.is_some(), "{seen:?}");
    assert_eq!(server.stop(seen).await.code, Some(0));
    let key = std::fs::read(&key_file).expect("the first start made the key file");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the key file is the owner's only");
    let files = files_in(&folder);
    assert!(files.contains(&"acp-master.key".to_owned()), "{files:?}");
    assert!(
        !files.iter().any(|f| f.ends_with(".tmp")),
        "no temporary file is left: {files:?}"
    );

    // Another key in the key file: refused, and the file is left as it is.
    std::fs::write(&key_file, OTHER_MASTER_KEY).unwrap();
    let out = refused(cwd.path(), &db.url, "127.0.0.1:0", &[]).await;
    assert!(
        out.all().contains(
            "sealed item(s) this master key cannot open (first: the JWT signing key `acp-"
        ),
        "{}",
        out.all()
    );
    assert_eq!(
        std::fs::read_to_string(&key_file).unwrap(),
        OTHER_MASTER_KEY
    );
    assert_eq!(files_in(&folder), files);

    // No key file and another ACP_MASTER_KEY: refused, and no key file is written.
    std::fs::remove_file(&key_file).unwrap();
    let out = refused(
        cwd.path(),
        &db.url,
        "127.0.0.1:0",
        &[("ACP_MASTER_KEY", OTHER_MASTER_KEY)],
    )
    .await;
    assert!(
        out.all().contains("this master key cannot open"),
        "{}",
        out.all()
    );
    assert!(!key_file.exists(), "no key file was written");

    // No key file and no ACP_MASTER_KEY: refused (a new key would open none of it), no file.
    let out = refused(cwd.path(), &db.url, "127.0.0.1:0", &[]).await;
    assert!(out.all().contains("no master key file at"), "{}", out.all());
    assert!(
        out.all().contains("no key file was written"),
        "{}",
        out.all()
    );
    assert!(!key_file.exists(), "no key file was written");
    let mut without_key = files.clone();
    without_key.retain(|f| f != "acp-master.key");
    assert_eq!(files_in(&folder), without_key, "nothing else was left");
    assert!(
        files_in(cwd.path()).is_empty(),
        "nothing in the working folder"
    );

    // The right key back: it starts, and keeps the file as it is.
    std::fs::write(&key_file, &key).unwrap();
    let mut server = serve(cwd.path(), &db.url, "127.0.0.1:0", &[]);
    let (seen, base) = server.listening().await;
    assert!(base.is_some(), "{seen:?}");
    assert_eq!(server.stop(seen).await.code, Some(0));
    assert_eq!(std::fs::read(&key_file).unwrap(), key);
}

/// On Postgres the key is always `ACP_MASTER_KEY` (the same on every replica): a replica started
/// with another one is refused and writes no key file anywhere.
#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_replica_with_another_key_is_refused_and_writes_no_file() {
    let cwd = tempfile::tempdir().unwrap();
    let db = TestDb::new(Engine::Postgres).await;
    let env = [("ACP_MASTER_KEY", TEST_MASTER_KEY)];
    let mut server = serve(cwd.path(), &db.url, "127.0.0.1:0", &env);
    let (seen, base) = server.listening().await;
    assert!(base.is_some(), "{seen:?}");
    assert_eq!(server.stop(seen).await.code, Some(0));

    let out = refused(
        cwd.path(),
        &db.url,
        "127.0.0.1:0",
        &[("ACP_MASTER_KEY", OTHER_MASTER_KEY)],
    )
    .await;
    assert!(
        out.all().contains("this master key cannot open"),
        "{}",
        out.all()
    );
    let out = refused(cwd.path(), &db.url, "127.0.0.1:0", &[]).await;
    assert!(out.all().contains("set ACP_MASTER_KEY"), "{}", out.all());
    assert!(files_in(cwd.path()).is_empty(), "no file was written");
    db.drop_database().await;
}
