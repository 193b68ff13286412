//! Every console page at phone width (390 px) in a real browser (headless Chromium over
//! WebDriver), with data in every table, long names and values included: the page is never
//! wider than the window (no horizontal page scroll); what is wider (tables, code, specs)
//! scrolls inside its own container. Compiled when `ACP_TEST_BROWSER` is set at build time.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::webdriver::Browser;

/// Long words that cannot break by themselves, the worst case for a narrow page.
const LONG_NAME: &str = "payments_reconciliation_and_refunds_bot_eu_west_1_production_primary";
const LONG_REASON: &str =
    "INC-4242_suspected_key_leak_in_the_payments_gateway_of_the_eu_west_1_cluster_rotate_everything";

/// The page's width against the window's, and the elements that stick out of the window
/// (outside any container that scrolls on its own), for the failure message.
const MEASURE: &str = r#"
const doc = document.documentElement;
const inner = window.innerWidth;
const scrolls = (el) => {
  for (let p = el.parentElement; p; p = p.parentElement) {
    const x = getComputedStyle(p).overflowX;
    if (x === 'auto' || x === 'scroll' || x === 'hidden') return p !== doc && p !== document.body;
  }
  return false;
};
const out = [];
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  // Text that spills out of its box counts too (it is no element of its own).
  const right = getComputedStyle(el).overflowX === 'visible' ? Math.max(r.right, r.left + el.scrollWidth) : r.right;
  if (right > inner + 0.5 && !scrolls(el)) {
    out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '') + ' right=' + Math.round(right));
  }
}
return {scroll: doc.scrollWidth, inner: inner, wide: out.slice(0, 12), title: document.title};
"#;

async fn assert_fits(browser: &Browser, what: &str) {
    let measured = browser.execute(MEASURE, json!([])).await;
    let (scroll, inner) = (
        measured["scroll"].as_f64().unwrap(),
        measured["inner"].as_f64().unwrap(),
    );
    assert!(
        inner <= 400.0,
        "the window is phone width: {inner} ({what})"
    );
    assert!(
        scroll <= inner,
        "{what} ({}) is {scroll} px wide in a {inner} px window; sticking out: {}",
        measured["title"],
        measured["wide"]
    );
}

