//! An audit event's console page links to what it names: its policy challenge (a page of its
//! own), its policy at the version that decided it, and the test bench filled in with the
//! request the decision recorded, which decides it again as it was decided.

use serde_json::{json, Value};

use crate::both_engines;
use crate::dashboard::{page, post_form};
use crate::helpers::*;

/// The events of one decision's trace, the oldest first.
async fn events_of_trace(app: &TestApp, trace_id: &str) -> Vec<Value> {
    let (s, body) = status_json(
        app.get(&format!("/v1/workspace/audit/events?trace_id={trace_id}"))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let mut items = body["items"].as_array().unwrap().clone();
    items.reverse();
    items
}

/// The one event of `event_type` in a trace.
async fn event_of(app: &TestApp, trace_id: &str, event_type: &str) -> Value {
    let found: Vec<Value> = events_of_trace(app, trace_id)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == event_type)
        .collect();
    assert_eq!(found.len(), 1, "{event_type} of {trace_id}: {found:?}");
    found[0].clone()
}

/// `text` as written in the page's HTML (askama's escaping).
fn escaped(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
}

/// HTML text back to what it says.
fn unescaped(html: &str) -> String {
    html.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

/// The text of the bench's `<textarea id=ID ...>`.
fn textarea(html: &str, id: &str) -> String {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no textarea {id}"));
    let open = start + html[start..].find('>').unwrap() + 1;
    let close = open + html[open..].find("</textarea>").unwrap();
    unescaped(&html[open..close])
}

/// The value of the bench's `<input id=ID ... value="...">`.
fn input_value(html: &str, id: &str) -> String {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no input {id}"));
    let value = start + html[start..].find("value=\"").unwrap() + 7;
    let end = value + html[value..].find('"').unwrap();
    unescaped(&html[value..end])
}

/// The selected option of the bench's `<select id=ID>`.
fn selected(html: &str, id: &str) -> String {
    let start = html
        .find(&format!("<select id=\"{id}\""))
        .unwrap_or_else(|| panic!("no select {id}"));
    let end = start + html[start..].find("</select>").unwrap();
    let options = &html[start..end];
    let at = options.find(" selected>").expect("an option is selected");
    let value = options[..at].rfind("value=\"").unwrap() + 7;
    let close = value + options[value..].find('"').unwrap();
    options[value..close].to_owned()
}

/// The `allow_up_to` of the spec shown in `text` (YAML).
fn allow_up_to(text: &str) -> f64 {
    let at = text.find("allow_up_to: ").expect("a spec with allow_up_to") + 13;
    let end = at
        + text[at..]
            .find(|c: char| c != '.' && !c.is_ascii_digit())
            .unwrap_or(text.len() - at);
    text[at..end].parse().unwrap()
}

both_engines! {
    async fn an_event_links_to_its_challenge_its_policy_version_and_the_bench(app) {
        let agent = crate::approvals::setup(&app).await;
        let refund = |amount: u32| json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": amount, "note": "<b>\"x\""}});
        let (s, asked) = status_json(app.post("/v1/check", &refund(400)).await).await;
        assert_eq!((s.as_u16(), asked["decision"].as_str()), (200, Some("challenge")), "{asked}");
        let challenge_id = asked["challenge_id"].as_str().unwrap().to_owned();
        let (s, allowed) = status_json(app.post("/v1/check", &refund(50)).await).await;
        assert_eq!((s.as_u16(), allowed["decision"].as_str()), (200, Some("allow")), "{allowed}");
        // Version 2: 50 is no longer allowed without a human.
        app.apply_policy(json!({
            "reusable_policy_blocks": {"refunds": {"amount": {"limits": {"USD": {"allow_up_to": 10, "challenge_up_to": 1000}}}}},
            "agent_groups": [{"name": "finance", "members": [agent.id]}],
            "bindings": [{"group": "finance", "blocks": ["refunds"]}]
        })).await;
        let owner = app.login("owner@example.com").await;
        let challenge_event = event_of(&app, asked["trace_id"].as_str().unwrap(), "decision.check").await;
        let allow_event = event_of(&app, allowed["trace_id"].as_str().unwrap(), "decision.check").await;
        let policy_id = allow_event["policy_id"].as_str().unwrap().to_owned();
        assert_eq!(allow_event["details"]["policy_version"], 1, "{allow_event}");

        // The decision that raised the challenge: links to the challenge, the policy at
        // version 1, and the bench filled in from it.
        let event_id = challenge_event["event_id"].as_str().unwrap();
        let (s, html) = page(&owner, &format!("/dashboard/audit/{event_id}")).await;
        assert_eq!(s, 200, "{html}");
        let challenge_href = format!("/dashboard/approvals/{challenge_id}");
        assert!(html.contains(&format!("<a href=\"{challenge_href}\" id=\"challenge-link\"><code>{challenge_id}</code></a>")), "{html}");
        let version_href = format!("/dashboard/policies/{policy_id}?version=1");
        assert!(html.contains(&format!("<a href=\"{version_href}\" id=\"policy-link\">")), "{html}");
        assert!(html.contains("<span id=\"policy-version\">1</span>"), "{html}");
        assert!(html.contains(&format!("href=\"/dashboard/policies/{policy_id}/test?event={event_id}\" id=\"open-bench\"")), "{html}");

        // The challenge's page: what was asked, pending, with the buttons for an owner.
        let (s, html) = page(&owner, &challenge_href).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains(&format!("<code id=\"challenge-id\">{challenge_id}</code>")), "{html}");
        assert!(html.contains("<span class=\"badge pending\" id=\"status\">pending</span>"), "{html}");
        assert!(html.contains("<code class=\"action\" id=\"action\">refund</code>"), "{html}");
        assert!(html.contains("<dd data-field=\"amount\">400</dd>"), "{html}");
        assert!(html.contains(&format!("action=\"{challenge_href}\"")) && html.contains("id=\"approve\""), "{html}");
        assert!(html.contains(&format!("href=\"/dashboard/policies/{policy_id}\" id=\"policy\"")), "{html}");
        assert!(html.contains(&format!("/dashboard/audit?trace_id={}", asked["trace_id"].as_str().unwrap())), "{html}");
        // The queue links to it too.
        let (_, queue) = page(&owner, "/dashboard/approvals").await;
        assert!(queue.contains(&format!("<a href=\"{challenge_href}\"><code>{challenge_id}</code></a>")), "{queue}");

        // Approved with the page's form: the approval's own event links to the challenge, whose
        // page shows who decided, without buttons.
        let res = post_form(&owner, &challenge_href, &[("csrf", &owner.csrf), ("decision", "approve"), ("reason", "checked")]).await;
        assert_eq!(res.status(), 303);
        let approval = event_of(&app, asked["trace_id"].as_str().unwrap(), "approval.approved").await;
        let (s, html) = page(&owner, &format!("/dashboard/audit/{}", approval["event_id"].as_str().unwrap())).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains(&format!("href=\"{challenge_href}\" id=\"challenge-link\"")), "{html}");
        assert!(!html.contains("id=\"open-bench\""), "an approval is no decision to replay: {html}");
        let (_, html) = page(&owner, &challenge_href).await;
        assert!(html.contains("id=\"status\">approved</span>"), "{html}");
        assert!(html.contains("id=\"decided-by\">user:"), "{html}");
        assert!(!html.contains("id=\"approve\""), "{html}");

        // The policy at version 1: its spec, a notice that it is not the current one, the
        // way to the current one and to what changed since.
        let (s, html) = page(&owner, &version_href).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains("id=\"earlier\""), "{html}");
        assert!(html.contains("Version 1, not the current one (version 2)"), "{html}");
        assert_eq!(allow_up_to(&html), 100.0, "the spec of version 1: {html}");
        assert!(html.contains(&format!("href=\"/dashboard/policies/{policy_id}/diff?from=1&#38;to=2\" id=\"changes-since\"")), "{html}");
        assert!(html.contains(&format!("href=\"/dashboard/policies/{policy_id}/test?version=1\" id=\"bench\"")), "{html}");
        let (_, current) = page(&owner, &format!("/dashboard/policies/{policy_id}")).await;
        assert!(!current.contains("id=\"earlier\""), "{current}");
        assert_eq!(allow_up_to(&current), 10.0, "{current}");
        assert_eq!(page(&owner, &format!("/dashboard/policies/{policy_id}?version=9")).await.0, 404);
        assert_eq!(page(&owner, &format!("/dashboard/policies/{policy_id}?version=0")).await.0, 400);

        // The bench from the allowed decision: its agent, action and recorded request, and
        // version 1 as the draft; evaluated, the draft allows as then, the current policy asks.
        let allow_id = allow_event["event_id"].as_str().unwrap();
        let (s, html) = page(&owner, &format!("/dashboard/policies/{policy_id}/test?event={allow_id}")).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains(&format!("Filled in from the decision {allow_id}")), "{html}");
        assert!(html.contains("it answered allow (amount_within_limit)."), "{html}");
        assert!(html.contains("The draft is version 1 of the policy, the one that decided"), "{html}");
        assert_eq!(input_value(&html, "agent_id"), agent.id);
        assert_eq!(input_value(&html, "action"), "refund");
        assert_eq!((selected(&html, "status"), selected(&html, "risk_tier")), ("active".to_owned(), "low".to_owned()));
        let context: Value = serde_json::from_str(&textarea(&html, "context")).unwrap();
        assert_eq!(context, json!({"currency": "USD", "amount": 50, "note": "<b>\"x\""}));
        assert!(html.contains(&escaped("\"note\": \"<b>\\\"x\\\"\"")), "the context is escaped: {html}");
        assert!(html.contains("id=\"against-draft\" checked"), "{html}");
        let draft = textarea(&html, "draft");
        assert_eq!(allow_up_to(&draft), 100.0, "{draft}");
        let form = |against: &'static str| {
            let (metadata, labels, context, draft) = (textarea(&html, "metadata"), textarea(&html, "labels"), textarea(&html, "context"), draft.clone());
            let owner = owner.clone();
            let (policy_id, agent_id) = (policy_id.clone(), agent.id.clone());
            async move {
                let res = post_form(&owner, &format!("/dashboard/policies/{policy_id}/test"), &[
                    ("csrf", &owner.csrf), ("agent_id", &agent_id), ("status", "active"), ("risk_tier", "low"),
                    ("metadata", &metadata), ("labels", &labels), ("action", "refund"), ("context", &context),
                    ("email", ""), ("against", against), ("draft", &draft),
                ]).await;
                assert_eq!(res.status(), 200);
                res.text().await.unwrap()
            }
        };
        let then = form("draft").await;
        assert!(then.contains("id=\"outcome\">allow</span>"), "{then}");
        let now = form("current").await;
        assert!(now.contains("id=\"outcome\">challenge</span>"), "{now}");

        // Another version as the draft, by hand.
        let (s, html) = page(&owner, &format!("/dashboard/policies/{policy_id}/test?version=1")).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains("The draft is version 1 of the policy;"), "{html}");
        assert_eq!(allow_up_to(&textarea(&html, "draft")), 100.0);

        // Only a decision of this policy fills the bench in.
        let approval_id = approval["event_id"].as_str().unwrap();
        let (s, html) = page(&owner, &format!("/dashboard/policies/{policy_id}/test?event={approval_id}")).await;
        assert_eq!(s, 400, "{html}");
        assert!(html.contains("invalid_event"), "{html}");
        let (s, other) = status_json(owner.post("/v1/policies/sync", &json!({"policy_id": "pol_other", "spec": {"agent_groups": [], "bindings": []}})).await).await;
        assert_eq!(s, 200, "{other}");
        let (s, html) = page(&owner, &format!("/dashboard/policies/pol_other/test?event={allow_id}")).await;
        assert_eq!(s, 400, "another policy's decision: {html}");
        let (s, _) = page(&owner, &format!("/dashboard/policies/{policy_id}/test?event=evt_0190aaaaaaaa7aaa8aaaaaaaaaaaaaaa")).await;
        assert_eq!(s, 404);

        // An event that names no policy challenge and no policy links to neither: the agent's
        // registration names its attestation challenge, which has no page.
        let (_, registered) = status_json(app.get(&format!("/v1/workspace/audit/events?agent_id={}&event_type=agent.registered", agent.id)).await).await;
        let registered = &registered["items"][0];
        assert!(registered["details"]["challenge_id"].as_str().is_some_and(|c| !c.starts_with("pch_")), "{registered}");
        let (s, html) = page(&owner, &format!("/dashboard/audit/{}", registered["event_id"].as_str().unwrap())).await;
        assert_eq!(s, 200, "{html}");
        for link in ["challenge-link", "policy-link", "open-bench"] {
            assert!(!html.contains(&format!("id=\"{link}\"")), "{link}: {html}");
        }
    }
}

