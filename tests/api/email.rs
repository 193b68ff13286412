//! `POST /v1/email/send`: delivered through a real SMTP server on loopback only on allow;
//! blocked sends deliver nothing; a provider failure is 502 and does not count; the per-agent
//! rate limit holds under concurrency and across two server processes.

use crate::both_engines;
use crate::helpers::*;
use serde_json::{json, Value};

/// An agent allowed to email example.com, at most `per_minute` a minute; answers it.
async fn setup(app: &TestApp, per_minute: u32) -> TestAgent {
    let agent = app.active_agent("mailer").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"mail": {
            "email": {"allowed_domains": ["example.com"], "max_recipients": 5, "rate_limit_per_minute": per_minute}
        }},
        "agent_groups": [{"name": "mailers", "members": [agent.id]}],
        "bindings": [{"group": "mailers", "blocks": ["mail"]}]
    }))
    .await;
    agent
}

/// The emails agents sent (the sink also gets the owner's login link).
async fn agent_mail(app: &TestApp, count: usize) -> Vec<crate::smtp::Received> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let sent: Vec<_> = app
            .smtp
            .messages()
            .into_iter()
            .filter(|m| m.data.contains("the secret body text"))
            .collect();
        if sent.len() >= count || std::time::Instant::now() > deadline {
            return sent;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn send_body(agent: &TestAgent, to: Value, subject: &str) -> Value {
    json!({"agent_id": agent.id, "email": {
        "to": to, "cc": ["cc@example.com"], "subject": subject,
        "text": "the secret body text", "html": "<p>the secret body text</p>"
    }})
}

both_engines! {
    async fn an_allowed_email_arrives_and_a_blocked_one_does_not(app) {
        let agent = setup(&app, 10).await;
        // Blocked first: nothing reaches the SMTP server.
        let res = app.post("/v1/email/send", &send_body(&agent, json!(["x@evil.test"]), "Blocked")).await;
        let blocked = assert_error(res, 403, "policy_blocked").await;
        assert_eq!(blocked["decision"], "deny");
        assert!(!blocked["reasons"].as_array().unwrap().is_empty(), "{blocked}");
        assert!(blocked.get("challenge").is_some(), "{blocked}");

        let (s, sent) = status_json(app.post("/v1/email/send", &send_body(&agent, json!(["Ann@Example.com", "bob@example.com"]), "Your refund")).await).await;
        assert_eq!(s, 200, "{sent}");
        assert_eq!((sent["ok"].as_bool(), sent["provider"].as_str()), (Some(true), Some("smtp")));
        let message_id = sent["provider_message_id"].as_str().unwrap().to_owned();
        assert!(!message_id.is_empty());

        let messages = agent_mail(&app, 1).await;
        assert_eq!(messages.len(), 1, "only the allowed email was delivered");
        let m = &messages[0];
        let mut rcpt = m.rcpt.clone();
        rcpt.sort();
        assert_eq!(rcpt, vec!["Ann@Example.com", "bob@example.com", "cc@example.com"]);
        assert!(m.data.contains("Subject: Your refund"), "{}", m.data);
        assert!(m.data.contains("the secret body text"));

        // Audited with domains, counts and the message id, never the body.
        let events = audit_events(&app, "event_type=email.sent").await;
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e["agent_id"], agent.id.as_str());
        assert_eq!(e["decision"], "allow");
        let text = e.to_string();
        assert!(text.contains(&message_id) && text.contains("example.com"), "{text}");
        assert!(!text.contains("secret body") && !text.contains("Your refund"), "{text}");
        let blocked_events = audit_events(&app, "action=send_email&decision=deny").await;
        assert_eq!(blocked_events.len(), 1, "the blocked send's decision is audited");
    }
}

