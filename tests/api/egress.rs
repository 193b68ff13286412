//! The vault proxy's way out against a real HTTPS upstream on loopback (`upstream.rs`): the
//! upstream's CA is trusted through `ca_pem`, and loopback is reached only where the test's
//! allow-list names it. No database.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acp::net::egress::{
    render, scrub, target, Egress, EgressError, EgressSettings, Outbound, Profile, ProxyCall,
    Upstream,
};
use serde_json::{json, Value};

use crate::upstream::{UpstreamServer, BINARY};

const TOKEN: &str = "sk_test_upstream_token_0123456789";
const QUERY_KEY: &str = "query-key-abcdefgh";

fn egress_with(up: &UpstreamServer, allow: &str, timeout: Duration, max: usize) -> Egress {
    Egress::new(EgressSettings {
        allow: allow
            .split(',')
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.parse()
                    .unwrap_or_else(|_| ipnet::IpNet::from(a.parse::<std::net::IpAddr>().unwrap()))
            })
            .collect(),
        ca_pem: Some(up.ca_pem.clone().into_bytes()),
        timeout,
        max_response_bytes: max,
    })
    .unwrap()
}

/// Loopback allowed (`localhost` may resolve to both families), the upstream's CA trusted.
fn egress(up: &UpstreamServer) -> Egress {
    egress_with(
        up,
        "127.0.0.0/8,::1",
        Duration::from_secs(10),
        4 * 1024 * 1024,
    )
}

fn profile(up: &UpstreamServer, extra: Value) -> Profile {
    let mut p = json!({
        "hosts": ["localhost", "127.0.0.1"],
        "ports": [up.port],
        "inject": {
            "headers": {"Authorization": "Bearer ${TOKEN}"},
            "query": {"key": "${QK}"}
        }
    });
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    Profile::from_json(&p).unwrap()
}

fn secrets() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("TOKEN".to_owned(), TOKEN.to_owned()),
        ("QK".to_owned(), QUERY_KEY.to_owned()),
    ])
}

/// The agent's request, checked and rendered under `profile`.
fn outbound(profile: &Profile, request: Value) -> Result<Outbound, EgressError> {
    let call = ProxyCall::from_json(&request)?;
    let t = target(profile, &call)?;
    render(profile, &call, &t, &secrets())
}

async fn send(egress: &Egress, profile: &Profile, request: Value) -> Result<Upstream, EgressError> {
    egress.send(outbound(profile, request)?).await
}

#[tokio::test]
async fn injected_secrets_reach_the_upstream_and_are_scrubbed_from_its_answer() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let p = profile(&up, json!({}));
    let out = outbound(
        &p,
        json!({
            "method": "post",
            "url": up.url("/echo/v1/charges?amount=5"),
            "headers": {"Content-Type": "application/json", "X-Agent": "a1", "Connection": "close"},
            "body": "{\"amount\": 5}"
        }),
    )
    .unwrap();
    let mut answer = egress.send(out).await.unwrap();
    assert_eq!(answer.status, 200);
    assert!(answer.latency_ms > 0.0);
    let seen: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/echo/v1/charges");
    assert_eq!(seen["query"], format!("amount=5&key={QUERY_KEY}"));
    assert_eq!(seen["headers"]["authorization"], format!("Bearer {TOKEN}"));
    assert_eq!(seen["headers"]["x-agent"], "a1");
    assert_eq!(seen["headers"]["content-type"], "application/json");
    assert_eq!(seen["headers"]["accept-encoding"], "identity");
    assert_eq!(seen["headers"]["host"], format!("localhost:{}", up.port));
    assert_eq!(seen["body"], "{\"amount\": 5}");
    assert_eq!(up.hits(), 1);

    // The echo carries both secrets back; the scrub takes them out.
    let out = outbound(
        &p,
        json!({"method": "POST", "url": up.url("/echo/v1/charges?amount=5"), "body": "{}"}),
    )
    .unwrap();
    let leaks = scrub(&mut answer, &out);
    let text = String::from_utf8(answer.body.clone()).unwrap();
    assert!(!text.contains(TOKEN) && !text.contains(QUERY_KEY), "{text}");
    assert!(text.contains("[REDACTED]"));
    let keys: Vec<&str> = leaks.iter().map(|l| l.key.as_str()).collect();
    assert!(keys.contains(&"TOKEN") && keys.contains(&"QK"), "{leaks:?}");
    // Framing headers of the answer are dropped; the JSON type stays.
    let names: Vec<String> = answer
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    assert!(!names.contains(&"content-length".to_owned()), "{names:?}");
    assert!(names.contains(&"content-type".to_owned()), "{names:?}");
}

