//! The MCP gateway's registered servers: registered, changed and removed by owners and admins,
//! read by members, refused to API keys; names, URLs (the vault proxy's egress rules) and the
//! upstream authentication (a vault profile that covers the URL) checked; every change audited
//! without a secret; the same through `acp mcp servers` and on the console. On both engines.

use serde_json::{json, Value};

use crate::helpers::*;

const UPSTREAM: &str = "https://127.0.0.1:8443/mcp";
const TOKEN: &str = "ghp_mcp-upstream-canary-0123456789";

/// A server whose egress allow-list opens loopback (as an operator does for an MCP server on
/// the same host), so that a loopback URL is registered without any name resolution.
async fn spawn(engine: Engine) -> TestApp {
    TestApp::spawn_with(engine, |config| {
        config.vault_proxy_allow = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await
}

fn upstream_set() -> Value {
    json!({
        "name": "github-mcp", "provider": "github", "environment": "production",
        "entries": {"GITHUB_TOKEN": TOKEN},
        "profiles": {
            "mcp": {"hosts": ["127.0.0.1"], "ports": [8443], "path_prefixes": ["/mcp"],
                    "inject": {"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}},
            "elsewhere": {"hosts": ["api.github.com"], "inject": {"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}}
        }
    })
}

async fn registered_servers(engine: Engine) {
    let app = spawn(engine).await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let owner = app.login("owner@example.com").await;
    let member = app.login("member@example.com").await;

    // Registered by an owner; where agents connect is the gateway's own path.
    let (s, made) = status_json(
        owner
            .post(
                "/v1/mcp/servers",
                &json!({"name": "github", "url": UPSTREAM}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let server = &made["server"];
    let id = server["server_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("mcp_"), "{id}");
    assert_eq!(server["endpoint"], format!("{}/mcp/github", app.base));
    assert_eq!(
        (&server["auth"], &server["record_arguments"], &server["url"]),
        (&Value::Null, &json!(false), &json!(UPSTREAM))
    );
    assert_eq!(server["created_by_name"], "owner@example.com");

    // Members read, by id or name; they may not change; API keys are machines', not people's.
    let (_, listed) = status_json(member.get("/v1/mcp/servers").await).await;
    assert_eq!(listed["items"][0]["server_id"], id.as_str());
    for path in [
        format!("/v1/mcp/servers/{id}"),
        "/v1/mcp/servers/github".into(),
    ] {
        let (s, got) = status_json(member.get(&path).await).await;
        assert_eq!(
            (s.as_u16(), &got["server"]["server_id"]),
            (200, &json!(id)),
            "{got}"
        );
    }
    let other = json!({"name": "jira", "url": UPSTREAM});
    assert_error(
        member.post("/v1/mcp/servers", &other).await,
        403,
        "insufficient_role",
    )
    .await;
    assert_error(
        member
            .post("/v1/mcp/servers/github/delete", &json!({}))
            .await,
        403,
        "insufficient_role",
    )
    .await;
    assert_error(app.get("/v1/mcp/servers").await, 401, "session_required").await;
    assert_error(
        owner.get("/v1/mcp/servers/nothing-here").await,
        404,
        "unknown_mcp_server",
    )
    .await;
    assert_error(
        owner.get("/v1/mcp/servers/Not_A_Name").await,
        404,
        "unknown_mcp_server",
    )
    .await;

    // Names: unique, lower case, a path segment.
    assert_error(
        owner
            .post(
                "/v1/mcp/servers",
                &json!({"name": "github", "url": UPSTREAM}),
            )
            .await,
        409,
        "mcp_server_exists",
    )
    .await;
    for (name, code) in [
        ("GitHub", "invalid_name"),
        ("git_hub", "invalid_name"),
        ("", "missing_name"),
    ] {
        assert_error(
            owner
                .post("/v1/mcp/servers", &json!({"name": name, "url": UPSTREAM}))
                .await,
            400,
            code,
        )
        .await;
    }
    // URLs: https, no credentials in them, and an address the egress rules let the gateway reach.
    for (url, code) in [
        ("http://127.0.0.1:8443/mcp", "invalid_url"),
        ("https://user:pw@127.0.0.1:8443/mcp", "invalid_url"),
        ("not a url", "invalid_url"),
        ("https://10.0.0.1/mcp", "destination_not_allowed"),
        ("https://169.254.169.254/mcp", "destination_not_allowed"),
        ("https://[::1]/mcp", "destination_not_allowed"),
    ] {
        assert_error(
            owner
                .post("/v1/mcp/servers", &json!({"name": "jira", "url": url}))
                .await,
            400,
            code,
        )
        .await;
    }

    // Upstream authentication: a profile of a live set, covering the URL, by id or number.
    let (s, set) = status_json(owner.post("/v1/vault/secret-sets", &upstream_set()).await).await;
    assert_eq!(s, 200, "{set}");
    let set_id = set["secret_set"]["secret_set_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let with_auth = |auth: Value| json!({"name": "jira", "url": UPSTREAM, "auth": auth, "record_arguments": true});
    assert_error(
        owner
            .post(
                "/v1/mcp/servers",
                &with_auth(json!({"secret_set_id": 7, "profile": "mcp"})),
            )
            .await,
        404,
        "unknown_secret_set",
    )
    .await;
    assert_error(
        owner
            .post(
                "/v1/mcp/servers",
                &with_auth(json!({"secret_set_id": 1, "profile": "nope"})),
            )
            .await,
        404,
        "unknown_profile",
    )
    .await;
    let refused = assert_error(
        owner
            .post(
                "/v1/mcp/servers",
                &with_auth(json!({"secret_set_id": 1, "profile": "elsewhere"})),
            )
            .await,
        400,
        "invalid_auth",
    )
    .await;
    assert!(
        refused["message"].as_str().unwrap().contains("127.0.0.1"),
        "{refused}"
    );
    let (s, jira) = status_json(
        owner
            .post(
                "/v1/mcp/servers",
                &with_auth(json!({"secret_set_id": 1, "profile": "mcp"})),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{jira}");
    assert_eq!(
        jira["server"]["auth"],
        json!({"secret_set_id": set_id, "profile": "mcp"})
    );
    assert_eq!(jira["server"]["record_arguments"], true);

    // Changes: a rename (not onto another's name), a URL the profile must still cover, the
    // authentication removed.
    let (s, renamed) = status_json(
        owner
            .post("/v1/mcp/servers/jira", &json!({"name": "jira-cloud"}))
            .await,
    )
    .await;
    assert_eq!(
        (s.as_u16(), &renamed["server"]["name"]),
        (200, &json!("jira-cloud")),
        "{renamed}"
    );
    assert_error(
        owner
            .post("/v1/mcp/servers/jira-cloud", &json!({"name": "github"}))
            .await,
        409,
        "mcp_server_exists",
    )
    .await;
    assert_error(
        owner
            .post(
                "/v1/mcp/servers/jira-cloud",
                &json!({"url": "https://127.0.0.1:9443/mcp"}),
            )
            .await,
        400,
        "invalid_auth",
    )
    .await;
    let (s, plain) = status_json(
        owner
            .post(
                "/v1/mcp/servers/jira-cloud",
                &json!({"auth": null, "url": "https://127.0.0.1:9443/mcp"}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{plain}");
    assert_eq!(
        (&plain["server"]["auth"], &plain["server"]["url"]),
        (&Value::Null, &json!("https://127.0.0.1:9443/mcp"))
    );
    assert_eq!(
        plain["server"]["record_arguments"], true,
        "absent fields stay"
    );
    assert_error(
        owner.post("/v1/mcp/servers/jira", &json!({})).await,
        404,
        "unknown_mcp_server",
    )
    .await;

    // Removed: its name answers unknown, and may be registered again.
    let (s, _) = status_json(
        owner
            .post("/v1/mcp/servers/jira-cloud/delete", &json!({}))
            .await,
    )
    .await;
    assert_eq!(s, 200);
    assert_error(
        owner.get("/v1/mcp/servers/jira-cloud").await,
        404,
        "unknown_mcp_server",
    )
    .await;
    assert_error(
        owner
            .post("/v1/mcp/servers/jira-cloud/delete", &json!({}))
            .await,
        404,
        "unknown_mcp_server",
    )
    .await;
    let (_, listed) = status_json(member.get("/v1/mcp/servers").await).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");

    // Every change audited, with the person as actor; the vault's value appears nowhere.
    let events = audit_events(&app, "?limit=200").await;
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .filter(|t| t.starts_with("mcp."))
        .collect();
    assert_eq!(
        kinds,
        [
            "mcp.server.deleted",
            "mcp.server.updated",
            "mcp.server.updated",
            "mcp.server.created",
            "mcp.server.created"
        ],
        "newest first"
    );
    let trail = serde_json::to_string(&events).unwrap();
    assert!(!trail.contains(TOKEN), "a secret in the audit trail");

    // The console lists the servers to members.
    let (s, page) = crate::dashboard::page(&member, "/dashboard/mcp").await;
    assert!(
        s == 200
            && page.contains(&format!("data-server=\"{id}\""))
            && page.contains(&format!("{}/mcp/github", app.base)),
        "{page}"
    );

    // `acp mcp servers` as an admin's terminal, and a member's.
    let term = Term::new(
        Some(&app.base),
        Some(&token_of(&app, "admin@example.com", "admin").await),
    );
    let added = term
        .json(&[
            "mcp",
            "servers",
            "add",
            "linear",
            "--url",
            UPSTREAM,
            "--secret-set",
            "github-mcp",
            "--profile",
            "mcp",
        ])
        .await;
    assert_eq!(
        added["server"]["auth"]["secret_set_id"],
        set_id.as_str(),
        "{added}"
    );
    let listed = term.json(&["mcp", "servers", "list"]).await;
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["github", "linear"]);
    let table = term.run(&["mcp", "servers", "list"]).await;
    assert!(
        table.code == 0 && table.out.contains("linear") && table.out.contains("profile mcp"),
        "{table:?}"
    );
    let refused = Term::new(
        Some(&app.base),
        Some(&token_of(&app, "member@example.com", "member").await),
    )
    .run(&["mcp", "servers", "remove", "linear", "--yes"])
    .await;
    assert_eq!(refused.code, 5, "refused by role: {refused:?}");
    let removed = term
        .run(&["mcp", "servers", "remove", "linear", "--yes"])
        .await;
    assert_eq!(
        (removed.code, removed.out.trim()),
        (0, "removed linear"),
        "{removed:?}"
    );
    let gone = term.run(&["mcp", "servers", "show", "linear"]).await;
    assert_eq!(gone.code, 6, "not found: {gone:?}");

    // A server whose secret set was deleted: a rename still works, a new URL needs a new
    // `auth` (or none).
    let stale = json!({"name": "stale", "url": UPSTREAM, "auth": {"secret_set_id": set_id, "profile": "mcp"}});
    let (s, made) = status_json(owner.post("/v1/mcp/servers", &stale).await).await;
    assert_eq!(s, 200, "{made}");
    let (s, deleted) = status_json(
        owner
            .post(
                &format!("/v1/vault/secret-sets/{set_id}/delete"),
                &json!({}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{deleted}");
    let moved = json!({"url": "https://127.0.0.1:8443/mcp/v2"});
    let refused = assert_error(
        owner.post("/v1/mcp/servers/stale", &moved).await,
        400,
        "invalid_auth",
    )
    .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("send a new `auth`"),
        "{refused}"
    );
    let (s, renamed) = status_json(
        owner
            .post(
                "/v1/mcp/servers/stale",
                &json!({"name": "stale-2", "record_arguments": true}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{renamed}");
    let (s, cleared) = status_json(
        owner
            .post(
                "/v1/mcp/servers/stale-2",
                &json!({"url": "https://127.0.0.1:8443/mcp/v2", "auth": null}),
            )
            .await,
    )
    .await;
    assert_eq!(
        (s.as_u16(), &cleared["server"]["auth"]),
        (200, &Value::Null),
        "{cleared}"
    );

    // Members may not change a server; approvers read.
    assert_error(
        member
            .post(
                "/v1/mcp/servers/stale-2",
                &json!({"record_arguments": false}),
            )
            .await,
        403,
        "insufficient_role",
    )
    .await;
    app.grant(&app.workspace_id, "approver@example.com", "approver")
        .await;
    let approver = app.login("approver@example.com").await;
    let (s, read) = status_json(approver.get("/v1/mcp/servers/stale-2").await).await;
    assert_eq!(s, 200, "{read}");

    // A query in the URL is refused: an upstream's credentials go in `auth`.
    let with_query = json!({"name": "q", "url": "https://127.0.0.1:8443/mcp?api_key=x"});
    assert_error(
        owner.post("/v1/mcp/servers", &with_query).await,
        400,
        "invalid_url",
    )
    .await;

    // Another workspace's servers are not found, by name or id.
    let (s, second) = status_json(
        owner
            .post("/v1/workspaces", &json!({"name": "second"}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{second}");
    let second_id = second["workspace"]["workspace_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (s, chosen) = status_json(
        owner
            .post("/v1/workspaces/select", &json!({"workspace_id": second_id}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{chosen}");
    assert_error(
        owner.get("/v1/mcp/servers/github").await,
        404,
        "unknown_mcp_server",
    )
    .await;
    assert_error(
        owner.get(&format!("/v1/mcp/servers/{id}")).await,
        404,
        "unknown_mcp_server",
    )
    .await;
    let (_, listed) = status_json(owner.get("/v1/mcp/servers").await).await;
    assert_eq!(listed["items"], json!([]), "{listed}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_servers_sqlite() {
    registered_servers(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_servers_postgres() {
    registered_servers(Engine::Postgres).await;
}
