//! `acp vault` against a real server, through the real binary, on both engines: secret sets
//! written from arguments, dotenv files and stdin, their versions and rollbacks, grants, workflow
//! leases (the token printed once), listings and revocations, in text and JSON, with the exit
//! codes of every client command. No value and no lease token ever reaches the command's output
//! (but the token, once), an answer, the audit trail or the server's log lines.

use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::both_engines;
use crate::helpers::*;
use crate::vault_agent::vault_policy;

/// Values put into the vault; none may ever be printed, answered, audited or logged.
const FROM_STDIN: &str = "sk_live_cli-stdin-canary-1111";
const FROM_ARG: &str = "cli-argument-canary-2222";
const FROM_DOTENV: &str = "whsec_cli-dotenv-canary-3333";
const FROM_DOTENV_STDIN: &str = "cli-dotenv-stdin-canary-4444";
const VALUES: [&str; 4] = [FROM_STDIN, FROM_ARG, FROM_DOTENV, FROM_DOTENV_STDIN];

/// The exit code a command must have, and no value in what it printed.
trait Exits {
    fn exits(self, code: i32) -> Ran;
}

impl Exits for Ran {
    fn exits(self, code: i32) -> Ran {
        assert_eq!(self.code, code, "{self:?}");
        for value in VALUES {
            assert!(
                !self.out.contains(value) && !self.err.contains(value),
                "a value was printed: {self:?}"
            );
        }
        self
    }
}

/// The `acp` binary as one person's terminal runs it: a server and a token, no stored login.
struct Cli {
    server: String,
    token: String,
    dir: tempfile::TempDir,
}