both_engines! {
    async fn a_decision_whose_input_was_not_kept_fills_in_the_agent_and_the_action(app) {
        let agent = crate::approvals::setup(&app).await;
        // A context over what a decision records (16 KiB): the event keeps no input.
        let big = "x".repeat(20 * 1024);
        let (s, decided) = status_json(app.post("/v1/check", &json!({"agent_id": agent.id, "action": "refund", "context": {"currency": "USD", "amount": 5, "blob": big}})).await).await;
        assert_eq!(s, 200, "{decided}");
        let event = event_of(&app, decided["trace_id"].as_str().unwrap(), "decision.check").await;
        assert_eq!(event["details"]["input"]["omitted"], "too_large", "{event}");
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let member = app.login("member@example.com").await;
        let policy_id = event["policy_id"].as_str().unwrap();
        let (s, html) = page(&member, &format!("/dashboard/policies/{policy_id}/test?event={}", event["event_id"].as_str().unwrap())).await;
        assert_eq!(s, 200, "{html}");
        assert!(html.contains("did not keep its request"), "{html}");
        assert_eq!(input_value(&html, "agent_id"), agent.id);
        assert_eq!(input_value(&html, "action"), "refund");
        assert_eq!(textarea(&html, "context"), "{}");
        assert!(html.contains("id=\"against-current\" checked"), "the current version decided it: {html}");
    }
}
