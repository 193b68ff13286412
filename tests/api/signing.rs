//! `bad_signature` says what the server saw: the canonical string it built and, for a signature
//! that is not one, a hint; on signed endpoints (401), on `/v1/verify` (`valid: false`) and on
//! token exchange (401). And the signed PATH is the path without the query string.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

const HB: &str = "/v1/telemetry/heartbeat";

/// The three ways a signature header can be wrong, from a correct signature `good` by the
/// agent: (name, header, expected hint, expected decoded length).
fn wrong_signatures(
    good: &str,
    stranger: &str,
) -> Vec<(&'static str, String, Option<&'static str>, Option<u64>)> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(good)
        .unwrap();
    vec![
        ("another key", stranger.to_owned(), None, None),
        (
            "not base64",
            "this is not base64!".to_owned(),
            Some("signature_not_base64"),
            None,
        ),
        (
            "63 bytes",
            b64(&raw[..63]),
            Some("signature_wrong_length"),
            Some(63),
        ),
        (
            "hex",
            hex::encode(&raw),
            Some("signature_wrong_length"),
            Some(96),
        ),
    ]
}

/// Asserts the detail of a `bad_signature` (an error body or a verify answer).
fn assert_detail(
    label: &str,
    body: &Value,
    canonical: &str,
    hint: Option<&str>,
    length: Option<u64>,
) {
    assert_eq!(body["canonical_string"], canonical, "{label}: {body}");
    assert_eq!(body["hint"].as_str(), hint, "{label}: {body}");
    assert_eq!(body["signature_length"].as_u64(), length, "{label}: {body}");
    assert_eq!(
        body["expected_signature_length"].as_u64(),
        length.map(|_| 64),
        "{label}: {body}"
    );
}

fn canonical(method: &str, path: &str, s: &Signed) -> String {
    format!(
        "{method}\n{path}\n{}\n{}\n{}",
        s.timestamp, s.nonce, s.body_sha256
    )
}

both_engines! {
    async fn a_signed_endpoint_answers_what_it_saw(app) {
        let agent = app.active_agent("sig").await;
        let body = serde_json::to_vec(&json!({"agent_id": agent.id, "status": "ok", "latency_ms": 1})).unwrap();
        let stranger = TestAgent::new();
        for (label, header, hint, length) in {
            let s = agent.sign("POST", HB, &now_ms().to_string(), &random_nonce(), &body);
            let other = stranger.sign("POST", HB, &s.timestamp, &s.nonce, &body);
            wrong_signatures(&s.signature, &other.signature)
        } {
            let mut s = agent.sign("POST", HB, &now_ms().to_string(), &random_nonce(), &body);
            s.signature = header;
            let out = assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "bad_signature").await;
            assert_detail(label, &out, &canonical("POST", HB, &s), hint, length);
            let message = out["message"].as_str().unwrap();
            match length {
                Some(n) => assert!(message.contains(&format!("{n} bytes")), "{message}"),
                None if hint.is_some() => assert!(message.contains("not base64"), "{message}"),
                None => assert!(message.contains("canonical_string"), "{message}"),
            }
            // The refusal spent nothing: the same nonce, signed right, goes through.
            let good = agent.sign("POST", HB, &s.timestamp, &s.nonce, &body);
            let (status, ok) = status_json(agent.send_signed(&app, HB, &agent.id, &good, body.clone()).await).await;
            assert_eq!(status, 200, "{label}: {ok}");
            assert!(ok.get("canonical_string").is_none() && ok.get("hint").is_none(), "{ok}");
        }
        // Another error says nothing of the canonical string.
        let s = agent.sign("POST", HB, &(now_ms() - 3_600_000).to_string(), &random_nonce(), &body);
        let out = assert_error(agent.send_signed(&app, HB, &agent.id, &s, body.clone()).await, 401, "timestamp_out_of_range").await;
        assert!(out.get("canonical_string").is_none(), "{out}");
    }
}

