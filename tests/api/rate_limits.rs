//! The request rate of an API key on a replica: a key's own rate (stored with the key), the
//! server's default for keys without one, and 429 `rate_limited` with `retry_after` and
//! `Retry-After` past it; a batch spends one token per decision.

use reqwest::Response;
use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

/// Asserts a 429 `rate_limited` whose `retry_after` and `Retry-After` agree and are at least
/// `at_least` seconds; answers the seconds.
async fn assert_rate_limited(res: Response, at_least: i64) -> i64 {
    let header = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = assert_error(res, 429, "rate_limited").await;
    let secs = body["retry_after"]
        .as_i64()
        .unwrap_or_else(|| panic!("{body}"));
    assert!(secs >= at_least, "{body}");
    assert_eq!(header, Some(secs.to_string()), "{body}");
    secs
}

/// A check of `read` by the agent, with `app`'s key.
async fn check(app: &TestApp, agent_id: &str) -> Response {
    app.post(
        "/v1/check",
        &json!({"agent_id": agent_id, "action": "read"}),
    )
    .await
}

/// Asserts a 200 answer.
async fn assert_answered(res: Response) {
    let (s, out) = status_json(res).await;
    assert_eq!(s, 200, "{out}");
}

fn checks(agent_id: &str, n: usize) -> Value {
    let checks: Vec<Value> = (0..n)
        .map(|_| json!({"agent_id": agent_id, "action": "read"}))
        .collect();
    json!({"checks": checks})
}

/// A key of the workspace made by its owner, with `rate_limit` (or the default): its secret.
async fn make_key(owner: &Browser, name: &str, rate_limit: Option<i64>) -> String {
    let (s, made) = status_json(
        owner
            .post(
                "/v1/workspace/api-keys",
                &json!({"name": name, "rate_limit": rate_limit}),
            )
            .await,
    )
    .await;
    assert_eq!(s, 200, "{made}");
    assert_eq!(made["api_key"]["rate_limit"], json!(rate_limit), "{made}");
    made["key"].as_str().unwrap().to_owned()
}

both_engines! {
    async fn a_key_with_a_small_rate_of_its_own_is_refused_past_it(app) {
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let agent = app.active_agent("rated").await;
        let slow = app.with_key(&make_key(&owner, "slow", Some(1)).await);
        // The rate is stored with the key and listed.
        let (_, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
        let item = listed["items"].as_array().unwrap().iter().find(|k| k["name"] == "slow").unwrap().clone();
        assert_eq!(item["rate_limit"], 1, "{listed}");
        assert!(listed["items"].as_array().unwrap().iter().any(|k| k["rate_limit"].is_null()), "{listed}");
        for bad in [json!(0), json!(1_000_001), json!("fast")] {
            assert_error(owner.post("/v1/workspace/api-keys", &json!({"name": "bad", "rate_limit": bad})).await, 400, "invalid_rate_limit").await;
        }

        // A full bucket takes a batch larger than itself, which leaves it in debt: one token a
        // second, so about a minute and a half before the next decision.
        let (s, batch) = status_json(slow.post("/v1/check/batch", &checks(&agent.id, 100)).await).await;
        assert_eq!(s, 200, "{batch}");
        assert_eq!(batch["results"].as_array().unwrap().len(), 100);
        let secs = assert_rate_limited(check(&slow, &agent.id).await, 2).await;
        assert!(secs <= 100, "{secs}");
        assert_rate_limited(slow.post("/v1/check/batch", &checks(&agent.id, 2)).await, 2).await;
        let evaluations = json!({"subject": {"type": "agent", "id": agent.id}, "action": {"name": "read"},
            "evaluations": [{"resource": {"type": "doc", "id": "1"}}, {"resource": {"type": "doc", "id": "2"}}]});
        assert_rate_limited(slow.post("/access/v1/evaluations", &evaluations).await, 2).await;
        // Requests other than decisions spend the key's rate too.
        assert_rate_limited(slow.get("/v1/agents").await, 2).await;
        // Nothing refused was decided: the batch's 100 decisions are the key's only ones.
        let key_id = item["key_id"].as_str().unwrap();
        let events = audit_events(&app, "event_type=decision.check&limit=200").await;
        assert_eq!(events.iter().filter(|e| e["actor"].as_str().is_some_and(|a| a.contains(key_id))).count(), 100);
        // Another key of the workspace is not held back.
        assert_answered(check(&app, &agent.id).await).await;

        // A key made with the admin command carries its rate too.
        let made = run_cli(&app.db_url, &["admin", "api-key", "create", "--workspace", &app.workspace_id, "--rate-limit", "7", "--output", "json"]).await;
        assert_eq!(made["api_key"]["rate_limit"], 7, "{made}");
        let (_, listed) = status_json(owner.get("/v1/workspace/api-keys").await).await;
        let id = made["api_key"]["key_id"].as_str().unwrap();
        assert!(listed["items"].as_array().unwrap().iter().any(|k| k["key_id"] == id && k["rate_limit"] == 7), "{listed}");
    }
}

async fn the_default_applies_to_keys_without_a_rate_of_their_own(engine: Engine) {
    let app = TestApp::spawn_with(engine, |config| config.api_key_rate_limit = 1).await;
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    // A key with a rate of its own is not held to the default.
    let fast = app.with_key(&make_key(&owner, "fast", Some(1000)).await);
    let agent = fast.active_agent("defaulted").await;
    for _ in 0..20 {
        assert_answered(check(&fast, &agent.id).await).await;
    }
    // The bootstrap key has none: one decision a second. A batch of 30 leaves it in debt.
    let (s, batch) = status_json(app.post("/v1/check/batch", &checks(&agent.id, 30)).await).await;
    assert_eq!(s, 200, "{batch}");
    assert_rate_limited(check(&app, &agent.id).await, 2).await;
    assert_rate_limited(app.get("/v1/agents").await, 2).await;
    assert_answered(check(&fast, &agent.id).await).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_applies_to_keys_without_a_rate_of_their_own_sqlite() {
    the_default_applies_to_keys_without_a_rate_of_their_own(Engine::Sqlite).await;
}

#[cfg(acp_postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_applies_to_keys_without_a_rate_of_their_own_postgres() {
    the_default_applies_to_keys_without_a_rate_of_their_own(Engine::Postgres).await;
}
