//! Who may do what: `GET /v1/access/agents/{agent_id}` and `GET /v1/access/actions/{action}`
//! (an access review, members read), and the AuthZEN 1.0 search APIs
//! `POST /access/v1/search/subject|action|resource` (the workspace's API key, `check` scope,
//! as the evaluation endpoints; confirmed against the store, since a search commits nothing
//! that would catch a key revoked meanwhile). See docs/access-review.md.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::api::{
    AccessParams, ActionAccessResponse, ActionSearchRequest, AgentAccessResponse, ErrorBody,
    ResourceSearchRequest, SearchActionFound, SearchActionsResponse, SearchEntitiesResponse,
    SearchEntity, SearchPageResponse, SearchParams, SearchRequest, SubjectSearchRequest,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::policy::access::{self, Asked, Page};
use crate::policy::spec::Outcome;

use super::authzen::{context_fields, object};
use super::extract::{AppJson, AppPath, AppQuery, Caller};
use super::operator::{needs, Authorized};

/// `json` (default) or `csv`.
fn wants_csv(format: Option<&str>) -> ApiResult<bool> {
    match format {
        None | Some("" | "json") => Ok(false),
        Some("csv") => Ok(true),
        Some(_) => Err(ApiError::invalid("format", "must be `json` or `csv`")),
    }
}

fn csv_response(name: &str, body: Result<String, csv::Error>) -> ApiResult<Response> {
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}.csv\""),
            ),
        ],
        body.map_err(ApiError::internal)?,
    )
        .into_response())
}

