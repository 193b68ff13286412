//! Actors as people read them. The audit trail, a challenge's `decided_by`, a policy version's
//! author and the like record who acted as `user:<id>`, `api_key:<id>` or `agent:<id>`; lists
//! show the person's email address, the key's name and the agent's name instead, looked up for a
//! whole page at once (one store call, never one per row).

use std::collections::{BTreeSet, HashMap};

use crate::store::{AccountStore, ActorName, StoreError};

/// The display names of a set of actors.
#[derive(Debug, Default, Clone)]
pub struct ActorNames(HashMap<String, String>);

impl ActorNames {
    /// The names of `actors` (as recorded), those of keys and agents only within
    /// `workspace_id`. Actors that are no id (`cli`, `system`, `approval_link`) have none.
    pub async fn lookup<'a>(
        store: &dyn AccountStore,
        workspace_id: &str,
        actors: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, StoreError> {
        let (mut users, mut keys, mut agents) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for actor in actors {
            match actor.split_once(':') {
                Some(("user", id)) => users.insert(id.to_owned()),
                Some(("api_key", id)) => keys.insert(id.to_owned()),
                Some(("agent", id)) => agents.insert(id.to_owned()),
                _ => false,
            };
        }
        if users.is_empty() && keys.is_empty() && agents.is_empty() {
            return Ok(Self::default());
        }
        let list = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        let found = store
            .actor_names(workspace_id, &list(users), &list(keys), &list(agents))
            .await?;
        Ok(Self(
            found
                .into_iter()
                .filter_map(|n| display(&n).map(|shown| (format!("{}:{}", n.kind, n.id), shown)))
                .collect(),
        ))
    }

    /// The name of `actor`, if it has one.
    pub fn get(&self, actor: &str) -> Option<String> {
        self.0.get(actor).cloned()
    }

    /// The name of `actor`, else the actor as recorded.
    pub fn shown(&self, actor: &str) -> String {
        self.get(actor).unwrap_or_else(|| actor.to_owned())
    }
}

/// `ada@example.com`; `API key gateway` (or `API key …abcd` without a name); `agent billing-bot`.
fn display(n: &ActorName) -> Option<String> {
    let name = n.name.as_deref().filter(|s| !s.is_empty());
    match (n.kind.as_str(), name) {
        ("user", Some(email)) => Some(email.to_owned()),
        ("api_key", Some(name)) => Some(format!("API key {name}")),
        ("api_key", None) => n.last_four.as_ref().map(|f| format!("API key …{f}")),
        ("agent", Some(name)) => Some(format!("agent {name}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(kind: &str, name: Option<&str>, last_four: Option<&str>) -> ActorName {
        ActorName {
            kind: kind.into(),
            id: "x".into(),
            name: name.map(Into::into),
            last_four: last_four.map(Into::into),
        }
    }

    #[test]
    fn people_keys_and_agents_read_by_name() {
        assert_eq!(
            display(&named("user", Some("ada@example.com"), None)).as_deref(),
            Some("ada@example.com")
        );
        assert_eq!(
            display(&named("api_key", Some("gateway"), Some("abcd"))).as_deref(),
            Some("API key gateway")
        );
        assert_eq!(
            display(&named("api_key", None, Some("abcd"))).as_deref(),
            Some("API key …abcd")
        );
        assert_eq!(
            display(&named("agent", Some("billing-bot"), None)).as_deref(),
            Some("agent billing-bot")
        );
        assert_eq!(display(&named("agent", Some(""), None)), None);
        let names = ActorNames(HashMap::from([(
            "user:usr_1".into(),
            "ada@example.com".into(),
        )]));
        assert_eq!(names.shown("user:usr_1"), "ada@example.com");
        assert_eq!(names.shown("system"), "system");
    }
}
