//! `GET /metrics`: the Prometheus text format, read back with a real Prometheus parser after
//! requests that move the counters, and its optional bearer token.
//!
//! The recorder is one per process and every test server of this binary records into it, so
//! these tests only look for series that must exist and counters that must have moved, never
//! for exact values.

use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use reqwest::StatusCode;
use serde_json::json;

use crate::both_engines;
use crate::helpers::*;

type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;

/// Scrapes `/metrics` (with `token` as the bearer, if any) and parses it.
async fn scrape(app: &TestApp, token: Option<&str>) -> (Exposition, String) {
    let mut req = app.client.get(app.url("/metrics"));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let res = req.send().await.expect("scrape");
    assert_eq!(res.status(), StatusCode::OK);
    let content_type = res.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = res.text().await.expect("body");
    let parsed = parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("not the Prometheus text format ({e:?}):\n{text}"));
    (parsed, text)
}

/// The values of the series of `metric` whose labels include every pair of `labels`.
fn series<'a>(
    scrape: &'a Exposition,
    metric: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a PrometheusValue> {
    let Some(family) = scrape.families.get(metric) else {
        return Vec::new();
    };
    family
        .iter_samples()
        .filter(|s| {
            let set = s.get_labelset().expect("labels");
            labels
                .iter()
                .all(|(k, v)| set.get_label_value(k) == Some(*v))
        })
        .map(|s| &s.value)
        .collect()
}

/// The summed value of the counter or gauge series of `metric` with `labels` (at least one
/// must exist).
fn counter(scrape: &Exposition, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found = series(scrape, metric, labels);
    assert!(!found.is_empty(), "no {metric} with {labels:?}");
    found
        .iter()
        .map(|v| match v {
            PrometheusValue::Counter(c) => c.value.as_f64(),
            PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
            other => panic!("{metric} is not a counter or gauge: {other:?}"),
        })
        .sum()
}

/// Asserts a histogram `metric` with `labels` exists and has counted at least one sample.
fn assert_histogram(scrape: &Exposition, metric: &str, labels: &[(&str, &str)]) {
    let found = series(scrape, metric, labels);
    assert!(!found.is_empty(), "no histogram {metric} with {labels:?}");
    let observed: u64 = found
        .iter()
        .map(|v| match v {
            PrometheusValue::Histogram(h) => h.count.unwrap_or(0),
            other => panic!("{metric} is not a histogram: {other:?}"),
        })
        .sum();
    assert!(observed >= 1, "{metric} {labels:?} has no samples");
}

