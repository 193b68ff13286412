//! Names where ids are asked: an agent by its name, a member by email, an API key or a personal
//! access token by its name. Ids still work (anything with an id's shape is taken as one); a
//! name is looked up with the API, and a name that several hold is an error listing their ids.

use serde_json::Value;

use super::client::{items, Client, Failure};
use crate::domain::ids;

/// How many matches an ambiguous name's error lists at most.
const SHOWN: usize = 10;

/// The one id among `matches` (`(id, what it is)`), or the error of a name nobody or several
/// hold.
fn one(kind: &str, name: &str, matches: Vec<(String, String)>) -> anyhow::Result<String> {
    match matches.len() {
        0 => Err(Failure::local(6, format!("no {kind} named `{name}` here")).into()),
        1 => Ok(matches
            .into_iter()
            .next()
            .map(|(id, _)| id)
            .unwrap_or_default()),
        n => {
            let listed: Vec<String> = matches
                .iter()
                .take(SHOWN)
                .map(|(id, what)| {
                    if what.is_empty() {
                        id.clone()
                    } else {
                        format!("{id} ({what})")
                    }
                })
                .collect();
            let more = if n > SHOWN {
                format!(" and {} more", n - SHOWN)
            } else {
                String::new()
            };
            Err(Failure::local(
                1,
                format!(
                    "{n} {kind}s are named `{name}`: {}{more}; give the id instead",
                    listed.join(", ")
                ),
            )
            .into())
        }
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// An agent's id: `name_or_id` when it is an agent id, else the agent of the workspace with
/// that exact name (`GET /v1/agents?name=`).
pub async fn agent(client: &Client, name_or_id: &str) -> anyhow::Result<String> {
    if ids::has_shape(name_or_id, ids::AGENT) {
        return Ok(name_or_id.to_owned());
    }
    let req = client
        .request(reqwest::Method::GET, "/v1/agents")
        .query(&[("name", name_or_id), ("limit", "200")]);
    let listed = client.send(req).await?;
    let matches = items(&listed)
        .iter()
        .map(|a| (text(&a["agent_id"]), text(&a["status"])))
        .collect();
    one("agent", name_or_id, matches)
}

/// An API key's id: `name_or_id` when it is a key id, else the live key of the workspace with
/// that name.
pub async fn api_key(client: &Client, name_or_id: &str) -> anyhow::Result<String> {
    if ids::has_shape(name_or_id, ids::API_KEY) {
        return Ok(name_or_id.to_owned());
    }
    let listed = client.get("/v1/workspace/api-keys").await?;
    let matches = live_named(&listed, "key_id", name_or_id);
    one("API key", name_or_id, matches)
}

/// A personal access token's id: `name_or_id` when it is a token id, else the caller's live
/// token with that name.
pub async fn token(client: &Client, name_or_id: &str) -> anyhow::Result<String> {
    if ids::has_shape(name_or_id, ids::TOKEN) {
        return Ok(name_or_id.to_owned());
    }
    let listed = client.get("/v1/auth/tokens").await?;
    let matches = live_named(&listed, "token_id", name_or_id);
    one("token", name_or_id, matches)
}

/// The items of a list answer named `name` and not revoked, as `(id, last four)`.
fn live_named(listed: &Value, id_key: &str, name: &str) -> Vec<(String, String)> {
    items(listed)
        .iter()
        .filter(|k| k["name"].as_str() == Some(name) && k["revoked_at"].is_null())
        .map(|k| {
            let hint = k["last_four"]
                .as_str()
                .map(|f| format!("ends in {f}"))
                .unwrap_or_default();
            (text(&k[id_key]), hint)
        })
        .collect()
}

/// A member's user id: `email_or_id` when it is a user id, else the member with that email
/// address (compared without case).
pub async fn member(client: &Client, email_or_id: &str) -> anyhow::Result<String> {
    if ids::has_shape(email_or_id, ids::USER) {
        return Ok(email_or_id.to_owned());
    }
    if !email_or_id.contains('@') {
        return Err(Failure::local(
            1,
            format!("`{email_or_id}` is neither an email address nor a user id (`usr_...`)"),
        )
        .into());
    }
    let listed = client.get("/v1/workspace/members").await?;
    let found = items(&listed)
        .iter()
        .find(|m| {
            m["email"]
                .as_str()
                .is_some_and(|e| e.eq_ignore_ascii_case(email_or_id))
        })
        .map(|m| text(&m["user_id"]));
    found.ok_or_else(|| Failure::local(6, format!("{email_or_id} is not a member here")).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_id_none_or_an_error_listing_them() {
        let found = one("agent", "bot", vec![("agt_1".into(), "active".into())]).unwrap();
        assert_eq!(found, "agt_1");
        let none = one("agent", "bot", Vec::new()).unwrap_err();
        let none = none.downcast_ref::<Failure>().unwrap();
        assert_eq!(
            (none.exit, none.message.as_str()),
            (6, "no agent named `bot` here")
        );
        let two = one(
            "agent",
            "bot",
            vec![
                ("agt_1".into(), "active".into()),
                ("agt_2".into(), String::new()),
            ],
        )
        .unwrap_err();
        let two = two.downcast_ref::<Failure>().unwrap();
        assert_eq!(two.exit, 1);
        assert!(
            two.message
                .contains("2 agents are named `bot`: agt_1 (active), agt_2;"),
            "{}",
            two.message
        );
    }
}
