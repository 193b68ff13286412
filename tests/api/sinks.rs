//! Audit sinks: a real HTTPS receiver on loopback that fails, stalls and goes down at times,
//! and a real `acp serve` process killed (-9) and stopped (SIGTERM) mid-stream, then two
//! replicas delivering together: every event
//! of the workspace arrives, signed, in commit order (repeats allowed, dropped by `event_id`),
//! on both engines. Then the sinks' API and retention, in-process.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::process::Child;
use tower::ServiceExt as _;

use crate::both_engines;
use crate::helpers::*;
use crate::replicas::start_replica_with;

/// How the receiver answers.
const FLAKY: u8 = 0;
const DOWN: u8 = 1;
const HEALTHY: u8 = 2;

/// One request the receiver got.
#[derive(Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A real HTTPS server on loopback that records every batch. Flaky: besides every fourth
/// request answered 500, the first batch that holds the registration of `agent-0-10` is
/// answered 500, and the first that holds `agent-1-05` is taken (recorded) but answered after
/// the sender's timeout, so that batch comes again.
struct Receiver {
    port: u16,
    ca_pem: String,
    mode: Arc<AtomicU8>,
    got: Arc<Mutex<Vec<Received>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Receiver {
    async fn start() -> Receiver {
        use axum::body::Bytes;
        use axum::http::{HeaderMap, StatusCode};
        let (ca_pem, tls) = crate::upstream::tls_config();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(FLAKY));
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let (refused, stalled) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (m, g) = (mode.clone(), got.clone());
        let router = axum::Router::new().route(
            "/ingest",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (mode, got, count) = (m.clone(), g.clone(), count.clone());
                let (refused, stalled) = (refused.clone(), stalled.clone());
                async move {
                    let mode = mode.load(Ordering::SeqCst);
                    // The schedule counts the flaky phase's requests only.
                    let n = if mode == FLAKY {
                        count.fetch_add(1, Ordering::SeqCst)
                    } else {
                        0
                    };
                    let holds = |name: &str| {
                        let needle = format!("\"name\":\"{name}\"");
                        body.windows(needle.len()).any(|w| w == needle.as_bytes())
                    };
                    let refuse = mode == FLAKY
                        && (n % 4 == 1
                            || (holds("agent-0-10") && !refused.swap(true, Ordering::SeqCst)));
                    if mode == DOWN || refuse {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    got.lock().unwrap().push(Received {
                        headers: headers
                            .iter()
                            .map(|(k, v)| {
                                (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect(),
                        body: body.to_vec(),
                    });
                    // Whenever it comes: a replica may resume delivery only once the
                    // receiver is healthy again.
                    if holds("agent-1-05") && !stalled.swap(true, Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(2_500)).await;
                    }
                    StatusCode::NO_CONTENT
                }
            }),
        );
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service =
                        hyper::service::service_fn(move |request| router.clone().oneshot(request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Receiver {
            port,
            ca_pem,
            mode,
            got,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("https://localhost:{}/ingest", self.port)
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Every event line received, in the order received, after checking each batch's
    /// signature with `secret`.
    fn events(&self, secret: &str) -> Vec<Value> {
        let got = self.got.lock().unwrap().clone();
        let mut lines = Vec::new();
        for batch in got {
            let header = |name: &str| {
                batch
                    .headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("batch without {name}"))
            };
            assert_eq!(header("content-type"), "application/x-ndjson");
            let (ts, nonce) = (header("x-service-timestamp"), header("x-service-nonce"));
            let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(format!("{ts}\n{nonce}\n{}", sha256_hex(&batch.body)).as_bytes());
            let expected =
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            assert_eq!(
                header("x-service-signature"),
                expected,
                "the batch's signature verifies"
            );
            assert!(header("x-service-sink-id").starts_with("snk_"));
            let text = String::from_utf8(batch.body).unwrap();
            assert!(text.ends_with('\n'), "NDJSON ends with a newline");
            for line in text.lines() {
                lines.push(serde_json::from_str(line).expect("each line is JSON"));
            }
        }
        lines
    }
}

/// First occurrences by `event_id`, in the order received.
fn distinct(events: &[Value]) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    events
        .iter()
        .filter(|e| seen.insert(e["event_id"].as_str().unwrap().to_owned()))
        .cloned()
        .collect()
}

/// A person's session on a server whose mail goes to the outbox: `(cookie, csrf)`.
async fn login_from_outbox(
    client: &reqwest::Client,
    base: &str,
    db_url: &str,
    email: &str,
) -> (String, String) {
    let res = client
        .post(format!("{base}/auth/start-login"))
        .json(&json!({"email": email}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let outbox = run_cli(db_url, &["admin", "outbox", "list", "--output", "json"]).await;
    let text = outbox["items"][0]["text"].as_str().unwrap().to_owned();
    let link = text
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    let res = client.get(link).send().await.unwrap();
    assert_eq!(res.status(), 303);
    let cookie = session_cookie_of(&res);
    let (_, me) = status_json(
        client
            .get(format!("{base}/auth/me"))
            .header("Cookie", &cookie)
            .send()
            .await
            .unwrap(),
    )
    .await;
    (cookie, me["csrf_token"].as_str().unwrap().to_owned())
}

struct Server {
    child: Child,
    base: String,
}

async fn serve(db_url: &str, key: &str, env: &[(&str, &str)]) -> Server {
    let (child, base) = start_replica_with(db_url, key, env).await;
    Server { child, base }
}

async fn sigterm(server: &mut Server) {
    crate::replicas::sigterm(&mut server.child).await;
}

/// Registers agent `name` with the workspace's key; answers its id.
async fn register(client: &reqwest::Client, base: &str, key: &str, name: &str) -> String {
    let agent = TestAgent::new();
    let res = client
        .post(format!("{base}/v1/agents/register"))
        .header("X-Service-Api-Key", key)
        .json(&json!({"name": name, "public_key": agent.public_key_b64()}))
        .send()
        .await
        .unwrap();
    let (s, body) = status_json(res).await;
    assert_eq!(s, 200, "{body}");
    body["agent_id"].as_str().unwrap().to_owned()
}

async fn every_event_arrives_in_order(engine: Engine) {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("receiver-ca.pem");
    std::fs::write(&ca_file, &receiver.ca_pem).unwrap();
    let ca_path = ca_file.display().to_string();
    let env = [
        ("ACP_VAULT_PROXY_ALLOW", "127.0.0.1/32"),
        ("ACP_VAULT_PROXY_CA_FILE", ca_path.as_str()),
        ("ACP_AUDIT_SINK_TIMEOUT_SECS", "1"),
        ("ACP_AUDIT_SINK_BACKOFF_MAX_SECS", "2"),
        ("ACP_EMAIL_URL", "outbox"),
        ("ACP_REGISTER_LIMIT_PER_IP", "100000"),
    ];
    let db = TestDb::new(engine).await;
    let bootstrap_key = random_api_key();
    let mut server = serve(&db.url, &bootstrap_key, &env).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // A workspace with an owner, an API key and a sink made by the owner's token.
    let made = run_cli(
        &db.url,
        &[
            "admin",
            "workspace",
            "create",
            "streamed",
            "--owner",
            "owner@example.com",
            "--output",
            "json",
        ],
    )
    .await;
    let ws = made["workspace"]["workspace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = run_cli(
        &db.url,
        &[
            "admin",
            "api-key",
            "create",
            "--workspace",
            &ws,
            "--output",
            "json",
        ],
    )
    .await;
    let key = key["api_key"]["key"].as_str().unwrap().to_owned();
    let (cookie, csrf) =
        login_from_outbox(&client, &server.base, &db.url, "owner@example.com").await;
    let (s, made) = status_json(
        client
            .post(format!("{}/v1/auth/tokens", server.base))
            .header("Cookie", &cookie)
            .header("X-CSRF-Token", &csrf)
            .json(&json!({"name": "siem"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let token = made["token"].as_str().unwrap().to_owned();
    let as_owner =
        |req: reqwest::RequestBuilder| req.bearer_auth(&token).header("X-Service-Workspace", &ws);
    let (s, sink) = status_json(
        as_owner(client.post(format!("{}/v1/workspace/audit/sinks", server.base)))
            .json(&json!({"name": "siem", "url": receiver.url()}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{sink}");
    let secret = sink["secret"].as_str().unwrap().to_owned();
    let sink_id = sink["sink"]["sink_id"].as_str().unwrap().to_owned();

    // Events one after another, while the receiver fails and stalls at times; the server is
    // killed, then stopped, mid-stream; in the last round a second replica delivers too, and
    // the events are made on both in turn.
    let mut names = Vec::new();
    let mut second: Option<Server> = None;
    for round in 0..3 {
        for i in 0..40 {
            let name = format!("agent-{round}-{i:02}");
            let base = match &second {
                Some(other) if i % 2 == 1 => other.base.clone(),
                _ => server.base.clone(),
            };
            register(&client, &base, &key, &name).await;
            names.push(name);
            // Spread over several of the sink's polls (one a second).
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        match round {
            0 => {
                server.child.start_kill().unwrap();
                server.child.wait().await.unwrap();
                server = serve(&db.url, &bootstrap_key, &env).await;
            }
            1 => {
                sigterm(&mut server).await;
                server = serve(&db.url, &bootstrap_key, &env).await;
                second = Some(serve(&db.url, &bootstrap_key, &env).await);
            }
            _ => {}
        }
    }

    // The receiver goes down: the sink says so, and how far behind it is.
    receiver.set(DOWN);
    register(&client, &server.base, &key, "while-down").await;
    names.push("while-down".into());
    let sink_url = format!("{}/v1/workspace/audit/sinks/{sink_id}", server.base);
    let mut seen_down = Value::Null;
    for _ in 0..150 {
        let (_, body) = status_json(as_owner(client.get(&sink_url)).send().await.unwrap()).await;
        let refused = body["sink"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("500"));
        if body["sink"]["state"] == "retrying"
            && refused
            && body["sink"]["lag_events"].as_i64() > Some(0)
        {
            seen_down = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen_down["sink"]["state"], "retrying", "{seen_down}");
    assert!(
        seen_down["sink"]["last_error"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{seen_down}"
    );
    assert!(seen_down["sink"]["lag_seconds"].as_f64().unwrap() >= 0.0);
    receiver.set(HEALTHY);

    // Everything the audit trail holds since the sink was made arrives.
    let mut trail = Vec::new();
    let mut cursor = None::<String>;
    loop {
        let mut url = format!("{}/v1/workspace/audit/events?limit=200", server.base);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let (_, page) = status_json(
            client
                .get(url)
                .header("X-Service-Api-Key", &key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        trail.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let created = trail
        .iter()
        .position(|e| e["event_type"] == "audit.sink_created")
        .expect("the sink's creation is audited");
    let expected: std::collections::HashSet<String> = trail[..=created]
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect();
    let mut delivered = Vec::new();
    for _ in 0..300 {
        delivered = distinct(&receiver.events(&secret));
        let ids: std::collections::HashSet<String> = delivered
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_owned())
            .collect();
        if expected.is_subset(&ids) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids: std::collections::HashSet<String> = delivered
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect();
    let missing: Vec<_> = expected.difference(&ids).collect();
    assert!(missing.is_empty(), "events never delivered: {missing:?}");
    assert!(
        delivered.iter().all(|e| e["workspace_id"] == ws.as_str()),
        "only the workspace's events"
    );
    // The sink starts at its creation (on Postgres, events committed just before may come
    // too: it starts below the oldest transaction still running).
    assert!(delivered
        .iter()
        .any(|e| e["event_type"] == "audit.sink_created"));
    // In commit order: the registrations, made one after another, arrive in that order.
    let registered: Vec<&str> = delivered
        .iter()
        .filter(|e| e["event_type"] == "agent.registered")
        .map(|e| e["details"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(registered, names, "every registration, once each, in order");
    // Caught up: nothing pending, everything counted.
    let mut state = Value::Null;
    for _ in 0..200 {
        let (_, body) = status_json(as_owner(client.get(&sink_url)).send().await.unwrap()).await;
        state = body;
        if state["sink"]["lag_events"] == 0 && state["sink"]["state"] == "delivering" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state["sink"]["lag_events"], 0, "{state}");
    // Caught up means the cursor moved past the stalled batch: it was answered 2xx when sent
    // again.
    let repeats = receiver.events(&secret).len() - delivered.len();
    assert!(
        repeats > 0,
        "the stalled batch was sent again (at least once)"
    );

    assert_eq!(state["sink"]["lag_seconds"], 0.0, "{state}");
    assert!(
        state["sink"]["delivered_events"].as_i64().unwrap() >= delivered.len() as i64,
        "{state}"
    );
    assert!(state["sink"]["last_delivered_at"].is_string(), "{state}");
    eprintln!(
        "{engine:?}: {} events delivered, {repeats} repeats",
        delivered.len()
    );
    // The sink's state in the metrics of this round's replicas (either may have delivered).
    let mut metrics = String::new();
    for base in [Some(&server.base), second.as_ref().map(|s| &s.base)]
        .into_iter()
        .flatten()
    {
        let res = client.get(format!("{base}/metrics")).send().await.unwrap();
        metrics.push_str(&res.text().await.unwrap());
    }
    assert!(
        metrics.contains(&format!(
            "acp_audit_sink_lag_events{{sink_id=\"{sink_id}\"}}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "acp_audit_sink_consecutive_failures{{sink_id=\"{sink_id}\"}}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("acp_audit_sink_deliveries_total{outcome=\"delivered\"}"),
        "{metrics}"
    );
    // The secret is never shown again, nor in the trail.
    assert!(state["sink"].get("secret").is_none());
    assert!(!serde_json::to_string(&trail).unwrap().contains(&secret));
    for mut s in [Some(server), second].into_iter().flatten() {
        s.child.start_kill().ok();
        s.child.wait().await.ok();
    }
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_in_order_through_failures_and_restarts_sqlite() {
    every_event_arrives_in_order(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_in_order_through_failures_and_restarts_postgres() {
    every_event_arrives_in_order(Engine::Postgres).await;
}

// ---- the sinks' API and retention, in-process ----------------------------------------------

both_engines! {
    async fn owners_and_admins_configure_sinks_members_only_read_them(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let owner = app.login("owner@example.com").await;
        let member = app.login("member@example.com").await;

        for (body, code) in [
            (json!({"name": "x", "url": "http://siem.example.com/"}), "invalid_sink_url"),
            (json!({"name": "x", "url": "https://u:p@siem.example.com/"}), "invalid_sink_url"),
            (json!({"name": "x", "url": "not a url"}), "invalid_sink_url"),
            (json!({"name": "  ", "url": "https://siem.example.com/"}), "missing_name"),
        ] {
            assert_error(owner.post("/v1/workspace/audit/sinks", &body).await, 400, code).await;
        }
        assert_error(
            member.post("/v1/workspace/audit/sinks", &json!({"name": "x", "url": "https://siem.example.com/"})).await,
            403,
            "insufficient_role",
        )
        .await;
        // API keys manage no sinks.
        let res = app.post("/v1/workspace/audit/sinks", &json!({"name": "x", "url": "https://siem.example.com/"})).await;
        assert!(matches!(res.status().as_u16(), 401 | 403), "{}", res.status());

        let (s, made) = status_json(
            owner
                .post("/v1/workspace/audit/sinks", &json!({"name": "SIEM", "url": "https://siem.example.com/acp", "enabled": false}))
                .await,
        )
        .await;
        assert_eq!(s, 200, "{made}");
        let secret = made["secret"].as_str().unwrap().to_owned();
        assert!(secret.starts_with("whsec_"));
        let id = made["sink"]["sink_id"].as_str().unwrap().to_owned();
        assert_eq!(made["sink"]["state"], "paused");
        assert_eq!(made["sink"]["kind"], "https_ndjson");

        // Members see the sink and its state, never its secret.
        let (s, list) = status_json(member.get("/v1/workspace/audit/sinks").await).await;
        assert_eq!(s, 200, "{list}");
        assert_eq!(list["items"][0]["sink_id"], id.as_str());
        assert_eq!(list["items"][0]["enabled"], false);
        assert!(!list.to_string().contains(&secret));
        assert_error(
            member.post(&format!("/v1/workspace/audit/sinks/{id}"), &json!({"enabled": true})).await,
            403,
            "insufficient_role",
        )
        .await;

        // Resume, rename, rotate, delete: each audited with the person.
        let (s, resumed) = status_json(
            owner.post(&format!("/v1/workspace/audit/sinks/{id}"), &json!({"enabled": true, "name": "SIEM 2"})).await,
        )
        .await;
        assert_eq!(s, 200, "{resumed}");
        assert_eq!(resumed["sink"]["name"], "SIEM 2");
        assert_eq!(resumed["sink"]["enabled"], true);
        let (s, rotated) = status_json(owner.post(&format!("/v1/workspace/audit/sinks/{id}/rotate-secret"), &json!({})).await).await;
        assert_eq!(s, 200, "{rotated}");
        let new_secret = rotated["secret"].as_str().unwrap();
        assert_ne!(new_secret, secret);
        assert_error(owner.get("/v1/workspace/audit/sinks/snk_nope").await, 404, "unknown_sink").await;
        let events: Vec<Value> = audit_events(&app, "limit=200")
            .await
            .into_iter()
            .filter(|e| e["event_type"].as_str().unwrap().starts_with("audit.sink_"))
            .collect();
        let types: Vec<&str> = events.iter().map(|e| e["event_type"].as_str().unwrap()).collect();
        assert!(types.contains(&"audit.sink_created") && types.contains(&"audit.sink_resumed") && types.contains(&"audit.sink_secret_rotated"), "{types:?}");
        assert!(events.iter().all(|e| e["actor"].as_str().unwrap().starts_with("user:")));
        let trail = serde_json::to_string(&events).unwrap();
        assert!(!trail.contains(&secret) && !trail.contains(new_secret), "no secret in the trail");

        // At most ten sinks.
        for i in 1..10 {
            let (s, body) = status_json(owner.post("/v1/workspace/audit/sinks", &json!({"name": format!("s{i}"), "url": "https://siem.example.com/", "enabled": false})).await).await;
            assert_eq!(s, 200, "{body}");
        }
        assert_error(
            owner.post("/v1/workspace/audit/sinks", &json!({"name": "eleventh", "url": "https://siem.example.com/"})).await,
            409,
            "too_many_sinks",
        )
        .await;
        let (s, _) = status_json(owner.post(&format!("/v1/workspace/audit/sinks/{id}/delete"), &json!({})).await).await;
        assert_eq!(s, 200);
        assert_error(owner.get(&format!("/v1/workspace/audit/sinks/{id}")).await, 404, "unknown_sink").await;
        assert_eq!(audit_events(&app, "event_type=audit.sink_deleted").await.len(), 1);
    }
}

/// Old rows, written straight into the database (the server stamps new ones with now).
async fn insert_old_rows(db_url: &str, workspace_id: &str, agent_id: &str, n: i64, days_ago: i64) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(db_url).await.unwrap();
    let at = now_ms() - days_ago * 86_400_000;
    for i in 0..n {
        sqlx::query(
            "INSERT INTO audit_events (id, workspace_id, created_at, event_type, agent_id, action, decision, \
             policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details) \
             VALUES ($1, $2, $3, 'old.event', NULL, 'old', NULL, NULL, NULL, NULL, '[]', '[]', 'system', '{}')",
        )
        .bind(format!("evt_old{days_ago}_{i:05}"))
        .bind(workspace_id)
        .bind(at + i)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO heartbeats (id, workspace_id, agent_id, status, latency_ms, observed_at, created_at, source) \
             VALUES ($1, $2, $3, 'ok', 1.0, $4, $4, 'agent')",
        )
        .bind(format!("hb_old{days_ago}_{i:05}"))
        .bind(workspace_id)
        .bind(agent_id)
        .bind(at + i)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
}

async fn count(db_url: &str, sql: &str, workspace_id: &str) -> i64 {
    let pool = sqlx::AnyPool::connect(db_url).await.unwrap();
    let n: i64 = sqlx::query_scalar(sql)
        .bind(workspace_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

async fn retention_prunes_old_rows_but_never_what_a_sink_has_not_delivered(engine: Engine) {
    let app = TestApp::spawn_with(engine, |c| c.retention_interval_secs = 1).await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let agent = app.active_agent("beating").await;

    // Settings: checked, and `null` keeps everything.
    assert_error(
        owner
            .post(
                "/v1/workspace/settings",
                &json!({"audit_retention_days": 0}),
            )
            .await,
        400,
        "invalid_retention",
    )
    .await;
    assert_error(
        owner
            .post(
                "/v1/workspace/settings",
                &json!({"heartbeat_retention_days": 40000}),
            )
            .await,
        400,
        "invalid_retention",
    )
    .await;
    let (s, settings) = status_json(owner.get("/v1/workspace/settings").await).await;
    assert_eq!(s, 200);
    assert_eq!(
        settings["audit_retention_days"],
        Value::Null,
        "the default keeps everything"
    );

    // A paused sink made before the old rows appear: they are after its cursor, undelivered.
    let (s, made) = status_json(
        owner
            .post(
                "/v1/workspace/audit/sinks",
                &json!({"name": "later", "url": "https://siem.example.com/", "enabled": false}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let sink = made["sink"]["sink_id"].as_str().unwrap().to_owned();
    insert_old_rows(&app.db_url, &app.workspace_id, &agent.id, 1_500, 10).await;
    let old_events =
        "SELECT COUNT(*) FROM audit_events WHERE workspace_id = $1 AND event_type = 'old.event'";
    let old_beats = "SELECT COUNT(*) FROM heartbeats WHERE workspace_id = $1 AND id LIKE 'hb_old%'";

    let (s, settings) = status_json(
        owner
            .post(
                "/v1/workspace/settings",
                &json!({"audit_retention_days": 7, "heartbeat_retention_days": 7.0}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{settings}");
    assert_eq!(settings["audit_retention_days"], 7);
    // Heartbeats go (in more than one batch); the undelivered events stay.
    for _ in 0..100 {
        if count(&app.db_url, old_beats, &app.workspace_id).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count(&app.db_url, old_beats, &app.workspace_id).await, 0);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        count(&app.db_url, old_events, &app.workspace_id).await,
        1_500,
        "a sink's undelivered events are kept"
    );
    let pruned = audit_events(&app, "event_type=retention.pruned").await;
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    assert_eq!(pruned[0]["details"]["table"], "heartbeats");
    assert_eq!(pruned[0]["details"]["deleted"], 1_500);
    assert_eq!(pruned[0]["actor"], "system");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("acp_retention_pruned_rows_total{table=\"heartbeats\"}"),
        "{metrics}"
    );

    // Without the sink they go too; recent events stay.
    let (s, _) = status_json(
        owner
            .post(
                &format!("/v1/workspace/audit/sinks/{sink}/delete"),
                &json!({}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200);
    for _ in 0..100 {
        if count(&app.db_url, old_events, &app.workspace_id).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count(&app.db_url, old_events, &app.workspace_id).await, 0);
    let pruned = audit_events(&app, "event_type=retention.pruned").await;
    let events_pruned: i64 = pruned
        .iter()
        .filter(|e| e["details"]["table"] == "audit_events")
        .map(|e| e["details"]["deleted"].as_i64().unwrap())
        .sum();
    assert_eq!(events_pruned, 1_500, "{pruned:?}");
    assert!(
        !audit_events(&app, "event_type=audit.sink_created")
            .await
            .is_empty(),
        "recent events stay"
    );

    // `null` keeps everything again.
    let (s, settings) = status_json(
        owner
            .post(
                "/v1/workspace/settings",
                &json!({"audit_retention_days": null}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(settings["audit_retention_days"], Value::Null);
    assert_eq!(
        settings["heartbeat_retention_days"], 7,
        "an absent field is unchanged"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_old_rows_but_never_undelivered_events_sqlite() {
    retention_prunes_old_rows_but_never_what_a_sink_has_not_delivered(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_old_rows_but_never_undelivered_events_postgres() {
    retention_prunes_old_rows_but_never_what_a_sink_has_not_delivered(Engine::Postgres).await;
}

// ---- destinations the sinks may not reach ----------------------------------------------------

/// A URL whose host is, or resolves to, a loopback, private, link-local or metadata address is
/// refused when a sink is made or moved (400 `destination_not_allowed`, naming no address). A
/// name that resolves to such an address only later (here: the sink was made on a replica whose
/// allow-list opened loopback, and a server without it delivers) fails its deliveries with
/// `last_error` "destination not allowed", which every member reads, and never the address.
/// Errors recorded with an address before are rewritten by migration 0024.
async fn sinks_never_reach_or_reveal_private_destinations(app: TestApp) {
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    app.grant(&app.workspace_id, "member@example.com", "member")
        .await;
    let owner = app.login("owner@example.com").await;
    let member = app.login("member@example.com").await;
    let sinks = "/v1/workspace/audit/sinks";

    for url in [
        "https://localhost:9/ingest",
        "https://127.0.0.1/ingest",
        "https://10.0.0.1/",
        "https://192.168.1.20:8443/x",
        "https://169.254.169.254/latest/meta-data/",
        "https://metadata.google.internal/",
        "https://[::1]/",
        "https://[::ffff:10.0.0.1]/",
    ] {
        let body = assert_error(
            owner
                .post(sinks, &json!({"name": "inside", "url": url}))
                .await,
            400,
            "destination_not_allowed",
        )
        .await;
        let text = body.to_string();
        for address in ["127.0.0.1", "::1", "10.0.0.1", "192.168", "169.254"] {
            assert!(
                url.contains(address) || !text.contains(address),
                "{url}: {text}"
            );
        }
    }
    let (_, list) = status_json(member.get(sinks).await).await;
    assert_eq!(list["items"], json!([]), "no sink was made");

    // A sink to a public name is made; moving it inside is refused and leaves it where it was.
    let (s, made) = status_json(
        owner
            .post(
                sinks,
                &json!({"name": "siem", "url": "https://siem.example.com/acp", "enabled": false}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let public_id = made["sink"]["sink_id"].as_str().unwrap().to_owned();
    assert_error(
        owner
            .post(
                &format!("{sinks}/{public_id}"),
                &json!({"url": "https://localhost:9/ingest"}),
            )
            .await,
        400,
        "destination_not_allowed",
    )
    .await;
    let (_, kept) = status_json(owner.get(&format!("{sinks}/{public_id}")).await).await;
    assert_eq!(kept["sink"]["url"], "https://siem.example.com/acp");

    // Made where loopback was allowed, delivered where it is not.
    let (s, pat) = status_json(owner.post("/v1/auth/tokens", &json!({"name": "ops"})).await).await;
    assert_eq!(s, 200, "{pat}");
    let pat = pat["token"].as_str().unwrap().to_owned();
    let (mut opened, opened_base) = crate::replicas::start_replica_with(
        &app.db_url,
        &app.key,
        &[("ACP_VAULT_PROXY_ALLOW", "127.0.0.1/32")],
    )
    .await;
    let (s, made) = status_json(
        app.client
            .post(format!("{opened_base}{sinks}"))
            .bearer_auth(&pat)
            .header("X-Service-Workspace", &app.workspace_id)
            .json(&json!({"name": "moved", "url": "https://localhost:9/ingest", "enabled": false}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{made}");
    let id = made["sink"]["sink_id"].as_str().unwrap().to_owned();
    crate::replicas::sigterm(&mut opened).await;
    let (s, resumed) = status_json(
        owner
            .post(&format!("{sinks}/{id}"), &json!({"enabled": true}))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{resumed}");
    let mut seen = Value::Null;
    for _ in 0..300 {
        let (_, body) = status_json(member.get(&format!("{sinks}/{id}")).await).await;
        if !body["sink"]["last_error"].is_null() {
            seen = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen["sink"]["last_error"], "destination not allowed",
        "{seen}"
    );
    assert_eq!(seen["sink"]["state"], "retrying", "{seen}");
    let (_, list) = status_json(member.get(sinks).await).await;
    assert!(!list.to_string().contains("127.0.0.1"), "{list}");

    // An error recorded with its address before the upgrade loses it.
    let (s, _) = status_json(
        owner
            .post(&format!("{sinks}/{id}"), &json!({"enabled": false}))
            .await,
    )
    .await;
    assert_eq!(s, 200);
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&app.db_url).await.unwrap();
    sqlx::query("UPDATE audit_sinks SET last_error = $1 WHERE id = $2")
        .bind("destination `127.0.0.1` is not a public address the proxy may reach")
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 24")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let (mut upgraded, _) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    crate::replicas::sigterm(&mut upgraded).await;
    let (_, after) = status_json(member.get(&format!("{sinks}/{id}")).await).await;
    assert_eq!(
        after["sink"]["last_error"], "destination not allowed",
        "{after}"
    );
}

both_engines! {
    async fn sinks_to_private_destinations_are_refused_and_their_errors_name_no_address(app) {
        sinks_never_reach_or_reveal_private_destinations(app).await;
    }
}
