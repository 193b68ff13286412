//! The shape of the `acp` command line, through the real binary: the help's groups (every
//! command in exactly one), the client flags listed once (`acp options`), `--yes` only where a
//! command asks first, the admin commands under `acp admin` (the old spellings hidden, working,
//! with a note), one exit-code table for every command (`sync` included) and one error line,
//! names where ids are asked, actors shown by name (CLI and console), checked filter values and
//! examples that name real values, and `acp agents list` a page at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;

use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

fn spec_file(dir: &std::path::Path, name: &str, agent_id: &str, allowed: &[&str]) -> String {
    let path = dir.join(name);
    let spec = json!({
        "reusable_policy_blocks": {"ops": {"actions": {"allow": allowed}}},
        "agent_groups": [{"name": "team", "members": [agent_id]}],
        "bindings": [{"group": "team", "blocks": ["ops"]}],
    });
    std::fs::write(&path, spec.to_string()).unwrap();
    path.display().to_string()
}

// --- the help --------------------------------------------------------------------------------

/// The sections of `acp --help` before the options: heading to command names.
fn help_groups(help: &str) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for line in help.lines() {
        if line == "Options:" {
            break;
        }
        if let Some(title) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
            if !title.starts_with("Usage") {
                groups.push((title.to_owned(), Vec::new()));
            }
        } else if let (Some(name), Some(last)) = (line.strip_prefix("  "), groups.last_mut()) {
            if let Some(word) = name.split_whitespace().next() {
                last.1.push(word.to_owned());
            }
        }
    }
    groups
}

#[tokio::test]
async fn the_help_groups_every_command_once_and_shows_the_exit_codes() {
    let term = Term::new(None, None);
    let ran = term.run(&["--help"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    let groups = help_groups(&ran.out);
    let titles: Vec<&str> = groups.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        titles,
        acp::cli::GROUPS.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        "{}",
        ran.out
    );
    // Every visible command of the tree is in exactly one group of the help.
    let mut tree = acp::cli::command();
    tree.build();
    let visible: BTreeSet<String> = tree
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (_, names) in &groups {
        for name in names {
            *seen.entry(name.clone()).or_default() += 1;
        }
    }
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        visible,
        "{}",
        ran.out
    );
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    // The table of the source agrees: no command in two groups, none left out.
    let listed: Vec<&str> = acp::cli::GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter().copied())
        .collect();
    assert_eq!(
        listed.iter().copied().collect::<BTreeSet<_>>().len(),
        listed.len()
    );
    for name in &visible {
        assert!(listed.contains(&name.as_str()), "{name} is in no group");
    }
    // The old admin spellings are not shown.
    for old in [
        "workspace",
        "api-key",
        "outbox",
        "keys",
        "backup",
        "restore",
    ] {
        assert!(!seen.contains_key(old), "{old} is shown");
    }
    // One exit-code table, every code.
    assert!(
        ran.out.contains("Exit codes (every command):"),
        "{}",
        ran.out
    );
    for (code, meaning) in acp::cli::EXIT_CODES {
        assert!(
            ran.out.contains(&format!("  {code}  {meaning}")),
            "{code}: {}",
            ran.out
        );
    }
    // Help into a pipe has no colour codes.
    assert!(!ran.out.contains('\u{1b}'), "{}", ran.out);
}

/// Every command of the tree, as the words that call it.
fn every_command(
    cmd: &clap::Command,
    path: Vec<String>,
    out: &mut Vec<(Vec<String>, clap::Command)>,
) {
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let mut words = path.clone();
        words.push(sub.get_name().to_owned());
        out.push((words.clone(), sub.clone()));
        every_command(sub, words, out);
    }
}

