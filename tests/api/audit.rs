//! The audit trail: filters, paging, export, and no secrets in events.

use crate::both_engines;
use crate::helpers::*;
use serde_json::json;

both_engines! {
    async fn audit_events_filter_page_and_export(app) {
        let a = app.active_agent("a").await;
        let b = app.active_agent("b").await;
        app.post(&format!("/v1/agents/{}/suspend", b.id), &json!({"reason": "noisy"})).await;

        let all = audit_events(&app, "").await;
        // bootstrap (2) + 2 x (registered, attested) + suspended
        assert_eq!(all.len(), 7);
        for e in &all {
            for field in ["event_id", "created_at", "event_type", "actor"] {
                assert!(e[field].is_string(), "{field} in {e}");
            }
            for field in ["agent_id", "action", "decision", "policy_id", "policy_hash", "trace_id"] {
                assert!(e.get(field).is_some(), "{field} in {e}");
            }
            assert!(e["reasons"].is_array() && e["reason_codes"].is_array());
        }
        let created: Vec<&str> = all.iter().map(|e| e["created_at"].as_str().unwrap()).collect();
        let mut sorted = created.clone();
        sorted.sort_by(|x, y| y.cmp(x));
        assert_eq!(created, sorted, "newest first");

        assert_eq!(audit_events(&app, &format!("agent_id={}", a.id)).await.len(), 2);
        assert_eq!(audit_events(&app, "event_type=agent.suspended").await.len(), 1);
        assert_eq!(audit_events(&app, "action=attest").await.len(), 2);
        assert_eq!(audit_events(&app, "start_ms=0&end_ms=1").await.len(), 0);
        assert_eq!(audit_events(&app, &format!("start_ms={}", now_ms() - 60_000)).await.len(), 7);

        // Paging visits every event exactly once.
        let mut seen = Vec::new();
        let mut cursor = String::new();
        loop {
            let (_, page) = status_json(app.get(&format!("/v1/workspace/audit/events?limit=3&cursor={cursor}")).await).await;
            seen.extend(page["items"].as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap().to_owned()));
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_owned(),
                None => break,
            }
        }
        let ids: Vec<String> = all.iter().map(|e| e["event_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(seen, ids);
        assert_error(app.get("/v1/workspace/audit/events?limit=201").await, 400, "invalid_limit").await;
        assert_error(app.get("/v1/workspace/audit/events?start_ms=abc").await, 400, "invalid_start_ms").await;
        assert_error(app.get("/v1/workspace/audit/events?limit=ten").await, 400, "invalid_limit").await;
        assert_error(app.get("/v1/workspace/audit/events?agent_id=a%00b").await, 400, "invalid_query").await;

        let (s, exported) = status_json(app.post("/v1/workspace/audit/export",
            &json!({"format": "json", "filters": {"agent_id": b.id}, "limit": 10})).await).await;
        assert_eq!(s, 200);
        assert_eq!(exported["count"], 3);
        let res = app.post("/v1/workspace/audit/export", &json!({"format": "csv"})).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
        let csv = res.text().await.unwrap();
        let lines: Vec<&str> = csv.trim_end().split("\r\n").collect();
        assert!(lines[0].starts_with("event_id,created_at,event_type,agent_id,action,decision"));
        assert_eq!(lines.len(), 8);
        assert!(csv.contains("agent.suspended"));
        assert_error(app.post("/v1/workspace/audit/export", &json!({"format": "xml"})).await, 400, "invalid_format").await;
    }
}

both_engines! {
    async fn no_key_signature_or_secret_reaches_an_event(app) {
        let agent = app.active_agent("a").await;
        let path = format!("/v1/agents/{}/claim-code", agent.id);
        let _ = agent.signed_post(&app, &path, &json!({})).await;
        let (body, s) = agent.signed_heartbeat(&agent.id, &random_nonce());
        agent.send_signed(&app, "/v1/telemetry/heartbeat", &agent.id, &s, body).await;
        let (_, ws_b_key) = app.other_workspace().await;
        let (_, all) = status_json(app.post("/v1/workspace/audit/export", &json!({"limit": 10000})).await).await;
        let text = all.to_string();
        assert!(!text.contains(&app.key), "API key leaked into audit");
        assert!(!text.contains(&ws_b_key));
        assert!(!text.contains(&s.signature), "signature leaked into audit");
        assert!(!text.contains("svc_test_"), "no key material at all");
    }
}