both_engines! {
    async fn send_input_errors(app) {
        let agent = setup(&app, 10).await;
        for (body, status, code) in [
            (json!({"email": {"to": ["a@example.com"], "subject": "s", "text": "t"}}), 400, "missing_agent_id"),
            (json!({"agent_id": agent.id}), 400, "missing_email"),
            (json!({"agent_id": agent.id, "email": {"subject": "s", "text": "t"}}), 400, "missing_email.to"),
            (json!({"agent_id": agent.id, "email": {"to": ["a@example.com"], "text": "t"}}), 400, "missing_email.subject"),
            (json!({"agent_id": agent.id, "email": {"to": ["a@example.com"], "subject": "s"}}), 400, "missing_email.text"),
            (json!({"agent_id": agent.id, "email": {"to": ["a@example.com"], "subject": "s\r\nBcc: x@evil.test", "text": "t"}}), 400, "invalid_email.subject"),
            (json!({"agent_id": agent.id, "email": {"to": ["a@example.com, b@evil.test"], "subject": "s", "text": "t"}}), 400, "invalid_email.to"),
            (json!({"agent_id": "agt_00000000000000000000000000000000", "email": {"to": ["a@example.com"], "subject": "s", "text": "t"}}), 404, "unknown_agent"),
            (json!({"agent_id": agent.id, "policy_id": "pol_nope", "email": {"to": ["a@example.com"], "subject": "s", "text": "t"}}), 404, "unknown_policy"),
        ] {
            assert_error(app.post("/v1/email/send", &body).await, status, code).await;
        }
        let res = app.client.post(app.url("/v1/email/send")).json(&json!({})).send().await.unwrap();
        assert_error(res, 401, "missing_api_key").await;
        assert!(agent_mail(&app, 0).await.is_empty(), "nothing was sent");
    }
}

both_engines! {
    async fn the_rate_limit_counts_sends_and_holds_under_concurrency(app) {
        let agent = setup(&app, 3).await;
        let sends = (0..8).map(|i| {
            let app = app.clone();
            let body = send_body(&agent, json!(["a@example.com"]), &format!("n{i}"));
            async move { app.post("/v1/email/send", &body).await.status().as_u16() }
        });
        let statuses = futures::future::join_all(sends).await;
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "{statuses:?}");
        assert!(statuses.iter().all(|s| *s == 200 || *s == 403), "{statuses:?}");
        assert_eq!(agent_mail(&app, 3).await.len(), 3);
        // `/v1/check` sees the same counts.
        let (_, d) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "send_email", "email": {"to": ["a@example.com"]}})).await).await;
        assert_eq!(d["decision"], "deny", "{d}");
        assert!(d["reason_codes"].to_string().contains("rate_limit"), "{d}");
    }
}

