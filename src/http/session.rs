//! Dashboard identity over HTTP: `/auth/*` (magic-link login, me, logout), `/v1/workspaces*`,
//! and the session-only management of API keys, members and personal access tokens.
//!
//! A request is authenticated by the `acp_session` cookie or by `Authorization: Bearer
//! svc_pat_...`. State-changing cookie requests pass the CSRF defence of [`csrf_refusal`]: a JSON
//! body from this service's own origin (or from a client that sends no `Origin`, such as a CI
//! script) needs nothing else; cross-site requests are refused; any other body must carry the
//! session's `X-CSRF-Token` (from login or `/auth/me`), as the service's own pages do. Tokens
//! are not sent by browsers on their own, so they need none.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};

use crate::context::{Context, SharedContext};
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::{self, Principal, PAT_PREFIX, SESSION_COOKIE};
use crate::identity::api_keys;
use crate::secret::ct_eq;

use super::headers::{bearer_token, cookie, is_json_content_type};
use super::observe::{note_principal, PrincipalKind};

/// The workspace a token's request names: the `X-Service-Workspace` header
/// (`X-Service-Workspace-Id` is read too), else the `workspace_id` query parameter.
pub fn named_workspace(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let header = ["x-service-workspace", "x-service-workspace-id"]
        .iter()
        .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    if let Some(ws) = header {
        return Some(ws.to_owned());
    }
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "workspace_id")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Resolves the principal of a request (cookie or token), enforcing CSRF for cookies. `uri`
/// is the request's, for a token's `?workspace_id=`.
pub async fn authenticate_user(
    ctx: &Context,
    method: &Method,
    headers: &HeaderMap,
    uri: &Uri,
) -> ApiResult<Principal> {
    if let Some(token) = bearer_token(headers) {
        if token.starts_with(PAT_PREFIX) {
            let workspace = named_workspace(headers, uri.query());
            let principal = accounts::token_principal(ctx, token, workspace.as_deref()).await?;
            return Ok(noted(principal));
        }
        if api_keys::is_well_formed(token) {
            return Err(ApiError::unauthorized(
                "session_required",
                "workspace API keys are not accepted here; log in or use a personal access token (svc_pat_...)",
            ));
        }
    }
    if headers.contains_key("x-service-api-key") && cookie(headers, SESSION_COOKIE).is_none() {
        return Err(ApiError::unauthorized(
            "session_required",
            "workspace API keys are not accepted here; log in or use a personal access token (svc_pat_...)",
        ));
    }
    let session_id = cookie(headers, SESSION_COOKIE).ok_or_else(accounts::unauthenticated)?;
    let principal = accounts::session_principal(ctx, &session_id).await?;
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        if let Some(why) = csrf_refusal(&ctx.public_url, headers, principal.csrf_token.as_deref()) {
            return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf_failed", why));
        }
    }
    Ok(noted(principal))
}

/// Notes who the request is, for its access log line.
fn noted(principal: Principal) -> Principal {
    let kind = if principal.pat_id.is_some() {
        PrincipalKind::Token
    } else {
        PrincipalKind::Session
    };
    note_principal(kind, principal.workspace_id.as_deref());
    principal
}

/// Why a state-changing request authenticated by the session cookie is refused as a possible
/// cross-site request forgery, or `None` when it may go on.
///
/// - `Sec-Fetch-Site: cross-site`, or an `Origin` other than this service's own (the origin of
///   `public_url`, or the request's `Host`), is refused, token or not.
/// - An `X-CSRF-Token` header, when sent, must be the session's token; with it, any body is
///   accepted (the service's own pages send it).
/// - Without one, the body must be declared JSON (`Content-Type: application/json` or
///   `application/...+json`), which a browser never sends cross-origin without CORS consent; a
///   request with no body and no `Content-Type` is accepted too. Forms and `text/plain` are
///   refused.
pub fn csrf_refusal(
    public_url: &str,
    headers: &HeaderMap,
    session_token: Option<&str>,
) -> Option<&'static str> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if fetch_site.trim().eq_ignore_ascii_case("cross-site") {
        return Some("cross-site requests cannot use the session cookie");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        if !is_own_origin(public_url, headers, origin.as_bytes()) {
            return Some("the request's Origin is not this service; cross-origin requests cannot use the session cookie");
        }
    }
    let sent = headers
        .get("x-csrf-token")
        .map(|v| v.as_bytes())
        .filter(|v| !v.is_empty());
    if let Some(sent) = sent {
        let expected = session_token.unwrap_or("");
        return if !expected.is_empty() && ct_eq(sent, expected.as_bytes()) {
            None
        } else {
            Some("the `X-CSRF-Token` header is not this session's token (from login or GET /auth/me)")
        };
    }
    let declared_json = match headers.get(header::CONTENT_TYPE) {
        Some(value) => is_json_content_type(value.as_bytes()),
        None => !has_body(headers),
    };
    if declared_json {
        None
    } else {
        Some("a request made with the session cookie must send its body as `application/json`, or carry the session's `X-CSRF-Token`")
    }
}

