//! Health, discovery, configuration, bootstrap, the CLI and committed generated files.

use crate::both_engines;
use crate::helpers::*;

both_engines! {
    async fn health_and_readiness_answer(app) {
        let (s, body) = status_json(app.client.get(app.url("/healthz")).send().await.unwrap()).await;
        assert_eq!((s.as_u16(), body["status"].as_str()), (200, Some("alive")));
        let (s, body) = status_json(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
        assert_eq!((s.as_u16(), body["status"].as_str()), (200, Some("ready")));
    }
}

both_engines! {
    async fn unknown_routes_and_methods_answer_in_the_envelope(app) {
        assert_error(app.get("/v1/nope").await, 404, "not_found").await;
        let res = app.client.delete(app.url("/v1/agents/register")).send().await.unwrap();
        assert_error(res, 405, "method_not_allowed").await;
    }
}

both_engines! {
    async fn openapi_is_served_and_lists_every_route(app) {
        let (s, doc) = status_json(app.client.get(app.url("/openapi.json")).send().await.unwrap()).await;
        assert_eq!(s, 200);
        for path in [
            "/healthz", "/readyz", "/v1/agents/register", "/v1/agents/attest", "/v1/agents/{agent_id}/claim-code",
            "/v1/agents", "/v1/agents/{agent_id}", "/v1/agents/{agent_id}/suspend", "/v1/agents/{agent_id}/resume",
            "/v1/agents/{agent_id}/revoke", "/v1/verify", "/v1/telemetry/heartbeat", "/v1/telemetry/heartbeat/ingest",
            "/v1/telemetry/heartbeat/recent", "/v1/workspace/agents/upsert", "/v1/workspace/agents",
            "/v1/workspace/audit/events", "/v1/workspace/audit/export",
        ] {
            assert!(doc["paths"].get(path).is_some(), "missing {path}");
        }
    }
}

both_engines! {
    async fn cli_creates_workspaces_and_keys_that_work(app) {
        let (ws, key) = app.other_workspace().await;
        assert!(ws.starts_with("ws_"));
        assert!(key.starts_with("svc_test_"));
        let (s, body) = status_json(app.get_as(&key, "/v1/agents").await).await;
        assert_eq!(s, 200, "{body}");
        let live = run_cli(&app.db_url, &["admin", "api-key", "create", "--workspace", &ws, "--live", "--output", "json"]).await;
        let live_key = live["api_key"]["key"].as_str().unwrap();
        assert!(live_key.starts_with("svc_live_"));
        // The key is accepted as a bearer token too, and its creation is audited without it.
        let res = app.client.get(app.url("/v1/workspace/audit/events")).bearer_auth(live_key).send().await.unwrap();
        let (s, body) = status_json(res).await;
        assert_eq!(s, 200);
        let text = body.to_string();
        assert!(text.contains("api_key.created") && text.contains("workspace.created"), "{text}");
        assert!(!text.contains(live_key) && !text.contains(&key));
        // A workspace that does not exist is refused.
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
            .args(["admin", "api-key", "create", "--workspace", "ws_nope", "--database-url", &app.db_url])
            .output().await.unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("no workspace"));
    }
}

both_engines! {
    async fn api_keys_are_required_and_checked(app) {
        assert_error(app.client.get(app.url("/v1/agents")).send().await.unwrap(), 401, "missing_api_key").await;
        assert_error(app.get_as("svc_test_short", "/v1/agents").await, 401, "invalid_api_key").await;
        assert_error(app.get_as(&random_api_key(), "/v1/agents").await, 401, "invalid_api_key").await;
        let res = app.client.get(app.url("/v1/agents")).header("Authorization", "Basic abc").send().await.unwrap();
        assert_error(res, 401, "missing_api_key").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_the_data_and_bootstraps_only_once() {
    let db = TestDb::new(Engine::Sqlite).await;
    let key = random_api_key();
    let mut config = acp::config::Config::for_database(&db.url).unwrap();
    config.addr = "127.0.0.1:0".parse().unwrap();
    config.bootstrap_api_key = Some(acp::secret::Secret::new(key.clone()));
    let first = acp::app::App::build(config.clone()).await.unwrap();
    assert!(first.bootstrap.is_some());
    first.run(async {}).await.unwrap();
    config.bootstrap_api_key = None;
    let second = acp::app::App::build(config).await.unwrap();
    assert!(
        second.bootstrap.is_none(),
        "a second start must not create another workspace"
    );
    second.run(async {}).await.unwrap();
}

#[tokio::test]
async fn a_malformed_bootstrap_key_is_refused() {
    let db = TestDb::new(Engine::Sqlite).await;
    let mut config = acp::config::Config::for_database(&db.url).unwrap();
    config.addr = "127.0.0.1:0".parse().unwrap();
    config.bootstrap_api_key = Some(acp::secret::Secret::new("svc_test_tooshort".into()));
    let err = acp::app::App::build(config).await.err().expect("refused");
    assert!(err.to_string().contains("ACP_BOOTSTRAP_API_KEY"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_prefix_is_stripped_before_signature_checks() {
    let app = TestApp::spawn_with(Engine::Sqlite, |c| c.path_prefix = Some("/api".into())).await;
    assert!(app.base.ends_with("/api"));
    let agent = app.active_agent("prefixed").await;
    // The agent signs the path the service sees, without the prefix.
    let (body, s) = agent.signed_heartbeat(&agent.id, &random_nonce());
    let res = agent
        .send_signed(&app, "/v1/telemetry/heartbeat", &agent.id, &s, body)
        .await;
    assert_eq!(res.status(), 200);
    let res = app
        .client
        .get(format!("{}/v1/agents", app.base.trim_end_matches("/api")))
        .send()
        .await
        .unwrap();
    assert_error(res, 404, "not_found").await;
    app.stop().await;
}

#[test]
fn committed_openapi_document_is_current() {
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/openapi.json"))
            .expect("schemas/openapi.json exists");
    assert!(
        committed == acp::http::openapi_document(),
        "schemas/openapi.json is stale: run `cargo run -- openapi > schemas/openapi.json`"
    );
}

#[test]
fn migrations_come_in_pairs() {
    let list = |engine: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(format!(
            "{}/migrations/{engine}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
        names.sort();
        names
    };
    let (sqlite, postgres) = (list("sqlite"), list("postgres"));
    assert!(!sqlite.is_empty());
    assert_eq!(
        sqlite, postgres,
        "migrations/sqlite and migrations/postgres must hold the same numbered files"
    );
    for name in &sqlite {
        let (num, rest) = name.split_once('_').expect("NNNN_name.sql");
        assert!(
            num.len() == 4 && num.bytes().all(|b| b.is_ascii_digit()) && rest.ends_with(".sql"),
            "{name}"
        );
    }
}

#[test]
fn the_docs_link_only_to_files_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for outside in ["shared/spec", "/work/", "CONTRACT.md", "interface-spec.md"] {
            assert!(
                !text.contains(outside),
                "{} names `{outside}`, which is not in the repository",
                page.display()
            );
        }
        // Every relative link `](path)` names a file or folder that exists.
        for (_, rest) in text.match_indices("](").map(|(i, _)| ((), &text[i + 2..])) {
            let target = rest.split(')').next().unwrap_or("");
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let dir = page.parent().unwrap();
            assert!(
                dir.join(target).exists(),
                "{} links to `{target}`, which does not exist",
                page.display()
            );
        }
    }
}