/// An SMTP port where nothing listens.
/// An agent allowed to email example.com with attachments that are not executables or
/// archives, none over 1,000 bytes.
async fn setup_attachments(app: &TestApp) -> TestAgent {
    let agent = app.active_agent("mailer").await;
    app.apply_policy(json!({
        "reusable_policy_blocks": {"mail": {
            "email": {"allowed_domains": ["example.com"], "blocked_attachments": [".exe", "application/zip"], "max_attachment_bytes": 1000}
        }},
        "agent_groups": [{"name": "mailers", "members": [agent.id]}],
        "bindings": [{"group": "mailers", "blocks": ["mail"]}]
    }))
    .await;
    agent
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The decoded content of the MIME part of attachment `filename` in a received message.
fn attached(data: &str, filename: &str) -> Vec<u8> {
    use base64::Engine as _;
    let start = data
        .find(&format!(
            "Content-Disposition: attachment; filename=\"{filename}\""
        ))
        .unwrap_or_else(|| panic!("no attachment {filename} in {data}"));
    let part = &data[start..];
    let (headers, rest) = part.split_once("\n\n").expect("part headers");
    let body = &rest[..rest.find("\n--").expect("part end")];
    if headers.contains("Content-Transfer-Encoding: base64") {
        base64::engine::general_purpose::STANDARD
            .decode(body.replace('\n', ""))
            .expect("base64 part")
    } else {
        assert!(
            headers.contains("Content-Transfer-Encoding: 7bit"),
            "{headers}"
        );
        body.as_bytes().to_vec()
    }
}

fn with_files(agent: &TestAgent, to: Value, attachments: Value) -> Value {
    json!({"agent_id": agent.id, "email": {
        "to": to, "subject": "Your report", "text": "the secret body text", "attachments": attachments
    }})
}

both_engines! {
    async fn attachments_are_judged_by_the_policy_and_delivered_with_the_message(app) {
        let agent = setup_attachments(&app).await;
        let pdf = b"%PDF-1.4 the report".to_vec();
        let csv: Vec<u8> = (0..=255u8).collect();
        let files = json!([
            {"filename": "report.pdf", "content_type": "application/pdf", "content": b64(&pdf), "size_bytes": pdf.len()},
            {"filename": "raw.bin", "content": b64(&csv)}
        ]);
        let (s, sent) = status_json(app.post("/v1/email/send", &with_files(&agent, json!(["Jane Doe <jane@example.com>"]), files)).await).await;
        assert_eq!(s, 200, "{sent}");
        let messages = agent_mail(&app, 1).await;
        assert_eq!(messages.len(), 1);
        let m = &messages[0];
        assert_eq!(m.rcpt, vec!["jane@example.com"], "the envelope carries the address");
        assert!(m.data.contains("To: \"Jane Doe\" <jane@example.com>"), "{}", m.data);
        assert!(m.data.contains("Content-Type: multipart/mixed"), "{}", m.data);
        assert!(m.data.contains("Content-Disposition: attachment; filename=\"report.pdf\""), "{}", m.data);
        assert!(m.data.contains("Content-Type: application/pdf"), "{}", m.data);
        assert!(m.data.contains("Content-Disposition: attachment; filename=\"raw.bin\""), "{}", m.data);
        assert!(m.data.contains("Content-Type: application/octet-stream"), "{}", m.data);
        assert_eq!(attached(&m.data, "report.pdf"), pdf);
        assert_eq!(attached(&m.data, "raw.bin"), csv, "binary content arrives intact");
        let events = audit_events(&app, "event_type=email.sent").await;
        assert_eq!((events[0]["details"]["attachment_count"].as_u64(), events[0]["details"]["recipient_domains"].clone()), (Some(2), json!(["example.com"])));
        assert!(!events[0].to_string().contains("report.pdf"), "file names stay out of the audit");

        // The same rules as /v1/check: an executable, an archive by type, a file over the size
        // limit, a recipient of another domain behind a display name. Nothing is delivered.
        for (to, file, code) in [
            ("jane@example.com", json!({"filename": "run.EXE", "content_type": "application/octet-stream", "content": b64(b"MZ")}), "attachment_blocked"),
            ("jane@example.com", json!({"filename": "a.dat", "content_type": "Application/Zip; name=a.dat", "content": b64(b"PK")}), "attachment_blocked"),
            ("jane@example.com", json!({"filename": "big.txt", "content_type": "text/plain", "content": b64(&[b'x'; 1001])}), "attachment_too_large"),
            ("Jane Doe <jane@evil.test>", json!({"filename": "ok.txt", "content_type": "text/plain", "content": b64(b"ok")}), "recipient_domain_not_allowed"),
        ] {
            let body = assert_error(app.post("/v1/email/send", &with_files(&agent, json!([to]), json!([file]))).await, 403, "policy_blocked").await;
            assert!(body["reason_codes"].as_array().unwrap().contains(&json!(code)), "{code}: {body}");
            // /v1/check decides the same from the metadata alone.
            let meta = json!({"filename": file["filename"], "content_type": file["content_type"], "size_bytes": if code == "attachment_too_large" { 1001 } else { 2 }});
            let address = to.rsplit('<').next().unwrap().trim_end_matches('>');
            let (_, d) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "send_email",
                "email": {"to": [address], "attachments": [meta]}})).await).await;
            assert_eq!(d["decision"], "deny", "{d}");
            assert!(d["reason_codes"].as_array().unwrap().contains(&json!(code)), "{code}: {d}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(agent_mail(&app, 1).await.len(), 1, "blocked sends delivered nothing");
    }
}