#[tokio::test]
async fn the_client_flags_are_listed_once_and_yes_is_where_a_command_asks() {
    let term = Term::new(None, None);
    let options = term.run(&["options"]).await;
    assert_eq!(options.code, 0, "{options:?}");
    for flag in [
        "--server",
        "--token",
        "--workspace",
        "--credentials",
        "--output",
    ] {
        assert!(options.out.contains(flag), "{flag}: {}", options.out);
    }
    // Each client command's help points there instead of listing them, and still takes them.
    for args in [
        &["agents", "list"][..],
        &["sync"],
        &["policy", "get"],
        &["audit", "sinks", "list"],
        &["members", "remove"],
    ] {
        let ran = term.run(&[args, &["--help"]].concat()).await;
        assert_eq!(ran.code, 0, "{args:?}: {ran:?}");
        assert!(
            ran.out.contains("see `acp options`"),
            "{args:?}: {}",
            ran.out
        );
        for flag in ["--server <", "--token <", "--credentials <", "--output <"] {
            assert!(
                !ran.out.contains(flag),
                "{args:?} lists {flag}: {}",
                ran.out
            );
        }
    }
    let ran = term
        .run(&[
            "agents",
            "list",
            "--server",
            "http://127.0.0.1:1",
            "--token",
            "t",
            "--output",
            "json",
        ])
        .await;
    assert_eq!(
        ran.code, 1,
        "unreachable, but the flags were taken: {ran:?}"
    );
    assert!(
        ran.err.starts_with("error: cannot reach the acp server"),
        "{ran:?}"
    );

    // The whole tree: the note on every command that takes the client flags; `--yes` only on
    // the commands that ask before a change.
    let mut tree = acp::cli::command();
    tree.build();
    let mut all = Vec::new();
    every_command(&tree, Vec::new(), &mut all);
    let mut with_yes = BTreeSet::new();
    for (words, mut cmd) in all {
        let help = cmd.render_long_help().to_string();
        let client = cmd.get_arguments().any(|a| a.get_id() == "server");
        if client {
            assert!(help.contains("see `acp options`"), "{words:?}: {help}");
            assert!(!help.contains("--server <"), "{words:?}: {help}");
        }
        if cmd.get_arguments().any(|a| a.get_id() == "yes") {
            with_yes.insert(words.join(" "));
        }
    }
    let expected: BTreeSet<String> = [
        "agents suspend",
        "agents revoke",
        "kill-switch pause",
        "kill-switch revoke-all",
        "credentials revoke",
        "credentials revoke-agent",
        "policy rollback",
        "api-keys revoke",
        "members remove",
        "token revoke",
        "audit sinks rotate-secret",
        "audit sinks delete",
        "vault revoke",
        "mcp servers remove",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(with_yes, expected);
    // A read-only command refuses it as any unknown flag: exit 1.
    let ran = term.run(&["agents", "list", "--yes"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    let ran = term.run(&["kill-switch", "status", "-y"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
}

#[tokio::test]
async fn filter_values_are_checked_and_named() {
    let term = Term::new(Some("http://127.0.0.1:1"), Some("t"));
    // Scopes too: the key's and the token's own.
    let key_scopes = acp::domain::access::KEY_SCOPES.join(", ");
    let ran = term
        .run(&[
            "api-keys",
            "create",
            "--name",
            "k",
            "--scope",
            "check,everything",
        ])
        .await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.err
            .contains(&format!("[possible values: {key_scopes}]")),
        "{}",
        ran.err
    );
    for (args, allowed) in [
        (
            &["audit", "search", "--decision", "maybe"][..],
            "allow, challenge, deny",
        ),
        (
            &["audit", "tail", "--decision", "maybe"],
            "allow, challenge, deny",
        ),
        (
            &["agents", "list", "--status", "sleeping"],
            "pending, active, suspended, revoked",
        ),
        (
            &["agents", "list", "--risk-tier", "extreme"],
            "low, medium, high",
        ),
        (
            &["agents", "list", "--seen", "yesterday"],
            "hour, day, stale, never",
        ),
        (
            &["challenges", "list", "--status", "maybe"],
            "pending, approved, denied, expired, all",
        ),
        (
            &[
                "members",
                "add",
                "--email",
                "a@example.com",
                "--role",
                "boss",
            ],
            "owner, admin, approver, member",
        ),
        (
            &[
                "admin",
                "add-member",
                "--workspace",
                "ws_x",
                "--email",
                "a@example.com",
                "--role",
                "boss",
            ],
            "owner, admin, approver, member",
        ),
        (
            &[
                "token",
                "create",
                "--name",
                "ci",
                "--scope",
                "read,everything",
            ],
            "read, policy:sync, approve",
        ),
    ] {
        let ran = term.run(args).await;
        assert_eq!(ran.code, 1, "{args:?}: {ran:?}");
        assert!(
            ran.err.contains(&format!("[possible values: {allowed}]")),
            "{args:?}: {}",
            ran.err
        );
        assert!(ran.err.starts_with("error: "), "{args:?}: {}", ran.err);
    }
}

// --- exit codes and the error line ------------------------------------------------------------

both_engines! {
    /// One table of exit codes over the real binary: a bad flag 1, a credential that is not
    /// valid (or none) 4, a refusal by role 5, not found 6, a conflict 3, a dry run with
    /// changes 2 and a tripped gate of `sync` 7; errors as one line, `error: MESSAGE (code:
    /// CODE)`.
    async fn one_exit_code_table_for_every_command(app) {
        let agent = app.active_agent("coded").await;
        let owner = Term::new(Some(&app.base), Some(&token_of(&app, "owner@example.com", "owner").await));
        let member = Term::new(Some(&app.base), Some(&token_of(&app, "member@example.com", "member").await));
        let bad = Term::new(Some(&app.base), Some("svc_pat_this_token_is_not_valid"));
        let nobody = Term::new(None, None);
        let dir = tempfile::tempdir().unwrap();
        let reads = spec_file(dir.path(), "reads.json", &agent.id, &["read"]);
        let writes = spec_file(dir.path(), "writes.json", &agent.id, &["read", "write"]);
        let deploys = spec_file(dir.path(), "deploys.json", &agent.id, &["read", "write", "deploy"]);
        let zero_hash = format!("sha256:{}", "0".repeat(64));
        let nobody_id = "agt_00000000000000000000000000000000";

        // (what, who, the command, its exit code, the server's code in the error line)
        type Row<'a> = (&'a str, &'a Term, Vec<&'a str>, i32, Option<&'a str>);
        let rows: Vec<Row> = vec![
            ("bad flag", &owner, vec!["agents", "list", "--no-such-flag"], 1, None),
            ("bad flag (sync)", &owner, vec!["sync", &reads, "--no-such-flag"], 1, None),
            ("401", &bad, vec!["agents", "list"], 4, Some("invalid_token")),
            ("401 (sync)", &bad, vec!["sync", &reads], 4, Some("invalid_token")),
            ("401 (rollback)", &bad, vec!["policy", "rollback", "1", "--dry-run"], 4, Some("invalid_token")),
            ("401 (whoami)", &bad, vec!["whoami"], 4, None),
            ("not logged in", &nobody, vec!["agents", "list"], 4, None),
            ("not logged in (sync)", &nobody, vec!["sync", &reads], 4, None),
            ("403", &member, vec!["agents", "suspend", &agent.id, "--yes"], 5, Some("insufficient_role")),
            ("403 (sync)", &member, vec!["sync", &reads, "--apply"], 5, Some("insufficient_role")),
            ("404", &owner, vec!["agents", "show", nobody_id], 6, Some("unknown_agent")),
            ("404 (a name)", &owner, vec!["agents", "show", "no-agent-has-this-name"], 6, None),
            ("dry run with changes (sync)", &owner, vec!["sync", &reads], 2, None),
            ("apply", &owner, vec!["sync", &reads, "--apply"], 0, None),
            ("apply again", &owner, vec!["sync", &writes, "--apply"], 0, None),
            ("404 (no such version)", &owner, vec!["policy", "rollback", "99", "--dry-run"], 6, Some("unknown_version")),
            ("dry run with changes (rollback)", &owner, vec!["policy", "rollback", "1", "--dry-run"], 2, None),
            ("conflict (sync)", &owner, vec!["sync", &deploys, "--apply", "--expect-hash", &zero_hash], 3, Some("sync_conflict")),
            ("conflict (rollback)", &owner, vec!["policy", "rollback", "1", "--yes", "--expect-hash", &zero_hash], 3, None),
            ("gate", &owner, vec!["sync", &deploys, "--fail-on", "more-permissive", "--impact-checks", "0"], 7, None),
            ("no gate", &owner, vec!["sync", &deploys, "--impact-checks", "0"], 2, None),
        ];
        for (what, term, args, code, error_code) in &rows {
            let ran = term.run(args).await;
            assert_eq!(ran.code, *code, "{what}: acp {args:?}: {ran:?}");
            let first = ran.err.lines().next().unwrap_or("");
            if ![0, 2, 7].contains(code) {
                assert!(first.starts_with("error: "), "{what}: {ran:?}");
            }
            if let Some(error_code) = error_code {
                assert!(first.ends_with(&format!(" (code: {error_code})")), "{what}: {ran:?}");
                assert!(!first.contains("HTTP "), "{what}: {ran:?}");
            }
        }
        // A gate's line says which exit it is.
        let ran = owner.run(&["sync", &deploys, "--fail-on", "more-permissive", "--impact-checks", "0"]).await;
        assert!(ran.out.contains("(exit 7)"), "{ran:?}");
        // With --output json the error is the server's answer, and the code the same.
        let ran = bad.run(&["agents", "list", "--output", "json"]).await;
        assert_eq!((ran.code, ran.json()["error"].as_str()), (4, Some("invalid_token")), "{ran:?}");
        let ran = bad.run(&["sync", &reads, "--output", "json"]).await;
        assert_eq!((ran.code, ran.json()["exit_code"].as_i64()), (4, Some(4)), "{ran:?}");
    }
}

// --- names where ids are asked, actors by name -------------------------------------------------

both_engines! {
    async fn names_where_ids_are_asked_and_actors_by_name(app) {
        let alpha = app.active_agent("alpha").await;
        let twin_a = app.active_agent("twin").await;
        let twin_b = app.active_agent("twin").await;
        let owner = Term::new(Some(&app.base), Some(&token_of(&app, "owner@example.com", "owner").await));

        // An agent by its name; an ambiguous name lists the ids; an id still works.
        assert_eq!(owner.json(&["agents", "show", "alpha"]).await["agent"]["agent_id"], alpha.id.as_str());
        let ran = owner.run(&["agents", "suspend", "twin", "--yes"]).await;
        assert_eq!(ran.code, 1, "{ran:?}");
        assert!(ran.err.starts_with("error: 2 agents are named `twin`: "), "{ran:?}");
        assert!(ran.err.contains(&twin_a.id) && ran.err.contains(&twin_b.id), "{ran:?}");
        let ran = owner.run(&["agents", "suspend", &twin_a.id, "--yes"]).await;
        assert_eq!((ran.code, ran.out.trim()), (0, format!("{}: suspended", twin_a.id).as_str()), "{ran:?}");
        let ran = owner.run(&["agents", "suspend", "alpha", "--reason", "drill", "--yes"]).await;
        assert_eq!((ran.code, ran.out.trim()), (0, format!("{}: suspended", alpha.id).as_str()), "{ran:?}");

        // The audit trail by the agent's name; the actor by email, in JSON and in the table.
        let found = owner.json(&["audit", "search", "--agent", "alpha", "--event-type", "agent.suspended"]).await;
        let event = &found["items"][0];
        assert!(event["actor"].as_str().unwrap().starts_with("user:usr_"), "{found}");
        assert_eq!(event["actor_name"], "owner@example.com", "{found}");
        let table = owner.run(&["audit", "search", "--agent", "alpha", "--event-type", "agent.suspended"]).await;
        assert!(table.code == 0 && table.out.contains("owner@example.com"), "{table:?}");
        assert!(!table.out.contains("user:usr_"), "{table:?}");

        // An API key by its name: it acts, and is shown by its name; then revoked by its name.
        let made = owner.run(&["api-keys", "create", "--name", "gateway"]).await;
        assert_eq!(made.code, 0, "{made:?}");
        let gateway = Term::new(Some(&app.base), Some(made.out.trim()));
        assert_eq!(gateway.run(&["agents", "resume", "alpha"]).await.code, 0);
        let found = owner.json(&["audit", "search", "--agent", &alpha.id, "--event-type", "agent.resumed"]).await;
        assert_eq!(found["items"][0]["actor_name"], "API key gateway", "{found}");
        let keys = owner.json(&["api-keys", "list"]).await;
        let listed = keys["items"].as_array().unwrap().iter().find(|k| k["name"] == "gateway").unwrap().clone();
        assert_eq!(listed["created_by_name"], "owner@example.com", "{keys}");
        let ran = owner.run(&["api-keys", "list"]).await;
        assert!(ran.out.contains("owner@example.com"), "{ran:?}");
        for _ in 0..2 {
            assert_eq!(owner.run(&["api-keys", "create", "--name", "twin-key"]).await.code, 0);
        }
        let ran = owner.run(&["api-keys", "revoke", "twin-key", "--yes"]).await;
        assert!(ran.code == 1 && ran.err.contains("2 API keys are named `twin-key`"), "{ran:?}");
        let ran = owner.run(&["api-keys", "revoke", "gateway", "--yes"]).await;
        assert_eq!((ran.code, ran.out.trim()), (0, format!("revoked {}", listed["key_id"].as_str().unwrap()).as_str()), "{ran:?}");
        assert_eq!(gateway.run(&["agents", "list"]).await.code, 4, "the revoked key is refused");
        assert_eq!(owner.run(&["api-keys", "revoke", "gateway", "--yes"]).await.code, 6, "no live key has the name");

        // A token by its name; a member by email.
        assert_eq!(owner.run(&["token", "create", "--name", "short-lived"]).await.code, 0);
        let ran = owner.run(&["token", "revoke", "short-lived", "--yes"]).await;
        assert!(ran.code == 0 && ran.out.starts_with("revoked pat_"), "{ran:?}");
        assert_eq!(owner.json(&["members", "add", "--email", "new@example.com", "--role", "approver"]).await["member"]["role"], "approver");
        assert_eq!(owner.run(&["members", "remove", "NEW@example.com", "--yes"]).await.code, 0);
        assert_eq!(owner.run(&["members", "remove", "new@example.com", "--yes"]).await.code, 6);

        // Who decided a challenge, by email; the policy's author, by email.
        let fin = crate::approvals::setup(&app).await;
        let (_, asked) = status_json(app.post("/v1/check", &json!({"agent_id": fin.id, "action": "refund", "context": {"currency": "USD", "amount": 300.0}})).await).await;
        let challenge = asked["challenge_id"].as_str().unwrap().to_owned();
        assert_eq!(owner.run(&["challenges", "approve", &challenge]).await.code, 0);
        let decided = owner.json(&["challenges", "list", "--status", "approved", "--agent", "fin"]).await;
        assert_eq!(decided["items"][0]["decided_by_name"], "owner@example.com", "{decided}");
        let ran = owner.run(&["challenges", "list", "--status", "approved"]).await;
        assert!(ran.out.contains("DECIDED BY") && ran.out.contains("owner@example.com"), "{ran:?}");
        let versions = owner.json(&["policy", "versions"]).await;
        assert_eq!(versions["items"][0]["author_name"], "owner@example.com", "{versions}");
        let ran = owner.run(&["policy", "versions"]).await;
        assert!(ran.out.contains("owner@example.com") && !ran.out.contains("user:usr_"), "{ran:?}");
        assert_eq!(owner.json(&["policy", "get"]).await["author_name"], "owner@example.com");

        // The console shows the same names.
        let browser = app.login("owner@example.com").await;
        for (page, names) in [
            ("/dashboard/audit", &["owner@example.com", "API key gateway"][..]),
            ("/dashboard/approvals", &["owner@example.com"]),
            ("/dashboard/policies/pol_default", &["owner@example.com"]),
            (&*format!("/dashboard/agents/{}", alpha.id), &["owner@example.com", "API key gateway"]),
        ] {
            let res = browser.get(page).await;
            assert_eq!(res.status(), 200, "{page}");
            let html = res.text().await.unwrap();
            for name in names {
                assert!(html.contains(name), "{page}: {name} not shown");
            }
            assert!(!html.contains(">user:usr_"), "{page} shows a user id as an actor");
        }
        let events = audit_events(&app, &format!("agent_id={}&event_type=agent.suspended", alpha.id)).await;
        let event_page = browser.get(&format!("/dashboard/audit/{}", events[0]["event_id"].as_str().unwrap())).await.text().await.unwrap();
        assert!(event_page.contains("id=\"actor-name\">owner@example.com<"), "{event_page}");
        // The export carries the name too.
        let res = browser.get("/dashboard/audit/export?format=csv&event_type=agent.suspended").await;
        let csv = res.text().await.unwrap();
        assert!(csv.lines().next().unwrap().ends_with(",actor_name"), "{csv}");
        assert!(csv.contains("owner@example.com"), "{csv}");
    }
}

// --- examples that name real values ----------------------------------------------------------

/// The backquoted examples of the `--event-type` line of `acp audit search --help`.
fn event_type_examples(help: &str) -> Vec<String> {
    let mut lines = help.lines().skip_while(|l| !l.contains("--event-type"));
    let mut line = lines.next().unwrap_or("").to_owned();
    // A long help puts the text under the flag, until a blank line or the next flag.
    for more in lines {
        let more = more.trim();
        if more.is_empty() || more.starts_with('-') {
            break;
        }
        line.push(' ');
        line.push_str(more);
    }
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

both_engines! {
    async fn the_examples_of_help_and_console_name_values_that_exist(app) {
        let agent = app.active_agent("example").await;
        let owner = Term::new(Some(&app.base), Some(&token_of(&app, "owner@example.com", "owner").await));
        // One decision and one suspension: the kinds of event the examples name.
        let (s, _) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "read"})).await).await;
        assert_eq!(s, 200);
        assert_eq!(owner.run(&["agents", "suspend", "example", "--yes"]).await.code, 0);

        let help = owner.run(&["audit", "search", "--help"]).await.out;
        let examples = event_type_examples(&help);
        assert!(examples.len() >= 2, "{help}");
        for example in &examples {
            let found = owner.json(&["audit", "search", "--event-type", example]).await;
            assert!(!found["items"].as_array().unwrap().is_empty(), "`{example}` of the help matches no event");
        }

        // The console's placeholder for the event type names one that exists.
        let browser = app.login("owner@example.com").await;
        let html = browser.get("/dashboard/audit").await.text().await.unwrap();
        let field = html.split("name=\"event_type\"").nth(1).unwrap();
        let placeholder = field.split("placeholder=\"").nth(1).unwrap().split('"').next().unwrap();
        let events = audit_events(&app, &format!("event_type={placeholder}")).await;
        assert!(!events.is_empty(), "the placeholder `{placeholder}` matches no event");
        // The decision filter offers the values the API takes, and no other.
        for decision in ["allow", "deny", "challenge"] {
            assert!(html.contains(&format!("<option value=\"{decision}\"")), "{decision}");
            assert_eq!(app.get(&format!("/v1/workspace/audit/events?decision={decision}")).await.status(), 200);
        }
    }
}

// --- agents list: pages and the console's filters ------------------------------------------------

both_engines! {
    async fn agents_list_pages_and_takes_the_consoles_filters(app) {
        let one = app.active_agent("p-one").await;
        let two = app.active_agent("p-two").await;
        let three = app.active_agent("p-three").await;
        let owner = Term::new(Some(&app.base), Some(&token_of(&app, "owner@example.com", "owner").await));
        let hb = json!({"agent_id": two.id, "status": "ok", "latency_ms": 1});
        assert_eq!(two.signed_post(&app, "/v1/telemetry/heartbeat", &hb).await.status(), 200);

        // A page of two says how to get the next; the next has the last and says nothing more.
        let first = owner.run(&["agents", "list", "--limit", "2"]).await;
        assert_eq!(first.code, 0, "{first:?}");
        let more = first.out.lines().last().unwrap().to_owned();
        assert!(more.starts_with("more: acp agents list --limit 2 --cursor "), "{first:?}");
        let words: Vec<&str> = more.split_whitespace().skip(2).collect();
        let second = owner.run(&words).await;
        assert_eq!(second.code, 0, "{second:?}");
        assert!(!second.out.contains("more:"), "{second:?}");
        let mut seen = Vec::new();
        for id in [&one.id, &two.id, &three.id] {
            let pages = [first.out.contains(id.as_str()), second.out.contains(id.as_str())];
            assert_eq!(pages.iter().filter(|p| **p).count(), 1, "{id} on one page: {first:?} {second:?}");
            seen.push(id.clone());
        }
        // In JSON, the server's `next_cursor`.
        let page = owner.json(&["agents", "list", "--limit", "2"]).await;
        let cursor = page["next_cursor"].as_str().unwrap().to_owned();
        assert_eq!(page["items"].as_array().unwrap().len(), 2);
        let rest = owner.json(&["agents", "list", "--limit", "2", "--cursor", &cursor]).await;
        assert_eq!((rest["items"].as_array().unwrap().len(), rest["next_cursor"].clone()), (1, Value::Null));

        // The console's filters: name or id, status, risk tier, last heartbeat, group, label.
        let ids = |v: &Value| -> BTreeSet<String> {
            v["items"].as_array().unwrap().iter().map(|a| a["agent_id"].as_str().unwrap().to_owned()).collect()
        };
        let set = |list: &[&String]| -> BTreeSet<String> { list.iter().map(|s| (*s).clone()).collect() };
        assert_eq!(ids(&owner.json(&["agents", "list", "--search", "P-T"]).await), set(&[&two.id, &three.id]));
        assert_eq!(ids(&owner.json(&["agents", "list", "--search", &one.id]).await), set(&[&one.id]));
        assert_eq!(ids(&owner.json(&["agents", "list", "--seen", "hour"]).await), set(&[&two.id]));
        assert_eq!(ids(&owner.json(&["agents", "list", "--seen", "never"]).await), set(&[&one.id, &three.id]));
        assert_eq!(ids(&owner.json(&["agents", "list", "--risk-tier", "high"]).await), BTreeSet::new());
        let low = ids(&owner.json(&["agents", "list", "--risk-tier", "low"]).await);
        let all = ids(&owner.json(&["agents", "list"]).await);
        assert_eq!(low, all);
        assert_eq!(ids(&owner.json(&["agents", "list", "--group", "nobody-group"]).await), BTreeSet::new());
        assert_eq!(ids(&owner.json(&["agents", "list", "--label", "no-such-label"]).await), BTreeSet::new());
        assert_eq!(owner.run(&["agents", "suspend", "p-three", "--yes"]).await.code, 0);
        assert_eq!(ids(&owner.json(&["agents", "list", "--status", "suspended", "--search", "p-"]).await), set(&[&three.id]));
        // The filters the `more:` line repeats.
        let ran = owner.run(&["agents", "list", "--search", "p-", "--status", "active", "--limit", "1"]).await;
        let more = ran.out.lines().last().unwrap();
        assert!(more.starts_with("more: acp agents list --search p- --status active --limit 1 --cursor "), "{ran:?}");

        // The API takes them too (`q`, `risk_tier`), and refuses a bad tier.
        let (s, listed) = status_json(app.get("/v1/agents?q=p-t&risk_tier=low").await).await;
        assert_eq!(s, 200, "{listed}");
        assert_eq!(ids(&listed), set(&[&two.id, &three.id]));
        assert_error(app.get("/v1/agents?risk_tier=extreme").await, 400, "invalid_risk_tier").await;
        assert_error(app.get(&format!("/v1/agents?q={}", "x".repeat(201))).await, 400, "invalid_q").await;
    }
}

// --- `acp admin`, and the old spellings ---------------------------------------------------------

both_engines! {
    async fn admin_commands_and_their_old_spellings(app) {
        let db = ["--database-url", app.db_url.as_str()];
        let term = Term::new(None, None);
        let made = term.json(&[&["admin", "workspace", "create", "ops"][..], &db].concat()).await;
        let ops = made["workspace"]["workspace_id"].as_str().unwrap().to_owned();
        let listed = term.json(&[&["admin", "workspace", "list"][..], &db].concat()).await;
        let names: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"ops") && names.contains(&"default"), "{listed}");
        let text = term.run(&[&["admin", "workspace", "list"][..], &db].concat()).await;
        assert!(text.out.starts_with("WORKSPACE") && text.out.contains(&ops), "{text:?}");
        let key = term.json(&[&["admin", "api-key", "create", "--workspace", &ops, "--name", "bootstrap"][..], &db].concat()).await;
        assert_eq!(key["api_key"]["name"], "bootstrap");
        assert!(key["api_key"]["key"].as_str().unwrap().starts_with("svc_test_"));

        // The old spellings work, are hidden, and name the new one on stderr (one line).
        for (old, new) in [
            (&["workspace", "create", "legacy"][..], "acp admin workspace create"),
            (&["workspace", "add-member", "--workspace", &ops, "--email", "old@example.com"], "acp admin add-member"),
            (&["admin", "workspace", "add-member", "--workspace", &ops, "--email", "old@example.com"], "acp admin add-member"),
            (&["api-key", "create", "--workspace", &ops], "acp admin api-key create"),
            (&["outbox", "list"], "acp admin outbox list"),
            (&["keys", "list"], "acp admin keys list"),
        ] {
            let ran = term.run(&[old, &db, &["--output", "json"]].concat()).await;
            assert_eq!(ran.code, 0, "{old:?}: {ran:?}");
            assert_eq!(ran.json()["ok"], true, "{old:?}: {ran:?}");
            let notes: Vec<&str> = ran.err.lines().collect();
            assert_eq!(notes.len(), 1, "{old:?}: {ran:?}");
            assert!(notes[0].starts_with("warning: `acp ") && notes[0].contains("is deprecated"), "{old:?}: {ran:?}");
            assert!(notes[0].ends_with(&format!("use `{new}`")), "{old:?}: {ran:?}");
        }
        // The new spellings say nothing on stderr.
        let ran = term.run(&[&["admin", "outbox", "list", "--output", "json"][..], &db].concat()).await;
        assert!(ran.code == 0 && ran.err.is_empty(), "{ran:?}");
        let help = term.run(&["admin", "--help"]).await.out;
        for sub in ["workspace", "add-member", "api-key", "outbox", "keys", "vault", "backup", "restore"] {
            assert!(help.lines().any(|l| l.trim_start().starts_with(&format!("{sub} "))), "{sub}: {help}");
        }
        let help = term.run(&["admin", "workspace", "--help"]).await.out;
        assert!(!help.contains("add-member"), "the old spelling is hidden: {help}");
    }
}

/// The server's first-start lines name the new spellings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_names_the_admin_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(Engine::Sqlite).await;
    let mut child = tokio::process::Command::new(BIN)
        .args(["serve", "--addr", "127.0.0.1:0", "--database-url", &db.url])
        .env_remove("ACP_MASTER_KEY")
        .env_remove("ACP_BOOTSTRAP_API_KEY")
        .env("ACP_EMAIL_URL", "outbox")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line()).await
    {
        let done = line.starts_with("acp listening on");
        banner.push(line);
        if done {
            break;
        }
    }
    child.kill().await.ok();
    let all = banner.join("\n");
    for new in [
        "acp admin api-key create --workspace ws_",
        "acp admin workspace create NAME",
        "acp admin add-member --workspace ws_",
        "acp admin outbox list",
    ] {
        assert!(all.contains(new), "`{new}` not in {all}");
    }
    for old in ["acp api-key ", "acp workspace ", "acp outbox "] {
        assert!(!all.contains(old), "`{old}` in {all}");
    }
}