both_engines! {
    async fn requests_decisions_and_refusals_show_in_the_metrics(app) {
        let agent = app.active_agent("metrics-bot").await;
        // A decision: the default policy denies every action (`no_matching_rule`).
        let (status, decision) = status_json(
            app.post("/v1/check", &json!({"agent_id": agent.id, "action": "refund"})).await,
        )
        .await;
        assert_eq!(status, 200, "{decision}");
        assert_eq!(decision["decision"], "deny");
        // A request with a templated route: the label is the template, never the id.
        let res = app.get(&format!("/v1/agents/{}", agent.id)).await;
        assert_eq!(res.status(), 200);
        // A signed request whose signature does not match its body.
        let body = serde_json::to_vec(&json!({"agent_id": agent.id, "status": "ok", "latency_ms": 1})).unwrap();
        let signed = agent.sign("POST", "/v1/telemetry/heartbeat", &now_ms().to_string(), &random_nonce(), b"{}");
        assert_error(
            agent.send_signed(&app, "/v1/telemetry/heartbeat", &agent.id, &signed, body).await,
            401,
            "bad_signature",
        )
        .await;
        // A well-formed API key that is no workspace's.
        assert_error(app.get_as(&random_api_key(), "/v1/agents").await, 401, "invalid_api_key").await;
        // A path no route matches.
        assert_error(app.get("/v1/no-such-thing/agt_12345").await, 404, "not_found").await;
        // Mail through the real SMTP server.
        app.grant(&app.workspace_id, "metrics@example.com", "member").await;
        app.request_login_link("metrics@example.com").await;

        let (scrape, text) = scrape(&app, None).await;
        let check = [("method", "POST"), ("route", "/v1/check"), ("status", "200")];
        assert!(counter(&scrape, "acp_http_requests_total", &check) >= 1.0);
        assert_histogram(&scrape, "acp_http_request_duration_seconds", &[("method", "POST"), ("route", "/v1/check")]);
        let templated = [("method", "GET"), ("route", "/v1/agents/{agent_id}"), ("status", "200")];
        assert!(counter(&scrape, "acp_http_requests_total", &templated) >= 1.0);
        assert!(counter(&scrape, "acp_http_requests_total", &[("route", "unmatched"), ("status", "404")]) >= 1.0);
        assert!(!text.contains(&agent.id), "an agent id is in the metrics");
        assert!(!text.contains("no-such-thing"), "a raw path is in the metrics");
        assert!(!text.contains(&app.workspace_id), "a workspace id is in the metrics");

        let deny = [("outcome", "deny"), ("policy_id", "pol_default")];
        assert!(counter(&scrape, "acp_decisions_total", &deny) >= 1.0);
        assert!(counter(&scrape, "acp_decision_reasons_total", &[("outcome", "deny"), ("reason", "no_matching_rule")]) >= 1.0);
        assert!(counter(&scrape, "acp_signature_failures_total", &[("source", "request"), ("reason", "bad_signature")]) >= 1.0);
        assert!(counter(&scrape, "acp_auth_failures_total", &[("credential", "agent"), ("reason", "bad_signature")]) >= 1.0);
        assert!(counter(&scrape, "acp_auth_failures_total", &[("credential", "api_key"), ("reason", "invalid_api_key")]) >= 1.0);

        assert_histogram(&scrape, "acp_group_commit_batch_size", &[]);
        assert_histogram(&scrape, "acp_group_commit_duration_seconds", &[("outcome", "committed")]);
        assert!(counter(&scrape, "acp_cache_lookups_total", &[("cache", "api_key"), ("result", "hit")]) >= 1.0);
        assert!(counter(&scrape, "acp_cache_lookups_total", &[("cache", "policy")]) >= 1.0);
        assert!(counter(&scrape, "acp_cache_lookups_total", &[("cache", "agent")]) >= 1.0);
        assert!(!series(&scrape, "acp_db_pool_connections", &[("state", "in_use")]).is_empty());
        assert_eq!(scrape.families["acp_db_pool_connections"].family_type, PrometheusType::Gauge);
        assert_eq!(scrape.families["acp_http_requests_total"].family_type, PrometheusType::Counter);
        assert!(!series(&scrape, "acp_db_pool_connections", &[("state", "idle")]).is_empty());
        assert!(counter(&scrape, "acp_db_pool_max_connections", &[]) >= 1.0);
        assert!(counter(&scrape, "acp_mail_sent_total", &[("provider", "smtp")]) >= 1.0);
        // Every metric is described.
        for name in ["acp_http_requests_total", "acp_decisions_total", "acp_group_commit_batch_size"] {
            assert!(!scrape.families[name].help.is_empty(), "no HELP for {name}");
        }

        // Counters only go up: another check moves the decision counter.
        let before = counter(&scrape, "acp_decisions_total", &deny);
        let res = app.post("/v1/check", &json!({"agent_id": agent.id, "action": "refund"})).await;
        assert_eq!(res.status(), 200);
        let (again, _) = crate::metrics::scrape(&app, None).await;
        assert!(counter(&again, "acp_decisions_total", &deny) > before);
    }
}

/// The labels of the one series of `metric`, as name-value pairs.
fn only_series_labels(scrape: &Exposition, metric: &str) -> Vec<(String, String)> {
    let family = scrape
        .families
        .get(metric)
        .unwrap_or_else(|| panic!("no {metric}"));
    let samples: Vec<_> = family.iter_samples().collect();
    assert_eq!(samples.len(), 1, "one series of {metric}");
    let set = samples[0].get_labelset().expect("labels");
    family
        .get_label_names()
        .iter()
        .map(|name| {
            let value = set.get_label_value(name).unwrap_or_default().to_owned();
            (name.clone(), value)
        })
        .collect()
}