both_engines! {
    async fn bad_attachments_are_refused_not_dropped(app) {
        let agent = setup_attachments(&app).await;
        let ok = b64(b"hello");
        for (attachments, code) in [
            (json!("report.pdf"), "invalid_attachments"),
            (json!(["report.pdf"]), "invalid_attachments"),
            (json!([{"filename": "a.txt", "content_type": "text/plain"}]), "invalid_attachments"),
            (json!([{"filename": "a.txt", "content_type": "text/plain", "content": "not base64!"}]), "invalid_attachments"),
            (json!([{"filename": "a.txt", "content_type": "not a type", "content": ok}]), "invalid_attachments"),
            (json!([{"filename": "", "content_type": "text/plain", "content": ok}]), "invalid_attachments"),
            (json!([{"filename": "a\r\nb.txt", "content_type": "text/plain", "content": ok}]), "invalid_attachments"),
            (json!([{"filename": "a.txt", "content_type": "text/plain", "content": ok, "size_bytes": 4}]), "invalid_attachments"),
            (json!([{"filename": "a.bin", "content": b64(&vec![0u8; 300 * 1024])}, {"filename": "b.bin", "content": b64(&vec![0u8; 300 * 1024])}]), "attachments_too_large"),
        ] {
            let body = assert_error(app.post("/v1/email/send", &with_files(&agent, json!(["jane@example.com"]), attachments.clone())).await, 400, code).await;
            assert!(body["message"].as_str().unwrap().len() > 10, "{body}");
        }
        for to in [json!(["Jane <jane@example.com>, bob@example.com"]), json!(["<>"]), json!(["Jane Doe"])] {
            assert_error(app.post("/v1/email/send", &with_files(&agent, to, json!([]))).await, 400, "invalid_email.to").await;
        }
        assert_error(app.post("/v1/email/send", &json!({"agent_id": agent.id, "email": {"to": "jane@example.com", "cc": ["x y"], "subject": "s", "text": "t"}})).await, 400, "invalid_email.cc").await;
        // Unpadded base64 and MIME line breaks are fine.
        let file = json!([{"filename": "a.txt", "content_type": "text/plain; charset=utf-8", "content": "aGVs\r\nbG8"}]);
        let (s, sent) = status_json(app.post("/v1/email/send", &with_files(&agent, json!("jane@example.com"), file)).await).await;
        assert_eq!(s, 200, "{sent}");
        let messages = agent_mail(&app, 1).await;
        assert_eq!(messages.len(), 1, "only the good send was delivered");
        assert_eq!(attached(&messages[0].data, "a.txt"), b"hello");
        assert_eq!(audit_events(&app, "event_type=email.sent").await.len(), 1);
    }
}