#[tokio::test]
async fn a_secret_echoed_in_every_form_is_scrubbed_from_body_and_headers() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let p = profile(&up, json!({}));
    let request = json!({"method": "GET", "url": up.url("/leak")});
    let mut answer = send(&egress, &p, request.clone()).await.unwrap();
    let raw = String::from_utf8(answer.body.clone()).unwrap();
    assert!(raw.contains(TOKEN), "the upstream really leaks: {raw}");
    let leaks = scrub(&mut answer, &outbound(&p, request).unwrap());
    let text = String::from_utf8(answer.body.clone()).unwrap();
    assert_eq!(
        text, "raw=[REDACTED]\nbase64=[REDACTED]\nhex=[REDACTED]\n",
        "{text}"
    );
    let echoed = answer
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-echo-token"))
        .unwrap();
    assert_eq!(echoed.1, "[REDACTED]");
    for (place, form) in [
        ("body", "raw"),
        ("body", "base64"),
        ("body", "hex"),
        ("header:x-echo-token", "raw"),
    ] {
        assert!(
            leaks
                .iter()
                .any(|l| l.key == "TOKEN" && l.place == place && l.form == form),
            "{place} {form}: {leaks:?}"
        );
    }
}

#[tokio::test]
async fn loopback_is_refused_without_the_allow_list_entry() {
    let up = UpstreamServer::start().await;
    let egress = egress_with(&up, "", Duration::from_secs(10), 1 << 20);
    let p = profile(&up, json!({}));
    for url in [
        up.url("/echo/x"),
        format!("https://127.0.0.1:{}/echo/x", up.port),
    ] {
        match send(&egress, &p, json!({"method": "GET", "url": url})).await {
            Err(EgressError::DestinationNotAllowed(addr)) => {
                assert!(addr == "127.0.0.1" || addr == "::1", "{addr}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // An allow-list for another network does not open loopback either.
    let egress = egress_with(&up, "10.0.0.0/8", Duration::from_secs(10), 1 << 20);
    assert!(matches!(
        send(
            &egress,
            &p,
            json!({"method": "GET", "url": up.url("/echo/x")})
        )
        .await,
        Err(EgressError::DestinationNotAllowed(_))
    ));
    assert_eq!(up.hits(), 0, "nothing refused reached the upstream");
}

#[tokio::test]
async fn metadata_and_private_literals_are_refused_even_with_loopback_allowed() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let p = Profile::from_json(&json!({
        "hosts": ["169.254.169.254", "10.0.0.1", "metadata.google.internal", "100.100.100.200"],
        "allow_http": true
    }))
    .unwrap();
    for (url, refused) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254",
        ),
        ("https://10.0.0.1/", "10.0.0.1"),
        (
            "http://100.100.100.200/latest/meta-data/",
            "100.100.100.200",
        ),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            "metadata.google.internal",
        ),
    ] {
        let started = Instant::now();
        match send(&egress, &p, json!({"method": "GET", "url": url})).await {
            Err(EgressError::DestinationNotAllowed(addr)) => assert_eq!(addr, refused),
            other => panic!("{url}: {other:?}"),
        }
        // Refused before any connection attempt (which would wait on an unreachable address).
        assert!(started.elapsed() < Duration::from_secs(2), "{url}");
    }
}

