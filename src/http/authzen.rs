//! The OpenID AuthZEN Authorization API 1.0 over acp's checks: `POST /access/v1/evaluation`,
//! `POST /access/v1/evaluations` and `GET /.well-known/authzen-configuration`, authenticated by
//! the workspace's API key (as `/v1/check`).
//!
//! The mapping (docs/authzen.md): `subject.id` is the agent's id (`subject.type` and
//! `subject.properties` are not read: acp knows the agent); `action.name` is the action; the
//! check's context is the request's `context` with `resource_type`, `resource_id`, and the
//! fields of `resource.properties` and `action.properties` added (a name given twice is an
//! error); a `send_email` check's email facts are the context's `email`. The policy is
//! `pol_default` unless the query names one (`?policy_id=`). An allow is `{"decision": true}`;
//! a deny is `false` with its reasons in the context; a challenge is `false` with the challenge
//! and its approval link in the context; a request that could not be decided is `false` with
//! `error: {status, code, message}` (payload-level errors, a missing subject for instance, are
//! 400 as the standard says).
//!
//! The top-level `context` of `POST /access/v1/evaluations` is kept once and shared by every
//! evaluation (each check reads its own fields over it), and what the evaluations come to once
//! the defaults are merged into each is bounded ([`MAX_MERGED_BYTES`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use utoipa::IntoParams;

