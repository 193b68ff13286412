//! Who may do what: an agent's effective permissions, an action's holders (JSON and CSV), and
//! the AuthZEN searches, each answer checked against real decisions of `/v1/check` and
//! `/access/v1/evaluation`, on both engines.

use serde_json::{json, Value};

use crate::both_engines;
use crate::helpers::*;

fn spec(ops: &str, reader: &str) -> Value {
    json!({
        "reusable_policy_blocks": {
            "refund-limits": {"amount": {"limits": {"USD": {"allow_up_to": 500, "challenge_up_to": 5000}}}},
            "deploys": {"actions": {"allow": ["deploy"], "challenge": ["rollback"]}},
            "docs": {"cedar": [{
                "name": "handbook",
                "when": "context.action == \"read_doc\" && context.fields.contains(\"resource_id=handbook\")",
                "outcome": "allow", "reason_code": "handbook", "reason": "the handbook is open to readers"
            }]}
        },
        "agent_groups": [
            {"name": "finance", "selectors": [{"labels": {"dept": "finance"}}]},
            {"name": "ops", "members": [ops]},
            {"name": "readers", "members": [reader]}
        ],
        "bindings": [
            {"name": "finance-refunds", "group": "finance", "blocks": ["refund-limits"], "actions": ["refund"]},
            {"name": "ops-deploys", "group": "ops", "blocks": ["deploys"]},
            {"name": "readers-docs", "group": "readers", "blocks": ["docs"]}
        ]
    })
}

async fn label(app: &TestApp, agent: &TestAgent, key: &str) {
    let item =
        json!({"external_agent_key": key, "agent_id": agent.id, "labels": {"dept": "finance"}});
    let (s, body) = status_json(app.post("/v1/workspace/agents/upsert", &item).await).await;
    assert_eq!(s, 200, "{body}");
}

async fn ok_json(app: &TestApp, path: &str) -> Value {
    let (s, body) = status_json(app.get(path).await).await;
    assert_eq!(s, 200, "{path}: {body}");
    body
}

async fn search(app: &TestApp, path: &str, body: Value) -> Value {
    let (s, answer) = status_json(app.post(path, &body).await).await;
    assert_eq!(s, 200, "{path} {body}: {answer}");
    answer
}

