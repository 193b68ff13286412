//! `/v1/workspace/agents`: the workspace's agent inventory.

use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::api::{
    ErrorBody, InventoryListParams, InventoryListResponse, InventoryUpsertRequest,
    InventoryUpsertResponse,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::telemetry::inventory;

use super::extract::{authenticate, AppJson, AppQuery};
use super::operator::{needs, token_person, Authorized};

/// Maps an external system's key for an agent to the agent, idempotently.
/// A person's token (owner or admin) maps agents of their workspace as a key does.
#[utoipa::path(post, path = "/v1/workspace/agents/upsert", tag = "inventory", request_body = InventoryUpsertRequest,
    security(("api_key" = []), ("access_token" = [])),
    responses((status = 200, body = InventoryUpsertResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`conflict`: the key maps to another agent", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn upsert_inventory(
    State(ctx): State<SharedContext>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    AppJson(req): AppJson<InventoryUpsertRequest>,
) -> ApiResult<Json<InventoryUpsertResponse>> {
    if let Some(person) = token_person(&ctx, &method, &uri, &headers, Need::AgentsChange).await {
        let (workspace_id, person) = person?;
        return Ok(Json(
            inventory::upsert(&ctx, &workspace_id, &person.actor(), req).await?,
        ));
    }
    let caller = authenticate(&ctx, &headers).await?;
    caller.require(Need::Telemetry)?;
    Ok(Json(
        inventory::upsert(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// Inventory items a page unless `limit` says otherwise, and the most it may say.
const INVENTORY_PAGE: i64 = 200;
const INVENTORY_PAGE_MAX: i64 = 500;

/// The workspace's agent inventory, in the order of `external_agent_key`, paged by cursor.
#[utoipa::path(get, path = "/v1/workspace/agents", tag = "inventory", params(InventoryListParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = InventoryListResponse), (status = 400, body = ErrorBody, description = "`invalid_limit`, `invalid_cursor`"),
        (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_inventory(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsRead>,
    AppQuery(params): AppQuery<InventoryListParams>,
) -> ApiResult<Json<InventoryListResponse>> {
    let limit = super::page_limit(params.limit, INVENTORY_PAGE, INVENTORY_PAGE_MAX)?;
    let after = match params.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(cursor) => Some(
            decode_key_cursor(cursor)
                .ok_or_else(|| ApiError::invalid("cursor", "is not a cursor this server issued"))?,
        ),
    };
    let mut items = inventory::list(&ctx, &op.workspace_id, &params, after, limit + 1).await?;
    let page = usize::try_from(limit).unwrap_or(usize::MAX);
    let next_cursor = if items.len() > page {
        items.truncate(page);
        items
            .last()
            .map(|i| encode_key_cursor(&i.external_agent_key))
    } else {
        None
    };
    Ok(Json(InventoryListResponse {
        ok: true,
        count: items.len(),
        items,
        next_cursor,
    }))
}

/// The inventory's cursor: the last `external_agent_key` listed (any text up to 200 characters,
/// so not the `(time, id)` cursor of the other lists), base64url without padding.
fn encode_key_cursor(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("k:{key}"))
}

fn decode_key_cursor(cursor: &str) -> Option<String> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    raw.strip_prefix("k:")
        .filter(|key| !key.is_empty() && key.chars().count() <= 200)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_cursors_carry_any_key_and_refuse_others() {
        for key in ["ops-1", "a b/c?d=e", "ключ"] {
            assert_eq!(
                decode_key_cursor(&encode_key_cursor(key)).as_deref(),
                Some(key)
            );
        }
        assert_eq!(decode_key_cursor("nope"), None);
        assert_eq!(
            decode_key_cursor(&crate::audit::encode_cursor(1, "agt_x")),
            None
        );
        assert_eq!(decode_key_cursor(&encode_key_cursor("")), None);
    }
}