#[tokio::test]
async fn redirects_are_returned_not_followed() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let mut answer = send(
        &egress,
        &profile(&up, json!({})),
        json!({"method": "GET", "url": up.url("/redirect")}),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 302);
    let out = outbound(
        &profile(&up, json!({})),
        json!({"method": "GET", "url": up.url("/redirect")}),
    )
    .unwrap();
    scrub(&mut answer, &out);
    let location = answer
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.as_str());
    assert_eq!(location, Some("https://example.com/"));
    assert_eq!(answer.body, b"moved");
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn a_slow_upstream_times_out() {
    let up = UpstreamServer::start().await;
    let egress = egress_with(&up, "127.0.0.0/8,::1", Duration::from_secs(1), 1 << 20);
    let started = Instant::now();
    let result = send(
        &egress,
        &profile(&up, json!({})),
        json!({"method": "GET", "url": up.url("/slow?ms=5000")}),
    )
    .await;
    assert!(matches!(result, Err(EgressError::Timeout)), "{result:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    // Within the timeout it answers.
    let answer = send(
        &egress,
        &profile(&up, json!({})),
        json!({"method": "GET", "url": up.url("/slow?ms=10")}),
    )
    .await
    .unwrap();
    assert_eq!(answer.body, b"slept");
}

#[tokio::test]
async fn answers_past_the_cap_are_refused() {
    let up = UpstreamServer::start().await;
    let egress = egress_with(&up, "127.0.0.0/8,::1", Duration::from_secs(10), 4096);
    let p = profile(&up, json!({}));
    for url in ["/big?bytes=5000", "/big?bytes=5000&chunked=true"] {
        let result = send(&egress, &p, json!({"method": "GET", "url": up.url(url)})).await;
        assert!(
            matches!(result, Err(EgressError::ResponseTooLarge(4096))),
            "{url}: {result:?}"
        );
    }
    for url in ["/big?bytes=4096", "/big?bytes=4096&chunked=true"] {
        let answer = send(&egress, &p, json!({"method": "GET", "url": up.url(url)}))
            .await
            .unwrap();
        assert_eq!(answer.body.len(), 4096, "{url}");
    }
}

#[tokio::test]
async fn binary_bodies_pass_both_ways() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let p = profile(&up, json!({}));
    let answer = send(
        &egress,
        &p,
        json!({"method": "GET", "url": up.url("/binary")}),
    )
    .await
    .unwrap();
    assert_eq!(answer.body, BINARY);
    // A binary request body (`body_base64`) arrives byte for byte: the echo's lossy text shows
    // the replacement characters where the bytes were not UTF-8.
    let answer = send(
        &egress,
        &p,
        json!({"method": "PUT", "url": up.url("/echo/upload"), "body_base64": "/wBh"}),
    )
    .await
    .unwrap();
    let seen: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(seen["body"], "\u{fffd}\u{0}a");
    assert_eq!(seen["headers"]["content-length"], "3");
}

#[tokio::test]
async fn plain_http_is_refused_unless_the_profile_allows_it() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let plain = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/hello",
            axum::routing::get(|headers: axum::http::HeaderMap| async move {
                headers
                    .get("authorization")
                    .map(|v| v.to_str().unwrap_or_default().to_owned())
                    .unwrap_or_default()
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let url = format!("http://127.0.0.1:{port}/hello");
    assert!(matches!(
        send(
            &egress,
            &profile(&up, json!({"ports": [port]})),
            json!({"method": "GET", "url": url})
        )
        .await,
        Err(EgressError::SchemeNotAllowed)
    ));
    let answer = send(
        &egress,
        &profile(&up, json!({"allow_http": true, "ports": [port]})),
        json!({"method": "GET", "url": url}),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, format!("Bearer {TOKEN}").as_bytes());
    plain.abort();
}

#[tokio::test]
async fn an_untrusted_certificate_or_a_compressed_answer_is_unavailable() {
    let up = UpstreamServer::start().await;
    let untrusting = Egress::new(EgressSettings {
        allow: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        ca_pem: None,
        timeout: Duration::from_secs(10),
        max_response_bytes: 1 << 20,
    })
    .unwrap();
    let p = profile(&up, json!({}));
    match send(
        &untrusting,
        &p,
        json!({"method": "GET", "url": up.url("/echo/x")}),
    )
    .await
    {
        Err(EgressError::Unavailable(message)) => {
            assert!(
                message.to_ascii_lowercase().contains("certificate"),
                "{message}"
            );
            assert!(
                !message.contains(TOKEN) && !message.contains(QUERY_KEY),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let egress = egress(&up);
    match send(
        &egress,
        &p,
        json!({"method": "GET", "url": up.url("/encoded")}),
    )
    .await
    {
        Err(EgressError::Unavailable(message)) => assert!(message.contains("gzip"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_closed_port_is_unavailable_without_the_secret_in_the_message() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    // A port just freed: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("https://127.0.0.1:{port}/echo/x");
    match send(
        &egress,
        &profile(&up, json!({"ports": [port]})),
        json!({"method": "GET", "url": url}),
    )
    .await
    {
        Err(EgressError::Unavailable(message)) => {
            assert!(message.starts_with("cannot connect"), "{message}");
            assert!(
                !message.contains(QUERY_KEY) && !message.contains(TOKEN),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Clients are kept per pinned destination, so their pooled connection is reused.
#[tokio::test]
async fn repeated_calls_reuse_one_connection() {
    let up = UpstreamServer::start().await;
    let egress = egress(&up);
    let p = profile(&up, json!({}));
    for _ in 0..5 {
        let answer = send(
            &egress,
            &p,
            json!({"method": "GET", "url": up.url("/echo/again")}),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, 200);
    }
    assert_eq!(up.hits(), 5);
    assert_eq!(up.connections(), 1, "one TLS connection for five calls");
}
