//! What a request's headers say, read the same way everywhere: its bearer credential, its
//! cookies and whether its body is declared JSON. Below the extractors, the sessions and the
//! access log, which all read them.

use axum::http::{header, HeaderMap};
use axum_extra::extract::cookie::CookieJar;

/// True for a `Content-Type` value that declares JSON: `application/json` or an
/// `application/...+json` type, with or without parameters such as `charset`.
pub fn is_json_content_type(value: &[u8]) -> bool {
    let mime = std::str::from_utf8(value)
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// The credential in `Authorization: Bearer ...`, if any.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The value of cookie `name` in the request, if sent and not empty.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    CookieJar::from_headers(headers)
        .get(name)
        .map(|c| c.value().to_owned())
        .filter(|v| !v.is_empty())
}
