//! `/v1/vault/{policy/eval, leases/request/mint, secrets/read, proxy/request}`: the vault's
//! agent side, in requests the agent signs itself. The public
//! client sends no `agent_id` in these bodies: the signer is the agent.

use axum::extract::State;
use axum::Json;

use crate::api::{
    DecisionResponse, ErrorBody, ProxyRequest, ProxyResponse, RequestLeaseMintRequest,
    RequestLeaseResponse, SecretsReadRequest, SecretsReadResponse, VaultEvalRequest,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::vault::agent::{self as vault_agent, Signer};
use crate::vault::proxy as vault_proxy;

use super::extract::SignedRequest;

fn signer(signed: &SignedRequest) -> Signer<'_> {
    Signer {
        agent: &signed.agent,
        nonce: signed.nonce.clone(),
    }
}

/// How the policy judges a vault action of the signing agent (`read`, `proxy`,
/// `mint_lease`); nothing is consumed. Always 200 with the decision, committed and audited
/// like any check's (a challenge gets its approval link).
#[utoipa::path(post, path = "/v1/vault/policy/eval", tag = "vault", request_body = VaultEvalRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = DecisionResponse),
        (status = 400, description = "`missing_*`, `invalid_action`, `invalid_environment`, `invalid_provider`, `invalid_request`", body = ErrorBody),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_secret_set`, `unknown_key`, `unknown_profile`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn eval(
    State(ctx): State<SharedContext>,
    signed: SignedRequest,
) -> ApiResult<Json<DecisionResponse>> {
    let req: VaultEvalRequest = signed.json_of_signer()?;
    Ok(Json(
        crate::vault::eval::eval(&ctx, signer(&signed), req).await?,
    ))
}

/// Mints a short request lease (default 60 s, one use) from a workflow lease of the signing
/// agent, if a grant allows `mint_request_lease` and the lease's action on the keys and the
/// policy allows `vault.mint_lease`.
#[utoipa::path(post, path = "/v1/vault/leases/request/mint", tag = "vault", request_body = RequestLeaseMintRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = RequestLeaseResponse),
        (status = 400, description = "`missing_*`, `invalid_action`, `invalid_ttl_seconds`, `invalid_uses`", body = ErrorBody),
        (status = 401, description = "`invalid_lease`, and the signature codes: `missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`", body = ErrorBody),
        (status = 403, description = "`no_grant`, `key_not_granted`, `action_not_leased`, `policy_denied`, `policy_challenge`, `minting_paused`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_secret_set`, `unknown_key`", body = ErrorBody),
        (status = 410, description = "`lease_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn mint_request_lease(
    State(ctx): State<SharedContext>,
    signed: SignedRequest,
) -> ApiResult<Json<RequestLeaseResponse>> {
    let req: RequestLeaseMintRequest = signed.json_of_signer()?;
    Ok(Json(vault_agent::mint(&ctx, signer(&signed), req).await?))
}

/// Reads granted keys with one use of a request lease minted for `read`.
#[utoipa::path(post, path = "/v1/vault/secrets/read", tag = "vault", request_body = SecretsReadRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = SecretsReadResponse),
        (status = 400, description = "`missing_*`, `invalid_environment`", body = ErrorBody),
        (status = 401, description = "`invalid_lease`, and the signature codes: `missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`", body = ErrorBody),
        (status = 403, description = "`no_grant`, `key_not_granted`, `action_not_leased`, `policy_denied`, `policy_challenge`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_secret_set`, `unknown_key`", body = ErrorBody),
        (status = 409, description = "`lease_used`", body = ErrorBody),
        (status = 410, description = "`lease_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn read_secrets(
    State(ctx): State<SharedContext>,
    signed: SignedRequest,
) -> ApiResult<Json<SecretsReadResponse>> {
    let req: SecretsReadRequest = signed.json_of_signer()?;
    Ok(Json(vault_agent::read(&ctx, signer(&signed), req).await?))
}

/// Has acp make an HTTPS call with the set's secrets injected into a profile's slots, with
/// one use of a request lease minted for `proxy`; the answer comes back with the secrets
/// scrubbed out. Redirects are returned, never followed.
#[utoipa::path(post, path = "/v1/vault/proxy/request", tag = "vault", request_body = ProxyRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = ProxyResponse),
        (status = 400, description = "`missing_*`, `invalid_request`, `invalid_environment`", body = ErrorBody),
        (status = 401, description = "`invalid_lease`, and the signature codes: `missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`", body = ErrorBody),
        (status = 403, description = "`host_not_allowed`, `scheme_not_allowed`, `request_not_allowed`, `destination_not_allowed`, `no_grant`, `key_not_granted`, `action_not_leased`, `policy_denied`, `policy_challenge`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_secret_set`, `unknown_profile`", body = ErrorBody),
        (status = 409, description = "`lease_used`", body = ErrorBody),
        (status = 410, description = "`lease_expired`", body = ErrorBody),
        (status = 502, description = "`upstream_unavailable`, `upstream_response_too_large`", body = ErrorBody),
        (status = 504, description = "`upstream_timeout`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn proxy_request(
    State(ctx): State<SharedContext>,
    signed: SignedRequest,
) -> ApiResult<Json<ProxyResponse>> {
    let req: ProxyRequest = signed.json_of_signer()?;
    Ok(Json(vault_proxy::proxy(&ctx, signer(&signed), req).await?))
}
