//! What every console handler takes and gives, checked once here: the person behind the
//! request ([`Person`], by session cookie), a posted form with its CSRF token checked
//! ([`Posted`]), the page's query, typed ([`PageQuery`]), and the error shown as a page inside
//! the shell ([`PageError`], rendered by [`show_failures`], the layer over every console route).

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::context::SharedContext;
use crate::error::ApiError;
use crate::http::pages::error_page;
use crate::identity::accounts::Principal;

use super::{answer, person, section_at};

/// The person behind a console page's GET, by session cookie (tokens and API keys open no
/// pages). Without a session the answer is the login page's redirect.
pub struct Person(pub Principal);

impl FromRequestParts<SharedContext> for Person {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Response> {
        person(ctx, &Method::GET, &parts.headers).await.map(Person)
    }
}

/// A form posted to the console: the person behind it and its fields, typed. The form's
/// `csrf` field counts as the `X-CSRF-Token` header, so the cookie request passes the same CSRF
/// check as any other (a cross-site request is refused, token or not). A field that cannot be
/// read is an error page inside the shell, like any error of the handler.
pub struct Posted<F> {
    pub person: Principal,
    pub form: F,
}

impl<F: DeserializeOwned> FromRequest<SharedContext> for Posted<F> {
    type Rejection = Response;

    async fn from_request(req: Request, ctx: &SharedContext) -> Result<Self, Response> {
        let mut headers = req.headers().clone();
        let body = Bytes::from_request(req, ctx)
            .await
            .map_err(IntoResponse::into_response)?;
        // One pass over the fields: the `csrf` token, and whether any text holds a NUL (refused
        // below, once the person is known, as the API refuses such JSON).
        let (mut token, mut nul) = (None, false);
        for (name, value) in form_urlencoded::parse(&body) {
            nul |= name.contains('\0') || value.contains('\0');
            if token.is_none() && name == "csrf" {
                token = Some(HeaderValue::from_str(&value).ok());
            }
        }
        let token = token.flatten();
        if let Some(token) = token.filter(|_| !headers.contains_key("x-csrf-token")) {
            headers.insert("x-csrf-token", token);
        }
        let person = person(ctx, &Method::POST, &headers).await?;
        if nul {
            let err = ApiError::bad_request(
                "invalid_form",
                "text in the form must not contain NUL characters",
            );
            return Err(PageError(err).into_response());
        }
        let form = typed(&body).map_err(|e| PageError(e).into_response())?;
        Ok(Posted { person, form })
    }
}

/// A page's query, typed, checked before anything else: a bad query is a 400 page whether or
/// not the person is logged in. No NUL in a name or value; a field that cannot be read is
/// `invalid_<field>` with what it must be.
pub struct PageQuery<Q>(pub Q);

impl<Q: DeserializeOwned> FromRequestParts<SharedContext> for PageQuery<Q> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Response> {
        let query = parts.uri.query().unwrap_or_default().as_bytes();
        let nul = form_urlencoded::parse(query).any(|(k, v)| k.contains('\0') || v.contains('\0'));
        if nul {
            let err = ApiError::bad_request(
                "invalid_query",
                "a query parameter must not contain NUL characters",
            );
            return Err(error_page(ctx, err));
        }
        typed(query)
            .map(PageQuery)
            .map_err(|err| error_page(ctx, err))
    }
}

/// `name=value&...` read into `F` (a name may repeat for a list), an error naming the field.
pub fn typed<F: DeserializeOwned>(text: &[u8]) -> Result<F, ApiError> {
    serde_path_to_error::deserialize(serde_html_form::Deserializer::from_bytes(text)).map_err(
        |err| match err.path().iter().next_back() {
            Some(serde_path_to_error::Segment::Map { key }) => {
                ApiError::invalid(key, err.inner().to_string())
            }
            _ => ApiError::bad_request("invalid_query", err.inner().to_string()),
        },
    )
}

/// A console handler's error, shown inside the shell as a page of the route's section with the
/// error's status (by [`show_failures`]). Any error of a use case converts with `?`.
pub struct PageError(pub ApiError);

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(err: E) -> Self {
        Self(err.into())
    }
}

/// What a [`PageError`] leaves in its answer for [`show_failures`]: the error without its cause
/// (logged when the answer is made).
#[derive(Clone)]
struct Failure {
    status: StatusCode,
    code: Cow<'static, str>,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        self.0.log_cause();
        let mut response = self.0.status.into_response();
        response.extensions_mut().insert(Failure {
            status: self.0.status,
            code: self.0.code,
            message: self.0.message,
        });
        response
    }
}