fn ids(answer: &Value) -> Vec<String> {
    let mut ids: Vec<String> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

both_engines! {
    async fn access_review_and_search_agree_with_decisions(app) {
        let fin1 = app.active_agent("fin-1").await;
        let fin2 = app.active_agent("fin-2").await;
        let fin3 = app.active_agent("fin-3").await;
        let ops = app.active_agent("ops").await;
        let reader = app.active_agent("reader").await;
        let stranger = app.active_agent("stranger").await;
        label(&app, &fin1, "fin-1").await;
        label(&app, &fin2, "fin-2").await;
        label(&app, &fin3, "fin-3").await;
        let (s, body) = status_json(app.post(&format!("/v1/agents/{}/suspend", fin3.id), &json!({"reason": "review"})).await).await;
        assert_eq!(s, 200, "{body}");
        app.apply_policy(spec(&ops.id, &reader.id)).await;

        // An agent's effective permissions: its groups, each action's cells, what decides them.
        let a = ok_json(&app, &format!("/v1/access/agents/{}", fin1.id)).await;
        assert_eq!((a["agent_id"].as_str(), a["policy_id"].as_str(), a["version"].as_i64()), (Some(fin1.id.as_str()), Some("pol_default"), Some(1)));
        assert_eq!(a["groups"], json!(["finance"]));
        let actions: Vec<&str> = a["actions"].as_array().unwrap().iter().map(|x| x["action"].as_str().unwrap()).collect();
        assert_eq!(actions, ["refund", "(any other action)"]);
        let refund = &a["actions"][0]["cells"];
        assert_eq!(refund[0]["condition"], "amount.USD in [0, 500]");
        assert_eq!(refund[0]["outcome"], "allow");
        assert_eq!(refund[0]["decided_by"], json!(["finance-refunds/refund-limits"]));
        assert_eq!(refund[1]["condition"], "amount.USD in (500, 5000]");
        assert_eq!(refund[1]["outcome"], "challenge");
        assert_eq!(a["not_analysed"], json!([]));
        // Every cell's example, checked for real, gets the cell's outcome.
        for action in a["actions"].as_array().unwrap() {
            for cell in action["cells"].as_array().unwrap() {
                let example = &cell["example"];
                let mut check = json!({"agent_id": fin1.id, "action": example["action"], "context": example["context"]});
                if !example["email"].is_null() {
                    check["email"] = example["email"].clone();
                }
                let (s, decision) = status_json(app.post("/v1/check", &check).await).await;
                assert_eq!(s, 200, "{decision}");
                assert_eq!(decision["decision"], cell["outcome"], "{cell}");
            }
        }
        // As CSV, one row per cell.
        let res = app.get(&format!("/v1/access/agents/{}?format=csv", fin1.id)).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
        let csv = res.text().await.unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some("policy_id,version,agent,groups,action,condition,outcome,decided_by,reason_codes,example"));
        let cells: usize = a["actions"].as_array().unwrap().iter().map(|x| x["cells"].as_array().unwrap().len()).sum();
        assert_eq!(lines.count(), cells);
        // An agent with raw Cedar: named, not silently dropped.
        let r = ok_json(&app, &format!("/v1/access/agents/{}", reader.id)).await;
        assert_eq!(r["not_analysed"], json!(["raw Cedar rule `handbook` of readers-docs/docs: raw Cedar is not analysed"]));

        // Who may refund: the kinds of agent, cell by cell.
        let h = ok_json(&app, "/v1/access/actions/refund").await;
        let finance = h["principals"].as_array().unwrap().iter().find(|p| p["groups"] == json!(["finance"])).unwrap();
        assert_eq!(finance["principals"], json!(["agents with labels dept=finance"]));
        assert_eq!(finance["cells"][0]["outcome"], "allow");
        let csv = app.get("/v1/access/actions/refund?format=csv").await.text().await.unwrap();
        assert!(csv.contains("agents with labels dept=finance,finance,refund,"), "{csv}");
        // An earlier version, and bad input.
        assert_error(app.get("/v1/access/actions/refund?version=9").await, 404, "unknown_version").await;
        assert_error(app.get("/v1/access/actions/refund?policy_id=pol_nothing").await, 404, "unknown_policy").await;
        assert_error(app.get("/v1/access/agents/agt_00000000000000000000000000000000").await, 404, "unknown_agent").await;
        assert_error(app.get("/v1/access/actions/refund?format=xml").await, 400, "invalid_format").await;

        // Subject search: exactly the agents an evaluation allows, in order of their ids, paged.
        let request = |amount: f64| json!({
            "subject": {"type": "agent"}, "action": {"name": "refund"},
            "resource": {"type": "payment", "properties": {"amount": amount, "currency": "USD"}}
        });
        let found = search(&app, "/access/v1/search/subject", request(100.0)).await;
        let mut expected = vec![fin1.id.clone(), fin2.id.clone()];
        expected.sort();
        assert_eq!(ids(&found), expected);
        assert_eq!(found["page"]["next_token"], "");
        let everyone = [&fin1, &fin2, &fin3, &ops, &reader, &stranger];
        for amount in [100.0, 1000.0, 9000.0] {
            let found = ids(&search(&app, "/access/v1/search/subject", request(amount)).await);
            let with_challenges = search(&app, "/access/v1/search/subject?include=challenge", request(amount)).await;
            for agent in everyone {
                let mut evaluation = request(amount);
                evaluation["subject"]["id"] = json!(agent.id);
                evaluation["resource"]["id"] = json!("p-1");
                let (_, decided) = status_json(app.post("/access/v1/evaluation", &evaluation).await).await;
                let allowed = decided["decision"] == true;
                assert_eq!(found.contains(&agent.id), allowed, "{amount} {}: {decided}", agent.id);
                let challenged = decided["context"]["decision"] == "challenge";
                let listed = with_challenges["results"].as_array().unwrap().iter().find(|r| r["id"] == json!(agent.id));
                assert_eq!(listed.is_some(), allowed || challenged, "{amount} {}", agent.id);
                if challenged {
                    assert_eq!(listed.unwrap()["properties"], json!({"decision": "challenge"}));
                }
            }
        }
        // Paged one at a time.
        let mut paged = request(100.0);
        paged["page"] = json!({"limit": 1});
        let first = search(&app, "/access/v1/search/subject", paged.clone()).await;
        assert_eq!(first["page"]["count"], 1);
        let token = first["page"]["next_token"].as_str().unwrap().to_owned();
        assert!(!token.is_empty());
        paged["page"]["token"] = json!(token);
        let second = search(&app, "/access/v1/search/subject", paged.clone()).await;
        let mut both = [ids(&first), ids(&second)].concat();
        both.sort();
        assert_eq!(both, expected);
        assert!(ids(&first)[0] < ids(&second)[0], "in order of their ids");
        // Each evaluation past the first spends one of the key's tokens: a key whose rate is
        // spent gets a shorter page and a token to go on from.
        app.grant(&app.workspace_id, "owner@example.com", "owner").await;
        let owner = app.login("owner@example.com").await;
        let (s, made) = status_json(owner.post("/v1/workspace/api-keys", &json!({"name": "slow", "rate_limit": 1})).await).await;
        assert_eq!(s, 200, "{made}");
        let slow = app.with_key(made["key"].as_str().unwrap());
        let mut everything = request(100.0);
        everything["page"] = json!({"limit": 10});
        let (s, short) = status_json(slow.post("/access/v1/search/subject", &everything).await).await;
        assert_eq!(s, 200, "{short}");
        assert!(short["page"]["count"].as_u64().unwrap() <= 1, "{short}");
        assert!(!short["page"]["next_token"].as_str().unwrap().is_empty(), "{short}");
        // JSON Schema's integer: `1.0` is the limit 1; `1.5`, 0 and -1 are not limits.
        let mut whole = request(100.0);
        whole["page"] = json!({"limit": 1.0});
        assert_eq!(search(&app, "/access/v1/search/subject", whole.clone()).await["page"]["count"], 1);
        for limit in [json!(1.5), json!(0), json!(-1), json!(1001)] {
            whole["page"] = json!({"limit": limit});
            assert_error(app.post("/access/v1/search/subject", &whole).await, 400, "invalid_page").await;
        }
        paged["page"]["token"] = json!("nonsense");
        assert_error(app.post("/access/v1/search/subject", &paged).await, 400, "invalid_page").await;
        let mut listed_properties = request(100.0);
        listed_properties["subject"]["properties"] = json!([null]);
        assert_error(app.post("/access/v1/search/subject", &listed_properties).await, 400, "invalid_subject").await;
        let mut listed_page = request(100.0);
        listed_page["page"] = json!([null, null]);
        assert_error(app.post("/access/v1/search/subject", &listed_page).await, 400, "invalid_page").await;
        let mut user = request(100.0);
        user["subject"]["type"] = json!("user");
        assert_error(app.post("/access/v1/search/subject", &user).await, 400, "invalid_subject").await;
        let mut no_action = request(100.0);
        no_action.as_object_mut().unwrap().remove("action");
        assert_error(app.post("/access/v1/search/subject", &no_action).await, 400, "missing_action").await;

        // Action search: what the agent may do on the resource.
        let what = |agent: &TestAgent| json!({
            "subject": {"type": "agent", "id": agent.id},
            "resource": {"type": "payment", "properties": {"amount": 100, "currency": "USD"}}
        });
        let names = |answer: &Value| answer["results"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&search(&app, "/access/v1/search/action", what(&fin1)).await), ["refund"]);
        assert_eq!(names(&search(&app, "/access/v1/search/action", what(&ops)).await), ["deploy"]);
        let with = search(&app, "/access/v1/search/action?include=challenge", what(&ops)).await;
        assert_eq!(names(&with), ["deploy", "rollback"]);
        assert_eq!(with["results"][1]["properties"], json!({"decision": "challenge"}));
        assert!(names(&search(&app, "/access/v1/search/action", what(&stranger)).await).is_empty());
        // An action a raw Cedar rule names is searched too.
        let docs_actions = json!({"subject": {"type": "agent", "id": reader.id}, "resource": {"type": "document", "id": "handbook"}});
        assert_eq!(names(&search(&app, "/access/v1/search/action", docs_actions).await), ["read_doc"]);
        assert_error(app.post("/access/v1/search/action", &json!({"subject": {"type": "agent"}, "resource": {"type": "x"}})).await, 400, "missing_id").await;
        assert_error(app.post("/access/v1/search/action", &json!({"subject": {"type": "agent", "id": ""}})).await, 400, "missing_subject").await;
        // An email a check could not read is the request's error, not an empty answer.
        let bad_email = json!({"subject": {"type": "agent", "id": fin1.id}, "context": {"email": 5}});
        assert_error(app.post("/access/v1/search/action", &bad_email).await, 400, "invalid_email").await;

        // Resource search: the ids the policy names, and how it decides the others.
        let which = json!({"subject": {"type": "agent", "id": reader.id}, "action": {"name": "read_doc"}, "resource": {"type": "document"}});
        let docs = search(&app, "/access/v1/search/resource", which).await;
        assert_eq!(docs["results"], json!([{"type": "document", "id": "handbook"}]));
        assert_eq!(docs["context"], json!({"other_ids": "deny"}));

        // From a terminal: `acp access what-can|who-can`, text, JSON and CSV.
        let acp = |args: Vec<String>| {
            let (base, key) = (app.base.clone(), app.key.clone());
            async move {
                let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_acp"))
                    .args(&args)
                    .env("ACP_SERVER", base).env("ACP_TOKEN", &key).env("ACP_API_KEY", &key)
                    .env_remove("ACP_DATABASE_URL").env_remove("ACP_CREDENTIALS")
                    .output().await.unwrap();
                (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
            }
        };
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let (code, out, err) = acp(words("access what-can fin-1")).await;
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains("groups: finance"), "{out}");
        assert!(out.lines().any(|l| l.starts_with("refund") && l.contains("amount.USD in [0, 500]") && l.contains("allow") && l.contains("finance-refunds/refund-limits")), "{out}");
        let (code, out, err) = acp(words("access what-can fin-1 --output csv")).await;
        assert_eq!(code, Some(0), "{err}");
        let served = app.get(&format!("/v1/access/agents/{}?format=csv", fin1.id)).await.text().await.unwrap();
        assert_eq!(out, served, "the CLI's CSV is the server's");
        let (code, out, err) = acp(words("access who-can refund --output json")).await;
        assert_eq!(code, Some(0), "{err}");
        let answer: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(answer["action"], "refund");
        let mut who = words("access who-can refund --output json --context");
        who.push(r#"{"amount": 100, "currency": "USD"}"#.to_owned());
        let (code, out, err) = acp(who.clone()).await;
        assert_eq!(code, Some(0), "{err}");
        let answer: Value = serde_json::from_str(&out).unwrap();
        let mut listed: Vec<String> = answer["agents"].as_array().unwrap().iter().map(|a| a["agent_id"].as_str().unwrap().to_owned()).collect();
        listed.sort();
        assert_eq!(listed, expected);
        who[4] = "csv".to_owned();
        let (code, out, err) = acp(who).await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out.lines().next(), Some("agent_id,decision"));
        assert_eq!(out.lines().count(), 3, "{out}");
        // Rows are for `acp access` only.
        let (code, _, err) = acp(words("agents list --output csv")).await;
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("`--output csv` is for `acp access` only"), "{err}");

        // The console's Access page, for a member: the matrix, the agent, the action.
        app.grant(&app.workspace_id, "member@example.com", "member").await;
        let member = app.login("member@example.com").await;
        let res = member.get(&format!("/dashboard/access?agent={}&action=refund", fin1.id)).await;
        assert_eq!(res.status(), 200);
        let page = res.text().await.unwrap();
        for id in ["id=\"matrix\"", "id=\"agent-access\"", "id=\"action-access\"", "id=\"not-analysed\""] {
            assert!(page.contains(id), "{id}: {page}");
        }
        assert!(page.contains("amount.USD in [0, 500]"), "{page}");
        let res = member.get("/dashboard/access?agent=agt_00000000000000000000000000000000").await;
        assert_eq!(res.status(), 404);

        // Listed in the PDP metadata.
        let (_, config) = status_json(app.client.get(app.url("/.well-known/authzen-configuration")).send().await.unwrap()).await;
        let pdp = config["policy_decision_point"].as_str().unwrap();
        assert_eq!(config["search_subject_endpoint"], format!("{pdp}/access/v1/search/subject"));
        assert_eq!(config["search_action_endpoint"], format!("{pdp}/access/v1/search/action"));
        assert_eq!(config["search_resource_endpoint"], format!("{pdp}/access/v1/search/resource"));
    }
}
