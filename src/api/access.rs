//! Who may do what: effective permissions (`/v1/access/...`) and the AuthZEN search APIs
//! (`/access/v1/search/...`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/access/agents/{agent_id}` and `GET /v1/access/actions/{action}`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AccessParams {
    /// Default `pol_default`.
    pub policy_id: Option<String>,
    /// A version of the policy (default: its current one).
    pub version: Option<i64>,
    /// `json` (default) or `csv` (one row per cell, for a review export).
    #[param(pattern = "^(json|csv)?$")]
    pub format: Option<String>,
}

/// One cell: the requests of an action that the policy decides one way.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AccessCellBody {
    /// The requests of the cell, e.g. `amount.USD in (500, 5000]`, `status = suspended`,
    /// `any request`. The first cell of an action is the best a request gets; each other one
    /// names what differs from the first cell's request, the rest being as there.
    pub condition: String,
    /// `allow`, `challenge` or `deny`.
    pub outcome: String,
    /// The guardrails or `binding/block` whose rules decide the cell's example.
    pub decided_by: Vec<String>,
    pub reason_codes: Vec<String>,
    /// One request of the cell, in the shape of a spec's test case (`agent`, `action`,
    /// `context`, `email`): `/v1/check` decides it `outcome`.
    #[schema(value_type = Object)]
    pub example: Value,
}

/// An action and its cells.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionCellsBody {
    /// The action, or `(any other action)`.
    pub action: String,
    pub cells: Vec<AccessCellBody>,
}

/// An agent's effective permissions under a policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentAccessResponse {
    pub ok: bool,
    pub agent_id: String,
    pub policy_id: String,
    pub version: i64,
    pub policy_hash: String,
    /// The policy's groups the agent is in.
    pub groups: Vec<String>,
    /// Every action the rules that can decide the agent name, and `(any other action)`.
    pub actions: Vec<ActionCellsBody>,
    /// Raw Cedar rules the analysis does not read, and cells one of them decides.
    pub not_analysed: Vec<String>,
}

/// Agents that an action treats alike, and their cells.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PrincipalCellsBody {
    /// Their groups (`finance`, `a, b`, `(no group)`), one entry per kind of agent.
    pub groups: Vec<String>,
    /// Which agents, one entry per kind (`agents with labels dept=finance`,
    /// `agt_… (explicit member)`, `agents in no group`).
    pub principals: Vec<String>,
    pub cells: Vec<AccessCellBody>,
}

/// Who may do an action under a policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionAccessResponse {
    pub ok: bool,
    pub action: String,
    pub policy_id: String,
    pub version: i64,
    pub policy_hash: String,
    pub principals: Vec<PrincipalCellsBody>,
    pub not_analysed: Vec<String>,
}

/// `?include=challenge` adds the challenged results, marked.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// Default `pol_default`.
    pub policy_id: Option<String>,
    /// `challenge`: challenged results too, each marked `properties.decision = "challenge"`.
    #[param(pattern = "^(challenge)?$")]
    pub include: Option<String>,
}

/// A search's subject: the agents (`type` is `agent`; `id` names one, for action and
/// resource search).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchSubject {
    #[serde(rename = "type")]
    #[schema(pattern = "^agent$")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Read, not used: an agent's own facts are its stored ones (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<serde_json::Map<String, Value>>,
}

/// A search's resource: `id` is left out by resource search.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchResource {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// A search's action: `name` is left out by action search.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchAction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// The page asked for.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct SearchPage {
    /// The `next_token` of the page before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// At most this many results (1 to 1000, default 50).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::int::optional"
    )]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// `POST /access/v1/search/subject|action|resource`: the part searched for is left
/// without its id (or name); the check's context is built as for an evaluation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchRequest {
    pub subject: SearchSubject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<SearchAction>,
    /// Its `type` (and `id`, but for resource search) join the context as `resource_type` and
    /// `resource_id`; subject and action search take none as well (a check without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<SearchResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::optional_object"
    )]
    pub page: Option<SearchPage>,
}

/// A search's subject named by its id (action and resource search).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IdentifiedSubject {
    #[serde(rename = "type")]
    #[schema(pattern = "^agent$")]
    pub kind: String,
    /// The agent's id.
    #[schema(min_length = 1)]
    pub id: String,
    /// Read, not used: an agent's own facts are its stored ones (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<serde_json::Map<String, Value>>,
}

/// A search's action named (subject and resource search).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NamedAction {
    #[schema(
        max_length = 128,
        pattern = r#"^[^\x00-\x1f\x7f-\x9f"\\]*[^\x00-\x1f\x7f-\x9f"\\\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f"\\]*$"#
    )]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// `POST /access/v1/search/subject`: which agents may do the action.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubjectSearchRequest {
    /// `{"type": "agent"}`.
    pub subject: SearchSubject,
    pub action: NamedAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<SearchResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::optional_object"
    )]
    pub page: Option<SearchPage>,
}

/// `POST /access/v1/search/action`: which actions the agent may do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionSearchRequest {
    pub subject: IdentifiedSubject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<SearchResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::optional_object"
    )]
    pub page: Option<SearchPage>,
}

/// `POST /access/v1/search/resource`: which resources (of `resource.type`) the agent may
/// do the action on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ResourceSearchRequest {
    pub subject: IdentifiedSubject,
    pub action: NamedAction,
    pub resource: SearchResource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::optional_object"
    )]
    pub page: Option<SearchPage>,
}

impl From<NamedAction> for SearchAction {
    fn from(a: NamedAction) -> Self {
        SearchAction {
            name: Some(a.name),
            properties: a.properties,
        }
    }
}

impl From<SubjectSearchRequest> for SearchRequest {
    fn from(r: SubjectSearchRequest) -> Self {
        SearchRequest {
            subject: r.subject,
            action: Some(r.action.into()),
            resource: r.resource,
            context: r.context,
            page: r.page,
        }
    }
}

impl IdentifiedSubject {
    fn into_search(self) -> SearchSubject {
        SearchSubject {
            kind: self.kind,
            id: Some(self.id),
            properties: self.properties,
        }
    }
}

impl From<ActionSearchRequest> for SearchRequest {
    fn from(r: ActionSearchRequest) -> Self {
        SearchRequest {
            subject: r.subject.into_search(),
            action: None,
            resource: r.resource,
            context: r.context,
            page: r.page,
        }
    }
}

impl From<ResourceSearchRequest> for SearchRequest {
    fn from(r: ResourceSearchRequest) -> Self {
        SearchRequest {
            subject: r.subject.into_search(),
            action: Some(r.action.into()),
            resource: Some(r.resource),
            context: r.context,
            page: r.page,
        }
    }
}

/// The page answered.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchPageResponse {
    /// Where the next page starts; empty when this is the last one.
    pub next_token: String,
    /// The results on this page.
    pub count: usize,
}

/// A subject or resource found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchEntity {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    /// `{"decision": "challenge"}` on a challenged result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// An action found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchActionFound {
    pub name: String,
    /// `{"decision": "challenge"}` on a challenged result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// Subject or resource search's answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchEntitiesResponse {
    pub results: Vec<SearchEntity>,
    pub page: SearchPageResponse,
    /// Resource search: `{"other_ids": "allow" | "challenge" | "deny"}`, how the policy decides
    /// an id it does not name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
}

/// Action search's answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchActionsResponse {
    pub results: Vec<SearchActionFound>,
    pub page: SearchPageResponse,
}
