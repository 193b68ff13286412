//! A real HTTPS upstream on loopback for the vault proxy's tests and benches: a certificate for
//! `localhost` and `127.0.0.1` issued at start by a CA of its own (whose PEM the caller trusts),
//! served with rustls and hyper on `127.0.0.1:0`. Self-contained (crates only, nothing of the
//! test helpers), so a bench can include it with `#[path]`.
//!
//! Routes: `/echo/*` answers JSON `{method, path, query, headers, body}` of what it received;
//! `/api/*` answers as an API does, `{ok, method, path}`, nothing of the request's headers;
//! `/redirect` a 302 to `https://example.com/`; `/leak` the `Authorization` bearer token raw, in
//! base64 and in hex, and in an `X-Echo-Token` header; `/big?bytes=N` N bytes; `/slow?ms=N`
//! sleeps first; `/big?bytes=N&chunked=true` streams them; `/binary` bytes that are not UTF-8; `/encoded` a body labelled
//! `Content-Encoding: gzip`; `/encodings` the bearer token as upstreams commonly re-encode a
//! value: one `name=value` line per spelling (percent-encoded, JSON- and HTML-escaped, base64),
//! in `Set-Cookie` headers and in a JSON document.

// Whoever includes this file uses part of it; a broken start is a broken test.
#![allow(
    dead_code,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "shared by the tests and the vault benchmark, each using a part; they stop at the first failure"
)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Query;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use base64::Engine as _;
use tokio_rustls::rustls;
use tower::ServiceExt as _;

/// Bytes that are not UTF-8, as `/binary` answers them.
pub const BINARY: &[u8] = &[0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, 0x01, 0x7f, 0xf0, 0x9f];

pub struct UpstreamServer {
    pub port: u16,
    /// The PEM of the CA that issued the server's certificate.
    pub ca_pem: String,
    hits: Arc<AtomicUsize>,
    deletes: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for UpstreamServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl UpstreamServer {
    pub async fn start() -> UpstreamServer {
        UpstreamServer::start_with(routes()).await
    }

    /// Serves `router` (any routes) over TLS the same way.
    pub async fn start_with(router: Router) -> UpstreamServer {
        let (ca_pem, tls) = tls_config();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream");
        let port = listener.local_addr().expect("upstream address").port();
        let hits = Arc::new(AtomicUsize::new(0));
        let deletes = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (counter, accepted, deleted) = (hits.clone(), connections.clone(), deletes.clone());
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                // Answers as a real server sends them: no wait for an ACK between the head
                // and a streamed body (Nagle).
                let _ = tcp.set_nodelay(true);
                accepted.fetch_add(1, Ordering::SeqCst);
                let (acceptor, router, counter, deleted) = (
                    acceptor.clone(),
                    router.clone(),
                    counter.clone(),
                    deleted.clone(),
                );
                tokio::spawn(async move {
                    // A client that gives up on the handshake (an untrusted CA) is no failure.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                        counter.fetch_add(1, Ordering::SeqCst);
                        if request.method() == hyper::Method::DELETE {
                            deleted.fetch_add(1, Ordering::SeqCst);
                        }
                        router.clone().oneshot(request)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        UpstreamServer {
            port,
            ca_pem,
            hits,
            deletes,
            connections,
            accept,
        }
    }

    /// `https://localhost:{port}{path}`
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// Requests received so far (every route, every connection).
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// `DELETE` requests received so far.
    pub fn deletes(&self) -> usize {
        self.deletes.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far (a client that keeps its connection makes one).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A CA and a server certificate for `localhost` and `127.0.0.1` it issued; the CA's PEM and
/// the server's TLS configuration.
pub fn tls_config() -> (String, rustls::ServerConfig) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "acp test upstream CA");
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");

    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let key = rcgen::KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &ca).expect("server certificate");

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("server TLS config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca.pem(), config)
}

fn routes() -> Router {
    Router::new()
        .route("/echo", any(echo))
        .route("/echo/{*rest}", any(echo))
        .route("/api/{*rest}", any(api))
        .route("/redirect", any(redirect))
        .route("/leak", any(leak))
        .route("/big", any(big))
        .route("/slow", any(slow))
        .route("/binary", any(binary))
        .route("/encoded", any(encoded))
        .route("/encodings", any(encodings))
}

async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        seen.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    axum::Json(serde_json::json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query().unwrap_or(""),
        "headers": seen,
        "body": String::from_utf8_lossy(&body),
    }))
    .into_response()
}

async fn api(method: Method, uri: Uri) -> Response {
    axum::Json(serde_json::json!({"ok": true, "method": method.as_str(), "path": uri.path()}))
        .into_response()
}

async fn redirect() -> Response {
    (
        StatusCode::FOUND,
        [(header::LOCATION, "https://example.com/")],
        "moved",
    )
        .into_response()
}