use crate::api::{
    AuthzenAction, AuthzenConfiguration, AuthzenDecision, AuthzenEvaluationItem,
    AuthzenEvaluationRequest, AuthzenEvaluationsAnswer, AuthzenEvaluationsRequest,
    AuthzenEvaluationsResponse, AuthzenResource, AuthzenSubject, CheckRequest, DecisionResponse,
    ErrorBody,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::policy::check::{self, StopAt, MAX_BATCH_CHECKS};
use crate::policy::error::CheckError;

use super::extract::{AppJson, AppQuery, Deciding, DecidingBatch};

/// The most bytes the evaluations of one request may come to once the defaults are merged
/// into each: for every evaluation, its subject id, its action (name and properties), its
/// resource (type, id and properties) and its context with the top-level one under it, as
/// JSON, whether its own or the defaults; summed over the evaluations. Each evaluation is
/// decided on its merged fields, so this bounds the work (and the audit) one request asks
/// for, which the body limit alone does not: a top-level context counts once per evaluation.
pub const MAX_MERGED_BYTES: usize = 1024 * 1024;

/// The policy the evaluations are decided under.
#[derive(Debug, Default, Deserialize, IntoParams)]
pub struct AuthzenParams {
    /// Default `pol_default`.
    pub policy_id: Option<String>,
}

/// One AuthZEN access evaluation: a check of the subject (an agent) doing the action.
#[utoipa::path(post, path = "/access/v1/evaluation", tag = "decisions", params(AuthzenParams),
    request_body = AuthzenEvaluationRequest, security(("api_key" = [])),
    responses((status = 200, body = AuthzenDecision), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn evaluation(
    State(ctx): State<SharedContext>,
    Deciding(caller): Deciding,
    AppQuery(params): AppQuery<AuthzenParams>,
    AppJson(req): AppJson<AuthzenEvaluationRequest>,
) -> ApiResult<Json<AuthzenDecision>> {
    caller.require(Need::Check)?;
    let own = object(req.context).map_err(|why| ApiError::invalid("context", why))?;
    let check_req = to_check(
        &req.subject,
        &req.action,
        &req.resource,
        own,
        Shared::default(),
        params.policy_id,
    )?;
    let answer = check::check(&ctx, &caller.access, &caller.actor(), check_req).await;
    if let Ok(decision) = &answer {
        super::observe::note_decision(&decision.trace_id);
    }
    Ok(Json(authzen_decision(answer)?))
}

/// AuthZEN access evaluations: up to 100, defaults at the top level, in order, with the
/// `evaluations_semantic` option (`execute_all`, `deny_on_first_deny`,
/// `permit_on_first_permit`); decided as `POST /v1/check/batch` decides (one commit). Without
/// `evaluations` (or with an empty list) the request is one evaluation, answered as
/// `POST /access/v1/evaluation` answers it.
#[utoipa::path(post, path = "/access/v1/evaluations", tag = "decisions", params(AuthzenParams),
    request_body = AuthzenEvaluationsRequest, security(("api_key" = [])),
    responses((status = 200, description = "`{evaluations: [decision, ...]}`, or one decision when the request has no evaluations", body = AuthzenEvaluationsAnswer),
        (status = 400, description = "`missing_field` (a subject, action or resource in neither the evaluation nor the defaults), `invalid_field`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 413, description = "`evaluations_too_large`: the evaluations, merged with the defaults, come to more than 1 MiB", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the key's rate cannot take this many decisions now (each evaluation counts); `retry_after` and `Retry-After`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn evaluations(
    State(ctx): State<SharedContext>,
    DecidingBatch(caller): DecidingBatch,
    AppQuery(params): AppQuery<AuthzenParams>,
    AppJson(mut req): AppJson<AuthzenEvaluationsRequest>,
) -> ApiResult<Json<AuthzenEvaluationsAnswer>> {
    let items = req.evaluations.take().unwrap_or_default();
    // One token of the key's rate per evaluation (a request of one, or a refused one, one).
    caller.spend(if items.len() > MAX_BATCH_CHECKS {
        1
    } else {
        items.len()
    })?;
    caller.require(Need::Check)?;
    let stop = semantic(req.options.as_ref())?;
    if items.is_empty() {
        // The backwards-compatible form: one evaluation, answered as a single decision.
        let own = object(req.context.take()).map_err(|why| ApiError::invalid("context", why))?;
        let check_req = to_check(
            required(req.subject.as_ref(), "subject")?,
            required(req.action.as_ref(), "action")?,
            required(req.resource.as_ref(), "resource")?,
            own,
            Shared::default(),
            params.policy_id,
        )?;
        let answer = check::check(&ctx, &caller.access, &caller.actor(), check_req).await;
        return Ok(Json(AuthzenEvaluationsAnswer::One(authzen_decision(
            answer,
        )?)));
    }
    if items.len() > MAX_BATCH_CHECKS {
        return Err(ApiError::invalid(
            "evaluations",
            format_args!("must hold at most {MAX_BATCH_CHECKS} evaluations"),
        ));
    }
    let merged = merged_bytes(&req, &items);
    if merged > MAX_MERGED_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "evaluations_too_large",
            format!(
                "the evaluations come to {merged} bytes with the defaults merged into each, over the {MAX_MERGED_BYTES} one request may ask for: send fewer evaluations or smaller defaults"
            ),
        ));
    }
    // The top-level context is kept once, shared by every check (its `email` is given to each
    // evaluation whose own context has none).
    let mut top = object(req.context.take()).map_err(|why| ApiError::invalid("context", why))?;
    let email = top.remove("email");
    let top = (!top.is_empty()).then(|| Arc::new(top));
    let shared = Shared {
        fields: top.as_deref(),
        email: email.as_ref(),
    };
    // Every evaluation is made whole from the defaults first: a payload that leaves one
    // without a subject, action or resource is refused as a whole (400), as the standard says.
    // An evaluation that cannot become a check is answered in its place, undecided (and stops
    // a `deny_on_first_deny` list there).
    let mut ready: Vec<CheckRequest> = Vec::with_capacity(items.len());
    let mut slots: Vec<Option<ApiError>> = Vec::with_capacity(items.len());
    for (n, item) in items.into_iter().enumerate() {
        let subject = item.subject.as_ref().or(req.subject.as_ref());
        let action = item.action.as_ref().or(req.action.as_ref());
        let resource = item.resource.as_ref().or(req.resource.as_ref());
        let (Some(subject), Some(action), Some(resource)) = (subject, action, resource) else {
            let absent = if subject.is_none() {
                "subject"
            } else if action.is_none() {
                "action"
            } else {
                "resource"
            };
            return Err(ApiError::bad_request(
                format!("missing_{absent}"),
                format!("evaluations[{n}] has no `{absent}`, and the request gives no default"),
            ));
        };
        let own = object(item.context).map_err(|why| {
            ApiError::invalid("context", format_args!("evaluations[{n}].context: {why}"))
        })?;
        match to_check(
            subject,
            action,
            resource,
            own,
            shared,
            params.policy_id.clone(),
        ) {
            Ok(check) => {
                ready.push(check);
                slots.push(None);
            }
            Err(err) => {
                slots.push(Some(err));
                if stop == StopAt::FirstDenial {
                    break;
                }
            }
        }
    }
    let mut decided = if ready.is_empty() {
        Vec::new()
    } else {
        check::check_batch(&ctx, &caller.access, &caller.actor(), ready, top, stop).await?
    }
    .into_iter();
    let mut evaluations = Vec::with_capacity(slots.len());
    for slot in slots {
        let decision = match slot {
            Some(err) => undecided(err),
            None => match decided.next() {
                Some(answer) => authzen_decision_or_error(answer),
                // The batch stopped before this evaluation.
                None => break,
            },
        };
        let stops = match stop {
            StopAt::Never => false,
            StopAt::FirstDenial => !decision.decision,
            StopAt::FirstAllow => decision.decision,
        };
        evaluations.push(decision);
        if stops {
            break;
        }
    }
    Ok(Json(AuthzenEvaluationsAnswer::Many(
        AuthzenEvaluationsResponse { evaluations },
    )))
}

