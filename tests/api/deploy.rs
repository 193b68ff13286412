//! `deploy/acp.service` and `deploy/acp.env` against the binary they run: every `acp` command
//! line of the unit names a real subcommand and real flags (read from its `--help`), every
//! variable of the example environment file is one `acp serve` knows, the unit passes
//! `systemd-analyze verify` and keeps its hardening (`systemd-analyze security`), and its health
//! check waits for a real server to be ready.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_acp");
/// Where the unit expects the binary.
const INSTALLED: &str = "/usr/local/bin/acp";

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

/// The unit's settings: `section -> [(key, value)]`, in order, comments and blank lines left out.
fn unit_settings(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(!line.ends_with('\\'), "no continued lines: {line}");
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not `Key=value`: {line}"));
        sections
            .entry(section.clone())
            .or_default()
            .push((key.trim().to_owned(), value.trim().to_owned()));
    }
    sections
}

/// The arguments of each `acp` run in a command line: the words after the binary's path, up to
/// the end or a shell operator (`;`, `>`, `|`, `&`, a closing quote).
fn acp_runs(command: &str) -> Vec<Vec<String>> {
    command
        .match_indices(INSTALLED)
        .map(|(at, _)| {
            let rest = &command[at + INSTALLED.len()..];
            let end = rest
                .find([';', '>', '|', '&', '\'', '"', ')'])
                .unwrap_or(rest.len());
            rest[..end].split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

async fn help(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .arg("--help")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "acp {args:?} --help fails");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn the_unit_runs_real_commands_and_flags_of_this_binary() {
    let text = std::fs::read_to_string(deploy("acp.service")).unwrap();
    let unit = unit_settings(&text);
    let service = &unit["Service"];
    let get = |key: &str| -> Vec<&str> {
        service
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(get("ExecStart"), [format!("{INSTALLED} serve")]);
    assert_eq!(get("User"), ["acp"], "a dedicated user");
    assert_eq!(get("StateDirectory"), ["acp"]);
    assert_eq!(get("EnvironmentFile"), ["/etc/acp/acp.env"]);
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(get(key), [value], "{key}");
    }
    // The database the unit names by default is in its state directory, the one folder it may
    // write.
    assert_eq!(
        get("Environment"),
        ["ACP_DATABASE_URL=sqlite:/var/lib/acp/acp.db"]
    );

    // Every `acp` run of every command line: a real subcommand, and only flags it has.
    let mut runs = Vec::new();
    for (key, value) in service {
        if key.starts_with("Exec") {
            runs.extend(acp_runs(value).into_iter().map(|run| (key.clone(), run)));
        }
    }
    let subcommands: Vec<&str> = runs.iter().map(|(_, run)| run[0].as_str()).collect();
    assert_eq!(subcommands, ["serve", "healthcheck"], "{runs:?}");
    assert!(
        runs.iter().any(|(key, _)| key == "ExecStartPost"),
        "the start waits for the health check"
    );
    for (key, run) in &runs {
        let help = help(&[run[0].as_str()]).await;
        for word in &run[1..] {
            let flag = word.split('=').next().unwrap();
            assert!(
                flag.starts_with("--"),
                "{key}: `{word}` is not a flag of acp {}",
                run[0]
            );
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{key}: acp {} has no {flag}:\n{help}",
                run[0]
            );
        }
    }

    // Every variable the example environment file sets or shows is one `acp serve` reads.
    let serve_help = help(&["serve"]).await;
    let env = std::fs::read_to_string(deploy("acp.env")).unwrap();
    let mut named = 0;
    for line in env.lines() {
        let setting = line.trim_start_matches('#');
        let Some((name, _)) = setting.split_once('=') else {
            continue;
        };
        if !name.starts_with("ACP_") || name.contains(' ') {
            continue;
        }
        named += 1;
        assert!(
            serve_help.contains(&format!("[env: {name}="))
                || serve_help.contains(&format!("[env: {name}]")),
            "acp serve does not read {name}"
        );
    }
    assert!(named >= 8, "{named} variables");
    // The health check reads the address and prefix from the server's own variables.
    let check_help = help(&["healthcheck"]).await;
    for name in ["ACP_ADDR", "ACP_PATH_PREFIX", "ACP_CONFIG"] {
        assert!(check_help.contains(&format!("[env: {name}=")), "{name}");
    }
}

/// The unit with the binary's path replaced by this build's, in a temporary folder.
fn unit_for_this_build(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(deploy("acp.service")).unwrap();
    let path = dir.join("acp.service");
    std::fs::write(&path, text.replace(INSTALLED, BIN)).unwrap();
    path
}

/// `systemd-analyze verify` accepts the unit, and its exposure stays at most 2.0 of 10
/// (`systemd-analyze security`). systemd is where the unit runs; the test needs its
/// `systemd-analyze` (Debian: the `systemd` package).
#[tokio::test]
async fn systemd_accepts_the_unit_and_rates_it_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .await
        .expect("systemd-analyze (apt-get install systemd) to verify deploy/acp.service");
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    // Exposure on systemd's scale of 0 to 10, as tenths: 20 is 2.0 ("OK").
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
        .arg(&unit)
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout);
    assert!(
        security.status.success(),
        "exposure above 2.0:\n{report}{}",
        String::from_utf8_lossy(&security.stderr)
    );
    assert!(report.contains("Overall exposure level"), "{report}");
}

/// The `ExecStartPost=` command, for `sh -c`: this build's binary, systemd's `$$` as `$`.
fn start_post_script() -> String {
    let text = std::fs::read_to_string(deploy("acp.service")).unwrap();
    let unit = unit_settings(&text);
    let command = unit["Service"]
        .iter()
        .find(|(k, _)| k == "ExecStartPost")
        .map(|(_, v)| v.clone())
        .unwrap();
    let script = command
        .strip_prefix("/bin/sh -c '")
        .and_then(|c| c.strip_suffix('\''))
        .unwrap_or_else(|| panic!("`/bin/sh -c '...'`: {command}"));
    script.replace("$$", "$").replace(INSTALLED, BIN)
}

/// The health check of the unit's start: with the server's `ACP_ADDR` it ends at once when the
/// server is ready, and keeps waiting while nothing answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_waits_for_the_server_to_be_ready() {
    let script = start_post_script();
    let app = TestApp::spawn(Engine::Sqlite).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let ready = tokio::time::timeout(
        Duration::from_secs(20),
        Command::new("/bin/sh")
            .args(["-c", &script])
            .env("ACP_ADDR", &addr)
            .status(),
    )
    .await
    .expect("the check ends once the server is ready")
    .unwrap();
    assert!(ready.success());

    // Nothing listening: still waiting after a few tries (systemd's TimeoutStartSec ends it).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut waiting = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("ACP_ADDR", &addr)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the check gave up while nothing answered"
    );
    waiting.kill().await.unwrap();
    app.stop().await;
}
