//! The OpenAPI document tells the truth: every operation lists what it can answer and the
//! constraints the server enforces, and what the document forbids the server refuses, in the
//! error envelope (bodies of the wrong shape, over-long URIs, unreadable headers).

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Every operation of the served document: (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                ops.push((method.to_owned(), path.clone(), op.clone()));
            }
        }
    }
    ops
}

/// The schema behind a `$ref` (or the schema itself).
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            let kind = if r.contains("/responses/") {
                "responses"
            } else {
                "schemas"
            };
            &doc["components"][kind][name]
        }
        None => schema,
    }
}

both_engines! {
    async fn every_operation_lists_every_status_it_can_answer(app) {
        let (s, doc) = status_json(app.client.get(app.url("/openapi.json")).send().await.unwrap()).await;
        assert_eq!(s, 200);
        let ops = operations(&doc);
        assert!(ops.len() >= 60, "{} operations", ops.len());
        for (method, path, op) in &ops {
            let label = format!("{} {path}", method.to_uppercase());
            let responses = op["responses"].as_object().unwrap();
            let has = |status: &str| responses.contains_key(status);
            // The middleware's and the extractors' answers.
            for status in ["400", "408", "414", "431", "500"] {
                assert!(has(status), "{label} does not list {status}");
            }
            let security = op["security"].as_array().cloned().unwrap_or_default();
            let optional = security.iter().any(|r| r.as_object().unwrap().is_empty());
            if !security.is_empty() && !optional {
                assert!(has("401"), "{label} takes credentials but does not list 401");
            }
            if let Some(body) = op.get("requestBody") {
                for status in ["413", "415"] {
                    assert!(has(status), "{label} takes a body but does not list {status}");
                }
                let schema = resolve(&doc, &body["content"]["application/json"]["schema"]);
                let required = schema["required"].as_array().is_some_and(|r| !r.is_empty());
                assert_eq!(body["required"], required, "{label}: an empty body reads as {{}}");
            }
            // Every error answer is the envelope.
            for (status, response) in responses {
                if status.starts_with('2') || status.starts_with('3') {
                    continue;
                }
                let response = resolve(&doc, response);
                if let Some(content) = response.get("content") {
                    assert_eq!(
                        content["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                        "{label} {status}"
                    );
                }
            }
        }
        // The constraints the server enforces.
        for path in ["/v1/agents", "/v1/workspace/audit/events", "/v1/telemetry/heartbeat/recent"] {
            let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
            let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
            assert_eq!((limit["schema"]["minimum"].as_i64(), limit["schema"]["maximum"].as_i64()), (Some(1), Some(200)), "{path}");
        }
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["RegisterRequest"]["properties"]["name"]["maxLength"], 200);
        assert_eq!(schemas["CreateTokenRequest"]["properties"]["expires_in_days"]["maximum"], 365);
        assert_eq!(schemas["MintRequest"]["properties"]["scopes"]["maxItems"], 32);
        // No text field the server reads may hold a NUL: each carries a pattern that says so.
        let no_nul = text_without_pattern(schemas);
        assert!(no_nul.is_empty(), "text without a pattern: {no_nul:?}");
        // Unnamed properties, too, are JSON without NUL characters.
        assert_eq!(schemas["AgentStatusRequest"]["additionalProperties"]["$ref"], "#/components/schemas/JsonValue");
        assert!(schemas["JsonValue"]["anyOf"].is_array());
    }
}

/// Text properties of the component schemas that carry no `pattern` (nor a `format` or `enum`).
fn text_without_pattern(schemas: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    for (name, schema) in schemas.as_object().unwrap() {
        let Some(props) = schema["properties"].as_object() else {
            continue;
        };
        for (prop, s) in props {
            let text = s["type"] == "string"
                || s["type"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t == "string"));
            if text
                && s.get("pattern").is_none()
                && s.get("format").is_none()
                && s.get("enum").is_none()
            {
                missing.push(format!("{name}.{prop}"));
            }
        }
    }
    missing
}

both_engines! {
    async fn a_body_the_document_forbids_is_refused_and_changes_nothing(app) {
        let agent = app.active_agent("shape").await;
        let raw = |path: String, body: &'static str| {
            app.client.post(app.url(&path)).header("X-Service-Api-Key", &app.key)
                .header("Content-Type", "application/json").body(body).send()
        };
        // `AgentStatusRequest` has no required field, so serde alone would read `[]` as `{}`.
        for body in ["[]", "[\"because\"]", "\"x\"", "null", "5"] {
            let res = raw(format!("/v1/agents/{}/revoke", agent.id), body).await.unwrap();
            assert_error(res, 400, "invalid_json").await;
        }
        let res = raw("/v1/identity/kill-switch/revoke-all".into(), "[]").await.unwrap();
        assert_error(res, 400, "invalid_json").await;
        let (_, got) = status_json(app.get(&format!("/v1/agents/{}", agent.id)).await).await;
        assert_eq!(got["agent"]["status"], "active", "{got}");
        let (_, ks) = status_json(app.get("/v1/identity/kill-switch/status").await).await;
        assert_eq!(ks["all_credentials_revoked_at"], Value::Null, "{ks}");
        // An empty body is the optional body left out.
        let res = raw(format!("/v1/agents/{}/suspend", agent.id), "").await.unwrap();
        assert_eq!(res.status(), 200);
    }
}