/// An audit event of type `test.{tag}` with this action, numbered `n` in its fields.
fn test_event(workspace_id: &str, action: &str, n: usize, tag: &str) -> acp::store::AuditRecord {
    acp::store::AuditRecord {
        id: acp::domain::ids::new_id(acp::domain::ids::EVENT),
        workspace_id: Some(workspace_id.to_owned()),
        created_at: now_ms(),
        event_type: format!("test.{tag}"),
        agent_id: None,
        action: Some(action.to_owned()),
        decision: Some("allow".into()),
        policy_id: Some("pol_default".into()),
        policy_hash: Some("sha256:00".into()),
        trace_id: Some(format!("trc_{tag}_{n}")),
        reasons: vec![format!("reason {n}"), "it's \"quoted\"".into()],
        reason_codes: vec![format!("code_{n}")],
        actor: "test".into(),
        details: json!({"n": n, "nested": {"list": [1, 2, 3]}}).into(),
    }
}

/// The stored events of type `test.{tag}`, by id.
/// Waits for the writer's callers that raced a shutdown: how many were answered; each of the
/// others must have been refused (`Closed`), never answered with another error.
async fn answered_or_closed(
    tasks: Vec<tokio::task::JoinHandle<Result<acp::store::Applied, acp::store::StoreError>>>,
) -> usize {
    let mut answered = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(_) => answered += 1,
            Err(acp::store::StoreError::Closed) => {}
            Err(other) => panic!("unexpected answer: {other:?}"),
        }
    }
    answered
}

