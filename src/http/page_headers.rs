//! The headers that keep browsers from misusing the server's answers, set in one layer on the
//! router rather than by each handler:
//!
//! - every answer: `X-Content-Type-Options: nosniff` (a browser takes the declared type, never
//!   guesses HTML or script out of a JSON body);
//! - every page (an answer in `text/html`, and an answer without a body type, such as the
//!   redirects of `/` and of login links): `Referrer-Policy: same-origin` (approval and claim
//!   links carry their token in the path, login links in the query: no page passes its address
//!   to another site; `no-referrer` would go further, but it also turns the `Origin` of the
//!   pages' own form posts and `fetch` calls into `null`, which the session's CSRF defence
//!   refuses as it refuses any opaque origin) and a `Content-Security-Policy` that allows
//!   nothing but the page itself: its inline
//!   `<style>` and `<script>` elements, marked with this answer's nonce; requests, forms and
//!   images to its own origin; no framing (`frame-ancestors 'none'`), no `<base>`, no plugins.
//!
//! The nonce is made per answer, and only for an answer whose template asks for it
//! ([`nonce`], called by `layout.html` and each page's script): the layer runs the request
//! inside a task-local slot, and reads the slot when the answer comes back. So an element a
//! bug might let through unescaped carries no nonce and does not run, and a request that
//! renders no page (`/v1/check`) makes no nonce and allocates nothing for it.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::http::{header, HeaderMap, HeaderValue, Request, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore;
use tokio::task::futures::TaskLocalFuture;

/// A nonce: 16 random bytes in base64url (22 characters).
type Nonce = [u8; 22];

tokio::task_local! {
    /// The nonce of the answer being made, once a template asked for it.
    static NONCE: Cell<Option<Nonce>>;
}

fn new_nonce() -> Nonce {
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    let mut nonce = [b'A'; 22];
    // 16 bytes are always 22 characters of unpadded base64.
    let _ = URL_SAFE_NO_PAD.encode_slice(raw, &mut nonce);
    nonce
}

/// The nonce of this answer's inline scripts and styles (`<script nonce="{{ ... }}">`): made
/// on first use, the same for every element of the page. Outside a request (a template
/// rendered by a test) a fresh one, which no policy names.
pub fn nonce() -> String {
    let nonce = NONCE
        .try_with(|slot| {
            let nonce = slot.get().unwrap_or_else(new_nonce);
            slot.set(Some(nonce));
            nonce
        })
        .unwrap_or_else(|_| new_nonce());
    String::from_utf8_lossy(&nonce).into_owned()
}

/// The policy of a page without inline elements (or of a redirect): nothing at all.
const BARE_POLICY: &str =
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The policy of a page whose inline elements carry `nonce`.
fn page_policy(nonce: &Nonce) -> Option<HeaderValue> {
    let nonce = std::str::from_utf8(nonce).ok()?;
    HeaderValue::from_str(&format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src 'self' data:; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'"
    ))
    .ok()
}

/// An answer a browser shows as a page: HTML, or no body type at all (a redirect).
fn is_page(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_none_or(|value| {
        value
            .as_bytes()
            .get(..9)
            .is_some_and(|t| t.eq_ignore_ascii_case(b"text/html"))
    })
}

/// Sets the answer's headers (see the module's documentation).
fn secure(headers: &mut HeaderMap, nonce: Option<Nonce>) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !is_page(headers) {
        return;
    }
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    let policy = nonce
        .as_ref()
        .and_then(page_policy)
        .unwrap_or_else(|| HeaderValue::from_static(BARE_POLICY));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
}

/// The layer: [`PageHeaders`] around every route. Written as a `tower` layer rather than with
/// `axum::middleware::from_fn`, which boxes each request's future: this one adds no
/// allocation to a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageHeadersLayer;

impl<S> tower::Layer<S> for PageHeadersLayer {
    type Service = PageHeaders<S>;

    fn layer(&self, inner: S) -> PageHeaders<S> {
        PageHeaders { inner }
    }
}

/// Runs the request with a nonce slot and sets the answer's headers.
#[derive(Debug, Clone)]
pub struct PageHeaders<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for PageHeaders<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = PageFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        PageFuture {
            inner: NONCE.scope(Cell::new(None), self.inner.call(request)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of [`PageHeaders`].
    pub struct PageFuture<F> {
        #[pin]
        inner: TaskLocalFuture<Cell<Option<Nonce>>, F>,
    }
}

impl<F, R, E> Future for PageFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = Result<Response<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut inner = self.project().inner;
        let answer = ready!(inner.as_mut().poll(cx));
        let nonce = inner.take_value().and_then(Cell::into_inner);
        Poll::Ready(answer.map(|mut response| {
            secure(response.headers_mut(), nonce);
            response
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_get_the_policy_and_every_answer_nosniff() {
        let mut json = HeaderMap::new();
        json.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        secure(&mut json, None);
        assert_eq!(json[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(!json.contains_key(header::CONTENT_SECURITY_POLICY));
        assert!(!json.contains_key(header::REFERRER_POLICY));

        let nonce = new_nonce();
        let mut page = HeaderMap::new();
        page.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Text/HTML; charset=utf-8"),
        );
        secure(&mut page, Some(nonce));
        let policy = page[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        let nonce = std::str::from_utf8(&nonce).unwrap();
        assert!(
            policy.contains(&format!("script-src 'nonce-{nonce}'")),
            "{policy}"
        );
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert_eq!(page[header::REFERRER_POLICY], "same-origin");

        let mut redirect = HeaderMap::new();
        secure(&mut redirect, None);
        assert_eq!(redirect[header::CONTENT_SECURITY_POLICY], BARE_POLICY);
    }

    #[tokio::test]
    async fn a_nonce_is_made_once_per_request_and_only_when_asked() {
        let (first, second) = NONCE
            .scope(Cell::new(None), async { (nonce(), nonce()) })
            .await;
        assert_eq!(first, second);
        assert_eq!(first.len(), 22);
        assert!(first
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let other = NONCE.scope(Cell::new(None), async { nonce() }).await;
        assert_ne!(first, other);
        let untouched = NONCE.scope(Cell::new(None), async {});
        tokio::pin!(untouched);
        untouched.as_mut().await;
        assert_eq!(untouched.take_value().map(Cell::into_inner), Some(None));
    }
}