/// An agent's effective permissions under a policy: every action the rules that can decide it
/// name (and any other action), each with the cells under which it is allowed, challenged or
/// denied, what decides each and an example request.
#[utoipa::path(get, path = "/v1/access/agents/{agent_id}", tag = "decisions",
    params(("agent_id" = String, Path), AccessParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, description = "JSON, or `text/csv` with `format=csv`",
            content((AgentAccessResponse = "application/json"), (String = "text/csv"))),
        (status = 400, description = "`invalid_format`, `invalid_version`", body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "`insufficient_scope`, `insufficient_role`: both `policies:read` and `agents:read` are needed", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`, `unknown_version`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agent(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
    AppPath(agent_id): AppPath<String>,
    AppQuery(params): AppQuery<AccessParams>,
) -> ApiResult<Response> {
    // The answer shows the agent's metadata and labels: the agents' reading too.
    op.also(Need::AgentsRead)?;
    let csv = wants_csv(params.format.as_deref())?;
    let found = access::agent_access(
        &ctx,
        &op.workspace_id,
        &agent_id,
        params.policy_id.as_deref(),
        params.version,
    )
    .await?;
    let body = found.into_body(&agent_id);
    if csv {
        return csv_response(&format!("access-{agent_id}"), access::agent_csv(&body));
    }
    Ok(Json(body).into_response())
}

/// Who may do an action under a policy: every kind of agent (the agents in no group, each
/// selector's, each explicit member's), those treated alike together, with their cells.
#[utoipa::path(get, path = "/v1/access/actions/{action}", tag = "decisions",
    params(("action" = String, Path, max_length = 128,
        pattern = r#"^[^\x00-\x1f\x7f-\x9f"\\]*[^\x00-\x1f\x7f-\x9f"\\\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f"\\]*$"#),
        AccessParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, description = "JSON, or `text/csv` with `format=csv`",
            content((ActionAccessResponse = "application/json"), (String = "text/csv"))),
        (status = 400, description = "`invalid_format`, `invalid_action`", body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "`unknown_policy`, `unknown_version`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn action(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
    AppPath(action): AppPath<String>,
    AppQuery(params): AppQuery<AccessParams>,
) -> ApiResult<Response> {
    let csv = wants_csv(params.format.as_deref())?;
    let found = access::action_holders(
        &ctx,
        &op.workspace_id,
        &action,
        params.policy_id.as_deref(),
        params.version,
    )
    .await?;
    let body = found.into_body();
    if csv {
        return csv_response("access-action", access::action_csv(&body));
    }
    Ok(Json(body).into_response())
}

/// The search's request as the use case reads it: the context built as an evaluation's.
fn asked(caller: &Caller, req: &SearchRequest, params: &SearchParams) -> ApiResult<Asked> {
    let include_challenge = match params.include.as_deref() {
        None | Some("") => false,
        Some("challenge") => true,
        Some(_) => return Err(ApiError::invalid("include", "must be `challenge`")),
    };
    let mut own = object(req.context.clone()).map_err(|why| ApiError::invalid("context", why))?;
    let email = own.remove("email");
    let action = req.action.as_ref();
    let resource = req.resource.as_ref();
    let no_properties = None;
    let context = context_fields(
        own,
        None,
        resource.map(|r| r.kind.as_str()),
        resource.and_then(|r| r.id.as_deref()),
        [
            (
                resource.map_or(&no_properties, |r| &r.properties),
                "resource.properties",
            ),
            (
                action.map_or(&no_properties, |a| &a.properties),
                "action.properties",
            ),
        ],
    )?;
    let page = req.page.clone().unwrap_or_default();
    Ok(Asked {
        action: action
            .and_then(|a| a.name.clone())
            .filter(|n| !n.trim().is_empty()),
        context,
        email,
        policy_id: params.policy_id.clone(),
        include_challenge,
        token: page.token.filter(|t| !t.is_empty()),
        limit: page.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        key: Some(caller.access.key.clone()),
    })
}

fn agent_subject(req: &SearchRequest) -> ApiResult<()> {
    if req.subject.kind != "agent" {
        return Err(ApiError::invalid("subject", "must be of `type` `agent`"));
    }
    Ok(())
}

fn subject_id(req: &SearchRequest) -> ApiResult<&str> {
    agent_subject(req)?;
    req.subject
        .id
        .as_deref()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::bad_request("missing_subject", "`subject.id` is required"))
}

fn require_action(asked: &Asked) -> ApiResult<()> {
    if asked.action.is_none() {
        return Err(ApiError::bad_request(
            "missing_action",
            "`action.name` is required",
        ));
    }
    Ok(())
}

/// A challenged result's mark.
fn mark(outcome: Outcome) -> Option<Value> {
    (outcome == Outcome::Challenge).then(|| json!({"decision": "challenge"}))
}

fn page_of<T>(page: &Page<T>) -> SearchPageResponse {
    SearchPageResponse {
        next_token: page.next_token.clone().unwrap_or_default(),
        count: page.results.len(),
    }
}

/// AuthZEN subject search: the agents whose check of the action on the resource, with the
/// context, the policy allows (an evaluation would answer `decision: true`), in order of their ids.
#[utoipa::path(post, path = "/access/v1/search/subject", tag = "decisions", params(SearchParams),
    request_body = SubjectSearchRequest, security(("api_key" = [])),
    responses((status = 200, body = SearchEntitiesResponse),
        (status = 400, description = "`missing_action`, `invalid_subject` (its `type` is not `agent`), `invalid_page` (a token this search did not give, a limit outside 1..1000), `invalid_context`, `invalid_include`", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, description = "`unknown_policy`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn search_subject(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppQuery(params): AppQuery<SearchParams>,
    AppJson(req): AppJson<SubjectSearchRequest>,
) -> ApiResult<Json<SearchEntitiesResponse>> {
    caller.require(Need::Check)?;
    let req = SearchRequest::from(req);
    agent_subject(&req)?;
    let asked = asked(&caller, &req, &params)?;
    require_action(&asked)?;
    let page = access::subject_search(&ctx, &caller.workspace_id, &asked).await?;
    Ok(Json(SearchEntitiesResponse {
        page: page_of(&page),
        results: page
            .results
            .into_iter()
            .map(|(id, outcome)| SearchEntity {
                kind: "agent".into(),
                id,
                properties: mark(outcome),
            })
            .collect(),
        context: None,
    }))
}

/// AuthZEN action search: the actions the policy names for the agent that it allows on the
/// resource with the context, in order.
#[utoipa::path(post, path = "/access/v1/search/action", tag = "decisions", params(SearchParams),
    request_body = ActionSearchRequest, security(("api_key" = [])),
    responses((status = 200, body = SearchActionsResponse),
        (status = 400, description = "`missing_subject`, `invalid_subject`, `invalid_page`, `invalid_context`, `invalid_include`", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn search_action(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppQuery(params): AppQuery<SearchParams>,
    AppJson(req): AppJson<ActionSearchRequest>,
) -> ApiResult<Json<SearchActionsResponse>> {
    caller.require(Need::Check)?;
    let req = SearchRequest::from(req);
    let agent_id = subject_id(&req)?;
    let asked = asked(&caller, &req, &params)?;
    let page = access::action_search(&ctx, &caller.workspace_id, agent_id, &asked).await?;
    Ok(Json(SearchActionsResponse {
        page: page_of(&page),
        results: page
            .results
            .into_iter()
            .map(|(name, outcome)| SearchActionFound {
                name,
                properties: mark(outcome),
            })
            .collect(),
    }))
}

/// AuthZEN resource search: the resource ids the policy names for the agent and action that
/// it allows, in order; `context.other_ids` says how it decides an id it does not name.
#[utoipa::path(post, path = "/access/v1/search/resource", tag = "decisions", params(SearchParams),
    request_body = ResourceSearchRequest, security(("api_key" = [])),
    responses((status = 200, body = SearchEntitiesResponse),
        (status = 400, description = "`missing_subject`, `missing_action`, `missing_resource`, `invalid_subject`, `invalid_page`, `invalid_context`, `invalid_include`", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn search_resource(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppQuery(params): AppQuery<SearchParams>,
    AppJson(req): AppJson<ResourceSearchRequest>,
) -> ApiResult<Json<SearchEntitiesResponse>> {
    caller.require(Need::Check)?;
    let mut req = SearchRequest::from(req);
    let agent_id = subject_id(&req)?.to_owned();
    // The ids are what is searched for: one given is not read.
    let kind = match req.resource.as_mut() {
        Some(resource) => {
            resource.id = None;
            resource.kind.clone()
        }
        None => return Err(ApiError::missing("resource")),
    };
    let asked = asked(&caller, &req, &params)?;
    require_action(&asked)?;
    let (page, others) =
        access::resource_search(&ctx, &caller.workspace_id, &agent_id, &kind, &asked).await?;
    Ok(Json(SearchEntitiesResponse {
        page: page_of(&page),
        results: page
            .results
            .into_iter()
            .map(|(id, outcome)| SearchEntity {
                kind: kind.clone(),
                id,
                properties: mark(outcome),
            })
            .collect(),
        context: Some(json!({"other_ids": others.as_str()})),
    }))
}