both_engines! {
    /// `acp_build_info` says what the binary was built from, and the standard process metrics
    /// are read at each scrape (the test servers run in this process: they are its figures).
    async fn the_build_and_the_process_are_in_the_metrics(app) {
        let (scrape, _) = scrape(&app, None).await;

        assert_eq!(scrape.families["acp_build_info"].family_type, PrometheusType::Gauge);
        assert!(!scrape.families["acp_build_info"].help.is_empty());
        assert_eq!(counter(&scrape, "acp_build_info", &[]), 1.0);
        let labels: std::collections::HashMap<String, String> =
            only_series_labels(&scrape, "acp_build_info").into_iter().collect();
        assert_eq!(labels["version"], env!("CARGO_PKG_VERSION"), "{labels:?}");
        // The commit the source is at (the build script ran again when HEAD moved).
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
        match head {
            Some(head) => assert_eq!(labels["git_sha"], head, "{labels:?}"),
            None => assert_eq!(labels["git_sha"], "unknown", "{labels:?}"),
        }
        // The profile: the folder of target/ this test binary was built into (`debug`, ...).
        let exe = std::env::current_exe().unwrap();
        let profile = exe.parent().and_then(|deps| deps.parent()).and_then(|p| p.file_name()).unwrap();
        assert_eq!(labels["profile"], profile.to_string_lossy(), "{labels:?}");
        let rustc = &labels["rustc"];
        assert!(
            rustc.split('.').count() >= 3 && rustc.split('-').next().unwrap().split('.').all(|n| n.parse::<u32>().is_ok()),
            "a compiler version: {labels:?}"
        );

        let gauge = |name: &str| -> f64 {
            assert_eq!(scrape.families[name].family_type, PrometheusType::Gauge, "{name}");
            assert!(!scrape.families[name].help.is_empty(), "no HELP for {name}");
            counter(&scrape, name, &[])
        };
        let resident = gauge("process_resident_memory_bytes");
        let virtual_memory = gauge("process_virtual_memory_bytes");
        assert!(resident > 1024.0 * 1024.0, "{resident}");
        assert!(virtual_memory >= resident, "{virtual_memory} < {resident}");
        let open = gauge("process_open_fds");
        let max = gauge("process_max_fds");
        assert!(open >= 3.0 && open <= max, "{open} of {max}");
        let limit = std::fs::read_to_string("/proc/self/limits").unwrap();
        let soft = limit
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .unwrap();
        assert_eq!(max.to_string(), soft, "the soft limit of this process");
        assert!(gauge("process_threads") >= 2.0);
        let started = gauge("process_start_time_seconds");
        let now = now_ms() as f64 / 1000.0;
        assert!(started <= now && started > now - 86_400.0, "{started} (now {now})");
        assert_eq!(scrape.families["process_cpu_seconds_total"].family_type, PrometheusType::Counter);
        assert!(counter(&scrape, "process_cpu_seconds_total", &[]) >= 0.0);

        // Read again at each scrape: with 200 more descriptors open, at least as many count.
        let files: Vec<std::fs::File> = (0..200).map(|_| std::fs::File::open("/proc/self/stat").unwrap()).collect();
        let (again, _) = crate::metrics::scrape(&app, None).await;
        assert!(counter(&again, "process_open_fds", &[]) >= 200.0);
        drop(files);
    }
}