async fn stored_events(
    store: &dyn acp::store::Store,
    workspace_id: &str,
    tag: &str,
) -> Vec<acp::store::AuditRecord> {
    let mut events = store
        .audit_events(&acp::store::AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_type: Some(format!("test.{tag}")),
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("events");
    events.sort_by(|a, b| a.id.cmp(&b.id));
    events
}

both_engines! {
    async fn a_batch_writes_exactly_the_events_of_the_changes_that_took_effect(app) {
        use acp::store::{AccountOp, AuditRecord, Change, NonceClaim, Op, SqlStore, Store, StoreError, Workspace};
        let store = SqlStore::open(&app.db_url, &Default::default()).await.expect("open");
        let event = |n: usize, tag: &str| test_event(&app.workspace_id, &format!("act_{n}"), n, tag);
        let record = |n: usize, tag: &str| Change::new(Op::Nothing).audited(event(n, tag));
        let stored = |tag: &'static str| stored_events(&store, &app.workspace_id, tag);

        // Decisions only: one statement up to 64 events, several in one transaction beyond.
        for (tag, n) in [("one", 1), ("forty", 40), ("sixty_four", 64), ("many", 150)] {
            let changes: Vec<Change> = (0..n).map(|i| record(i, tag)).collect();
            let written: Vec<AuditRecord> = changes.iter().flat_map(|c| c.audit.clone()).collect();
            let results = store.apply(&changes).await.expect("apply");
            assert_eq!(results.len(), n);
            assert!(results.iter().all(|r| r.is_ok()), "{tag}: {results:?}");
            let events = stored(tag).await;
            assert_eq!(events, written, "{tag}: every event, as written");
        }

        // A mixed batch: a replayed nonce and a failing operation write none of their events;
        // everything else is written once.
        let claim = |nonce: &str| NonceClaim {
            scope: "test:batch".into(),
            nonce: nonce.into(),
            expires_at: now_ms() + 60_000,
            agent_id: None,
        };
        let duplicate = Workspace { id: app.workspace_id.clone(), name: "again".into(), created_at: now_ms() };
        let changes = vec![
            record(0, "mixed"),
            record(1, "mixed").with_nonce(claim("n-1")),
            record(2, "mixed"),
            record(3, "mixed").with_nonce(claim("n-1")),
            Change::new(AccountOp::CreateWorkspace(duplicate)).audited(event(4, "mixed")),
            record(5, "mixed"),
            record(6, "mixed").with_nonce(claim("n-2")),
        ];
        let results = store.apply(&changes).await.expect("apply");
        assert!(matches!(results[3], Err(StoreError::Replay)), "{:?}", results[3]);
        assert!(results[4].is_err(), "{:?}", results[4]);
        for i in [0, 1, 2, 5, 6] {
            assert!(results[i].is_ok(), "change {i}: {:?}", results[i]);
        }
        let actions: Vec<String> = stored("mixed").await.into_iter().filter_map(|e| e.action).collect();
        assert_eq!(actions, ["act_0", "act_1", "act_2", "act_5", "act_6"]);
        store.close().await;
    }
}

both_engines! {
    async fn the_writer_commits_every_change_it_accepts(app) {
        use acp::store::{Change, GroupCommit, Op, SqlStore, Store, StoreError};
        use std::sync::Arc;
        let store: Arc<dyn Store> =
            Arc::new(SqlStore::open(&app.db_url, &Default::default()).await.expect("open"));
        let event = |n: usize, tag: &str| test_event(&app.workspace_id, &format!("act_{n:04}"), n, tag);
        let stored = |tag: &'static str| stored_events(store.as_ref(), &app.workspace_id, tag);

        // Batches of at most 4: 300 concurrent changes make many batches, each started while
        // the changes behind it queue up. Every change is answered, and written once.
        let (writer, handle) = GroupCommit::start(store.clone(), 4);
        let tasks: Vec<_> = (0..300)
            .map(|n| {
                let (writer, change) = (writer.clone(), Change::new(Op::Nothing).audited(event(n, "burst")));
                tokio::spawn(async move { writer.commit(change).await })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").expect("committed");
        }
        let mut actions: Vec<String> = stored("burst").await.into_iter().filter_map(|e| e.action).collect();
        actions.sort();
        let expected: Vec<String> = (0..300).map(|n| format!("act_{n:04}")).collect();
        assert_eq!(actions, expected);

        // Shutdown while changes are queued: each is either committed and answered, or refused
        // (`Closed`), never lost after being accepted.
        let tasks: Vec<_> = (0..200)
            .map(|n| {
                let (writer, change) = (writer.clone(), Change::new(Op::Nothing).audited(event(n, "cut")));
                tokio::spawn(async move { writer.commit(change).await })
            })
            .collect();
        tokio::task::yield_now().await;
        handle.shutdown().await;
        let answered = answered_or_closed(tasks).await;
        assert_eq!(stored("cut").await.len(), answered);
        assert!(matches!(
            writer.commit(Change::new(Op::Nothing).audited(event(0, "late"))).await,
            Err(StoreError::Closed)
        ));
    }
}

both_engines! {
    async fn a_lazy_change_rides_with_a_batch_or_goes_alone_and_is_never_lost(app) {
        use acp::store::{Change, GroupCommit, Op, SqlStore, Store};
        use std::sync::Arc;
        let store: Arc<dyn Store> =
            Arc::new(SqlStore::open(&app.db_url, &Default::default()).await.expect("open"));
        let event = |n: usize, tag: &str| test_event(&app.workspace_id, &format!("act_{n:04}"), n, tag);
        let stored = |tag: &'static str| stored_events(store.as_ref(), &app.workspace_id, tag);
        let (writer, handle) = GroupCommit::start(store.clone(), 4);

        // Alone: nothing comes to ride with, so it goes on its own.
        writer.commit_lazily(Change::new(Op::Nothing).audited(event(0, "alone"))).await.expect("committed");
        assert_eq!(stored("alone").await.len(), 1);

        // Mixed with eager changes: every one is answered and written once.
        let tasks: Vec<_> = (0..60)
            .map(|n| {
                let (writer, change) = (writer.clone(), Change::new(Op::Nothing).audited(event(n, "mixed")));
                tokio::spawn(async move {
                    if n % 3 == 0 { writer.commit_lazily(change).await } else { writer.commit(change).await }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").expect("committed");
        }
        assert_eq!(stored("mixed").await.len(), 60);

        // Stopping: a lazy change already accepted is committed, not left waiting.
        let waiting: Vec<_> = (0..10)
            .map(|n| {
                let (writer, change) = (writer.clone(), Change::new(Op::Nothing).audited(event(n, "stop")));
                tokio::spawn(async move { writer.commit_lazily(change).await })
            })
            .collect();
        tokio::task::yield_now().await;
        handle.shutdown().await;
        let answered = answered_or_closed(waiting).await;
        assert_eq!(stored("stop").await.len(), answered);
    }
}

both_engines! {
    async fn several_changes_of_one_caller_commit_together(app) {
        use acp::store::{Change, GroupCommit, Op, SqlStore, Store};
        use std::sync::Arc;
        let store: Arc<dyn Store> =
            Arc::new(SqlStore::open(&app.db_url, &Default::default()).await.expect("open"));
        // Batches of at most 4 messages: groups of 10 changes mixed with single changes. Every
        // change is answered in its place, and each group is never split between two batches.
        let (writer, handle) = GroupCommit::start(store.clone(), 4);
        let tasks: Vec<_> = (0..40)
            .map(|g| {
                let writer = writer.clone();
                let ws = app.workspace_id.clone();
                tokio::spawn(async move {
                    if g % 2 == 0 {
                        let changes = (0..10)
                            .map(|k| Change::new(Op::Nothing).audited(test_event(&ws, &format!("g{g:02}_{k:02}"), g * 10 + k, "grouped")))
                            .collect();
                        let results = writer.commit_all(changes).await;
                        assert_eq!(results.len(), 10);
                        results.into_iter().all(|r| r.is_ok())
                    } else {
                        let change = Change::new(Op::Nothing).audited(test_event(&ws, &format!("s{g:02}"), g, "grouped"));
                        writer.commit(change).await.is_ok()
                    }
                })
            })
            .collect();
        for task in tasks {
            assert!(task.await.expect("task"), "every change committed");
        }
        handle.shutdown().await;
        assert!(writer.commit_all(vec![Change::new(Op::Nothing)]).await.iter().all(|r| r.is_err()), "closed");
        let events = stored_events(store.as_ref(), &app.workspace_id, "grouped").await;
        assert_eq!(events.len(), 20 * 10 + 20);
        // The commit order of each group's events: one transaction id on Postgres, consecutive
        // rows on SQLite.
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let url = if app.db_url.starts_with("postgres") {
            app.db_url.clone()
        } else {
            format!("sqlite://{}", app.db_url.trim_start_matches("sqlite:").trim_start_matches("//"))
        };
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        for g in (0..40).step_by(2) {
            let pattern = format!("g{g:02}_%");
            let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM audit_events WHERE action LIKE $1 ORDER BY action")
                .bind(&pattern).fetch_all(&mut conn).await.unwrap();
            assert_eq!(seqs.len(), 10);
            if app.db_url.starts_with("postgres") {
                assert!(seqs.iter().all(|s| *s == seqs[0]), "group {g}: {seqs:?}");
            } else {
                assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "group {g}: {seqs:?}");
            }
        }
    }
}

/// Migration 0009 takes the audit table's separate index on `id` away (on SQLite by rebuilding
/// the table): events written before it are all there afterwards, field for field and in
/// order, and new events are written next to them.
async fn audit_events_survive_the_id_index_migration(engine: Engine) {
    use acp::store::{apply_one, AuditQuery, AuditRecord, AuditStore, Change, Op, SqlStore};
    let db = TestDb::new(engine).await;
    let dir_name = match engine {
        Engine::Sqlite => "sqlite",
        Engine::Postgres => "postgres",
    };
    // The migrations before 0009, applied as an older release would have.
    let older = tempfile::tempdir().unwrap();
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dir_name);
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.as_str() < "0009" {
            std::fs::copy(entry.path(), older.path().join(&name)).unwrap();
        }
    }
    sqlx::any::install_default_drivers();
    let url = match engine {
        Engine::Sqlite => format!("sqlite://{}?mode=rwc", db.url.trim_start_matches("sqlite:")),
        Engine::Postgres => db.url.clone(),
    };
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(older.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let ws = "ws_0000000000000000000000000000000a";
    let old: Vec<AuditRecord> = (0..3)
        .map(|i| AuditRecord {
            id: format!("evt_0000000000000000000000000000000{i}"),
            workspace_id: Some(ws.into()),
            created_at: 1_700_000_000_000 + i,
            event_type: "decision.check".into(),
            agent_id: Some("agt_00000000000000000000000000000001".into()),
            action: Some("refund".into()),
            decision: Some(if i == 1 { "deny" } else { "allow" }.into()),
            policy_id: Some("pol_default".into()),
            policy_hash: Some(format!("sha256:{}", "ab".repeat(32))),
            trace_id: Some(format!("trc_0000000000000000000000000000000{i}")),
            reasons: vec![format!("reason {i}")],
            reason_codes: vec![format!("code_{i}")],
            actor: "api_key:key_00000000000000000000000000000001".into(),
            details: json!({"policy_version": i, "determining_policies": ["binding:refunds"]})
                .into(),
        })
        .collect();
    for e in &old {
        sqlx::query(
            "INSERT INTO audit_events (id, workspace_id, created_at, event_type, agent_id, action, decision, \
             policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&e.id)
        .bind(e.workspace_id.as_deref())
        .bind(e.created_at)
        .bind(&e.event_type)
        .bind(e.agent_id.as_deref())
        .bind(e.action.as_deref())
        .bind(e.decision.as_deref())
        .bind(e.policy_id.as_deref())
        .bind(e.policy_hash.as_deref())
        .bind(e.trace_id.as_deref())
        .bind(serde_json::to_string(&e.reasons).unwrap())
        .bind(serde_json::to_string(&e.reason_codes).unwrap())
        .bind(&e.actor)
        .bind(e.details.value().to_string())
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    // This release's store applies 0009 on open.
    let store = SqlStore::open(&db.url, &Default::default()).await.unwrap();
    let newer = AuditRecord {
        id: acp::domain::ids::new_id(acp::domain::ids::EVENT),
        created_at: 1_700_000_000_010,
        ..old[0].clone()
    };
    let mut change = Change::new(Op::Nothing);
    change.audit.push(newer.clone());
    apply_one(&store, change).await.unwrap();
    let query = AuditQuery {
        workspace_id: ws.into(),
        limit: 10,
        ..AuditQuery::default()
    };
    let mut expected = old.clone();
    expected.push(newer);
    expected.reverse();
    assert_eq!(store.audit_events(&query).await.unwrap(), expected);
    store.close().await;
    // No index on `id` is left: only the workspace's, those of the selective filters (0016)
    // and the sinks' order (0020).
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let indexes = match engine {
        Engine::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_events'"
        }
        Engine::Postgres => {
            "SELECT indexname::text AS name FROM pg_indexes WHERE tablename = 'audit_events'"
        }
    };
    let mut names: Vec<String> = sqlx::query_scalar(indexes).fetch_all(&pool).await.unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "audit_events_action",
            "audit_events_agent",
            "audit_events_sequence",
            "audit_events_trace",
            "audit_events_type",
            "audit_events_workspace"
        ]
    );
    pool.close().await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_events_survive_the_id_index_migration_sqlite() {
    audit_events_survive_the_id_index_migration(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_events_survive_the_id_index_migration_postgres() {
    audit_events_survive_the_id_index_migration(Engine::Postgres).await;
}

both_engines! {
    async fn a_change_decided_on_a_replaced_state_writes_nothing_and_the_rest_of_its_batch_commits(app) {
        use acp::store::{Basis, Change, CredentialOp, NonceClaim, Op, SqlStore, Store, StoreError};
        let store = SqlStore::open(&app.db_url, &Default::default()).await.expect("open");
        let ws = app.workspace_id.clone();
        let at = |version: i64| Basis { workspace_id: ws.clone(), version };
        let record = |n: usize, tag: &str| Change::new(Op::Nothing).audited(test_event(&ws, &format!("act_{n}"), n, tag));
        let v0 = store.workspace_version(&ws).await.expect("version");
        // A change decisions read moves the version, in its own transaction.
        let pause = Change::new(CredentialOp::SetMinting { workspace_id: ws.clone(), paused: true, reason: None, at: now_ms() });
        store.apply(&[pause]).await.expect("batch").pop().expect("one").expect("paused");
        let v1 = store.workspace_version(&ws).await.expect("version");
        assert_eq!(v1, v0 + 1);

        // Decision-only batches (one INSERT) and batches with nonce claims alike.
        let nonce = |n: &str| NonceClaim { scope: "test".into(), nonce: n.into(), expires_at: now_ms() + 60_000, agent_id: None };
        let batch = vec![
            record(1, "stale").on(at(v0)),
            record(2, "stale").on(at(v1)),
            record(3, "stale"),
            record(4, "stale").on(at(v0)).with_nonce(nonce("n4")),
            record(5, "stale").on(at(v1)).with_nonce(nonce("n5")),
        ];
        let results = store.apply(&batch).await.expect("batch");
        let stale: Vec<bool> = results.iter().map(|r| matches!(r, Err(StoreError::Stale(v)) if *v == v1)).collect();
        assert_eq!(stale, [true, false, false, true, false], "{results:?}");
        let written: Vec<String> = stored_events(&store, &ws, "stale").await.into_iter().filter_map(|e| e.action).collect();
        assert_eq!(written, ["act_2", "act_3", "act_5"]);
        // The stale change's nonce was not spent: the same claim succeeds on the current state.
        let retry = record(4, "stale").on(at(v1)).with_nonce(nonce("n4"));
        store.apply(&[retry]).await.expect("batch").pop().expect("one").expect("committed");
        let only_stale = store.apply(&[record(6, "stale").on(at(v0))]).await.expect("batch");
        assert!(matches!(only_stale[..], [Err(StoreError::Stale(_))]), "{only_stale:?}");

        // Decisions alone (on Postgres the version check and the INSERT are one statement),
        // one of them with its details written as text, as a check writes them.
        let mut as_text = test_event(&ws, "act_9", 9, "records");
        as_text.details = acp::store::Details::Text(
            serde_json::value::RawValue::from_string(r#"{"input":{"context":{"amount":9}}}"#.into()).expect("json"),
        );
        let records = vec![
            Change::new(Op::Nothing).audited(test_event(&ws, "act_7", 7, "records")).on(at(v0)),
            Change::new(Op::Nothing).audited(test_event(&ws, "act_8", 8, "records")).on(at(v1)),
            Change::new(Op::Nothing).audited(as_text),
            Change::new(Op::Nothing).audited(test_event(&ws, "act_10", 10, "records")).on(at(v0)),
        ];
        let results = store.apply(&records).await.expect("batch");
        let stale: Vec<bool> = results.iter().map(|r| matches!(r, Err(StoreError::Stale(v)) if *v == v1)).collect();
        assert_eq!(stale, [true, false, false, true], "{results:?}");
        let mut written = stored_events(&store, &ws, "records").await;
        written.sort_by(|a, b| a.action.cmp(&b.action));
        let actions: Vec<&str> = written.iter().filter_map(|e| e.action.as_deref()).collect();
        assert_eq!(actions, ["act_8", "act_9"]);
        assert_eq!(written[1].details.value()["input"]["context"]["amount"], 9);
        assert_eq!(written[0].details.value()["nested"]["list"][2], 3);
        store.close().await;
    }
}