/// The outbox provider stores the files with the message; the CLI shows them.
async fn the_outbox_keeps_attachments(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = setup_attachments(&app).await;
    let (mut replica, base) =
        crate::replicas::start_replica_with(&app.db_url, &app.key, &[("ACP_EMAIL_URL", "outbox")])
            .await;
    let pdf = b"%PDF-1.4 outbox".to_vec();
    let res = reqwest::Client::new()
        .post(format!("{base}/v1/email/send"))
        .header("X-Service-Api-Key", &app.key)
        .json(&with_files(
            &agent,
            json!(["Jane Doe <jane@example.com>"]),
            json!([{"filename": "r.pdf", "content_type": "application/pdf", "content": b64(&pdf)}]),
        ))
        .send()
        .await
        .unwrap();
    let (s, sent) = status_json(res).await;
    assert_eq!(
        (s.as_u16(), sent["provider"].as_str()),
        (200, Some("outbox")),
        "{sent}"
    );
    let outbox = run_cli(
        &app.db_url,
        &["admin", "outbox", "list", "--output", "json"],
    )
    .await;
    let item = &outbox["items"][0];
    assert_eq!(item["to"], json!(["Jane Doe <jane@example.com>"]));
    assert_eq!(
        item["attachments"],
        json!([{"filename": "r.pdf", "content_type": "application/pdf", "size_bytes": pdf.len(), "content": b64(&pdf)}])
    );
    replica.kill().await.ok();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_keeps_attachments_sqlite() {
    the_outbox_keeps_attachments(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_keeps_attachments_postgres() {
    the_outbox_keeps_attachments(Engine::Postgres).await;
}

async fn dead_smtp_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("smtp://127.0.0.1:{port}?tls=none")
}

async fn provider_down_is_502_and_not_counted(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = setup(&app, 1).await;
    // A replica whose provider is down.
    let url = dead_smtp_url().await;
    let (mut down, base) =
        crate::replicas::start_replica_with(&app.db_url, &app.key, &[("ACP_EMAIL_URL", &url)])
            .await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let res = client
            .post(format!("{base}/v1/email/send"))
            .header("X-Service-Api-Key", &app.key)
            .json(&send_body(&agent, json!(["a@example.com"]), "s"))
            .send()
            .await
            .unwrap();
        let body = assert_error(res, 502, "provider_unavailable").await;
        assert!(body["trace_id"].is_string(), "{body}");
    }
    // Two failed sends at a limit of one a minute: neither counted.
    let (_, d) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "send_email", "email": {"to": ["a@example.com"]}})).await).await;
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(audit_events(&app, "event_type=email.failed").await.len(), 2);
    down.kill().await.ok();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_down_is_502_and_not_counted_sqlite() {
    provider_down_is_502_and_not_counted(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_down_is_502_and_not_counted_postgres() {
    provider_down_is_502_and_not_counted(Engine::Postgres).await;
}

/// Two server processes on one database race sends of one agent at its limit.
async fn two_replicas_never_exceed_the_limit(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = setup(&app, 4).await;
    let (mut other, other_base) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let client = reqwest::Client::new();
    let sends = (0..12).map(|i| {
        let url = if i % 2 == 0 {
            app.url("/v1/email/send")
        } else {
            format!("{other_base}/v1/email/send")
        };
        let body = send_body(&agent, json!(["a@example.com"]), &format!("n{i}"));
        let req = client
            .post(url)
            .header("X-Service-Api-Key", &app.key)
            .json(&body);
        async move { req.send().await.unwrap().status().as_u16() }
    });
    let statuses = futures::future::join_all(sends).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        4,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 403),
        "{statuses:?}"
    );
    other.kill().await.ok();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_sqlite_never_exceed_the_email_limit() {
    two_replicas_never_exceed_the_limit(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_never_exceed_the_email_limit() {
    two_replicas_never_exceed_the_limit(Engine::Postgres).await;
}

/// An agent suspended through one process cannot send through another, even while the other
/// still holds it as active in its cache: the reservation re-checks it.
async fn a_suspended_agent_cannot_send_through_another_replica(engine: Engine) {
    let app = TestApp::spawn(engine).await;
    let agent = setup(&app, 10).await;
    let (mut other, other_base) = crate::replicas::start_replica(&app.db_url, &app.key).await;
    let other_app = app.at(other_base);
    // The other process sends once: its cache now holds the agent as active.
    let res = other_app
        .post(
            "/v1/email/send",
            &send_body(&agent, json!(["a@example.com"]), "first"),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = app
        .post(
            &format!("/v1/agents/{}/suspend", agent.id),
            &json!({"reason": "incident"}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = other_app
        .post(
            "/v1/email/send",
            &send_body(&agent, json!(["a@example.com"]), "second"),
        )
        .await;
    // Refused by the policy (the other process already saw the change) or by the
    // reservation (it had not): either way, nothing is sent.
    let (s, body) = status_json(res).await;
    assert_eq!(s, 403, "{body}");
    assert!(
        ["policy_blocked", "agent_not_active"].contains(&body["error"].as_str().unwrap()),
        "{body}"
    );
    assert_eq!(audit_events(&app, "event_type=email.sent").await.len(), 1);
    other.kill().await.ok();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_agent_cannot_send_through_another_sqlite_process() {
    a_suspended_agent_cannot_send_through_another_replica(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_agent_cannot_send_through_another_postgres_replica() {
    a_suspended_agent_cannot_send_through_another_replica(Engine::Postgres).await;
}