/// A console handler's answer: a page, a redirect, or its error shown as a page.
pub type PageResult = Result<Response, PageError>;

/// The layer over every console route: an answer that carries a handler's error becomes the
/// error page of the route's section, inside the shell of the person who asked (found again
/// by their session; without one, the login page's redirect).
pub async fn show_failures(State(ctx): State<SharedContext>, req: Request, next: Next) -> Response {
    let headers = req.headers().clone();
    let section = section_at(
        ctx.config.path_prefix.as_deref().unwrap_or_default(),
        req.extensions()
            .get::<MatchedPath>()
            .map_or("", MatchedPath::as_str),
    );
    let mut response = next.run(req).await;
    let Some(failure) = response.extensions_mut().remove::<Failure>() else {
        return response;
    };
    let err = ApiError::new(failure.status, failure.code, failure.message);
    match person(&ctx, &Method::GET, &headers).await {
        Ok(principal) => answer(&ctx, &principal, section, Err(err)).await,
        Err(refused) => refused,
    }
}

/// A page size: a whole number from 1 to 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize(pub i64);

impl<'de> Deserialize<'de> for PageSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole(d, 1, 200).map(PageSize)
    }
}

/// A whole number from 1 (a policy version, an export's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positive(pub i64);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole(d, 1, i64::MAX).map(Positive)
    }
}

/// A whole number from 0 (a count of things done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub i64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole(d, 0, i64::MAX).map(Count)
    }
}

/// A whole number from `low` to `high`, written as text (queries and forms hold text only).
fn whole<'de, D: Deserializer<'de>>(d: D, low: i64, high: i64) -> Result<i64, D::Error> {
    let text = Cow::<str>::deserialize(d)?;
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| (low..=high).contains(n))
        .ok_or_else(|| D::Error::custom(format!("must be a whole number from {low} to {high}")))
}

/// A page or form that takes no fields (any sent are ignored, as the `csrf` of a form is read
/// by [`Posted`] itself).
#[derive(Debug, Deserialize)]
pub struct Nothing {}

/// The query of a paged list: its filters `F`, its page (`cursor`, `limit`) and `done`, the
/// change just made (for its notice). A page size that does not read is `invalid_limit`; the
/// filters' own fields are read through serde's `flatten`, which names no field in its errors
/// (`invalid_query`), so they are text, checked by their page.
#[derive(Debug, Deserialize)]
pub struct Paged<F = Nothing> {
    #[serde(flatten)]
    pub filters: F,
    cursor: Option<String>,
    limit: Option<PageSize>,
    done: Option<String>,
}

impl<F> Paged<F> {
    /// The cursor, when one is given.
    pub fn cursor(&self) -> Option<String> {
        self.cursor
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
    }

    /// The page size, when one is given.
    pub fn limit(&self) -> Option<i64> {
        self.limit.map(|l| l.0)
    }

    /// `done`, trimmed.
    pub fn done(&self) -> &str {
        self.done.as_deref().map_or("", str::trim)
    }
}

/// A form field as sent: `None` when the form has no such field, else its text, empty
/// included (serde_html_form reads an empty value of an `Option` as absent, which some forms
/// must tell apart). Use with `#[serde(default)]`.
#[derive(Debug, Default)]
pub struct Sent(pub Option<String>);

impl<'de> Deserialize<'de> for Sent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|text| Sent(Some(text)))
    }
}

impl Sent {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// The answer of every console page to a request without a session, for the OpenAPI entries
/// of the pages (written once, named in each page's `responses`).
#[derive(utoipa::IntoResponses)]
#[response(status = 303, description = "not logged in: to /login")]
pub struct NotLoggedIn;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Form {
        #[serde(default)]
        name: Sent,
        #[serde(default)]
        tag: Vec<String>,
        limit: Option<PageSize>,
    }

    #[test]
    fn forms_read_typed_with_the_failing_field_named() {
        let form: Form = typed(b"name=&tag=a&tag=b&csrf=x").unwrap();
        assert_eq!(form.name.as_deref(), Some(""), "sent empty is not absent");
        assert_eq!(form.tag, ["a", "b"]);
        assert_eq!(form.limit, None);
        let form: Form = typed(b"limit=200").unwrap();
        assert_eq!(
            (form.name.as_deref(), form.limit),
            (None, Some(PageSize(200)))
        );
        for bad in ["limit=0", "limit=201", "limit=ten"] {
            let err = typed::<Form>(bad.as_bytes()).unwrap_err();
            assert_eq!(err.code, "invalid_limit", "{bad}");
            assert!(err.message.contains("from 1 to 200"), "{}", err.message);
        }
    }
}