both_engines! {
    async fn the_signed_path_leaves_out_the_query_string(app) {
        let agent = app.active_agent("sig").await;
        // An agent's own challenge status link: a signed GET, here with a query string.
        let path = "/v1/policy-challenges/pch_0123456789abcdef0123456789abcdef/status";
        let target = format!("{path}?wait=30");
        let get = |s: Signed| {
            app.client
                .get(app.url(&target))
                .header("X-Service-Agent-Id", &agent.id)
                .header("X-Service-Timestamp", s.timestamp)
                .header("X-Service-Nonce", s.nonce)
                .header("X-Service-Signature", s.signature)
                .send()
        };
        // Signed over the path alone: the signature verifies (the challenge is unknown).
        let s = agent.sign("GET", path, &now_ms().to_string(), &random_nonce(), b"");
        assert_error(get(s).await.unwrap(), 404, "unknown_challenge").await;
        // Signed over the path and the query: refused, and the answer shows what was signed.
        let s = agent.sign("GET", &target, &now_ms().to_string(), &random_nonce(), b"");
        let expected = canonical("GET", path, &s);
        let out = assert_error(get(s).await.unwrap(), 401, "bad_signature").await;
        assert_detail("query signed", &out, &expected, None, None);
    }
}

both_engines! {
    async fn verify_answers_what_it_saw(app) {
        let agent = app.active_agent("sig").await;
        let stranger = TestAgent::new();
        let (path, body) = ("/orders/A%2F1001/refund", br#"{"amount":40}"#);
        let ts = now_ms();
        let s = agent.sign("POST", path, &ts.to_string(), &random_nonce(), body);
        let other = stranger.sign("POST", path, &s.timestamp, &s.nonce, body);
        for (label, header, hint, length) in wrong_signatures(&s.signature, &other.signature) {
            let req = json!({"agent_id": agent.id, "method": "POST", "path": path, "timestamp_ms": ts,
                             "nonce": s.nonce, "body_sha256": s.body_sha256, "signature_b64": header});
            let (status, out) = status_json(app.post("/v1/verify", &req).await).await;
            assert_eq!(status, 200, "{out}");
            assert_eq!((out["valid"].as_bool(), out["reason"].as_str()), (Some(false), Some("bad_signature")), "{label}: {out}");
            assert_detail(label, &out, &canonical("POST", path, &s), hint, length);
        }
        // The right signature still verifies (no refusal spent the nonce), with no detail.
        let req = json!({"agent_id": agent.id, "method": "POST", "path": path, "timestamp_ms": ts,
                         "nonce": s.nonce, "body_sha256": s.body_sha256, "signature_b64": s.signature});
        let (_, out) = status_json(app.post("/v1/verify", &req).await).await;
        assert_eq!(out["valid"], true, "{out}");
        assert!(out.get("canonical_string").is_none() && out.get("hint").is_none(), "{out}");
        // A reason other than the signature carries no detail.
        let (_, out) = status_json(app.post("/v1/verify", &req).await).await;
        assert_eq!(out["reason"], "replay_detected", "{out}");
        assert!(out.get("canonical_string").is_none(), "{out}");
    }
}

both_engines! {
    async fn token_exchange_answers_what_it_saw(app) {
        let agent = app.active_agent("sig").await;
        let stranger = TestAgent::new();
        let (path, body) = ("/payments/v1/refund", br#"{"order":"A-1001"}"#);
        let ts = now_ms();
        let s = agent.sign("POST", path, &ts.to_string(), &random_nonce(), body);
        let other = stranger.sign("POST", path, &s.timestamp, &s.nonce, body);
        for (label, header, hint, length) in wrong_signatures(&s.signature, &other.signature) {
            let req = json!({"agent_id": agent.id, "audience": "payments-api",
                             "agent_request": {"method": "POST", "path": path, "timestamp_ms": ts, "nonce": s.nonce,
                                               "body_sha256": s.body_sha256, "signature_b64": header}});
            let out = assert_error(app.post("/v1/token/exchange", &req).await, 401, "bad_signature").await;
            assert_detail(label, &out, &canonical("POST", path, &s), hint, length);
        }
    }
}
