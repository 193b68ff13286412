//! The operator's command line against a real server, on both engines: `acp login` (the magic
//! link pasted into the terminal), the stored credential file, tokens, and every day-two command,
//! refusals by role and scope included.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::both_engines;
use crate::helpers::*;

/// One person's terminal: the `acp` binary with its own credentials file.
struct Terminal {
    _dir: tempfile::TempDir,
    creds: PathBuf,
}

impl Terminal {
    fn new() -> Terminal {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir
            .path()
            .join("config")
            .join("acp")
            .join("credentials.json");
        Terminal { _dir: dir, creds }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"));
        cmd.args(args)
            .env("ACP_CREDENTIALS", &self.creds)
            .env_remove("ACP_SERVER")
            .env_remove("ACP_TOKEN")
            .env_remove("ACP_WORKSPACE")
            .env_remove("ACP_DATABASE_URL")
            .stdin(Stdio::null());
        cmd
    }

    async fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().await.expect("run acp");
        Ran {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn run(&self, args: &[&str]) -> Ran {
        self.run_env(args, &[]).await
    }

    /// Runs a command that must succeed, with `--output json`.
    async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        let ran = self.run(&all).await;
        assert_eq!(ran.code, 0, "acp {args:?}: {ran:?}");
        ran.json()
    }

    /// `acp login`, pasting the link from the email into its stdin.
    async fn login(&self, app: &TestApp, email: &str) -> Ran {
        let before = app.smtp.messages().len();
        let mut child = self
            .command(&["login", "--server", &app.base, "--email", email])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn acp login");
        let messages = app.smtp.wait_for(before + 1).await;
        let link = crate::smtp::login_link(messages.last().unwrap());
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(format!("{link}\n").as_bytes())
            .await
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn stored(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(&self.creds).unwrap()).unwrap()
    }
}

/// The next line a command printed (a hang guard, not a timing assertion).
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line within 30 s")
        .unwrap()
        .expect("the command is still running")
}

