//! The access log: the real binary with `--log-format json`, its stderr read line by line. One
//! JSON line per request with the route template, status, latency, request id, trace context,
//! principal kind, workspace and decision trace id; never a key or token.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::helpers::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// Reads every line of `stream` into a vector, until it ends.
fn collect_lines(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        let mut all = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push(line);
        }
        all
    })
}

/// The trace id of a `traceparent` answer, checked to be well formed.
fn trace_of(res: &reqwest::Response) -> (String, String) {
    let value = res.headers()["traceparent"].to_str().unwrap().to_owned();
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00", "{value}");
    for (part, len) in [(parts[1], 32), (parts[2], 16), (parts[3], 2)] {
        assert_eq!(part.len(), len, "{value}");
        assert!(
            part.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{value}"
        );
    }
    assert_ne!(parts[1], "0".repeat(32));
    assert_ne!(parts[2], "0".repeat(16));
    (parts[1].to_owned(), parts[2].to_owned())
}

async fn each_request_writes_one_json_access_line(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = app.active_agent("log-bot").await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_acp"))
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
        .env_remove("ACP_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn acp serve");
    let stderr = collect_lines(child.stderr.take().expect("stderr"));
    let mut stdout_lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stdout = Vec::new();
    let base = loop {
        let line =
            tokio::time::timeout(std::time::Duration::from_secs(30), stdout_lines.next_line())
                .await
                .expect("server started in time")
                .expect("read stdout")
                .expect("server printed its address");
        stdout.push(line.clone());
        if let Some(rest) = line.strip_prefix("acp listening on ") {
            break rest.split_whitespace().next().expect("url").to_owned();
        }
    };
    let stdout_rest = collect_lines(stdout_lines.into_inner());
    let server = app.at(base);
    let client = &server.client;
    let bogus_token = format!("svc_pat_{}", acp::secret::random_base62(40));

    // A templated route, continuing the caller's trace.
    let res = client
        .get(server.url(&format!("/v1/agents/{}", agent.id)))
        .header("X-Service-Api-Key", &app.key)
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .header("x-request-id", "req-agent-get")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let (trace, span) = trace_of(&res);
    assert_eq!(trace, TRACE_ID, "the caller's trace goes on");
    assert_ne!(span, PARENT_ID, "the server's span is its own");
    assert!(res.headers()["traceparent"]
        .to_str()
        .unwrap()
        .ends_with("-01"));

    // A decision: its own trace id goes in the line too.
    let res = client
        .post(server.url("/v1/check"))
        .header("X-Service-Api-Key", &app.key)
        .header("x-request-id", "req-check")
        .json(&json!({"agent_id": agent.id, "action": "refund"}))
        .send()
        .await
        .unwrap();
    let (check_trace, _) = trace_of(&res);
    let (status, decision) = status_json(res).await;
    assert_eq!(status, 200, "{decision}");
    let decision_trace = decision["trace_id"].as_str().unwrap().to_owned();
    assert!(decision_trace.starts_with("trc_"), "{decision}");

    // A refused credential, and a malformed traceparent (replaced by a new trace).
    let res = client
        .get(server.url("/v1/agents"))
        .bearer_auth(&bogus_token)
        .header(
            "traceparent",
            format!("00-{}-{PARENT_ID}-01", TRACE_ID.to_uppercase()),
        )
        .header("x-request-id", "req-bad-token")
        .send()
        .await
        .unwrap();
    let (bad_trace, _) = trace_of(&res);
    assert_ne!(bad_trace, TRACE_ID);
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // An error answer with a stable code: the line carries it (taken where the error was
    // rendered), as does a refusal before any handler (an unknown route).
    let res = client
        .post(server.url("/v1/check"))
        .header("X-Service-Api-Key", &app.key)
        .header("x-request-id", "req-check-unknown")
        .json(&json!({"agent_id": "agt_nobody", "action": "refund"}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_json(res).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], "unknown_agent", "{body}");
    let res = client
        .get(server.url("/v1/no-such-route"))
        .header("x-request-id", "req-no-route")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);

    // No traceparent at all: one is made.
    let res = client
        .get(server.url("/healthz"))
        .header("x-request-id", "req-health")
        .send()
        .await
        .unwrap();
    let (health_trace, _) = trace_of(&res);
    assert_eq!(res.status(), StatusCode::OK);

    // SIGTERM: the server drains and stops cleanly.
    let pid = child.id().expect("running").to_string();
    let term = Command::new("kill").args(["-TERM", &pid]).status().await;
    assert!(term.expect("run kill").success());
    let exit = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
        .await
        .expect("the server stopped in time")
        .expect("wait for the server");
    assert!(exit.success(), "{exit:?}");
    let stderr = stderr.await.unwrap();
    stdout.extend(stdout_rest.await.unwrap());

    let output = [stdout.join("\n"), stderr.join("\n")].join("\n");
    for secret in [&app.key, &bogus_token] {
        assert!(
            !output.contains(secret.as_str()),
            "a credential is in the output"
        );
    }
    // Exactly one line names each request, and it is its access line.
    let mut lines: HashMap<&str, Vec<Value>> = HashMap::new();
    for line in &stderr {
        let parsed: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        for id in [
            "req-agent-get",
            "req-check",
            "req-bad-token",
            "req-health",
            "req-check-unknown",
            "req-no-route",
        ] {
            if line.contains(&format!("\"{id}\"")) {
                lines.entry(id).or_default().push(parsed.clone());
            }
        }
    }
    let line_of = |id: &str| -> Value {
        let found = lines.get(id).cloned().unwrap_or_default();
        assert_eq!(found.len(), 1, "lines for {id}: {found:?}");
        let line = found[0].clone();
        assert_eq!(line["target"], "acp::access", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
        let fields = line["fields"].clone();
        assert_eq!(fields["request_id"], id, "{fields}");
        assert!(
            fields["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
            "{fields}"
        );
        fields
    };

    let get = line_of("req-agent-get");
    assert_eq!(get["method"], "GET");
    assert_eq!(
        get["route"], "/v1/agents/{agent_id}",
        "the template, not the path"
    );
    assert_eq!(get["status"], 200);
    assert_eq!(get["trace_id"], TRACE_ID);
    assert_eq!(get["parent_span_id"], PARENT_ID);
    assert_eq!(get["span_id"], span);
    assert_eq!(get["principal"], "api_key");
    assert_eq!(get["workspace_id"], app.workspace_id);
    assert!(get.get("decision_trace_id").is_none(), "{get}");
    assert!(
        get.get("error_code").is_none(),
        "a success has no code: {get}"
    );
    assert!(!get.to_string().contains(&agent.id), "{get}");

    let check = line_of("req-check");
    assert_eq!(check["method"], "POST");
    assert_eq!(check["route"], "/v1/check");
    assert_eq!(check["status"], 200);
    assert_eq!(check["trace_id"], check_trace);
    assert_eq!(check["decision_trace_id"], decision_trace);
    assert_eq!(check["principal"], "api_key");
    assert_eq!(check["workspace_id"], app.workspace_id);
    assert!(check.get("error_code").is_none(), "{check}");

    let bad = line_of("req-bad-token");
    assert_eq!(bad["route"], "/v1/agents");
    assert_eq!(bad["status"], 401);
    assert_eq!(bad["trace_id"], bad_trace);
    assert!(bad.get("parent_span_id").is_none(), "{bad}");
    assert_eq!(bad["principal"], "anonymous");
    assert!(bad.get("workspace_id").is_none(), "{bad}");
    assert_eq!(bad["error_code"], "invalid_token", "{bad}");

    let unknown = line_of("req-check-unknown");
    assert_eq!(unknown["route"], "/v1/check");
    assert_eq!(unknown["status"], 404);
    assert_eq!(unknown["error_code"], "unknown_agent", "{unknown}");
    assert_eq!(unknown["principal"], "api_key");

    let no_route = line_of("req-no-route");
    assert_eq!(no_route["route"], "unmatched");
    assert_eq!(no_route["error_code"], "not_found", "{no_route}");

    let health = line_of("req-health");
    assert_eq!(health["route"], "/healthz");
    assert_eq!(health["trace_id"], health_trace);
    assert_eq!(health["principal"], "anonymous");
    assert!(health.get("error_code").is_none(), "{health}");

    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_writes_one_json_access_line_sqlite() {
    each_request_writes_one_json_access_line(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_writes_one_json_access_line_postgres() {
    each_request_writes_one_json_access_line(Engine::Postgres).await;
}
