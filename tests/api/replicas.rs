//! Two server processes on one database: a nonce used on one is rejected on the other.

use crate::helpers::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts the real `acp` binary on `db_url` and answers it with its base URL.
pub async fn start_replica(db_url: &str, key: &str) -> (Child, String) {
    start_replica_with(db_url, key, &[]).await
}

/// [`start_replica`] with more environment variables.
pub async fn start_replica_with(db_url: &str, key: &str, env: &[(&str, &str)]) -> (Child, String) {
    start_replica_limited(None, db_url, key, env).await
}

/// [`start_replica_with`], the process allowed at most `descriptors` open files (soft and hard
/// limit, set by the shell before it becomes the server) when given.
pub async fn start_replica_limited(
    descriptors: Option<u32>,
    db_url: &str,
    key: &str,
    env: &[(&str, &str)],
) -> (Child, String) {
    let server = env!("CARGO_BIN_EXE_acp");
    let serve = ["serve", "--addr", "127.0.0.1:0", "--database-url", db_url];
    let mut command = match descriptors {
        None => Command::new(server),
        Some(n) => {
            let mut sh = Command::new("sh");
            sh.args([
                "-c",
                &format!("ulimit -n {n} && exec \"$0\" \"$@\""),
                server,
            ]);
            sh
        }
    };
    let mut child = command
        .args(serve)
        .env("ACP_BOOTSTRAP_API_KEY", key)
        .env("ACP_MASTER_KEY", TEST_MASTER_KEY)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn acp serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let base = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("server started in time")
            .expect("read stdout")
            .expect("server printed its address");
        if let Some(rest) = line.strip_prefix("acp listening on ") {
            break rest.split_whitespace().next().expect("url").to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base)
}

/// SIGTERM to a replica, then wait (at most 30 s) for its clean exit.
pub async fn sigterm(server: &mut Child) {
    let pid = server.id().expect("running").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("run kill");
    assert!(killed.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), server.wait())
        .await
        .expect("the server stops")
        .expect("wait for the server");
    assert!(status.success(), "clean exit: {status:?}");
}

async fn nonce_is_shared_between_replicas(engine: Engine) {
    let db = TestDb::new(engine).await;
    let key = random_api_key();
    let (mut one, base_one) = start_replica(&db.url, &key).await;
    let (mut two, base_two) = start_replica(&db.url, &key).await;
    let client = reqwest::Client::new();

    let agent = TestAgent::new();
    let res = client
        .post(format!("{base_one}/v1/agents/register"))
        .header("X-Service-Api-Key", &key)
        .json(&json!({"name": "r", "public_key": agent.public_key_b64()}))
        .send()
        .await
        .unwrap();
    let (_, reg) = status_json(res).await;
    let agent_id = reg["agent_id"].as_str().unwrap().to_owned();
    let challenge = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        reg["challenge"].as_str().unwrap(),
    )
    .unwrap();
    use ed25519_dalek::Signer;
    let res = client.post(format!("{base_two}/v1/agents/attest"))
        .json(&json!({"agent_id": agent_id, "challenge_id": reg["challenge_id"], "signature": b64(&agent.key.sign(&challenge).to_bytes())}))
        .send().await.unwrap();
    assert_eq!(res.status(), 200, "attest on the second replica");

    let (body, s) = agent.signed_heartbeat(&agent_id, &random_nonce());
    let send = |base: &str| {
        client
            .post(format!("{base}/v1/telemetry/heartbeat"))
            .header("Content-Type", "application/json")
            .header("X-Service-Agent-Id", &agent_id)
            .header("X-Service-Timestamp", &s.timestamp)
            .header("X-Service-Nonce", &s.nonce)
            .header("X-Service-Signature", &s.signature)
            .body(body.clone())
            .send()
    };
    assert_eq!(send(&base_one).await.unwrap().status(), 200);
    assert_error(send(&base_two).await.unwrap(), 401, "replay_detected").await;

    // And through /v1/verify: valid on one replica, a replay on the other.
    let v = agent.sign(
        "GET",
        "/orders",
        &now_ms().to_string(),
        &random_nonce(),
        b"",
    );
    let req = json!({"agent_id": agent_id, "method": "GET", "path": "/orders", "timestamp_ms": v.timestamp.parse::<i64>().unwrap(),
        "nonce": v.nonce, "body_sha256": v.body_sha256, "signature_b64": v.signature});
    let verify = |base: &str| {
        client
            .post(format!("{base}/v1/verify"))
            .header("X-Service-Api-Key", &key)
            .json(&req)
            .send()
    };
    let (_, first) = status_json(verify(&base_two).await.unwrap()).await;
    assert_eq!(first["valid"], true, "{first}");
    let (_, second) = status_json(verify(&base_one).await.unwrap()).await;
    assert_eq!(second["reason"], "replay_detected");

    one.kill().await.ok();
    two.kill().await.ok();
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_sqlite_file_share_nonces() {
    nonce_is_shared_between_replicas(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_postgres_database_share_nonces() {
    nonce_is_shared_between_replicas(Engine::Postgres).await;
}

/// SIGTERM while a request is in flight: the request completes (and is committed), then the
/// process exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_then_exits() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = TestDb::new(Engine::Sqlite).await;
    let key = random_api_key();
    let (mut server, base) = start_replica(&db.url, &key).await;
    let addr = base.trim_start_matches("http://").to_owned();

    let agent = TestAgent::new();
    let body =
        serde_json::to_vec(&json!({"name": "late", "public_key": agent.public_key_b64()})).unwrap();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/agents/register HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Service-Api-Key: {key}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&body[..10]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let pid = server.id().unwrap().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    conn.write_all(&body[10..]).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let status = tokio::time::timeout(std::time::Duration::from_secs(15), server.wait())
        .await
        .expect("exits")
        .unwrap();
    assert!(status.success(), "clean exit: {status:?}");

    // The registration was committed with its audit event.
    let (mut again, base) = start_replica(&db.url, &key).await;
    let res = reqwest::Client::new()
        .get(format!(
            "{base}/v1/workspace/audit/events?event_type=agent.registered"
        ))
        .header("X-Service-Api-Key", &key)
        .send()
        .await
        .unwrap();
    let (_, events) = status_json(res).await;
    assert_eq!(events["items"].as_array().unwrap().len(), 1, "{events}");
    again.kill().await.ok();
}