both_engines! {
    async fn an_operator_works_from_the_terminal(app) {
        let ws = app.workspace_id.clone();
        let agent = app.active_agent("cli-agent").await;
        app.grant(&ws, "owner@example.com", "owner").await;
        app.grant(&ws, "member@example.com", "member").await;

        // Not logged in: exit 4, and it says how.
        let nobody = Terminal::new();
        let ran = nobody.run(&["agents", "list"]).await;
        assert_eq!(ran.code, 4, "{ran:?}");
        assert!(ran.err.contains("acp login"), "{ran:?}");

        // Log in: the link pasted into the terminal; a token stored in a private file.
        let owner = Terminal::new();
        let ran = owner.login(&app, "owner@example.com").await;
        assert_eq!(ran.code, 0, "{ran:?}");
        assert!(ran.out.contains("Logged in to") && ran.err.contains("Paste the link"), "{ran:?}");
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&owner.creds), 0o600);
            assert_eq!(mode(owner.creds.parent().unwrap()), 0o700);
        }
        let stored = owner.stored();
        assert_eq!(stored["current"], app.base.as_str());
        let login = &stored["servers"][app.base.as_str()];
        assert!(login["token"].as_str().unwrap().starts_with("svc_pat_"));
        let me = owner.json(&["whoami"]).await;
        assert_eq!(me["user"]["email"], "owner@example.com");
        assert_eq!(me["auth"], "token");
        // The login's session was ended once the token was made.
        let events = audit_events(&app, "event_type=auth.logout").await;
        assert!(!events.is_empty());

        // Agents: list, show, and a suspend that asks first.
        let listed = owner.json(&["agents", "list"]).await;
        assert!(listed["items"].as_array().unwrap().iter().any(|a| a["agent_id"] == agent.id.as_str()));
        let text = owner.run(&["agents", "list"]).await;
        assert!(text.out.starts_with("AGENT") && text.out.contains(&agent.id), "{text:?}");
        assert_eq!(owner.json(&["agents", "show", &agent.id]).await["agent"]["status"], "active");
        let ran = owner.run(&["agents", "suspend", &agent.id, "--reason", "drill"]).await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.contains("--yes"), "{ran:?}");
        assert_eq!(owner.json(&["agents", "show", &agent.id]).await["agent"]["status"], "active");
        let ran = owner.run(&["agents", "suspend", &agent.id, "--reason", "drill", "--yes"]).await;
        assert_eq!((ran.code, ran.out.trim()), (0, format!("{}: suspended", agent.id).as_str()), "{ran:?}");
        assert_eq!(owner.run(&["agents", "show", "agt_00000000000000000000000000000000"]).await.code, 6);
        // A pending agent approved, another revoked.
        let pending = TestAgent::new();
        let pending_id = pending.register(&app, Some(&app.key), "cli-pending").await;
        assert_eq!(owner.json(&["agents", "list", "--status", "pending"]).await["items"][0]["agent_id"], pending_id.as_str());
        assert_eq!(owner.run(&["agents", "approve", &pending_id]).await.out.trim(), format!("{pending_id}: active"));
        let doomed = app.active_agent("cli-doomed").await;
        assert_eq!(owner.run(&["agents", "revoke", &doomed.id, "--yes"]).await.out.trim(), format!("{}: revoked", doomed.id));

        // What it did: the audit trail, searched and followed.
        let found = owner.json(&["audit", "search", "--agent", &agent.id, "--event-type", "agent.suspended", "--since", "10m"]).await;
        let me_id = me["user"]["user_id"].as_str().unwrap();
        assert_eq!(found["items"][0]["actor"], format!("user:{me_id}").as_str(), "{found}");
        let mut tail = owner
            .command(&["audit", "tail", "--follow", "--agent", &agent.id, "-n", "1", "--output", "json"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
        assert_eq!(first["event_type"], "agent.suspended");
        let ran = owner.run(&["agents", "resume", &agent.id]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        let second: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
        assert_eq!(second["event_type"], "agent.resumed");
        tail.kill().await.unwrap();

        // The kill switch.
        assert_eq!(owner.json(&["kill-switch", "status"]).await["minting_paused"], false);
        assert_eq!(owner.json(&["kill-switch", "pause", "--reason", "drill", "--yes"]).await["minting_paused"], true);
        assert_eq!(owner.json(&["kill-switch", "resume"]).await["minting_paused"], false);
        assert_eq!(owner.run(&["kill-switch", "revoke-all", "--yes"]).await.code, 0);

        // Credentials.
        assert_eq!(owner.json(&["credentials", "revoke-agent", &agent.id, "--yes"]).await["revoked"], 0);
        let ran = owner.run(&["credentials", "revoke", "--cred-id", "crd_00000000000000000000000000000000", "--yes"]).await;
        assert_eq!((ran.code, ran.out.trim()), (0, "revoked 0 credential(s)"), "{ran:?}");
        assert_eq!(owner.run(&["credentials", "revoke", "--yes"]).await.code, 1, "a credential or its id is required");
        assert_eq!(owner.json(&["credentials", "introspect", "not-a-credential"]).await["active"], false);

        // Challenges: listed, approved and denied by id.
        let fin = crate::approvals::setup(&app).await;
        let mut ids = Vec::new();
        for amount in [200.0, 300.0] {
            let (_, out) = status_json(app.post("/v1/check", &json!({"agent_id": fin.id, "action": "refund", "context": {"currency": "USD", "amount": amount}})).await).await;
            ids.push(out["challenge_id"].as_str().unwrap().to_owned());
        }
        let pending = owner.json(&["challenges", "list"]).await;
        assert_eq!(pending["items"].as_array().unwrap().len(), 2);
        assert_eq!(owner.run(&["challenges", "approve", &ids[0]]).await.out.trim(), format!("{}: approved", ids[0]));
        assert_eq!(owner.json(&["challenges", "deny", &ids[1]]).await["challenge"]["status"], "denied");
        assert_eq!(owner.run(&["challenges", "deny", &ids[1]]).await.code, 3);

        // Policies: versions, get, diff, rollback (a dry run first), sync with the stored login.
        let spec = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
        std::fs::write(spec.path(), json!({"reusable_policy_blocks": {"r": {"actions": {"allow": ["read"]}}},
            "agent_groups": [{"name": "all", "members": [agent.id]}], "bindings": [{"group": "all", "blocks": ["r"]}]}).to_string()).unwrap();
        let spec_path = spec.path().to_str().unwrap();
        assert_eq!(owner.run(&["sync", spec_path]).await.code, 2);
        assert_eq!(owner.run(&["sync", spec_path, "--apply"]).await.code, 0);
        let versions = owner.json(&["policy", "versions"]).await;
        assert_eq!(versions["items"].as_array().unwrap().len(), 2);
        assert_eq!(owner.json(&["policy", "get", "--version", "1"]).await["version"], 1);
        let diff = owner.run(&["policy", "diff", "1", "2"]).await;
        assert!(diff.code == 0 && diff.out.contains("+ blocks: r"), "{diff:?}");
        let dry = owner.run(&["policy", "rollback", "1", "--dry-run"]).await;
        assert_eq!(dry.code, 2, "{dry:?}");
        let rolled = owner.run(&["policy", "rollback", "1", "--yes"]).await;
        assert!(rolled.code == 0 && rolled.out.contains("rolled back: version 3"), "{rolled:?}");
        assert_eq!(owner.run(&["policy", "rollback", "1", "--yes", "--expect-hash", "sha256:00"]).await.code, 3);

        // API keys: a scoped one, listed, revoked.
        let made = owner.run(&["api-keys", "create", "--name", "gateway", "--scope", "check,verify"]).await;
        let key = made.out.trim().to_owned();
        assert!(key.starts_with("svc_test_"), "{made:?}");
        let keys = owner.json(&["api-keys", "list"]).await;
        let gateway = keys["items"].as_array().unwrap().iter().find(|k| k["name"] == "gateway").unwrap().clone();
        assert_eq!(gateway["scopes"], json!(["check", "verify"]));
        // The key works as --token; its scopes hold (exit 5).
        let ran = owner.run_env(&["kill-switch", "pause", "--yes"], &[("ACP_TOKEN", &key)]).await;
        assert_eq!(ran.code, 5, "{ran:?}");
        assert!(ran.err.contains("insufficient_scope") && ran.err.contains("kill-switch"), "{ran:?}");
        let key_id = gateway["key_id"].as_str().unwrap();
        assert_eq!(owner.run(&["api-keys", "revoke", key_id, "--yes"]).await.code, 0);

        // A read-only token for CI: it reads and changes nothing.
        let made = owner.run(&["token", "create", "--name", "ci", "--expires", "30d", "--scope", "read"]).await;
        assert_eq!(made.code, 0, "{made:?}");
        let ci = made.out.trim().to_owned();
        let ci_env = [("ACP_TOKEN", ci.as_str()), ("ACP_SERVER", app.base.as_str())];
        let ran = nobody.run_env(&["agents", "list", "--output", "json"], &ci_env).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        let ran = nobody.run_env(&["agents", "suspend", &agent.id, "--yes"], &ci_env).await;
        assert_eq!(ran.code, 5, "{ran:?}");
        assert!(ran.err.contains("insufficient_scope"), "{ran:?}");
        let tokens = owner.json(&["token", "list"]).await;
        let ci_item = tokens["items"].as_array().unwrap().iter().find(|t| t["name"] == "ci" && t["scopes"] == json!(["read"])).unwrap().clone();
        // The read token cannot make or revoke tokens; the login's token revokes it.
        let ran = nobody.run_env(&["token", "create", "--name", "wider"], &ci_env).await;
        assert_eq!(ran.code, 5, "{ran:?}");
        assert_eq!(owner.run(&["token", "revoke", ci_item["token_id"].as_str().unwrap(), "--yes"]).await.code, 0);
        assert_eq!(nobody.run_env(&["agents", "list"], &ci_env).await.code, 4);

        // Members: a member reads, and may not suspend (exit 5, insufficient_role).
        let member = Terminal::new();
        assert_eq!(member.login(&app, "member@example.com").await.code, 0);
        assert_eq!(member.run(&["agents", "list"]).await.code, 0);
        let ran = member.run(&["agents", "suspend", &agent.id, "--yes"]).await;
        assert_eq!(ran.code, 5, "{ran:?}");
        assert!(ran.err.contains("insufficient_role"), "{ran:?}");
        assert_eq!(owner.json(&["members", "add", "--email", "new@example.com", "--role", "approver"]).await["member"]["role"], "approver");
        let members = owner.json(&["members", "list"]).await;
        assert!(members["items"].as_array().unwrap().iter().any(|m| m["email"] == "new@example.com"));
        assert_eq!(owner.run(&["members", "remove", "new@example.com", "--yes"]).await.code, 0);

        // Workspaces: create one, act on it, and back.
        let made = owner.json(&["workspaces", "create", "second"]).await;
        let second = made["workspace"]["workspace_id"].as_str().unwrap().to_owned();
        assert_eq!(owner.run(&["workspaces", "use", &second]).await.code, 0);
        assert_eq!(owner.stored()["servers"][app.base.as_str()]["workspace"], second.as_str());
        assert_eq!(owner.json(&["agents", "list"]).await["items"], json!([]));
        let listed = owner.run(&["workspaces", "list"]).await;
        assert!(listed.out.lines().any(|l| l.starts_with('*') && l.contains(&second)), "{listed:?}");
        assert_eq!(owner.run(&["workspaces", "use", "ws_00000000000000000000000000000000"]).await.code, 6);
        assert_eq!(owner.run(&["agents", "show", &agent.id, "--workspace", &ws]).await.code, 0);
        assert_eq!(owner.run(&["workspaces", "use", &ws]).await.code, 0);

        // Log out: the token is revoked and forgotten.
        let token = owner.stored()["servers"][app.base.as_str()]["token"].as_str().unwrap().to_owned();
        let ran = owner.run(&["logout"]).await;
        assert!(ran.code == 0 && ran.out.contains("token revoked"), "{ran:?}");
        assert!(owner.stored()["servers"].as_object().unwrap().is_empty());
        let ran = owner.run_env(&["whoami"], &[("ACP_TOKEN", &token), ("ACP_SERVER", &app.base)]).await;
        assert_eq!(ran.code, 4, "{ran:?}");
        app.stop().await;
    }
}

both_engines! {
    async fn audit_sinks_and_retention_from_the_terminal(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = Terminal::new();
        assert_eq!(owner.login(&app, "owner@example.com").await.code, 0);
        let member = Terminal::new();
        assert_eq!(member.login(&app, "member@example.com").await.code, 0);

        // Created paused; the secret printed once on stdout, alone.
        let ran = owner.run(&["audit", "sinks", "create", "--name", "siem", "--url", "https://siem.example.com/acp", "--paused"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        let secret = ran.out.trim().to_owned();
        assert!(secret.starts_with("whsec_") && !secret.contains('\n'), "{ran:?}");
        assert!(ran.err.contains("shown only this once"), "{ran:?}");
        let listed = owner.json(&["audit", "sinks", "list"]).await;
        let id = listed["items"][0]["sink_id"].as_str().unwrap().to_owned();
        assert_eq!(listed["items"][0]["state"], "paused");
        let ran = member.run(&["audit", "sinks", "list"]).await;
        assert!(ran.code == 0 && ran.out.contains(&id) && ran.out.contains("paused") && !ran.out.contains(&secret), "{ran:?}");

        let resumed = owner.json(&["audit", "sinks", "resume", &id]).await;
        assert_eq!(resumed["sink"]["enabled"], true);
        let ran = owner.run(&["audit", "sinks", "show", &id]).await;
        assert!(ran.code == 0 && ran.out.contains("lag_events") && ran.out.contains(&id), "{ran:?}");
        // Refused by role: exit 5; a missing sink: exit 6; without --yes off a terminal: refused.
        assert_eq!(member.run(&["audit", "sinks", "pause", &id]).await.code, 5);
        assert_eq!(owner.run(&["audit", "sinks", "show", "snk_nope"]).await.code, 6);
        let ran = owner.run(&["audit", "sinks", "delete", &id]).await;
        assert_ne!(ran.code, 0, "{ran:?}");
        let rotated = owner.json(&["audit", "sinks", "rotate-secret", &id, "--yes"]).await;
        assert_ne!(rotated["secret"].as_str().unwrap(), secret);
        assert_eq!(owner.json(&["audit", "sinks", "delete", &id, "--yes"]).await["ok"], true);
        assert_eq!(owner.json(&["audit", "sinks", "list"]).await["items"], json!([]));

        // Retention: shown, set, kept again.
        let ran = owner.run(&["audit", "retention"]).await;
        assert!(ran.code == 0 && ran.out.contains("audit events: all"), "{ran:?}");
        let set = owner.json(&["audit", "retention", "--events", "400", "--heartbeats", "30"]).await;
        assert_eq!((set["audit_retention_days"].clone(), set["heartbeat_retention_days"].clone()), (json!(400), json!(30)));
        let set = owner.json(&["audit", "retention", "--events", "keep"]).await;
        assert_eq!((set["audit_retention_days"].clone(), set["heartbeat_retention_days"].clone()), (Value::Null, json!(30)));
        let ran = owner.run(&["audit", "retention", "--events", "0"]).await;
        assert!(ran.code == 1 && ran.err.contains("invalid_retention"), "{ran:?}");
        assert_eq!(member.run(&["audit", "retention", "--events", "5"]).await.code, 5);
        let ran = owner.run(&["audit", "retention", "--events", "soon"]).await;
        assert!(ran.code == 1 && ran.err.contains("neither a number of days nor `keep`"), "{ran:?}");
    }
}
