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

both_engines! {
    async fn a_batch_writes_exactly_the_events_of_the_changes_that_took_effect(app) {
        use acp::store::{AuditEvent, AuditQuery, Change, NonceClaim, Op, SqlStore, Store, StoreError, Workspace};
        let store = SqlStore::open(&app.db_url, &Default::default()).await.expect("open");
        let event = |n: usize, tag: &str| AuditEvent {
            id: acp::ids::new_id(acp::ids::EVENT),
            workspace_id: Some(app.workspace_id.clone()),
            created_at: now_ms(),
            event_type: format!("test.{tag}"),
            agent_id: None,
            action: Some(format!("act_{n}")),
            decision: Some("allow".into()),
            policy_id: Some("pol_default".into()),
            policy_hash: Some("sha256:00".into()),
            trace_id: Some(format!("trc_{tag}_{n}")),
            reasons: vec![format!("reason {n}"), "it's \"quoted\"".into()],
            reason_codes: vec![format!("code_{n}")],
            actor: "test".into(),
            details: json!({"n": n, "nested": {"list": [1, 2, 3]}}),
        };
        let record = |n: usize, tag: &str| Change::new(Op::Nothing).audited(event(n, tag));
        let stored = |tag: &'static str| {
            let store = &store;
            let workspace_id = app.workspace_id.clone();
            async move {
                let mut events = store
                    .audit_events(&AuditQuery {
                        workspace_id,
                        event_type: Some(format!("test.{tag}")),
                        limit: 1000,
                        ..Default::default()
                    })
                    .await
                    .expect("events");
                events.sort_by(|a, b| a.id.cmp(&b.id));
                events
            }
        };

        // Decisions only: one statement up to 64 events, several in one transaction beyond.
        for (tag, n) in [("one", 1), ("forty", 40), ("sixty_four", 64), ("many", 150)] {
            let changes: Vec<Change> = (0..n).map(|i| record(i, tag)).collect();
            let written: Vec<AuditEvent> = changes.iter().flat_map(|c| c.audit.clone()).collect();
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
            Change::new(Op::CreateWorkspace(duplicate)).audited(event(4, "mixed")),
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