/// Where this PDP's endpoints are (the AuthZEN PDP metadata).
#[utoipa::path(get, path = "/.well-known/authzen-configuration", tag = "decisions",
    responses((status = 200, body = AuthzenConfiguration)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn configuration(State(ctx): State<SharedContext>) -> impl IntoResponse {
    let base = ctx.public_url.trim_end_matches('/');
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(AuthzenConfiguration {
            policy_decision_point: base.to_owned(),
            access_evaluation_endpoint: format!("{base}/access/v1/evaluation"),
            access_evaluations_endpoint: format!("{base}/access/v1/evaluations"),
            search_subject_endpoint: format!("{base}/access/v1/search/subject"),
            search_action_endpoint: format!("{base}/access/v1/search/action"),
            search_resource_endpoint: format!("{base}/access/v1/search/resource"),
        }),
    )
}

fn required<'a, T>(value: Option<&'a T>, name: &str) -> ApiResult<&'a T> {
    value.ok_or_else(|| ApiError::missing(name))
}

/// `options.evaluations_semantic` (default `execute_all`).
fn semantic(options: Option<&Value>) -> ApiResult<StopAt> {
    let semantic = match options {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => o.get("evaluations_semantic"),
        Some(_) => return Err(ApiError::invalid("options", "must be an object")),
    };
    match semantic {
        None | Some(Value::Null) => Ok(StopAt::Never),
        Some(Value::String(s)) if s == "execute_all" => Ok(StopAt::Never),
        Some(Value::String(s)) if s == "deny_on_first_deny" => Ok(StopAt::FirstDenial),
        Some(Value::String(s)) if s == "permit_on_first_permit" => Ok(StopAt::FirstAllow),
        Some(_) => Err(ApiError::bad_request(
            "invalid_evaluations_semantic",
            "`options.evaluations_semantic` must be `execute_all`, `deny_on_first_deny` or `permit_on_first_permit`",
        )),
    }
}

/// A context's fields (none for no context or `null`).
pub(super) fn object(context: Option<Value>) -> Result<Map<String, Value>, &'static str> {
    match context {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o),
        Some(_) => Err("must be an object"),
    }
}

/// What the evaluations come to with the defaults merged into each (see [`MAX_MERGED_BYTES`]):
/// each default is measured once and counted for every evaluation that takes it.
fn merged_bytes(req: &AuthzenEvaluationsRequest, items: &[AuthzenEvaluationItem]) -> usize {
    let json = |v: &Option<Value>| v.as_ref().map_or(0, crate::policy::impact::json_len);
    let subject = |s: &AuthzenSubject| s.id.len();
    let action = |a: &AuthzenAction| a.name.len().saturating_add(json(&a.properties));
    let resource = |r: &AuthzenResource| {
        r.kind
            .len()
            .saturating_add(r.id.len())
            .saturating_add(json(&r.properties))
    };
    let defaults = [
        req.subject.as_ref().map_or(0, subject),
        req.action.as_ref().map_or(0, action),
        req.resource.as_ref().map_or(0, resource),
        json(&req.context),
    ];
    items.iter().fold(0, |sum: usize, item| {
        [
            item.subject.as_ref().map_or(defaults[0], subject),
            item.action.as_ref().map_or(defaults[1], action),
            item.resource.as_ref().map_or(defaults[2], resource),
            defaults[3],
            json(&item.context),
        ]
        .into_iter()
        .fold(sum, usize::saturating_add)
    })
}

/// What the evaluations of one request share: the top-level context's fields (but `email`)
/// and its `email`.
#[derive(Debug, Clone, Copy, Default)]
struct Shared<'a> {
    fields: Option<&'a Map<String, Value>>,
    email: Option<&'a Value>,
}