both_engines! {
    async fn an_integer_may_be_written_with_a_zero_fraction(app) {
        // JSON Schema's `integer` includes 5.0; `5.5` is not an integer.
        let (s, body) = status_json(app.post("/v1/workspace/audit/export", &json!({"limit": 5.0})).await).await;
        assert_eq!(s, 200, "{body}");
        assert_error(app.post("/v1/workspace/audit/export", &json!({"limit": 5.5})).await, 400, "invalid_limit").await;
        assert_error(app.post("/v1/workspace/audit/export", &json!({"limit": "5"})).await, 400, "invalid_limit").await;
    }
}

both_engines! {
    async fn an_over_long_uri_is_answered_414_in_the_envelope(app) {
        let long = "x".repeat(9000);
        let res = app.get(&format!("/v1/agents?name={long}")).await;
        assert!(res.headers().contains_key("x-request-id"));
        assert_error(res, 414, "uri_too_long").await;
        let res = app.client.post(app.url(&format!("/v1/agents/{long}/revoke"))).send().await.unwrap();
        assert_error(res, 414, "uri_too_long").await;
        // Just under the limit is an ordinary request.
        let res = app.get(&format!("/v1/agents?name={}", "x".repeat(8000))).await;
        assert_eq!(res.status(), 200);
    }
}

both_engines! {
    async fn a_header_the_server_reads_that_is_not_text_is_400_in_the_envelope(app) {
        let bad = reqwest::header::HeaderValue::from_bytes(b"svc_test_\xff\xfe").unwrap();
        let res = app.client.get(app.url("/v1/agents")).header("X-Service-Api-Key", bad.clone()).send().await.unwrap();
        assert!(res.headers().contains_key("x-request-id"));
        let body = assert_error(res, 400, "invalid_header").await;
        assert!(body["message"].as_str().unwrap().contains("x-service-api-key"), "{body}");
        let res = app.client.post(app.url("/v1/policies/sync")).bearer_auth("x")
            .header("Idempotency-Key", bad.clone()).json(&json!({"spec": {}})).send().await.unwrap();
        assert_error(res, 400, "invalid_header").await;
        let res = app.client.post(app.url("/v1/check")).header("X-Service-Api-Key", &app.key)
            .header("Content-Type", bad).body("{}").send().await.unwrap();
        assert_error(res, 400, "invalid_header").await;
        // Headers the server does not read are not its business.
        let other = reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap();
        let res = app.client.get(app.url("/v1/agents")).header("X-Service-Api-Key", &app.key)
            .header("X-Unrelated", other).send().await.unwrap();
        assert_eq!(res.status(), 200);
    }
}

both_engines! {
    async fn a_malformed_api_key_is_refused_where_a_person_could_also_call(app) {
        let res = app.client.post(app.url("/v1/status/checks/run")).header("X-Service-Api-Key", "nonsense").send().await.unwrap();
        assert_error(res, 401, "invalid_api_key").await;
        let res = app.client.post(app.url("/v1/status/checks/run")).header("X-Service-Api-Key", &app.key).send().await.unwrap();
        assert_eq!(res.status(), 200);
    }
}

/// Sends `raw` on a connection of its own and reads the answer until the server closes it.
async fn raw_exchange(url: &str, raw: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may close before it read everything sent (a head it refused half way): what
    // counts is the answer it wrote before closing.
    let _ = stream.write_all(raw).await;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut chunk).await {
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(answer).unwrap()
}

/// The status and envelope of one raw answer.
fn raw_error(answer: &str) -> (u16, Value) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.contains("\r\ncontent-type: application/json\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())),
        "{head}"
    );
    let status = head[9..12].parse().unwrap();
    (status, serde_json::from_str(body).unwrap())
}

both_engines! {
    async fn heads_the_http_layer_cannot_parse_are_answered_in_the_envelope(app) {
        // A request line over hyper's own 64 KiB limit.
        let line = format!("GET /v1/agents?name={} HTTP/1.1\r\nHost: x\r\n\r\n", "x".repeat(70_000));
        let (status, body) = raw_error(&raw_exchange(&app.url(""), line.as_bytes()).await);
        assert_eq!((status, body["error"].as_str()), (414, Some("uri_too_long")), "{body}");
        // A control character in a header line.
        let raw = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Thing: a\x01b\r\n\r\n";
        let (status, body) = raw_error(&raw_exchange(&app.url(""), raw).await);
        assert_eq!((status, body["error"].as_str()), (400, Some("malformed_request")), "{body}");
        // A head larger than the HTTP layer buffers (sent whole, so the answer is read before the
        // connection closes).
        let headers: String = (0..60).map(|i| format!("X-F{i}: {}\r\n", "a".repeat(7000))).collect();
        let raw = format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{headers}");
        let (status, body) = raw_error(&raw_exchange(&app.url(""), raw.as_bytes()).await);
        assert_eq!((status, body["error"].as_str()), (431, Some("headers_too_large")), "{body}");
        // After a good request on the same connection, the bad one still gets the envelope.
        let raw = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\x01\r\n\r\n";
        let answer = raw_exchange(&app.url(""), raw).await;
        let (first, second) = answer.split_once("HTTP/1.1 400 ").unwrap();
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        let (status, body) = raw_error(&format!("HTTP/1.1 400 {second}"));
        assert_eq!((status, body["error"].as_str()), (400, Some("malformed_request")), "{body}");
    }
}