/// True when the request announces a body (`Content-Length` above zero, or a chunked one).
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.to_str().map_or(true, |v| v.trim() != "0"))
}

/// Scheme, lower-case host and port (the scheme's default when not written) of an origin or
/// URL; `None` when it has no scheme or host.
fn origin_of(text: &str) -> Option<(String, String, u16)> {
    let uri: Uri = text.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((scheme, host, port))
}

/// True when `origin` (an `Origin` header value) is the origin of `public_url`, or names the
/// host and port the request was sent to (its `Host` header).
fn is_own_origin(public_url: &str, headers: &HeaderMap, origin: &[u8]) -> bool {
    let Some((scheme, host, port)) = std::str::from_utf8(origin).ok().and_then(origin_of) else {
        // `Origin: null` (sandboxed frames, opaque origins) and anything unreadable.
        return false;
    };
    if origin_of(public_url).is_some_and(|own| own == (scheme.clone(), host.clone(), port)) {
        return true;
    }
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| origin_of(&format!("{scheme}://{v}")))
        .is_some_and(|(_, h, p)| h == host && p == port)
}

impl FromRequestParts<SharedContext> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        authenticate_user(ctx, &parts.method, &parts.headers, &parts.uri).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const OWN: &str = "https://acp.example.com";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn refused(pairs: &[(&'static str, &str)]) -> bool {
        csrf_refusal(OWN, &headers(pairs), Some("tok")).is_some()
    }

    #[test]
    fn json_without_origin_or_from_the_own_origin_needs_no_token() {
        let json = ("content-type", "application/json; charset=utf-8");
        assert!(!refused(&[json, ("content-length", "2")]));
        assert!(!refused(&[json, ("origin", "https://ACP.example.com:443")]));
        assert!(!refused(&[(
            "content-type",
            "application/merge-patch+json"
        )]));
        // The Host the request was sent to counts as the own origin too.
        assert!(!refused(&[
            json,
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ]));
        assert!(!refused(&[json, ("sec-fetch-site", "same-origin")]));
    }

    #[test]
    fn cross_site_requests_are_refused_even_with_the_token() {
        let json = ("content-type", "application/json");
        let token = ("x-csrf-token", "tok");
        assert!(refused(&[json, ("origin", "https://evil.example")]));
        assert!(refused(&[json, token, ("origin", "https://evil.example")]));
        assert!(
            refused(&[json, ("origin", "http://acp.example.com")]),
            "another scheme is another origin"
        );
        assert!(refused(&[json, ("origin", "https://acp.example.com:8443")]));
        assert!(refused(&[json, ("origin", "null")]));
        assert!(refused(&[json, token, ("sec-fetch-site", "cross-site")]));
        assert!(refused(&[
            json,
            ("origin", "http://127.0.0.1:9999"),
            ("host", "127.0.0.1:8080")
        ]));
    }

    #[test]
    fn bodies_that_are_not_json_need_the_token() {
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert!(refused(&[("content-type", ct)]), "{ct}");
            assert!(
                !refused(&[("content-type", ct), ("x-csrf-token", "tok")]),
                "{ct}"
            );
            assert!(
                refused(&[("content-type", ct), ("x-csrf-token", "forged")]),
                "{ct}"
            );
        }
        assert!(refused(&[("content-length", "5")]), "an undeclared body");
        assert!(refused(&[("transfer-encoding", "chunked")]));
        assert!(!refused(&[]), "no body at all");
        assert!(!refused(&[("content-length", "0")]));
        assert!(
            refused(&[
                ("content-type", "application/json"),
                ("x-csrf-token", "forged")
            ]),
            "a wrong token is refused"
        );
        assert!(csrf_refusal(
            OWN,
            &headers(&[("content-type", "text/plain"), ("x-csrf-token", "")]),
            None
        )
        .is_some());
    }
}