/// The check an evaluation asks for (see the module's mapping): `own` is its own context, to
/// be read over `shared.fields` (which the check is given apart, once for all evaluations).
fn to_check(
    subject: &AuthzenSubject,
    action: &AuthzenAction,
    resource: &AuthzenResource,
    own: Map<String, Value>,
    shared: Shared<'_>,
    policy_id: Option<String>,
) -> ApiResult<CheckRequest> {
    if subject.id.is_empty() {
        return Err(ApiError::bad_request(
            "missing_subject",
            "`subject.id` is required",
        ));
    }
    if action.name.trim().is_empty() {
        return Err(ApiError::bad_request(
            "missing_action",
            "`action.name` is required",
        ));
    }
    let mut fields = own;
    let email = fields.remove("email").or_else(|| shared.email.cloned());
    let fields = context_fields(
        fields,
        shared.fields,
        Some(&resource.kind),
        Some(&resource.id),
        [
            (&resource.properties, "resource.properties"),
            (&action.properties, "action.properties"),
        ],
    )?;
    Ok(CheckRequest {
        agent_id: subject.id.clone(),
        policy_id,
        action: action.name.clone(),
        context: Some(Value::Object(fields)),
        email,
    })
}

/// A check's context fields from an AuthZEN request: its own `context` (without `email`), the
/// resource's type and id (`resource_type`, `resource_id`; each when given) and the fields
/// of `resource.properties` and `action.properties`; a name given twice is an error.
pub(super) fn context_fields(
    mut fields: Map<String, Value>,
    shared: Option<&Map<String, Value>>,
    resource_type: Option<&str>,
    resource_id: Option<&str>,
    properties: [(&Option<Value>, &str); 2],
) -> ApiResult<Map<String, Value>> {
    let mut add = |name: &str, value: Value, from: &str| -> ApiResult<()> {
        if fields.contains_key(name) || shared.is_some_and(|s| s.contains_key(name)) {
            return Err(ApiError::invalid(
                "context",
                format_args!("`{name}` of `{from}` is also a field of the context"),
            ));
        }
        fields.insert(name.to_owned(), value);
        Ok(())
    };
    if let Some(kind) = resource_type {
        add("resource_type", json!(kind), "resource.type")?;
    }
    if let Some(id) = resource_id {
        add("resource_id", json!(id), "resource.id")?;
    }
    for (properties, from) in properties {
        match properties {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) => {
                for (name, value) in o {
                    add(name, value.clone(), from)?;
                }
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "context",
                    format_args!("`{from}` must be an object"),
                ))
            }
        }
    }
    Ok(fields)
}

/// A check's answer as an AuthZEN decision; a failure the PEP caused in the payload (400) or a
/// server failure stays an HTTP error.
fn authzen_decision(answer: Result<DecisionResponse, CheckError>) -> ApiResult<AuthzenDecision> {
    match answer {
        Ok(decision) => Ok(decided(decision)),
        Err(err) => {
            let err = ApiError::from(err);
            if err.status.is_client_error() && err.status.as_u16() != 400 {
                err.log_cause();
                Ok(undecided(err))
            } else {
                Err(err)
            }
        }
    }
}

/// In a list of evaluations every failure is that evaluation's denial.
fn authzen_decision_or_error(answer: Result<DecisionResponse, CheckError>) -> AuthzenDecision {
    match answer {
        Ok(decision) => decided(decision),
        Err(err) => {
            let err = ApiError::from(err);
            err.log_cause();
            undecided(err)
        }
    }
}

/// `allow` → true; `deny` and `challenge` → false with what the PEP needs in the context.
fn decided(d: DecisionResponse) -> AuthzenDecision {
    if d.decision == "allow" {
        return AuthzenDecision {
            decision: true,
            context: None,
        };
    }
    let mut context = json!({
        "decision": d.decision,
        "reason": d.reason_codes.first().cloned().unwrap_or_else(|| d.decision.clone()),
        "reason_codes": d.reason_codes,
        "reasons": d.reasons,
        "trace_id": d.trace_id,
        "policy_id": d.policy_id,
        "policy_version": d.policy_version,
    });
    if let (Some(id), Some(challenge)) = (d.challenge_id, d.challenge) {
        context["reason"] = json!("challenge");
        context["challenge_id"] = json!(id);
        context["challenge"] = json!(challenge);
    }
    AuthzenDecision {
        decision: false,
        context: Some(context),
    }
}

/// A denial that carries the error the request could not be decided for.
fn undecided(err: ApiError) -> AuthzenDecision {
    AuthzenDecision {
        decision: false,
        context: Some(json!({
            "reason": err.code,
            "error": {"status": err.status.as_u16(), "code": err.code, "message": err.message},
        })),
    }
}