impl Cli {
    fn new(server: &str, token: &str) -> Cli {
        Cli {
            server: server.to_owned(),
            token: token.to_owned(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn with_token(&self, token: &str) -> Cli {
        Cli::new(&self.server, token)
    }

    /// Runs `acp ARGS` with `stdin` (or none), in this terminal's own folder.
    async fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Ran {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("ACP_SERVER", &self.server)
            .env("ACP_TOKEN", &self.token)
            .env("ACP_CREDENTIALS", self.dir.path().join("credentials.json"))
            .env_remove("ACP_WORKSPACE")
            .env_remove("ACP_DATABASE_URL")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn acp");
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(text.as_bytes()).await.unwrap();
            drop(pipe);
        }
        let out = child.wait_with_output().await.unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn run(&self, args: &[&str]) -> Ran {
        self.run_with(args, None).await
    }

    /// `acp ARGS --output json`, which must succeed.
    async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        self.run(&all).await.exits(0).json()
    }

    fn file(&self, name: &str, content: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.to_string_lossy().into_owned()
    }
}

/// A token of `browser`'s person.
async fn token_of(browser: &Browser) -> String {
    let (s, body) = status_json(
        browser
            .post("/v1/auth/tokens", &json!({"name": "vault-cli"}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// A second server process on the test's database (the real binary, logging JSON at debug
/// level), its URL and a task collecting every line it writes.
async fn logging_server(
    app: &TestApp,
) -> (
    tokio::process::Child,
    String,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--database-url",
            &app.db_url,
            "--log-format",
            "json",
        ])
        .env("ACP_BOOTSTRAP_API_KEY", &app.key)
        .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
        .env("ACP_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn acp serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let base = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the server started in time")
            .unwrap()
            .expect("the server printed its address");
        seen.push(line.clone());
        if let Some(rest) = line.strip_prefix("acp listening on ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Both streams are read as they come (a full pipe would stall the server).
    let mut stderr = child.stderr.take().unwrap();
    let err = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let logs = tokio::spawn(async move {
        let mut rest = String::new();
        let _ = stdout.into_inner().read_to_string(&mut rest).await;
        seen.extend(rest.lines().map(str::to_owned));
        seen.extend(err.await.unwrap_or_default().lines().map(str::to_owned));
        seen
    });
    (child, base, logs)
}

both_engines! {
    async fn the_vault_is_run_from_the_terminal(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let agent = app.active_agent("cli-payer").await;
        app.apply_policy(vault_policy(false)).await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;
        let (mut server, base, logs) = logging_server(&app).await;
        let cli = Cli::new(&base, &token_of(&owner).await);

        // Create from stdin: the value is all of stdin but its final newline.
        let ran = cli.run_with(&["vault", "put", "stripe-prod", "--provider", "stripe", "--environment", "production",
            "--value-stdin", "STRIPE_SECRET_KEY"], Some(&format!("{FROM_STDIN}\n"))).await.exits(0);
        assert!(ran.out.starts_with("created stripe-prod (ss_") && ran.out.contains("version 1, keys STRIPE_SECRET_KEY"), "{ran:?}");
        let set_id = ran.out.split(['(', ',']).nth(1).unwrap().to_owned();
        assert!(set_id.starts_with("ss_"), "{set_id}");

        // A new version from an argument, then from a dotenv file and from dotenv on stdin.
        let ran = cli.run(&["vault", "put", "stripe-prod", &format!("ACCOUNT={FROM_ARG}")]).await.exits(0);
        assert!(ran.out.contains("version 2, keys ACCOUNT,STRIPE_SECRET_KEY"), "{ran:?}");
        let dotenv = cli.file(".env", &format!("# webhooks\nexport WEBHOOK_SECRET='{FROM_DOTENV}'\n"));
        let put = cli.json(&["vault", "put", &set_id, "--from-dotenv", &dotenv]).await;
        assert_eq!(put["secret_set"]["version"], 3);
        assert_eq!(put["secret_set"]["keys"], json!(["ACCOUNT", "STRIPE_SECRET_KEY", "WEBHOOK_SECRET"]));
        let ran = cli.run_with(&["vault", "put", "1", "--from-dotenv", "-", "--unset", "ACCOUNT", "--expected-version", "3"],
            Some(&format!("EXTRA=\"{FROM_DOTENV_STDIN}\"\n"))).await.exits(0);
        assert!(ran.out.contains("version 4, keys EXTRA,STRIPE_SECRET_KEY,WEBHOOK_SECRET"), "{ran:?}");

        // Refusals, each with its exit code and no value in the output.
        cli.run(&["vault", "put", "stripe-prod"]).await.exits(1);
        let ran = cli.run(&["vault", "put", "stripe-prod", &format!("A={FROM_ARG}"), &format!("A={FROM_ARG}")]).await.exits(1);
        assert!(ran.err.contains("`A` is given twice"), "{ran:?}");
        cli.run(&["vault", "put", "stripe-prod", FROM_ARG]).await.exits(1);
        cli.run_with(&["vault", "put", "stripe-prod", "--from-dotenv", "-", "--value-stdin", "K"], Some("K=v\n")).await.exits(1);
        let bad = cli.file("bad.env", &format!("{FROM_DOTENV} is not dotenv\n"));
        cli.run(&["vault", "put", "stripe-prod", "--from-dotenv", &bad]).await.exits(1);
        let ran = cli.run(&["vault", "put", "stripe-test", &format!("K={FROM_ARG}")]).await.exits(6);
        assert!(ran.err.contains("--provider and --environment"), "{ran:?}");
        let ran = cli.run(&["vault", "put", "stripe-prod", "--provider", "paypal", "--environment", "production",
            &format!("K={FROM_ARG}")]).await.exits(1);
        assert!(ran.err.contains("provider `stripe`"), "{ran:?}");
        cli.run(&["vault", "put", "1", "--provider", "stripe", "--environment", "production", &format!("K={FROM_ARG}")]).await.exits(1);
        let ran = cli.run(&["vault", "put", "stripe-prod", "--expected-version", "1", &format!("K={FROM_ARG}")]).await.exits(3);
        assert!(ran.err.contains("version_conflict"), "{ran:?}");
        let ran = cli.run(&["vault", "put", "stripe-prod", &format!("9BAD={FROM_ARG}"), "--output", "json"]).await.exits(1);
        assert_eq!(ran.json()["error"], "invalid_set", "{ran:?}");
        cli.run(&["vault", "versions", "ss_00000000000000000000000000000000"]).await.exits(6);
        cli.run(&["vault", "versions", "99"]).await.exits(6);

        // Lists: key names and versions, in text and JSON.
        let ran = cli.run(&["vault", "sets"]).await.exits(0);
        assert!(ran.out.starts_with("#  SET"), "{ran:?}");
        assert!(ran.out.contains("stripe-prod") && ran.out.contains("EXTRA,STRIPE_SECRET_KEY,WEBHOOK_SECRET") && ran.out.contains(" live"), "{ran:?}");
        let sets = cli.json(&["vault", "sets"]).await;
        assert_eq!(sets["items"][0]["version"], 4);
        let ran = cli.run(&["vault", "versions", "stripe-prod"]).await.exits(0);
        assert!(ran.out.starts_with("VERSION  KEYS"), "{ran:?}");
        assert_eq!(ran.out.lines().count(), 5, "{ran:?}");
        let versions = cli.json(&["vault", "versions", &set_id]).await;
        assert_eq!(versions["items"][3]["keys"], json!(["STRIPE_SECRET_KEY"]));

        // Roll back: version 1's entries as version 5.
        let ran = cli.run(&["vault", "rollback", "stripe-prod", "--to", "1"]).await.exits(0);
        assert!(ran.out.contains("version 5, keys STRIPE_SECRET_KEY"), "{ran:?}");
        cli.run(&["vault", "rollback", "stripe-prod", "--to", "1", "--expected-version", "4"]).await.exits(3);
        cli.run(&["vault", "rollback", "stripe-prod", "--to", "77"]).await.exits(6);

        // Grants: aliases in, names out; to an agent and to a group.
        let ran = cli.run(&["vault", "grant", "stripe-prod", "--agent", &agent.id, "--actions", "proxy_use,mint_request_lease",
            "--actions", "read", "--all-keys"]).await.exits(0);
        assert!(ran.out.starts_with("granted grt_") && ran.out.contains(&format!("to agent {}", agent.id))
            && ran.out.contains(": proxy,mint_lease,read; keys all; expires never"), "{ran:?}");
        let grant = cli.json(&["vault", "grant", "1", "--group", "finance", "--actions", "read", "--keys", "STRIPE_SECRET_KEY",
            "--expires-at", "2099-01-01T00:00:00Z"]).await;
        assert_eq!(grant["grant"]["allowed_actions"], json!(["read"]));
        let group_grant = grant["grant"]["grant_id"].as_str().unwrap().to_owned();
        cli.run(&["vault", "grant", "stripe-prod", "--agent", &agent.id, "--actions", "write", "--all-keys"]).await.exits(1);
        cli.run(&["vault", "grant", "stripe-prod", "--agent", &agent.id, "--actions", "read"]).await.exits(1);
        cli.run(&["vault", "grant", "stripe-prod", "--agent", "agt_00000000000000000000000000000000", "--actions", "read", "--all-keys"]).await.exits(6);
        let ran = cli.run(&["vault", "grants", "stripe-prod"]).await.exits(0);
        assert!(ran.out.starts_with("GRANT") && ran.out.contains("group finance") && ran.out.contains("proxy,mint_lease,read"), "{ran:?}");
        let grants = cli.json(&["vault", "grants"]).await;
        assert_eq!(grants["items"].as_array().unwrap().len(), 2);

        // A workflow lease: the token alone on stdout, once; the facts on stderr.
        let ran = cli.run(&["vault", "lease", "stripe-prod", "--agent", &agent.id, "--actions", "proxy_use,read",
            "--purpose", "nightly payouts", "--ttl", "30m"]).await.exits(0);
        let token = ran.out.trim().to_owned();
        assert!(token.starts_with("vwl_") && token.len() == 47 && ran.out.lines().count() == 1, "{ran:?}");
        assert!(ran.err.contains("shown only this once") && ran.err.contains("workflow lease ls_"), "{ran:?}");
        let (s, minted) = status_json(agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": token, "secret_set_id": 1, "action": "read"})).await).await;
        assert_eq!(s, 200, "the token is a live workflow lease: {minted}");
        // The value went in as it was piped, less the final newline.
        let (s, read) = status_json(agent.signed_post(&app, "/v1/vault/secrets/read", &json!({
            "request_lease_token": minted["request_lease_token"], "secret_set_id": 1, "keys": ["STRIPE_SECRET_KEY"]})).await).await;
        assert_eq!(s, 200, "{read}");
        assert_eq!(read["secrets"]["STRIPE_SECRET_KEY"], FROM_STDIN);
        let issued = cli.json(&["vault", "lease", "1", "--agent", &agent.id, "--actions", "proxy", "--purpose", "json"]).await;
        let second = issued["workflow_lease_token"].as_str().unwrap().to_owned();
        assert!(second.starts_with("vwl_"));
        cli.run(&["vault", "lease", "stripe-prod", "--agent", &agent.id, "--actions", "mint_lease", "--purpose", "p"]).await.exits(1);
        cli.run(&["vault", "lease", "stripe-prod", "--agent", &agent.id, "--actions", "proxy", "--purpose", "p", "--ttl", "2d"]).await.exits(1);

        // Leases are listed, never with a token.
        let ran = cli.run(&["vault", "leases", "--set", "stripe-prod"]).await.exits(0);
        assert!(ran.out.starts_with("LEASE") && ran.out.contains("nightly payouts") && ran.out.contains(" live "), "{ran:?}");
        assert!(ran.out.contains("request") && ran.out.contains(" used "), "the spent request lease: {ran:?}");
        let listed = cli.json(&["vault", "leases", "--kind", "workflow", "--agent", &agent.id]).await;
        let items = listed["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1]["actions"], json!(["proxy", "read"]));
        assert!(!listed.to_string().contains(&token) && !ran.out.contains(&token));
        let lease_id = items[1]["lease_id"].as_str().unwrap().to_owned();

        // Revocations: asked first (refused without --yes and a terminal), then done.
        cli.run(&["vault", "revoke", &lease_id]).await.exits(1);
        let ran = cli.run(&["vault", "revoke", &lease_id, "--yes"]).await.exits(0);
        assert!(ran.out.starts_with(&format!("revoked lease {lease_id} (")), "{ran:?}");
        let res = agent.signed_post(&app, "/v1/vault/leases/request/mint",
            &json!({"workflow_lease_token": token, "secret_set_id": 1, "action": "read"})).await;
        assert_error(res, 401, "invalid_lease").await;
        cli.run(&["vault", "revoke", &lease_id, "--yes"]).await.exits(6);
        let ran = cli.run(&["vault", "revoke", "--agent", &agent.id, "--set", "stripe-prod", "--yes"]).await.exits(0);
        assert!(ran.out.starts_with("revoked ") && ran.out.contains(" lease(s) of agent"), "{ran:?}");
        let ran = cli.run(&["vault", "revoke", &group_grant, "--yes"]).await.exits(0);
        assert_eq!(ran.out.trim(), format!("revoked grant {group_grant}"));
        cli.run(&["vault", "revoke", "key_123", "--yes"]).await.exits(1);
        let ran = cli.run(&["vault", "leases", "--set", "1"]).await.exits(0);
        assert!(ran.out.contains(" revoked "), "{ran:?}");

        // Who may: a member reads and is refused changes (5); a bad token is 4; an API key
        // issues leases by the set's number but lists no sets.
        let reader = cli.with_token(&token_of(&member).await);
        reader.run(&["vault", "sets"]).await.exits(0);
        reader.run(&["vault", "put", "stripe-prod", &format!("K={FROM_ARG}")]).await.exits(5);
        reader.run(&["vault", "lease", "1", "--agent", &agent.id, "--actions", "proxy", "--purpose", "p"]).await.exits(5);
        cli.with_token("svc_pat_not-a-token").run(&["vault", "sets"]).await.exits(4);
        let machine = cli.with_token(&app.key);
        let ran = machine.run(&["vault", "lease", "1", "--agent", &agent.id, "--actions", "proxy", "--purpose", "ci"]).await.exits(0);
        assert!(ran.out.trim().starts_with("vwl_"), "{ran:?}");
        let ran = machine.run(&["vault", "lease", "stripe-prod", "--agent", &agent.id, "--actions", "proxy", "--purpose", "ci"]).await.exits(4);
        assert!(ran.err.contains("session_required"), "{ran:?}");
        let nobody = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args(["vault", "sets"])
            .env("ACP_CREDENTIALS", cli.dir.path().join("none.json"))
            .env_remove("ACP_SERVER")
            .env_remove("ACP_TOKEN")
            .output()
            .await
            .unwrap();
        assert_eq!(nobody.status.code(), Some(4));

        // No value and no token in any answer of the trail, nor in the server's log lines.
        let (_, trail) = status_json(owner.get("/v1/workspace/audit/events?limit=200").await).await;
        let trail = trail.to_string();
        for secret in VALUES.iter().copied().chain([token.as_str(), second.as_str()]) {
            assert!(!trail.contains(secret), "in the audit trail: {secret}");
        }
        server.kill().await.unwrap();
        let lines = logs.await.unwrap();
        assert!(lines.len() > 10, "the server logged: {lines:?}");
        for secret in VALUES.iter().copied().chain([token.as_str(), second.as_str()]) {
            assert!(!lines.iter().any(|l| l.contains(secret)), "in the server's log: {secret}");
        }
    }
}
