//! Live audit streams are bounded: per principal (an API key, a personal access token, a
//! person's sessions) and per server, the server's cap derived from the process's descriptor
//! limit so that streams never take the descriptors the API needs. Past a cap, 429
//! `too_many_streams` with `Retry-After`; every other request is still answered.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::Value;

use crate::both_engines;
use crate::helpers::*;

const STREAM: &str = "/v1/workspace/audit/stream";

/// Opens a stream with `key` at `base`. A server that stopped accepting connections (out of
/// descriptors) fails the test here rather than hanging it.
async fn open(client: &reqwest::Client, base: &str, key: &str) -> Response {
    tokio::time::timeout(
        Duration::from_secs(30),
        client
            .get(format!("{base}{STREAM}"))
            .header("X-Service-Api-Key", key)
            .send(),
    )
    .await
    .expect("the server answers (it has descriptors left)")
    .expect("request")
}

/// Asserts the refusal: 429 `too_many_streams`, its cap, and `Retry-After`.
async fn assert_refused(res: Response, limit: usize) {
    // Checked before the body is read: an accepted stream's body never ends.
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the stream is refused"
    );
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = assert_error(res, 429, "too_many_streams").await;
    assert_eq!(body["limit"], limit, "{body}");
    assert_eq!(retry_after.as_deref(), Some("10"), "{body}");
    assert_eq!(body["retry_after"], 10, "{body}");
}

both_engines! {
    async fn each_principal_holds_at_most_eight_audit_streams(app) {
        let client = reqwest::Client::new();
        let mut held = Vec::new();
        for _ in 0..8 {
            let res = open(&client, &app.base, &app.key).await;
            assert_eq!(res.status(), StatusCode::OK);
            held.push(res);
        }
        assert_refused(open(&client, &app.base, &app.key).await, 8).await;

        // Other principals have their own eight: another key, a person, the person's token.
        let (_, other_key) = app.other_workspace().await;
        let other = open(&client, &app.base, &other_key).await;
        assert_eq!(other.status(), StatusCode::OK);
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let person = owner.get(STREAM).await;
        assert_eq!(person.status(), StatusCode::OK);
        let (s, pat) = status_json(owner.post("/v1/auth/tokens", &serde_json::json!({"name": "ci"})).await).await;
        assert_eq!(s, 200, "{pat}");
        let by_token = client
            .get(app.url(STREAM))
            .bearer_auth(pat["token"].as_str().unwrap())
            .header("X-Service-Workspace", &app.workspace_id)
            .send()
            .await
            .unwrap();
        assert_eq!(by_token.status(), StatusCode::OK);
        // The key's other requests are answered.
        let (s, events) = status_json(app.get("/v1/workspace/audit/events").await).await;
        assert_eq!(s, 200, "{events}");

        // A stream whose client leaves gives its place back.
        drop(held.pop());
        let mut reopened = None;
        for _ in 0..300 {
            let res = open(&client, &app.base, &app.key).await;
            if res.status() == StatusCode::OK {
                reopened = Some(res);
                break;
            }
            let (_, body): (_, Value) = status_json(res).await;
            assert_eq!(body["error"], "too_many_streams", "{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(reopened.is_some(), "the place of the stream given up is free again");
        assert_refused(open(&client, &app.base, &app.key).await, 8).await;
    }
}

/// The real server started with 256 descriptors (soft and hard limit). One key opens streams
/// (its own cap lifted) until the server refuses one: it refuses at its cap, half the
/// descriptors, well before they run out, and meanwhile every other request is answered,
/// including many at once on new connections. Without the cap the server stops accepting
/// connections at about 230 streams and the next request is never answered.
async fn streams_never_take_the_descriptors_the_api_needs(engine: Engine) {
    let db = TestDb::new(engine).await;
    let key = random_api_key();
    let (mut server, base) = crate::replicas::start_replica_limited(
        Some(256),
        &db.url,
        &key,
        &[("ACP_AUDIT_STREAMS_PER_PRINCIPAL", "100000")],
    )
    .await;
    let client = reqwest::Client::new();
    let mut held = Vec::new();
    let refused = loop {
        assert!(
            held.len() < 400,
            "no stream was refused before 400 were open"
        );
        let res = open(&client, &base, &key).await;
        if res.status() != StatusCode::OK {
            break res;
        }
        held.push(res);
    };
    assert_eq!(held.len(), 128, "half of 256 descriptors are the streams'");
    assert_refused(refused, 128).await;

    // The API is answered: reads, a write, and many requests at once on fresh connections.
    let (s, ready) = status_json(client.get(format!("{base}/readyz")).send().await.unwrap()).await;
    assert_eq!(s, 200, "{ready}");
    let agent = TestAgent::new();
    let res = client
        .post(format!("{base}/v1/agents/register"))
        .header("X-Service-Api-Key", &key)
        .json(&serde_json::json!({"name": "while-streaming", "public_key": agent.public_key_b64()}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let many = (0..32).map(|_| {
        let (base, key) = (base.clone(), key.clone());
        async move {
            let fresh = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let res = tokio::time::timeout(
                Duration::from_secs(30),
                fresh
                    .get(format!("{base}/v1/workspace/audit/events?limit=5"))
                    .header("X-Service-Api-Key", &key)
                    .send(),
            )
            .await
            .expect("answered")
            .unwrap();
            res.status()
        }
    });
    for status in futures::future::join_all(many).await {
        assert_eq!(status, StatusCode::OK);
    }
    // Still refused while the streams are held; given back, the place is free again.
    assert_refused(open(&client, &base, &key).await, 128).await;
    drop(held.pop());
    let mut reopened = false;
    for _ in 0..300 {
        if open(&client, &base, &key).await.status() == StatusCode::OK {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened);
    drop(held);
    crate::replicas::sigterm(&mut server).await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_never_take_the_descriptors_the_api_needs_sqlite() {
    streams_never_take_the_descriptors_the_api_needs(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_never_take_the_descriptors_the_api_needs_postgres() {
    streams_never_take_the_descriptors_the_api_needs(Engine::Postgres).await;
}