async fn leak(headers: HeaderMap) -> Response {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_owned())
        .unwrap_or_default();
    let body = format!(
        "raw={token}\nbase64={}\nhex={}\n",
        base64::engine::general_purpose::STANDARD.encode(&token),
        hex::encode(&token)
    );
    ([("x-echo-token", token)], body).into_response()
}

#[derive(serde::Deserialize)]
struct Size {
    bytes: Option<usize>,
    ms: Option<u64>,
    /// `/big?chunked=true`: sent in 1 KiB chunks without a `Content-Length`.
    chunked: Option<bool>,
}

async fn big(Query(size): Query<Size>) -> Response {
    let bytes = size.bytes.unwrap_or(1024);
    if size.chunked != Some(true) {
        return vec![b'x'; bytes].into_response();
    }
    let chunks = (0..bytes.div_ceil(1024)).map(move |i| {
        let len = (bytes - i * 1024).min(1024);
        Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; len]))
    });
    axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response()
}

async fn slow(Query(size): Query<Size>) -> Response {
    tokio::time::sleep(Duration::from_millis(size.ms.unwrap_or(1000))).await;
    "slept".into_response()
}

async fn binary() -> Response {
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        BINARY.to_vec(),
    )
        .into_response()
}

async fn encoded() -> Response {
    (
        [(header::CONTENT_ENCODING, "gzip")],
        b"\x1f\x8b\x08\x00 not really gzip".to_vec(),
    )
        .into_response()
}

/// `text` with each character that is not an ASCII letter or digit spelled by `escape`.
fn escape_all(text: &str, escape: impl Fn(char) -> String) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                escape(c)
            }
        })
        .collect()
}

/// Each of `units` as `prefix` and its hex digits, `width` of them, in upper or lower case.
fn hex_units(units: impl Iterator<Item = u32>, prefix: &str, width: usize, upper: bool) -> String {
    units
        .map(|u| {
            if upper {
                format!("{prefix}{u:0width$X}")
            } else {
                format!("{prefix}{u:0width$x}")
            }
        })
        .collect()
}

/// Percent-encoding of every byte of `c`; `+` for a space when `plus`.
fn percent(c: char, upper: bool, plus: bool) -> String {
    if plus && c == ' ' {
        return "+".into();
    }
    let mut buf = [0u8; 4];
    let bytes = c.encode_utf8(&mut buf).bytes().map(u32::from);
    hex_units(bytes, "%", 2, upper)
}

/// `\uXXXX` (UTF-16, so a surrogate pair past the BMP).
fn json_unicode(c: char, upper: bool) -> String {
    let mut buf = [0u16; 2];
    let units = c.encode_utf16(&mut buf).iter().map(|u| u32::from(*u));
    hex_units(units, "\\u", 4, upper)
}

/// The spellings `/encodings` answers, by name.
pub fn encodings_of(token: &str) -> Vec<(&'static str, String)> {
    let json = serde_json::to_string(token).unwrap();
    let json = json[1..json.len() - 1].to_owned();
    let html_named = token
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    vec![
        (
            "url_lower_20",
            escape_all(token, |c| percent(c, false, false)),
        ),
        (
            "url_upper_plus",
            escape_all(token, |c| percent(c, true, true)),
        ),
        (
            "url_form",
            form_urlencoded::byte_serialize(token.as_bytes()).collect(),
        ),
        ("json", json.clone()),
        ("json_slash", json.replace('/', "\\/")),
        (
            "json_unicode_lower",
            token.chars().map(|c| json_unicode(c, false)).collect(),
        ),
        (
            "json_unicode_upper",
            escape_all(token, |c| json_unicode(c, true)),
        ),
        ("html_named", html_named.clone()),
        ("html_apos", html_named.replace("&#39;", "&apos;")),
        (
            "html_decimal",
            token.chars().map(|c| format!("&#{};", c as u32)).collect(),
        ),
        (
            "html_hex",
            escape_all(token, |c| format!("&#x{:X};", c as u32)),
        ),
        (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(token),
        ),
    ]
}

async fn encodings(headers: HeaderMap) -> Response {
    let token = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .map(|v| v.strip_prefix("Bearer ").map(str::to_owned).unwrap_or(v))
        .unwrap_or_default();
    let spellings = encodings_of(&token);
    let mut body: String = spellings
        .iter()
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect();
    body.push_str(&serde_json::json!({ "echo": token }).to_string());
    let cookie: String = escape_all(&token, |c| percent(c, false, false));
    let mut response = body.into_response();
    for value in [
        format!("session={cookie}; Path=/; HttpOnly"),
        format!("raw=\"{}\"; Secure", spellings[3].1),
    ] {
        response.headers_mut().append(
            header::SET_COOKIE,
            axum::http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    response
}