/// With a metrics token configured, `/metrics` answers 401 in the error envelope without it or
/// with another, and 200 with it.
async fn the_metrics_token_guards_the_endpoint(engine: Engine) {
    const TOKEN: &str = "metrics-scraper-token-0123456789";
    let app = TestApp::spawn_with(engine, |config| {
        config.metrics_token = Some(acp::secret::Secret::new(TOKEN.to_owned()));
    })
    .await;
    let url = app.url("/metrics");
    let res = app.client.get(&url).send().await.unwrap();
    assert!(res.headers().contains_key("x-request-id"));
    assert_error(res, 401, "missing_metrics_token").await;
    let res = app
        .client
        .get(&url)
        .bearer_auth("metrics-scraper-token-012345678X")
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "invalid_metrics_token").await;
    // The workspace's API key is not the metrics token.
    let res = app
        .client
        .get(&url)
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "invalid_metrics_token").await;
    let (scrape, text) = scrape(&app, Some(TOKEN)).await;
    assert!(!scrape.families.is_empty());
    // The refusals were counted, under the route template.
    assert!(
        counter(
            &scrape,
            "acp_http_requests_total",
            &[("route", "/metrics"), ("status", "401")]
        ) >= 2.0
    );
    assert!(!text.contains(TOKEN));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_token_guards_the_endpoint_sqlite() {
    the_metrics_token_guards_the_endpoint(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_token_guards_the_endpoint_postgres() {
    the_metrics_token_guards_the_endpoint(Engine::Postgres).await;
}

/// The distinct values of `label` among the series of `metric`.
fn label_values(
    scrape: &Exposition,
    metric: &str,
    label: &str,
) -> std::collections::BTreeSet<String> {
    scrape
        .families
        .get(metric)
        .map(|family| {
            family
                .iter_samples()
                .filter_map(|s| {
                    s.get_labelset()
                        .expect("labels")
                        .get_label_value(label)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

both_engines! {
    async fn labels_tenants_choose_keep_a_bounded_number_of_values(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let agent = app.active_agent("labels-bot").await;
        // Six policies, each denying with a reason code of its own, and three sinks.
        let policies: Vec<String> = (0..6).map(|i| format!("pol_labels_{i}")).collect();
        for (i, policy_id) in policies.iter().enumerate() {
            let spec = json!({
                "reusable_policy_blocks": {"no": {"cedar": [{"name": "no", "when": "true", "outcome": "deny",
                    "reason_code": format!("code_{i}"), "reason": "denied"}]}},
                "agent_groups": [{"name": "g", "members": [agent.id]}],
                "bindings": [{"name": "g", "group": "g", "blocks": ["no"]}]
            });
            let (s, out) = status_json(owner.post("/v1/policies/sync", &json!({"policy_id": policy_id, "spec": spec})).await).await;
            assert_eq!(s, 200, "{out}");
        }
        for i in 0..3 {
            let sink = json!({"name": format!("siem{i}"), "url": format!("https://siem{i}.example.com/acp"), "enabled": false});
            let (s, out) = status_json(owner.post("/v1/workspace/audit/sinks", &sink).await).await;
            assert_eq!(s, 200, "{out}");
        }

        // A server process of its own (its own registry), with small bounds.
        let (mut server, base) = crate::replicas::start_replica_with(&app.db_url, &app.key, &[
            ("ACP_METRICS_MAX_POLICY_LABELS", "3"),
            ("ACP_METRICS_MAX_REASON_LABELS", "4"),
            ("ACP_METRICS_MAX_SINK_LABELS", "1"),
        ]).await;
        let replica = app.at(base);
        for policy_id in policies.iter().map(String::as_str).chain(["pol_default"]) {
            let (s, out) = status_json(replica.post("/v1/check", &json!({"agent_id": agent.id, "action": "read", "policy_id": policy_id})).await).await;
            assert_eq!((s.as_u16(), out["decision"].as_str()), (200, Some("deny")), "{out}");
        }
        // The sinks' lag is read when the server starts (and every 15 s).
        let scrape = loop {
            let (scrape, _) = scrape(&replica, None).await;
            if label_values(&scrape, "acp_audit_sink_lag_events", "sink_id").len() >= 2 {
                break scrape;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };

        // Seven policies decided with: the first three keep their id, the rest are `other`.
        let policy_ids = label_values(&scrape, "acp_decisions_total", "policy_id");
        assert_eq!(policy_ids.len(), 4, "{policy_ids:?}");
        assert!(policy_ids.contains("other"), "{policy_ids:?}");
        assert_eq!(scrape.families["acp_decisions_total"].iter_samples().count(), 4);
        assert_eq!(counter(&scrape, "acp_decisions_total", &[]), 7.0);
        // Seven reason codes: four kept, the rest `other`.
        let reasons = label_values(&scrape, "acp_decision_reasons_total", "reason");
        assert_eq!(reasons.len(), 5, "{reasons:?}");
        assert!(reasons.contains("other"), "{reasons:?}");
        assert!(label_values(&scrape, "acp_decision_reasons_total", "policy_id").len() <= 4);
        assert_eq!(counter(&scrape, "acp_decision_reasons_total", &[]), 7.0);
        // Three sinks: one by its id, the other two together.
        let sinks = label_values(&scrape, "acp_audit_sink_lag_events", "sink_id");
        assert_eq!(sinks.len(), 2, "{sinks:?}");
        assert!(sinks.contains("other"), "{sinks:?}");
        crate::replicas::sigterm(&mut server).await;
    }
}
