//! The vault's injecting proxy (`POST /v1/vault/proxy/request`) against a real HTTPS server on
//! loopback that the test starts: its CA is trusted through the configuration, and loopback is
//! opened by the operator allow-list the test sets. The secrets reach the upstream in the
//! profile's slots only, come back scrubbed, and every refusal has its code. On both engines.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::upstream::{UpstreamServer, BINARY};
use crate::vault_agent::{vault_policy, Setup};

const TOKEN: &str = "sk_live_proxy-canary-0123456789";
const QUERY_KEY: &str = "qk_proxy-canary-9876543210";

async fn spawn(engine: Engine, upstream: &UpstreamServer, allow_loopback: bool) -> TestApp {
    let ca = upstream.ca_pem.clone().into_bytes();
    TestApp::spawn_with(engine, move |config| {
        if allow_loopback {
            config.vault_proxy_allow = vec!["127.0.0.1/32".parse().unwrap()];
        }
        config.vault_proxy_ca_pem = Some(ca);
        config.vault_proxy_timeout_secs = 2;
        config.vault_proxy_max_response_bytes = 64 * 1024;
    })
    .await
}

fn proxied_set(port: u16) -> Value {
    json!({
        "name": "upstream", "provider": "echo", "environment": "production",
        "entries": {"TOKEN": TOKEN, "QUERY_KEY": QUERY_KEY, "UNUSED": "never-sent-value-1"},
        "profiles": {
            "api": {"hosts": ["localhost"], "ports": [port], "methods": ["GET", "POST"], "path_prefixes": ["/echo/"],
                    "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}, "query": {"key": "${QUERY_KEY}"}}},
            "wide": {"hosts": ["localhost"], "ports": [port], "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}}},
            "plain": {"hosts": ["localhost"], "ports": [port], "allow_http": true, "inject": {"headers": {"X-Token": "${TOKEN}"}}},
            "inside": {"hosts": ["10.0.0.1", "169.254.169.254", "metadata.google.internal"],
                       "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}}}
        }
    })
}

async fn proxy(
    app: &TestApp,
    s: &Setup,
    token: &str,
    profile: &str,
    request: Value,
) -> reqwest::Response {
    s.agent
        .signed_post(
            app,
            "/v1/vault/proxy/request",
            &json!({"request_lease_token": token, "secret_set_id": 1, "profile": profile, "request": request}),
        )
        .await
}

/// The owner's set `set`, an active agent granted `keys` of it for the proxy, and a request
/// lease minted for that agent (`lease`: the mint's extra fields): the setup and the lease.
async fn proxying(app: &TestApp, set: Value, keys: Value, lease: Value) -> (Setup, String) {
    let grant = json!({"allowed_keys": keys, "allowed_actions": ["proxy", "mint_lease"]});
    let s = crate::vault_agent::setup(app, set, grant, json!(["proxy"])).await;
    let token = s.minted(app, "proxy", lease).await;
    (s, token)
}

/// A `GET` of `url` through the proxy with `profile`: the status and the answer.
async fn get(
    app: &TestApp,
    s: &Setup,
    token: &str,
    profile: &str,
    url: String,
) -> (reqwest::StatusCode, Value) {
    status_json(proxy(app, s, token, profile, json!({"method": "GET", "url": url})).await).await
}

async fn uses_left(s: &Setup) -> i64 {
    let (_, listed) = status_json(s.owner.get("/v1/vault/leases?kind=request").await).await;
    listed["items"][0]["uses_left"].as_i64().unwrap()
}

async fn the_proxy_injects_scrubs_and_refuses(engine: Engine) {
    let upstream = UpstreamServer::start().await;
    let app = spawn(engine, &upstream, true).await;
    let (s, token) = proxying(
        &app,
        proxied_set(upstream.port),
        json!(["TOKEN", "QUERY_KEY"]),
        json!({"uses": 20}),
    )
    .await;

    // The call goes out with the secrets in the profile's slots, and comes back scrubbed.
    let (st, answer) = status_json(
        proxy(&app, &s, &token, "api", json!({"method": "POST", "url": upstream.url("/echo/v1/charges?amount=5"),
            "headers": {"Content-Type": "application/json", "X-Trace": "t1"}, "body": "{\"amount\":5}"})).await,
    )
    .await;
    assert_eq!(st, 200, "{answer}");
    assert_eq!(answer["status"], 200);
    let echoed: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["path"], "/echo/v1/charges");
    assert_eq!(echoed["body"], "{\"amount\":5}");
    assert_eq!(echoed["headers"]["x-trace"], "t1");
    // The upstream saw both secrets (that is what the scrub took out of its echo).
    assert_eq!(echoed["headers"]["authorization"], "Bearer [REDACTED]");
    assert!(echoed["query"].as_str().unwrap().contains("amount=5"));
    assert!(
        echoed["query"].as_str().unwrap().contains("key=[REDACTED]")
            || echoed["query"]
                .as_str()
                .unwrap()
                .contains("key=%5BREDACTED%5D"),
        "{echoed}"
    );
    let text = answer.to_string();
    assert!(
        !text.contains(TOKEN) && !text.contains(QUERY_KEY),
        "no secret comes back"
    );

    // A leak in any form is scrubbed and audited.
    let (st, leaked) = get(&app, &s, &token, "wide", upstream.url("/leak")).await;
    assert_eq!(st, 200, "{leaked}");
    assert!(!leaked.to_string().contains(TOKEN));
    assert!(leaked["body"].as_str().unwrap().contains("[REDACTED]"));
    // (A call's outcome events are committed beside its answer.)
    let leaks = audit_events_once(&app, "event_type=vault.proxy.leak_scrubbed", |e| {
        !e.is_empty()
    })
    .await;
    let forms: Vec<&str> = leaks
        .iter()
        .flat_map(|e| {
            e["details"]["leaks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["form"].as_str().unwrap())
        })
        .collect();
    for form in ["raw", "base64", "hex"] {
        assert!(forms.contains(&form), "{form} in {forms:?}");
    }
    // The console's overview lists the leak by key, place and form, never the value.
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let overview = owner.get("/dashboard").await.text().await.unwrap();
    assert!(overview.contains("id=\"leaks\""), "{overview}");
    assert!(
        overview.contains("wide</td>") && overview.contains(" (raw)"),
        "{overview}"
    );
    assert!(!overview.contains(TOKEN), "no secret on the page");

    // Redirects come back, never followed; binary bodies come back in base64.
    let hits = upstream.hits();
    let (st, redirect) = get(&app, &s, &token, "wide", upstream.url("/redirect")).await;
    assert_eq!(
        (st.as_u16(), redirect["status"].as_u64()),
        (200, Some(302)),
        "{redirect}"
    );
    assert_eq!(redirect["headers"]["location"], "https://example.com/");
    assert_eq!(upstream.hits(), hits + 1, "the redirect was not followed");
    let (_, binary) = get(&app, &s, &token, "wide", upstream.url("/binary")).await;
    assert!(binary["body"].is_null());
    assert_eq!(b64(BINARY), binary["body_base64"].as_str().unwrap());

    // Bounded: too slow, too big.
    assert_error(
        proxy(
            &app,
            &s,
            &token,
            "wide",
            json!({"method": "GET", "url": upstream.url("/slow?ms=4000")}),
        )
        .await,
        504,
        "upstream_timeout",
    )
    .await;
    assert_error(
        proxy(
            &app,
            &s,
            &token,
            "wide",
            json!({"method": "GET", "url": upstream.url("/big?bytes=100000")}),
        )
        .await,
        502,
        "upstream_response_too_large",
    )
    .await;

    // Refused before the lease's use is spent.
    let before = uses_left(&s).await;
    for (profile, request, status, code) in [
        (
            "api",
            json!({"method": "GET", "url": "https://evil.example/echo/x"}),
            403,
            "host_not_allowed",
        ),
        (
            "api",
            json!({"method": "GET", "url": upstream.url("/admin")}),
            403,
            "request_not_allowed",
        ),
        (
            "api",
            json!({"method": "DELETE", "url": upstream.url("/echo/x")}),
            403,
            "request_not_allowed",
        ),
        (
            "api",
            json!({"method": "GET", "url": "https://localhost:6379/echo/x"}),
            403,
            "request_not_allowed",
        ),
        (
            "inside",
            json!({"method": "GET", "url": "https://10.0.0.1:2375/"}),
            403,
            "request_not_allowed",
        ),
        (
            "api",
            json!({"method": "GET", "url": upstream.url("/echo/../admin")}),
            403,
            "request_not_allowed",
        ),
        (
            "api",
            json!({"method": "GET", "url": format!("http://localhost:{}/echo/x", upstream.port)}),
            403,
            "scheme_not_allowed",
        ),
        (
            "api",
            json!({"method": "GET", "url": upstream.url("/echo/x"), "headers": {"authorization": "Bearer mine"}}),
            400,
            "invalid_request",
        ),
        ("api", json!({"method": "GET"}), 400, "invalid_request"),
        (
            "nope",
            json!({"method": "GET", "url": upstream.url("/echo/x")}),
            404,
            "unknown_profile",
        ),
        (
            "inside",
            json!({"method": "GET", "url": "https://10.0.0.1/"}),
            403,
            "destination_not_allowed",
        ),
        (
            "inside",
            json!({"method": "GET", "url": "https://169.254.169.254/latest/meta-data/"}),
            403,
            "destination_not_allowed",
        ),
        (
            "inside",
            json!({"method": "GET", "url": "https://metadata.google.internal/"}),
            403,
            "destination_not_allowed",
        ),
    ] {
        let res = proxy(&app, &s, &token, profile, request.clone()).await;
        let status_text = format!("{profile} {request}");
        let body = assert_error(res, status, code).await;
        assert!(!body.to_string().contains(TOKEN), "{status_text}");
    }
    assert_eq!(uses_left(&s).await, before, "refusals spend no use");
    // `proxy` never implies `read`: no read lease for this agent.
    let (_, lease) = status_json(app.post("/v1/vault/leases/workflow",
        &json!({"agent_id": s.agent.id, "secret_set_id": 1, "purpose": "p", "actions": ["read"]})).await).await;
    let res = s.agent.signed_post(&app, "/v1/vault/leases/request/mint",
        &json!({"workflow_lease_token": lease["workflow_lease_token"], "secret_set_id": 1, "action": "read"})).await;
    assert_error(res, 403, "no_grant").await;

    // The policy judges the target: a block whose proxy hosts do not name it denies.
    app.apply_policy(
        json!({"global_guardrails": {"actions": {"allow": ["vault.proxy", "vault.mint_lease"]},
        "vault": {"proxy_hosts": ["api.stripe.com"]}}}),
    )
    .await;
    let body = assert_error(
        proxy(
            &app,
            &s,
            &token,
            "api",
            json!({"method": "GET", "url": upstream.url("/echo/x")}),
        )
        .await,
        403,
        "policy_denied",
    )
    .await;
    assert_eq!(body["reason_codes"], json!(["proxy_host_not_allowed"]));
    let (st, eval) = status_json(
        s.agent
            .signed_post(
                &app,
                "/v1/vault/policy/eval",
                &json!({"secret_set_id": 1, "action": "proxy",
        "profile": "api", "request": {"method": "GET", "url": upstream.url("/echo/x")}}),
            )
            .await,
    )
    .await;
    assert_eq!(st, 200, "{eval}");
    assert_eq!(
        (eval["decision"].as_str(), &eval["reason_codes"]),
        (Some("deny"), &json!(["proxy_host_not_allowed"]))
    );
    app.apply_policy(vault_policy(false)).await;

    // The trail: each call with its host, status and latency; no secret anywhere in it.
    let calls = audit_events_once(&app, "event_type=vault.proxy.request&limit=200", |e| {
        e.iter().any(|e| e["details"]["path"] == "/echo/v1/charges")
            && e.iter()
                .any(|e| e["details"]["error"] == "upstream_timeout")
    })
    .await;
    let ok = calls
        .iter()
        .find(|e| e["details"]["path"] == "/echo/v1/charges")
        .unwrap();
    assert_eq!(
        (
            ok["details"]["status"].as_u64(),
            ok["details"]["host"].as_str()
        ),
        (Some(200), Some("localhost"))
    );
    assert!(ok["details"]["latency_ms"].as_f64().is_some());
    assert!(calls
        .iter()
        .any(|e| e["details"]["error"] == "upstream_timeout"));
    let (_, trail) = status_json(s.owner.get("/v1/vault/audit?limit=200").await).await;
    let (_, all) = status_json(app.get("/v1/workspace/audit/events?limit=200").await).await;
    for text in [trail.to_string(), all.to_string()] {
        assert!(!text.contains(TOKEN) && !text.contains(QUERY_KEY) && !text.contains(&token));
    }

    // A value with CR or LF can never be injected into a header.
    let bad = json!({"name": "crlf", "provider": "x", "environment": "x", "entries": {"T": "a\r\nX-Evil: 1"},
        "profiles": {"p": {"hosts": ["localhost"], "inject": {"headers": {"Authorization": "${T}"}}}}});
    assert_error(
        s.owner.post("/v1/vault/secret-sets", &bad).await,
        400,
        "invalid_entries",
    )
    .await;
    app.stop().await;
}

/// Without the operator's allow-list, loopback is out of reach (and plain http, even where a
/// profile allows it, still goes through the same address checks).
async fn loopback_needs_the_allow_list(engine: Engine) {
    let upstream = UpstreamServer::start().await;
    let app = spawn(engine, &upstream, false).await;
    let (s, token) = proxying(&app, proxied_set(upstream.port), json!("*"), json!({})).await;
    let body = assert_error(
        proxy(
            &app,
            &s,
            &token,
            "api",
            json!({"method": "GET", "url": upstream.url("/echo/x")}),
        )
        .await,
        403,
        "destination_not_allowed",
    )
    .await;
    assert!(
        body["message"].as_str().unwrap().contains("127.0.0.1"),
        "{body}"
    );
    let res = proxy(
        &app,
        &s,
        &token,
        "plain",
        json!({"method": "GET", "url": format!("http://localhost:{}/", upstream.port)}),
    )
    .await;
    assert_error(res, 403, "destination_not_allowed").await;
    assert_eq!(upstream.hits(), 0);
    assert_eq!(uses_left(&s).await, 1);
    app.stop().await;
}

/// A path segment with a path parameter (`..;`), in any spelling (`..%3b`, `%2e%2e%3B`, double
/// encoded), is a dot segment to servers that drop the parameter before they normalise (Tomcat
/// reads `/echo/..;/admin` as `/admin`): refused like `..` itself, before the lease's use is
/// spent and before anything reaches the upstream. A parameter on an ordinary segment passes.
async fn path_parameters_cannot_hide_dot_segments(engine: Engine) {
    let upstream = UpstreamServer::start().await;
    let app = spawn(engine, &upstream, true).await;
    let (s, token) = proxying(
        &app,
        proxied_set(upstream.port),
        json!(["TOKEN", "QUERY_KEY"]),
        json!({"uses": 20}),
    )
    .await;
    let (hits, before) = (upstream.hits(), uses_left(&s).await);
    for path in [
        "/echo/..;/admin",
        "/echo/..;jsessionid=1/admin",
        "/echo/.;/admin",
        "/echo/..%3b/admin",
        "/echo/..%3B/admin",
        "/echo/%2e%2e%3b/admin",
        "/echo/%2E.%3B/admin",
        "/echo/..%253b/admin",
        "/echo/x/..;/..;/admin",
    ] {
        let body = assert_error(
            proxy(
                &app,
                &s,
                &token,
                "api",
                json!({"method": "GET", "url": upstream.url(path)}),
            )
            .await,
            403,
            "request_not_allowed",
        )
        .await;
        assert!(!body.to_string().contains(TOKEN), "{path}: {body}");
    }
    assert_eq!(upstream.hits(), hits, "nothing reached the upstream");
    assert_eq!(uses_left(&s).await, before, "refusals spend no use");

    let (st, answer) = get(
        &app,
        &s,
        &token,
        "api",
        upstream.url("/echo/v1/charges;v=2"),
    )
    .await;
    assert_eq!(
        (st.as_u16(), answer["status"].as_u64()),
        (200, Some(200)),
        "{answer}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_parameters_cannot_hide_dot_segments_sqlite() {
    path_parameters_cannot_hide_dot_segments(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_parameters_cannot_hide_dot_segments_postgres() {
    path_parameters_cannot_hide_dot_segments(Engine::Postgres).await;
}

/// A secret with the characters encoders touch: a space, `/`, `+`, the HTML specials, and
/// characters outside ASCII (one past the BMP, a surrogate pair in JSON).
const SPECIAL: &str = "p@ss w/rd+<&>\"'é🔑~canary-42";

/// The upstream echoes the injected value the ways upstreams commonly re-encode a value:
/// percent-encoded (lower and upper case hex, `%20` and `+`), JSON-escaped (`\"`, `\/`,
/// `\uXXXX` for every character), HTML character references (named, decimal, hex), base64, in
/// a JSON document and in `Set-Cookie` headers. Each comes back as exactly `[REDACTED]`, and
/// the leak is audited with its form.
async fn the_scrub_sees_through_common_encodings(engine: Engine) {
    let upstream = UpstreamServer::start().await;
    let app = spawn(engine, &upstream, true).await;
    let set = json!({
        "name": "encoded", "provider": "echo", "environment": "production",
        "entries": {"TOKEN": SPECIAL},
        "profiles": {"wide": {"hosts": ["localhost"], "ports": [upstream.port],
            "inject": {"headers": {"Authorization": "Bearer ${TOKEN}"}}}}
    });
    let (s, token) = proxying(&app, set, json!(["TOKEN"]), json!({})).await;
    let (st, answer) = get(&app, &s, &token, "wide", upstream.url("/encodings")).await;
    assert_eq!(
        (st.as_u16(), answer["status"].as_u64()),
        (200, Some(200)),
        "{answer}"
    );
    let body = answer["body"].as_str().unwrap();
    let lines: Vec<&str> = body.lines().collect();
    let spellings = crate::upstream::encodings_of(SPECIAL);
    for (name, spelled) in &spellings {
        assert!(
            lines.contains(&format!("{name}=[REDACTED]").as_str()),
            "{name} ({spelled}) in {body}"
        );
    }
    assert_eq!(lines.last(), Some(&"{\"echo\":\"[REDACTED]\"}"), "{body}");
    assert_eq!(
        answer["headers"]["set-cookie"],
        "session=[REDACTED]; Path=/; HttpOnly, raw=\"[REDACTED]\"; Secure",
        "{answer}"
    );
    let headers = answer["headers"].to_string();
    for (name, spelled) in &spellings {
        assert!(
            !body.contains(spelled.as_str()) && !headers.contains(spelled.as_str()),
            "{name}"
        );
    }

    let leaks = audit_events_once(&app, "event_type=vault.proxy.leak_scrubbed", |e| {
        !e.is_empty()
    })
    .await;
    let found: Vec<(String, String)> = leaks
        .iter()
        .flat_map(|e| e["details"]["leaks"].as_array().unwrap().clone())
        .map(|l| {
            (
                l["place"].as_str().unwrap().to_owned(),
                l["form"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for form in ["url", "json", "html", "base64"] {
        assert!(
            found.contains(&("body".to_owned(), form.to_owned())),
            "{form} in {found:?}"
        );
    }
    for form in ["url", "json"] {
        assert!(
            found.contains(&("header:set-cookie".to_owned(), form.to_owned())),
            "{form} in {found:?}"
        );
    }
    let (_, trail) = status_json(app.get("/v1/workspace/audit/events?limit=200").await).await;
    assert!(
        !trail.to_string().contains("canary-42"),
        "no value in the trail"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_sees_through_common_encodings_sqlite() {
    the_scrub_sees_through_common_encodings(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_sees_through_common_encodings_postgres() {
    the_scrub_sees_through_common_encodings(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_injects_scrubs_and_refuses_sqlite() {
    the_proxy_injects_scrubs_and_refuses(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_injects_scrubs_and_refuses_postgres() {
    the_proxy_injects_scrubs_and_refuses(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_needs_the_allow_list_sqlite() {
    loopback_needs_the_allow_list(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_needs_the_allow_list_postgres() {
    loopback_needs_the_allow_list(Engine::Postgres).await;
}