/// Opens `path` and checks it fits; answers the page's title (to check it is the page meant).
async fn visit(browser: &Browser, app: &TestApp, path: &str) -> String {
    browser.open(&app.url(path)).await;
    assert_fits(browser, path).await;
    browser
        .execute("return document.title;", json!([]))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn ok(res: reqwest::Response) -> Value {
    let (s, body) = status_json(res).await;
    assert!(s.is_success(), "{s}: {body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_page_fits_a_phone() {
    let app = TestApp::spawn(Engine::Sqlite).await;

    // Agents with long names, labels, metadata and heartbeats.
    let long = app.active_agent(LONG_NAME).await;
    let other = app.active_agent("support-bot").await;
    ok(app
        .post(
            "/v1/workspace/agents/upsert",
            &json!({"external_agent_key": "crm_customer_relationship_management_agent_42_eu_west_1", "agent_id": long.id,
                "labels": ["payments_reconciliation_eu_west_1", "tier_one_production_critical_path", "x"]}),
        )
        .await)
    .await;
    let now = now_ms();
    let beats: Vec<Value> = (0..12)
        .map(|i| json!({"agent_id": long.id, "status": "ok", "latency_ms": 40 + i * 7, "observed_at": acp::time::iso(now - (12 - i) * 60_000)}))
        .collect();
    ok(app
        .post("/v1/telemetry/heartbeat/ingest", &json!({"items": beats}))
        .await)
    .await;
    let pending_agent = {
        let mut agent = TestAgent::new();
        agent.id = agent
            .register(
                &app,
                Some(&app.key),
                "pending_agent_with_a_long_name_waiting_for_approval",
            )
            .await;
        agent
    };

    // An agent that registered without a workspace, asking to be claimed.
    let mut stray = TestAgent::new();
    stray.id = stray
        .register(
            &app,
            None,
            "stray_agent_with_a_very_long_name_asking_to_join_a_workspace",
        )
        .await;
    assert_eq!(stray.attest_latest(&app).await.status(), 200);
    let claim = ok(stray
        .signed_post(
            &app,
            &format!("/v1/agents/{}/claim-code", stray.id),
            &json!({}),
        )
        .await)
    .await;
    let claim_url = claim["claim_url"].as_str().unwrap().to_owned();

    // Two versions of a policy with refunds, minting and a long group name; checks that allow,
    // deny and ask.
    app.grant(&app.workspace_id, "owner@example.com", "owner")
        .await;
    let owner = app.login("owner@example.com").await;
    let spec = |limit: u32| {
        json!({
            "reusable_policy_blocks": {
                "refunds": {"amount": {"limits": {"USD": {"allow_up_to": limit, "challenge_up_to": 1000}}}},
                "minting": {"actions": {"allow": ["mint_credential"]}}
            },
            "agent_groups": [{"name": "finance_and_payments_reconciliation_group_eu_west_1", "members": [long.id, other.id]}],
            "bindings": [{"group": "finance_and_payments_reconciliation_group_eu_west_1", "blocks": ["refunds", "minting"]}]
        })
    };
    ok(owner
        .post("/v1/policies/sync", &json!({"spec": spec(100)}))
        .await)
    .await;
    ok(owner
        .post("/v1/policies/sync", &json!({"spec": spec(50)}))
        .await)
    .await;
    let mut challenges = Vec::new();
    let mut links = Vec::new();
    for amount in [400, 20, 5000, 700, 30] {
        let decided = ok(app
            .post(
                "/v1/check",
                &json!({"agent_id": long.id, "action": "refund", "context": {"currency": "USD", "amount": amount,
                    "order": "ord_0123456789abcdef0123456789abcdef0123456789abcdef", "note": LONG_REASON}}),
            )
            .await)
        .await;
        if let Some(id) = decided["challenge_id"].as_str() {
            challenges.push(id.to_owned());
            links.push(decided["challenge"]["url"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(challenges.len(), 2);
    ok(owner
        .post(
            &format!("/v1/policy-challenges/{}/decide", challenges[1]),
            &json!({"decision": "approve", "reason": LONG_REASON}),
        )
        .await)
    .await;

    // Credentials, the vault, the workspace.
    let mut creds = Vec::new();
    for (audience, scope) in [
        (
            "payments-api.eu-west-1.internal.example.com",
            "refunds:write",
        ),
        (
            "customer_relationship_management_system_production",
            "contacts:read_all_records_of_every_customer",
        ),
    ] {
        let minted = ok(app
            .post(
                "/v1/identity/credentials/mint",
                &json!({"agent_id": long.id, "audience": audience, "scopes": [scope], "ttl_seconds": 3600}),
            )
            .await)
        .await;
        creds.push(minted["credential"]["cred_id"].as_str().unwrap().to_owned());
    }
    let set = ok(owner
        .post(
            "/v1/vault/secret-sets",
            &json!({"name": "stripe_production_payments_reconciliation_eu_west_1", "provider": "stripe", "environment": "production",
                "entries": {"STRIPE_SECRET_KEY_FOR_THE_PAYMENTS_RECONCILIATION_SERVICE": "sk_test_x", "ACCOUNT": "acct_1"},
                "profiles": {"stripe": {"hosts": ["api.stripe.com", "files.stripe.com"], "methods": ["GET", "POST"], "path_prefixes": ["/v1/charges/and/refunds/of/the/payments/service/"],
                    "inject": {"headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY_FOR_THE_PAYMENTS_RECONCILIATION_SERVICE}"}}}}}),
        )
        .await)
    .await;
    let set_id = set["secret_set"]["secret_set_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{set}"))
        .to_owned();
    ok(owner
        .post(
            &format!("/v1/vault/secret-sets/{set_id}"),
            &json!({"set": {"WEBHOOK_SIGNING_SECRET_OF_THE_PAYMENTS_RECONCILIATION_SERVICE": "whsec_x"}}),
        )
        .await)
    .await;
    ok(owner
        .post(
            "/v1/vault/grants",
            &json!({"secret_set_id": set_id, "agent_id": long.id, "allowed_keys": "*", "allowed_actions": ["proxy_use", "mint_request_lease"]}),
        )
        .await)
    .await;
    ok(owner
        .post(
            "/v1/vault/leases/workflow",
            &json!({"agent_id": long.id, "secret_set_id": set_id, "purpose": LONG_REASON, "actions": ["proxy"], "ttl_seconds": 3600}),
        )
        .await)
    .await;
    for (email, role) in [
        (
            "ada.lovelace.of.the.analytical.engine.department@example.com",
            "admin",
        ),
        ("bob@example.com", "approver"),
        ("cy@example.com", "member"),
    ] {
        ok(owner
            .post(
                "/v1/workspace/members",
                &json!({"email": email, "role": role}),
            )
            .await)
        .await;
    }
    let key = ok(owner
        .post(
            "/v1/workspace/api-keys",
            &json!({"name": "payments gateway of the eu west 1 cluster", "live": true, "scopes": ["check", "verify", "agents:read", "audit:read"]}),
        )
        .await)
    .await;
    let key_id = key["api_key"]["key_id"].as_str().unwrap().to_owned();
    let token = ok(owner
        .post(
            "/v1/auth/tokens",
            &json!({"name": "ci_pipeline_of_the_payments_reconciliation_service", "scopes": ["read"]}),
        )
        .await)
    .await;
    let token_id = token["token_id"]
        .as_str()
        .or_else(|| token["token"]["token_id"].as_str())
        .map(str::to_owned);
    ok(owner
        .post(
            "/v1/workspace/audit/sinks",
            &json!({"name": "security_information_and_event_management_eu_west_1", "url": "https://siem.example.com/ingest/acp/events/of/the/payments/workspace", "enabled": false}),
        )
        .await)
    .await;
    ok(owner
        .post(
            "/v1/identity/kill-switch/minting",
            &json!({"paused": true, "reason": LONG_REASON}),
        )
        .await)
    .await;
    let members = ok(owner.get("/v1/workspace/members").await).await;
    let member_id = members["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["email"] == "cy@example.com")
        .and_then(|m| m["user_id"].as_str())
        .unwrap()
        .to_owned();
    let tokens = ok(owner.get("/v1/auth/tokens").await).await;
    let token_id =
        token_id.unwrap_or_else(|| tokens["items"][0]["token_id"].as_str().unwrap().to_owned());
    let events = ok(app
        .get("/v1/workspace/audit/events?event_type=decision.check&decision=challenge&limit=1")
        .await)
    .await;
    let event_id = events["items"][0]["event_id"].as_str().unwrap().to_owned();
    let policy_id = events["items"][0]["policy_id"].as_str().unwrap().to_owned();

    let browser = Browser::start().await;
    browser
        .call(
            reqwest::Method::POST,
            "/window/rect",
            json!({"width": 390, "height": 844}),
        )
        .await;
    // Before logging in: the login page.
    visit(&browser, &app, "/login").await;
    browser.log_in_as(&app, &owner).await;

    let pages = [
        "/dashboard".to_owned(),
        "/dashboard/agents".to_owned(),
        "/dashboard/agents?status=pending".to_owned(),
        format!("/dashboard/agents/{}", long.id),
        format!("/dashboard/agents/{}", pending_agent.id),
        format!("/dashboard/agents/{}/suspend", long.id),
        "/dashboard/policies".to_owned(),
        format!("/dashboard/policies/{policy_id}"),
        format!("/dashboard/policies/{policy_id}?version=1"),
        format!("/dashboard/policies/{policy_id}/diff?from=1&to=2"),
        format!("/dashboard/policies/{policy_id}/dry-run"),
        format!("/dashboard/policies/{policy_id}/rollback/1"),
        format!("/dashboard/policies/{policy_id}/test"),
        format!("/dashboard/policies/{policy_id}/test?event={event_id}"),
        "/dashboard/approvals".to_owned(),
        format!("/dashboard/approvals/{}", challenges[0]),
        format!("/dashboard/approvals/{}", challenges[1]),
        "/dashboard/audit".to_owned(),
        format!("/dashboard/audit/{event_id}"),
        "/dashboard/credentials".to_owned(),
        format!("/dashboard/credentials/{}/revoke", creds[0]),
        format!("/dashboard/credentials/agents/{}/revoke", long.id),
        "/dashboard/vault".to_owned(),
        format!("/dashboard/vault/{set_id}"),
        format!("/dashboard/vault/{set_id}/delete"),
        format!("/dashboard/vault/{set_id}/rollback/1"),
        "/dashboard/settings".to_owned(),
        format!("/dashboard/settings/members/{member_id}/remove"),
        format!("/dashboard/settings/api-keys/{key_id}/revoke"),
        format!("/dashboard/settings/tokens/{token_id}/revoke"),
        // An error page inside the console.
        "/dashboard/agents/agt_0190aaaaaaaa7aaa8aaaaaaaaaaaaaaa".to_owned(),
    ];
    for path in &pages {
        let title = visit(&browser, &app, path).await;
        assert!(!title.is_empty(), "{path}");
    }

    // The pages a form answers: a dry run of the other spec, and the bench's decision.
    browser
        .open(&app.url(&format!("/dashboard/policies/{policy_id}/dry-run")))
        .await;
    browser
        .execute(
            "document.getElementById('spec').value = arguments[0]; document.getElementById('dry-run-form').submit();",
            json!([serde_json::to_string(&spec(100)).unwrap()]),
        )
        .await;
    browser.element("#apply-form").await;
    assert_fits(&browser, "the dry run's answer").await;
    browser
        .open(&app.url(&format!(
            "/dashboard/policies/{policy_id}/test?event={event_id}"
        )))
        .await;
    browser
        .execute("document.getElementById('bench-form').submit();", json!([]))
        .await;
    browser.element("#outcome").await;
    assert_fits(&browser, "the bench's decision").await;
    // A new API key, shown once on the page that answers its form.
    browser.open(&app.url("/dashboard/settings")).await;
    browser
        .type_into(
            "#key-name",
            "a_key_with_a_very_long_name_for_the_payments_gateway",
        )
        .await;
    browser.click("#create-key-submit").await;
    browser.element("#new-secret").await;
    assert_fits(&browser, "a new API key").await;
    // An agent's claim: its link's page, and the console's page for the pasted link.
    browser.open(&claim_url).await;
    browser.element("#agent-name").await;
    assert_fits(&browser, "the claim link's page").await;
    browser.open(&app.url("/dashboard/agents")).await;
    browser
        .execute(
            "document.getElementById('claim-code').value = arguments[0]; document.getElementById('claim-code').form.submit();",
            json!([claim_url]),
        )
        .await;
    browser.element("#claim-form").await;
    assert_fits(&browser, "the console's claim page").await;
    // The approval link's page, as an approver opens it from the mail.
    browser.open(&links[0]).await;
    browser.element("#status").await;
    assert_fits(&browser, "the approval link's page").await;
    browser.quit().await;
    app.stop().await;
}
