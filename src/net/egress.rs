//! The vault proxy's way out: an agent's request checked against a proxy profile, the set's
//! secrets injected into the profile's declared slots only, the call sent over HTTPS to public
//! addresses only (SSRF-safe: every resolved address is checked and the connection pinned to
//! the checked ones), and the secrets scrubbed out of the answer before the agent sees it.
//!
//! Self-contained on purpose: it names nothing of the rest of the crate, so the run-time
//! context can hold an [`Egress`] without importing the vault's use cases.
//!
//! Why one file of this length (1,700 lines of code, 900 of tests): it is the service's only
//! way out to addresses an agent chooses, so every rule that keeps a request from reaching
//! what it must not (resolution, the address checks, the pinned connection, redirects refused,
//! the secrets' slots, the scrubbing of every spelling of every secret) is read and reviewed in
//! one place, beside the tests that attack it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use ipnet::IpNet;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

/// Largest request body an agent may send through the proxy.
pub const MAX_REQUEST_BODY: usize = 1024 * 1024;
const MAX_URL_LEN: usize = 8 * 1024;
const MAX_HEADERS: usize = 64;
const MAX_HEADER_VALUE: usize = 8 * 1024;
/// Secret values shorter than this are not scrubbed from answers: a short value (a PIN, `true`,
/// a region name) also occurs by chance in ordinary answers, and replacing every occurrence
/// would mangle them while protecting little.
pub const MIN_SCRUB_LEN: usize = 8;
const REDACTED: &str = "[REDACTED]";
/// The methods the proxy sends; `CONNECT` and `TRACE` never (a tunnel, a reflection).
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// Names that reach a cloud's metadata service without a metadata address in sight.
const METADATA_NAMES: &[&str] = &["metadata.google.internal", "metadata"];
/// Cloud metadata addresses (AWS/GCP/Azure, AWS over IPv6, Alibaba). They hand out the
/// machine's cloud credentials, so only an allow-list entry naming the address itself (a /32 or
/// /128) lets the proxy reach one: a broad range allowed for other reasons does not.
const METADATA_ADDRS: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];
/// How long a built client (and its pooled TLS connections) is kept for reuse.
const CLIENT_TTL: Duration = Duration::from_secs(60);
const MAX_CLIENTS: u64 = 256;
/// How long a host's checked addresses are used without resolving it again. Each call would
/// otherwise wait on the system's resolver (a thread hop at best, a DNS query at worst) before
/// it goes out; only addresses that passed the checks are kept, and for less time than a client
/// stays pinned to them, so this widens nothing that [`CLIENT_TTL`] does not already allow.
const RESOLVED_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("`{field}`: {message}")]
    InvalidRequest {
        field: &'static str,
        message: String,
    },
    #[error("the profile does not allow this URL scheme (https only, unless it allows http)")]
    SchemeNotAllowed,
    #[error("host `{0}` is not among the profile's hosts")]
    HostNotAllowed(String),
    #[error("port {0} is not among the profile's ports (without `ports`, only the scheme's own)")]
    PortNotAllowed(u16),
    #[error("method `{0}` is not among the profile's methods")]
    MethodNotAllowed(String),
    #[error("path `{0}` is not under the profile's path prefixes")]
    PathNotAllowed(String),
    #[error("the profile injects `${{{0}}}`, which the secret set does not hold")]
    KeyMissing(String),
    #[error("secret `{0}` holds a character that cannot be sent (CR, LF, NUL or another control character)")]
    InvalidSecret(String),
    #[error("destination `{0}` is not a public address the proxy may reach")]
    DestinationNotAllowed(String),
    #[error("host `{0}` does not resolve")]
    Unresolvable(String),
    #[error("the upstream did not answer in time")]
    Timeout,
    #[error("the upstream is unavailable: {0}")]
    Unavailable(String),
    #[error("the upstream's answer is larger than {0} bytes")]
    ResponseTooLarge(usize),
}

fn invalid(field: &'static str, message: impl Into<String>) -> EgressError {
    EgressError::InvalidRequest {
        field,
        message: message.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Profiles

/// One proxy profile of a secret set, as stored (see the vault's profile check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Host names and `*.domain` patterns, lower-case without a trailing dot.
    pub hosts: Vec<String>,
    /// Upper-case methods; empty: any method the proxy sends.
    pub methods: Vec<String>,
    /// Path prefixes; empty: any path.
    pub path_prefixes: Vec<String>,
    pub allow_http: bool,
    /// Ports a call may go to; empty: the scheme's own (443, or 80 for plain http), so a
    /// profile for an internal host on the allow-list does not open its every service.
    pub ports: Vec<u16>,
    /// Header name → template with `${KEY}` references.
    pub headers: BTreeMap<String, String>,
    /// Query parameter name → template.
    pub query: BTreeMap<String, String>,
}

impl Profile {
    /// Reads the stored shape `{hosts, methods?, path_prefixes?, allow_http?, ports?, inject:
    /// {headers?, query?}}`.
    pub fn from_json(v: &Value) -> Result<Profile, String> {
        let Value::Object(p) = v else {
            return Err("a profile must be an object".into());
        };
        let strings = |field: &str| -> Result<Vec<String>, String> {
            match p.get(field) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("`{field}` must list strings"))
                    })
                    .collect(),
                Some(_) => Err(format!("`{field}` must be a list of strings")),
            }
        };
        let hosts: Vec<String> = strings("hosts")?
            .into_iter()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        if hosts.is_empty() {
            return Err("`hosts` must list at least one host pattern".into());
        }
        if let Some(bad) = hosts.iter().find(|h| {
            let bare = h.strip_prefix("*.").unwrap_or(h);
            bare.is_empty() || bare.contains('*')
        }) {
            return Err(format!("`{bad}` is not a host name or `*.domain` pattern"));
        }
        let methods: Vec<String> = strings("methods")?
            .into_iter()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(format!("`{bad}` is not a method the proxy sends"));
        }
        let path_prefixes = strings("path_prefixes")?;
        if let Some(bad) = path_prefixes.iter().find(|p| !p.starts_with('/')) {
            return Err(format!("path prefix `{bad}` must start with `/`"));
        }
        let allow_http = match p.get("allow_http") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("`allow_http` must be true or false".into()),
        };
        let slot = |name: &str| -> Result<BTreeMap<String, String>, String> {
            match p.get("inject").and_then(|i| i.get(name)) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(templates)) => templates
                    .iter()
                    .map(|(target, template)| {
                        let template = template
                            .as_str()
                            .ok_or_else(|| format!("`inject.{name}.{target}` must be a string"))?;
                        parse_template(template)?;
                        Ok((target.clone(), template.to_owned()))
                    })
                    .collect(),
                Some(_) => Err(format!("`inject.{name}` must be an object")),
            }
        };
        let headers = slot("headers")?;
        if let Some(bad) = headers
            .keys()
            .find(|h| HeaderName::from_bytes(h.as_bytes()).is_err())
        {
            return Err(format!("`{bad}` is not a header name"));
        }
        let query = slot("query")?;
        let ports = match p.get("ports") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| *n > 0)
                        .ok_or_else(|| "`ports` must list port numbers (1 to 65535)".to_owned())
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`ports` must be a list of port numbers".into()),
        };
        Ok(Profile {
            hosts,
            methods,
            path_prefixes,
            allow_http,
            ports,
            headers,
            query,
        })
    }

    /// Every `${KEY}` the profile's templates name.
    pub fn keys(&self) -> BTreeSet<String> {
        self.headers
            .values()
            .chain(self.query.values())
            .filter_map(|t| parse_template(t).ok())
            .flatten()
            .filter_map(|part| match part {
                Part::Key(k) => Some(k.to_owned()),
                Part::Text(_) => None,
            })
            .collect()
    }
}

enum Part<'a> {
    Text(&'a str),
    Key(&'a str),
}

/// A template cut into literal text and `${KEY}` references.
fn parse_template(template: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        if start > 0 {
            parts.push(Part::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`{template}` opens `${{` without closing it"))?;
        let key = &after[..end];
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(format!("`${{{key}}}` is not a key name"));
        }
        parts.push(Part::Key(key));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

// ---------------------------------------------------------------------------------------------
// The agent's request

/// What an agent asks the proxy to send: `{method, url, headers?, body? | body_base64?}`.
#[derive(Clone)]
pub struct ProxyCall {
    /// Upper-case.
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

/// Shows the method, the URL without its query and the header names: an agent may put its own
/// credentials in either.
impl std::fmt::Debug for ProxyCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = self.url.split(['?', '#']).next().unwrap_or_default();
        f.debug_struct("ProxyCall")
            .field("method", &self.method)
            .field("url", &url)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .finish()
    }
}

impl ProxyCall {
    pub fn from_json(request: &Value) -> Result<ProxyCall, EgressError> {
        let Value::Object(r) = request else {
            return Err(invalid(
                "request",
                "must be an object `{method, url, headers?, body?}`",
            ));
        };
        if let Some(unknown) = r
            .keys()
            .find(|k| !["method", "url", "headers", "body", "body_base64"].contains(&k.as_str()))
        {
            return Err(invalid(
                "request",
                format!("`{unknown}` is not a field: method, url, headers, body, body_base64"),
            ));
        }
        let method = match r.get("method") {
            Some(Value::String(m)) => m.to_ascii_uppercase(),
            _ => return Err(invalid("request.method", "must be a string")),
        };
        if !METHODS.contains(&method.as_str()) {
            return Err(invalid(
                "request.method",
                format!("`{method}` is not one of {}", METHODS.join(", ")),
            ));
        }
        let url = match r.get("url") {
            Some(Value::String(u)) if !u.is_empty() => u.clone(),
            _ => return Err(invalid("request.url", "must be a non-empty string")),
        };
        if url.len() > MAX_URL_LEN {
            return Err(invalid(
                "request.url",
                format!("must be at most {MAX_URL_LEN} characters"),
            ));
        }
        let headers = match r.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(h)) => {
                if h.len() > MAX_HEADERS {
                    return Err(invalid(
                        "request.headers",
                        format!("at most {MAX_HEADERS} headers"),
                    ));
                }
                let mut headers = Vec::with_capacity(h.len());
                for (name, value) in h {
                    let Value::String(value) = value else {
                        return Err(invalid(
                            "request.headers",
                            format!("`{name}` must be a string"),
                        ));
                    };
                    if HeaderName::from_bytes(name.as_bytes()).is_err() {
                        return Err(invalid(
                            "request.headers",
                            format!("`{name}` is not a header name"),
                        ));
                    }
                    // The value is not quoted back: it may be the agent's own credential.
                    if value.len() > MAX_HEADER_VALUE || HeaderValue::from_str(value).is_err() {
                        return Err(invalid(
                            "request.headers",
                            format!("the value of `{name}` is too long or holds CR, LF, NUL or another control character"),
                        ));
                    }
                    headers.push((name.clone(), value.clone()));
                }
                headers
            }
            Some(_) => {
                return Err(invalid(
                    "request.headers",
                    "must be an object of `NAME: value`",
                ))
            }
        };
        let body = match (r.get("body"), r.get("body_base64")) {
            (Some(b), Some(b64)) if !b.is_null() && !b64.is_null() => {
                return Err(invalid(
                    "request.body",
                    "give `body` or `body_base64`, not both",
                ))
            }
            (Some(Value::String(text)), _) => Some(text.clone().into_bytes()),
            (Some(Value::Null) | None, Some(Value::String(b64))) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| invalid("request.body_base64", "must be standard base64"))?,
            ),
            (Some(Value::Null) | None, Some(Value::Null) | None) => None,
            (Some(Value::Null) | None, Some(_)) => {
                return Err(invalid("request.body_base64", "must be a string"))
            }
            (Some(_), _) => return Err(invalid("request.body", "must be a string")),
        };
        if body.as_ref().is_some_and(|b| b.len() > MAX_REQUEST_BODY) {
            return Err(invalid(
                "request.body",
                format!("must be at most {MAX_REQUEST_BODY} bytes"),
            ));
        }
        Ok(ProxyCall {
            method,
            url,
            headers,
            body,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The target, checked against the profile

/// Where a call goes, checked against a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: String,
    /// Lower-case, no trailing dot; an IPv6 address without brackets.
    pub host: String,
    pub port: u16,
    pub method: String,
    /// The normalised path (dot segments resolved, percent-encoding kept).
    pub path: String,
    /// The host itself and each `*.parent` pattern that matches it, e.g. `["a.b.com",
    /// "*.b.com", "*.com"]`; an IP address matches only itself.
    pub host_patterns: Vec<String>,
}

/// The URL as the proxy will send it: parsed, without userinfo, with a host whose trailing dot
/// is dropped (so the name checked, the name pinned and the name sent are one string).
fn parse_url(raw: &str) -> Result<url::Url, EgressError> {
    let mut url = url::Url::parse(raw)
        .map_err(|e| invalid("request.url", format!("is not an absolute URL: {e}")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "request.url",
            "must not carry a user name or password",
        ));
    }
    if let Some(url::Host::Domain(domain)) = url.host() {
        let domain = domain.to_ascii_lowercase();
        let bare = domain.trim_end_matches('.');
        if bare.is_empty() {
            return Err(invalid("request.url", "has no host"));
        }
        if bare != domain {
            let bare = bare.to_owned();
            url.set_host(Some(&bare))
                .map_err(|e| invalid("request.url", format!("has a bad host: {e}")))?;
        }
    }
    url.set_fragment(None);
    Ok(url)
}

/// The URL's host as the proxy names it: a domain as written (lower case, trailing dot
/// dropped by [`parse_url`]), an IP address without brackets.
fn host_of(url: &url::Url, field: &'static str) -> Result<String, EgressError> {
    match url.host() {
        Some(url::Host::Domain(d)) => Ok(d.to_owned()),
        Some(url::Host::Ipv4(ip)) => Ok(ip.to_string()),
        Some(url::Host::Ipv6(ip)) => Ok(ip.to_string()),
        None => Err(invalid(field, "has no host")),
    }
}

/// The longest endpoint URL a user may register (an audit sink, an MCP server).
pub const MAX_ENDPOINT_URL: usize = 2048;

/// An endpoint a user registers for the service to call (an audit sink's receiver, an MCP
/// server): an absolute `https://` URL with a host, no user name or password (credentials go
/// elsewhere, never in a URL that is shown) and no fragment, at most [`MAX_ENDPOINT_URL`]
/// bytes. The error completes "`url` ...". Where it resolves is checked separately
/// ([`Egress::check_destination`]), and again at every call.
pub fn https_endpoint(raw: &str) -> Result<url::Url, String> {
    if raw.len() > MAX_ENDPOINT_URL {
        return Err(format!("must be at most {MAX_ENDPOINT_URL} characters"));
    }
    let url = url::Url::parse(raw).map_err(|e| format!("is not an absolute URL: {e}"))?;
    if url.scheme() != "https" {
        return Err("must be an https:// URL".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a fragment".into());
    }
    Ok(url)
}

/// Checks a call against a profile: scheme, host, method and path.
pub fn target(profile: &Profile, call: &ProxyCall) -> Result<Target, EgressError> {
    let url = parse_url(&call.url)?;
    let scheme = url.scheme().to_owned();
    match scheme.as_str() {
        "https" => {}
        "http" if profile.allow_http => {}
        _ => return Err(EgressError::SchemeNotAllowed),
    }
    let (host, host_patterns) = match url.host() {
        Some(url::Host::Domain(d)) => {
            let host = d.to_owned();
            let patterns = host_patterns(&host);
            (host, patterns)
        }
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), vec![ip.to_string()]),
        Some(url::Host::Ipv6(ip)) => (ip.to_string(), vec![ip.to_string()]),
        None => return Err(invalid("request.url", "has no host")),
    };
    if !profile.hosts.iter().any(|h| host_patterns.contains(h)) {
        return Err(EgressError::HostNotAllowed(host));
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| invalid("request.url", "has no port"))?;
    let default_port = if scheme == "https" { 443 } else { 80 };
    let port_allowed = if profile.ports.is_empty() {
        port == default_port
    } else {
        profile.ports.contains(&port)
    };
    if !port_allowed {
        return Err(EgressError::PortNotAllowed(port));
    }
    let method = call.method.to_ascii_uppercase();
    if !profile.methods.is_empty() && !profile.methods.contains(&method) {
        return Err(EgressError::MethodNotAllowed(method));
    }
    let path = url.path().to_owned();
    if hides_dot_segment(&path) {
        return Err(EgressError::PathNotAllowed(path));
    }
    if !profile.path_prefixes.is_empty()
        && !profile.path_prefixes.iter().any(|p| under_prefix(&path, p))
    {
        return Err(EgressError::PathNotAllowed(path));
    }
    Ok(Target {
        scheme,
        host,
        port,
        method,
        path,
        host_patterns,
    })
}

/// `a.b.com` → `["a.b.com", "*.b.com", "*.com"]`.
fn host_patterns(host: &str) -> Vec<String> {
    let mut patterns = vec![host.to_owned()];
    let mut rest = host;
    while let Some((_, parent)) = rest.split_once('.') {
        if parent.is_empty() {
            break;
        }
        patterns.push(format!("*.{parent}"));
        rest = parent;
    }
    patterns
}

/// A prefix matches at a segment boundary: `/v1` covers `/v1` and `/v1/x` but not `/v1x`, so a
/// profile for `/v1/charges` does not open `/v1/charges-admin`; a prefix ending in `/` covers
/// what starts with it.
fn under_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// The url crate resolves `.`, `..` and their `%2e` spellings, but it keeps an encoded slash or
/// backslash, so `/v1/..%2fadmin` reaches a server that decodes before it normalises as
/// `/admin`; and it keeps a segment with a path parameter, `..;x` or `..%3b`, which servers
/// such as Tomcat read as `..` once they drop the parameter. Any segment that is `.` or `..`
/// once the path is decoded (up to three times, against double encoding), split at `/` and
/// `\`, and cut at its first `;`, is refused.
fn hides_dot_segment(path: &str) -> bool {
    let mut current = path.to_owned();
    for _ in 0..3 {
        let decoded = percent_encoding::percent_decode_str(&current)
            .decode_utf8_lossy()
            .into_owned();
        if decoded.split(['/', '\\']).any(|segment| {
            let name = segment.split(';').next().unwrap_or(segment);
            name == "." || name == ".."
        }) {
            return true;
        }
        if decoded == current {
            return false;
        }
        current = decoded;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Rendering: the request with its secrets

/// Headers that describe one connection, or the framing of this message, not the request: the
/// proxy makes its own.
fn hop_by_hop(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    ) || name.starts_with("proxy-")
}

/// Request headers that would let an answer slip past the scrub: a compressed answer hides the
/// secret's bytes, and byte ranges could fetch an echoed secret in pieces, none of which is the
/// whole value.
fn scrub_defeating(name: &str) -> bool {
    matches!(name, "accept-encoding" | "range" | "if-range")
}

/// The header names a `Connection` header lists, which are hop-by-hop too.
fn connection_listed(headers: &[(String, String)]) -> BTreeSet<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The request ready to send, secrets in. Its `Debug` shows neither header values, nor the
/// query, nor the secrets.
pub struct Outbound {
    method: reqwest::Method,
    url: url::Url,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    host: String,
    port: u16,
    https_only: bool,
    /// `(key, value)` of every secret injected, for scrubbing the answer.
    secrets: Vec<(String, String)>,
}

impl Outbound {
    /// A POST of `body` to an `https://` URL with `headers` (audit sinks' batches): sent
    /// through the same checks as the proxy's calls (public destinations unless allowed, no
    /// redirects, the answer capped), with nothing to scrub.
    pub fn post_https(
        raw_url: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Outbound, EgressError> {
        Outbound::to_https(reqwest::Method::POST, raw_url, headers, Some(body))
    }

    fn to_https(
        method: reqwest::Method,
        raw_url: &str,
        headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<Outbound, EgressError> {
        let url = parse_url(raw_url)?;
        if url.scheme() != "https" {
            return Err(EgressError::SchemeNotAllowed);
        }
        let host = host_of(&url, "url")?;
        let port = url.port_or_known_default().unwrap_or(443);
        Ok(Outbound {
            method,
            url,
            headers,
            body,
            host,
            port,
            https_only: true,
            secrets: Vec::new(),
        })
    }

    /// A call of `method` to an `https://` URL with `headers` and nothing injected (an MCP
    /// server registered without `auth`), sent through the same checks as the proxy's calls;
    /// the answer is asked for uncompressed, as the proxy's are.
    pub fn https(
        method: &str,
        raw_url: &str,
        mut headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<Outbound, EgressError> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| invalid("method", "is not a method"))?;
        headers.push(("Accept-Encoding".into(), "identity".into()));
        Outbound::to_https(method, raw_url, headers, body)
    }

    /// What finds this call's secrets in the answer.
    pub fn scrubber(&self) -> Scrubber {
        Scrubber {
            patterns: Patterns::of(&self.secrets),
        }
    }

    pub fn method(&self) -> &str {
        self.method.as_str()
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn path(&self) -> &str {
        self.url.path()
    }

    /// The names of the headers sent (values may be secrets).
    pub fn header_names(&self) -> Vec<&str> {
        self.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The names of the secrets injected.
    pub fn keys(&self) -> BTreeSet<&str> {
        self.secrets.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// `text` with every secret value of this call (long enough to scrub) replaced, for
    /// messages built from what a library said.
    fn redact(&self, text: &str) -> String {
        redacted(text, self.secrets.iter().map(|(_, v)| v.as_str()))
    }
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("method", &self.method.as_str())
            .field("scheme", &self.url.scheme())
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.url.path())
            .field("headers", &self.header_names())
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .field("keys", &self.keys())
            .finish()
    }
}

/// Fills a template; the secrets it used are added to `used`.
fn fill(
    template: &str,
    secrets: &BTreeMap<String, String>,
    used: &mut Vec<(String, String)>,
) -> Result<String, EgressError> {
    // Templates were checked when the profile was read; one that no longer parses is a
    // profile that cannot be used, said without echoing the template.
    let parts =
        parse_template(template).map_err(|e| invalid("profile", format!("bad template: {e}")))?;
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Key(key) => {
                let value = secrets
                    .get(key)
                    .ok_or_else(|| EgressError::KeyMissing(key.to_owned()))?;
                if value.contains(['\r', '\n', '\0']) {
                    return Err(EgressError::InvalidSecret(key.to_owned()));
                }
                if !used.iter().any(|(k, _)| k == key) {
                    used.push((key.to_owned(), value.clone()));
                }
                out.push_str(value);
            }
        }
    }
    Ok(out)
}

/// `text` with every one of `secrets` long enough to scrub replaced.
fn redacted<'a>(text: &str, secrets: impl Iterator<Item = &'a str>) -> String {
    secrets
        .filter(|v| v.len() >= MIN_SCRUB_LEN)
        .fold(text.to_owned(), |t, v| t.replace(v, REDACTED))
}

/// The call with the profile's secrets injected into its declared slots. `target` must be what
/// [`target`] answered for this call and profile.
pub fn render(
    profile: &Profile,
    call: &ProxyCall,
    target: &Target,
    secrets: &BTreeMap<String, String>,
) -> Result<Outbound, EgressError> {
    let mut url = parse_url(&call.url)?;
    let host = host_of(&url, "request.url")?;
    if host != target.host || url.path() != target.path {
        return Err(invalid("request.url", "is not the URL that was checked"));
    }
    let method = reqwest::Method::from_bytes(target.method.as_bytes())
        .map_err(|_| invalid("request.method", "is not a method"))?;
    let mut used = Vec::new();

    // Query: the profile's parameters are appended; an agent's parameter of the same name could
    // shadow or be mistaken for the injected one, so it is refused.
    if !profile.query.is_empty() {
        if let Some((name, _)) = url
            .query_pairs()
            .find(|(name, _)| profile.query.contains_key(name.as_ref()))
        {
            return Err(invalid(
                "request.url",
                format!("the query parameter `{name}` is one the profile injects"),
            ));
        }
        let mut filled = Vec::with_capacity(profile.query.len());
        for (name, template) in &profile.query {
            filled.push((name, fill(template, secrets, &mut used)?));
        }
        let mut pairs = url.query_pairs_mut();
        for (name, value) in &filled {
            pairs.append_pair(name, value);
        }
    }

    // Headers: the agent's, less hop-by-hop and framing ones, then the profile's.
    let listed = connection_listed(&call.headers);
    let mut headers = Vec::with_capacity(call.headers.len() + profile.headers.len());
    for (name, value) in &call.headers {
        if profile
            .headers
            .keys()
            .any(|injected| injected.eq_ignore_ascii_case(name))
        {
            return Err(invalid(
                "request.headers",
                format!("`{name}` is a header the profile injects"),
            ));
        }
        let lower = name.to_ascii_lowercase();
        if hop_by_hop(&lower)
            || lower == "host"
            || listed.contains(&lower)
            || scrub_defeating(&lower)
        {
            continue;
        }
        headers.push((name.clone(), value.clone()));
    }
    // Answers come uncompressed, so the scrub reads what the agent will read.
    if !profile
        .headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("accept-encoding"))
    {
        headers.push(("Accept-Encoding".into(), "identity".into()));
    }
    for (name, template) in &profile.headers {
        let before = used.len();
        let value = fill(template, secrets, &mut used)?;
        if HeaderValue::from_str(&value).is_err() {
            // A control character other than CR, LF or NUL in a secret (the template's own
            // text was checked when the profile was stored).
            let key = used
                .get(before..)
                .and_then(|new| new.first())
                .map(|(k, _)| k.clone())
                .or_else(|| {
                    parse_template(template).ok().and_then(|parts| {
                        parts.into_iter().find_map(|p| match p {
                            Part::Key(k) => Some(k.to_owned()),
                            Part::Text(_) => None,
                        })
                    })
                })
                .unwrap_or_default();
            return Err(EgressError::InvalidSecret(key));
        }
        headers.push((name.clone(), value));
    }
    Ok(Outbound {
        method,
        url,
        headers,
        body: call.body.clone(),
        host,
        port: target.port,
        https_only: target.scheme == "https",
        secrets: used,
    })
}

// ---------------------------------------------------------------------------------------------
// The answer, scrubbed

/// What the upstream answered.
pub struct Upstream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub latency_ms: f64,
}

/// Shows the status, the header names and the body's size: before [`scrub`] the values may hold
/// secrets.
impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("status", &self.status)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.len())
            .field("latency_ms", &self.latency_ms)
            .finish()
    }
}

/// An answer whose status and headers are in and whose body is read as it comes (see
/// [`Egress::open`]).
pub struct Opened {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    response: reqwest::Response,
    /// The answer's `Content-Encoding`, when it is not `identity`.
    encoding: Option<String>,
    read: usize,
    max: usize,
    timeout: Duration,
    /// The values injected into the call, replaced in what is said of a failure.
    secrets: Vec<String>,
}

impl Opened {
    /// The next piece of the body, `None` at its end: each within the timeout, all of them
    /// within the answer cap. A body the upstream compressed (although asked not to) is refused:
    /// the scrub could not read it.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, EgressError> {
        let next = match tokio::time::timeout(self.timeout, self.response.chunk()).await {
            Ok(next) => next,
            Err(_) => return Err(EgressError::Timeout),
        };
        let chunk = match next {
            Ok(chunk) => chunk,
            Err(e) if e.is_timeout() => return Err(EgressError::Timeout),
            Err(e) => {
                let said = redacted(&error_text(&e), self.secrets.iter().map(String::as_str));
                return Err(EgressError::Unavailable(said));
            }
        };
        let Some(chunk) = chunk else {
            return Ok(None);
        };
        if let Some(encoding) = self.encoding.as_ref().filter(|_| !chunk.is_empty()) {
            return Err(EgressError::Unavailable(format!(
                "the upstream answered with `Content-Encoding: {encoding}`, which the proxy cannot scrub"
            )));
        }
        self.read += chunk.len();
        if self.read > self.max {
            return Err(EgressError::ResponseTooLarge(self.max));
        }
        Ok(Some(chunk.to_vec()))
    }

    /// The whole body (bounded as [`Opened::chunk`] bounds it).
    pub async fn body(&mut self) -> Result<Vec<u8>, EgressError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The answer, its pieces each awaited at most `idle` (a stream that stays open while it
    /// has nothing to say) instead of the egress timeout.
    pub fn idle_for(mut self, idle: Duration) -> Opened {
        self.timeout = idle;
        self
    }

    /// A header's value (the first of that name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("status", &self.status)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("read", &self.read)
            .finish()
    }
}

/// Finds and replaces the secrets of one call in what comes back, piece by piece (see
/// [`scrub`] for the spellings it finds). The default finds nothing (a call with no secret).
#[derive(Default)]
pub struct Scrubber {
    patterns: Option<Patterns>,
}

impl Scrubber {
    /// The scrubber of these secrets (by key), as a call that injects them uses.
    pub fn of(secrets: &BTreeMap<String, String>) -> Scrubber {
        let pairs: Vec<(String, String)> = secrets
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Scrubber {
            patterns: Patterns::of(&pairs),
        }
    }

    /// `text` with every secret replaced, when it held one; each secret found is added to
    /// `leaks` (once per key and form) as found in `place`.
    pub fn scrub(&self, text: &[u8], place: &str, leaks: &mut Vec<Leak>) -> Option<Vec<u8>> {
        let (scrubbed, found) = self.patterns.as_ref().and_then(|p| p.scrub(text))?;
        note_leaks(leaks, found, place);
        Some(scrubbed)
    }
}

/// Adds what a scrub found in `place` to `leaks`, each leak once.
fn note_leaks(leaks: &mut Vec<Leak>, found: Vec<Found>, place: &str) {
    for (key, form) in found {
        let leak = Leak {
            key,
            place: place.to_owned(),
            form,
        };
        if !leaks.contains(&leak) {
            leaks.push(leak);
        }
    }
}

/// A secret found (and replaced) in an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    pub key: String,
    /// `body` or `header:<name>` (the vault proxy); `message` or `event` (the MCP gateway).
    pub place: String,
    /// `raw`, `base64`, `hex`, `url` (percent-encoded, `+` or `%20` for a space), `json` (a
    /// JSON string's escapes) or `html` (character references).
    pub form: &'static str,
}

/// The spellings of a secret that are searched for, as they are: the value itself, its base64
/// (standard and url-safe, padded or not, and inside a longer base64 text) and its hex (lower
/// and upper case). The escapes an answer may wrap around any of them (percent-encoding, JSON,
/// HTML) are undone by [`Decoder`] views instead: there are too many ways to escape a value to
/// spell them all (any character of it may or may not be escaped).
fn spellings(value: &str) -> Vec<(&'static str, Vec<u8>)> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let raw = value.as_bytes();
    let mut forms: Vec<(&'static str, Vec<u8>)> = vec![("raw", raw.to_vec())];
    for engine in [&STANDARD, &URL_SAFE] {
        forms.push(("base64", engine.encode(raw).into_bytes()));
    }
    // Inside a longer base64 text (`Basic base64(user:secret)`) the secret's own characters
    // depend on where it starts modulo 3 bytes. For each start, the characters made only of the
    // secret's bits are its mark there: drop those that share bits with what comes before (0,
    // 2 or 3 characters) or after (the last one, unless the end falls on a 3-byte boundary).
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(raw);
            let encoded = engine.encode(&shifted).into_bytes();
            let skip = [0, 2, 3][offset];
            let end = if shifted.len() % 3 == 0 {
                encoded.len()
            } else {
                encoded.len().saturating_sub(1)
            };
            if let Some(mark) = encoded.get(skip..end) {
                forms.push(("base64", mark.to_vec()));
            }
        }
    }
    forms.push(("hex", hex::encode(raw).into_bytes()));
    forms.push(("hex", hex::encode_upper(raw).into_bytes()));
    forms.retain(|(_, f)| f.len() >= MIN_SCRUB_LEN);
    forms.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.1.cmp(&b.1)));
    forms.dedup_by(|a, b| a.1 == b.1);
    forms
}

/// A secret found in one text: its key and the form it was in.
type Found = (String, &'static str);

/// Every spelling of every secret of one call, in one automaton: made once per answer, then
/// each view of the body and of each header value is read once (linear in its length plus
/// the matches), however many secrets and spellings there are.
struct Patterns {
    automaton: aho_corasick::AhoCorasick,
    /// Per pattern: the secret's key, the spelling's form, and the spelling.
    meta: Vec<(String, &'static str, Vec<u8>)>,
}

impl Patterns {
    fn of(secrets: &[(String, String)]) -> Option<Patterns> {
        let meta: Vec<(String, &'static str, Vec<u8>)> = secrets
            .iter()
            .filter(|(_, value)| value.len() >= MIN_SCRUB_LEN)
            .flat_map(|(key, value)| {
                spellings(value)
                    .into_iter()
                    .map(move |(form, spelling)| (key.clone(), form, spelling))
            })
            .collect();
        if meta.is_empty() {
            return None;
        }
        // Standard semantics, so that overlapping matches are all found: two secrets that
        // overlap in an answer are both taken out.
        let automaton = aho_corasick::AhoCorasick::new(meta.iter().map(|(_, _, p)| p)).ok()?;
        Some(Patterns { automaton, meta })
    }

    /// `text` with every spelling of every secret replaced, in every view of it, and the leaks
    /// found (key and form); `None` when there is none.
    fn scrub(&self, text: &[u8]) -> Option<(Vec<u8>, Vec<Found>)> {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut leaks: Vec<Found> = Vec::new();
        let mut note = |key: &str, form: &'static str| {
            if !leaks.iter().any(|(k, f)| k == key && *f == form) {
                leaks.push((key.to_owned(), form));
            }
        };
        for hit in self.automaton.find_overlapping_iter(text) {
            let (key, form, _) = &self.meta[hit.pattern().as_usize()];
            ranges.push((hit.start(), hit.end()));
            note(key, form);
        }
        for decoder in Decoder::ALL {
            let Some(view) = decoder.view(text) else {
                continue;
            };
            for hit in self.automaton.find_overlapping_iter(&view.bytes) {
                let (key, form, spelling) = &self.meta[hit.pattern().as_usize()];
                let (start, end) = view.source(hit.start(), hit.end());
                // Found as it is: the plain search has it already.
                if text.get(start..end) == Some(spelling.as_slice()) {
                    continue;
                }
                ranges.push((start, end));
                note(key, if *form == "raw" { decoder.form() } else { form });
            }
        }
        if ranges.is_empty() {
            return None;
        }
        ranges.sort_unstable();
        let mut out = Vec::with_capacity(text.len());
        let mut from = 0;
        for (start, end) in ranges {
            if end <= from {
                continue;
            }
            if start >= from {
                out.extend_from_slice(&text[from..start]);
                out.extend_from_slice(REDACTED.as_bytes());
            }
            // An overlapping range extends the redaction before it.
            from = end;
        }
        out.extend_from_slice(&text[from..]);
        Some((out, leaks))
    }
}

/// A text with one kind of escape undone, and where each of its bytes came from.
struct View {
    bytes: Vec<u8>,
    /// The escapes whose decoded length differs from their source length, in order:
    /// `(view offset, view length, source offset, source length)`. Every other byte maps to
    /// the source one to one, so escapes are all that is kept (an answer has few).
    units: Vec<(usize, usize, usize, usize)>,
}

impl View {
    /// Where in the source the view's bytes `start..end` come from, whole escapes included.
    fn source(&self, start: usize, end: usize) -> (usize, usize) {
        (self.at(start, false), self.at(end.saturating_sub(1), true))
    }

    /// The source offset of view byte `at` (`after`: just past it).
    fn at(&self, at: usize, after: bool) -> usize {
        let index = self.units.partition_point(|u| u.0 <= at);
        let Some(&(view, view_len, source, source_len)) =
            index.checked_sub(1).and_then(|i| self.units.get(i))
        else {
            return at + usize::from(after);
        };
        if at < view + view_len {
            if after {
                source + source_len
            } else {
                source
            }
        } else {
            source + source_len + (at - view - view_len) + usize::from(after)
        }
    }
}

/// The escapes an upstream commonly wraps a value in, each undone in a view of the text.
/// Written by hand rather than with the decoders of `percent-encoding`, `serde_json` or an HTML
/// crate: the scrub needs to know which bytes of the answer each decoded byte came from (to
/// replace the escaped span whole), and to decode a text that is not one well-formed string
/// (a whole body, where a stray `%` or `\` is left as it is instead of failing the decode).
#[derive(Clone, Copy)]
enum Decoder {
    /// `%hh` in either case; `+` stays a plus.
    Percent,
    /// `%hh`, and `+` for a space (a form or a query string).
    Form,
    /// A JSON string's escapes: `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX` (any
    /// character, and surrogate pairs).
    Json,
    /// HTML character references: `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` (and their
    /// upper-case forms), `&#NNN;` and `&#xHH;`.
    Html,
}

impl Decoder {
    const ALL: [Decoder; 4] = [
        Decoder::Percent,
        Decoder::Form,
        Decoder::Json,
        Decoder::Html,
    ];

    fn form(self) -> &'static str {
        match self {
            Decoder::Percent | Decoder::Form => "url",
            Decoder::Json => "json",
            Decoder::Html => "html",
        }
    }

    /// The byte an escape starts with.
    fn starts(self, byte: u8) -> bool {
        match self {
            Decoder::Percent => byte == b'%',
            Decoder::Form => byte == b'%' || byte == b'+',
            Decoder::Json => byte == b'\\',
            Decoder::Html => byte == b'&',
        }
    }

    /// The escape at the start of `text`: the bytes it stands for (up to four, a UTF-8
    /// character) and how many of the text's bytes it takes; `None` when none starts there.
    fn unit(self, text: &[u8]) -> Option<([u8; 4], usize, usize)> {
        let one = |byte: u8, used: usize| Some(([byte, 0, 0, 0], 1, used));
        match (self, text) {
            (Decoder::Form, [b'+', ..]) => one(b' ', 1),
            (Decoder::Percent | Decoder::Form, [b'%', hi, lo, ..]) => {
                one(hex_digit(*hi)? << 4 | hex_digit(*lo)?, 3)
            }
            (Decoder::Json, [b'\\', b'u', rest @ ..]) => {
                let high = hex_number(rest.get(..4)?)?;
                let (code, used) = if (0xd800..0xdc00).contains(&high) {
                    match rest.get(4..6) {
                        Some(b"\\u") => {
                            let low = hex_number(rest.get(6..10)?)?;
                            if !(0xdc00..0xe000).contains(&low) {
                                return None;
                            }
                            (0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00), 12)
                        }
                        _ => return None,
                    }
                } else {
                    (high, 6)
                };
                utf8(code, used)
            }
            (Decoder::Json, [b'\\', escaped, ..]) => one(
                match escaped {
                    b'"' | b'\\' | b'/' => *escaped,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    _ => return None,
                },
                2,
            ),
            (Decoder::Html, [b'&', b'#', b'x' | b'X', rest @ ..]) => {
                let digits = rest
                    .iter()
                    .take(7)
                    .take_while(|b| b.is_ascii_hexdigit())
                    .count();
                let code = hex_number(&rest[..digits])?;
                utf8(
                    code,
                    3 + digits + usize::from(rest.get(digits) == Some(&b';')),
                )
            }
            (Decoder::Html, [b'&', b'#', rest @ ..]) => {
                let digits = rest
                    .iter()
                    .take(8)
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let code = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
                utf8(
                    code,
                    2 + digits + usize::from(rest.get(digits) == Some(&b';')),
                )
            }
            (Decoder::Html, [b'&', rest @ ..]) => {
                const NAMED: [(&[u8], u8); 5] = [
                    (b"amp", b'&'),
                    (b"lt", b'<'),
                    (b"gt", b'>'),
                    (b"quot", b'"'),
                    (b"apos", b'\''),
                ];
                let semicolon = rest.iter().take(5).position(|b| *b == b';')?;
                let name = &rest[..semicolon];
                let (_, byte) = NAMED.iter().find(|(n, _)| name.eq_ignore_ascii_case(n))?;
                one(*byte, semicolon + 2)
            }
            _ => None,
        }
    }

    /// `text` with this decoder's escapes undone, or `None` when it holds none.
    fn view(self, text: &[u8]) -> Option<View> {
        // Without a plus, the form view is the percent one.
        if matches!(self, Decoder::Form) {
            memchr::memchr(b'+', text)?;
        }
        let first = text.iter().position(|b| self.starts(*b))?;
        let mut bytes = Vec::with_capacity(text.len());
        bytes.extend_from_slice(&text[..first]);
        let mut units = Vec::new();
        let mut changed = false;
        let mut at = first;
        while let Some(&byte) = text.get(at) {
            match self.starts(byte).then(|| self.unit(&text[at..])).flatten() {
                Some((decoded, len, used)) => {
                    if len != used {
                        units.push((bytes.len(), len, at, used));
                    }
                    bytes.extend_from_slice(&decoded[..len]);
                    at += used;
                    changed = true;
                }
                None => {
                    bytes.push(byte);
                    at += 1;
                }
            }
        }
        changed.then_some(View { bytes, units })
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    (byte as char)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The value of 1 to 8 hex digits.
fn hex_number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    digits
        .iter()
        .try_fold(0u32, |n, b| Some(n << 4 | u32::from(hex_digit(*b)?)))
}

/// A code point as UTF-8 (a surrogate or a value past U+10FFFF is no character: `None`).
fn utf8(code: u32, used: usize) -> Option<([u8; 4], usize, usize)> {
    let c = char::from_u32(code)?;
    let mut buf = [0u8; 4];
    let len = c.encode_utf8(&mut buf).len();
    Some((buf, len, used))
}

/// Filters the answer's headers (hop-by-hop and framing ones dropped; `Set-Cookie` kept) and
/// replaces every secret injected into the call with `[REDACTED]` in the body and the header
/// values (each `Set-Cookie` among them): raw, base64 (standard and url-safe, padded or not,
/// and inside a longer base64 text), hex (lower and upper case), and any of these wrapped in
/// percent-encoding (either case of hex, `%20` or `+` for a space), a JSON string's escapes
/// (`\/`, `\"`, `\uXXXX` for any character) or HTML character references (`&amp;`, `&lt;`,
/// `&gt;`, `&quot;`, `&apos;` or `&#39;`, decimal and hex). Values shorter than
/// [`MIN_SCRUB_LEN`] bytes are not scrubbed: they occur by chance in ordinary answers, and
/// replacing them would mangle them. Linear in the answer's size: the spellings are made once,
/// and each text is read once as it is and once per kind of escape it holds. Answers where
/// each secret was found, and in which form.
pub fn scrub(upstream: &mut Upstream, outbound: &Outbound) -> Vec<Leak> {
    let listed = connection_listed(&upstream.headers);
    upstream.headers.retain(|(name, _)| {
        let lower = name.to_ascii_lowercase();
        !hop_by_hop(&lower) && !listed.contains(&lower)
    });
    let Some(patterns) = Patterns::of(&outbound.secrets) else {
        return Vec::new();
    };
    let mut leaks: Vec<Leak> = Vec::new();
    if let Some((body, seen)) = patterns.scrub(&upstream.body) {
        upstream.body = body;
        note_leaks(&mut leaks, seen, "body");
    }
    for (name, value) in upstream.headers.iter_mut() {
        if let Some((scrubbed, seen)) = patterns.scrub(value.as_bytes()) {
            *value = String::from_utf8_lossy(&scrubbed).into_owned();
            note_leaks(
                &mut leaks,
                seen,
                &format!("header:{}", name.to_ascii_lowercase()),
            );
        }
    }
    leaks
}

// ---------------------------------------------------------------------------------------------
// Destinations

fn v4_in(ip: Ipv4Addr, base: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(base)) & mask
}

fn v6_in(ip: Ipv6Addr, base: [u16; 8], len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    let [a, b, c, d, e, f, g, h] = base;
    u128::from(ip) & mask == u128::from(Ipv6Addr::new(a, b, c, d, e, f, g, h)) & mask
}

/// IPv4 ranges that are not the public internet.
const V4_BLOCKED: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),       // "this network", the unspecified address
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // carrier-grade NAT (and Alibaba's metadata service)
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local (and the metadata service of most clouds)
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // documentation
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast
    ([192, 168, 0, 0], 16),  // private
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation
    ([203, 0, 113, 0], 24),  // documentation
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and the broadcast address
];

/// IPv6 ranges that are not the public internet (the ones that embed an IPv4 address are
/// judged by it, in [`blocked`]).
const V6_BLOCKED: &[([u16; 8], u32)] = &[
    ([0x0064, 0xff9b, 0, 0, 0, 0, 0, 0], 96), // NAT64: reaches any IPv4 address through a gateway
    ([0x0064, 0xff9b, 1, 0, 0, 0, 0, 0], 48), // local-use NAT64
    ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64),      // discard-only
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),      // IETF protocol assignments (Teredo among them)
    ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32), // documentation
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),      // documentation
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),       // unique local (private)
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),      // link-local
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),      // site-local (deprecated)
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),       // multicast
];

/// The IPv4 address an IPv6 address stands for: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`, deprecated) or 6to4 (`2002:aabb:ccdd::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let bits = u128::from(ip);
    if bits >> 32 == 0 && bits > 1 {
        return Some(Ipv4Addr::from(bits as u32));
    }
    if v6_in(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

/// Whether an address is outside the public internet: loopback, private, link-local,
/// multicast, unspecified, broadcast, shared, reserved, documentation, NAT64, or an IPv6 form
/// of such an IPv4 address.
pub fn blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => V4_BLOCKED.iter().any(|(b, l)| v4_in(v4, *b, *l)),
        IpAddr::V6(v6) => {
            if v6.is_unspecified() || v6.is_loopback() {
                return true;
            }
            if let Some(v4) = embedded_v4(v6) {
                return blocked(IpAddr::V4(v4));
            }
            V6_BLOCKED.iter().any(|(b, l)| v6_in(v6, *b, *l))
        }
    }
}

fn is_metadata(ip: IpAddr) -> bool {
    let v4 = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    METADATA_ADDRS.contains(&ip) || v4.is_some_and(|v4| METADATA_ADDRS.contains(&v4))
}

/// Whether the proxy may connect to `ip`: a public address, or one the operator's allow-list
/// contains (a metadata address only when an entry names exactly it). An IPv6 form of an IPv4
/// address counts as that address for the allow-list too.
pub fn destination_allowed(ip: IpAddr, allow: &[IpNet]) -> bool {
    let v4 = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    let candidates: Vec<IpAddr> = std::iter::once(ip).chain(v4).collect();
    if is_metadata(ip) {
        return allow.iter().any(|net| {
            net.prefix_len() == net.max_prefix_len() && candidates.contains(&net.addr())
        });
    }
    if allow
        .iter()
        .any(|net| candidates.iter().any(|c| net.contains(c)))
    {
        return true;
    }
    !blocked(ip)
}

// ---------------------------------------------------------------------------------------------
// Sending

/// What the proxy's way out is configured with.
#[derive(Debug, Clone)]
pub struct EgressSettings {
    /// Networks the operator lets the proxy reach although they are not public.
    pub allow: Vec<IpNet>,
    /// Extra trusted root certificates, PEM.
    pub ca_pem: Option<Vec<u8>>,
    /// For the whole exchange: resolution, connection, request and the answer's last byte.
    pub timeout: Duration,
    pub max_response_bytes: usize,
}

/// A client is pinned to one host's checked addresses, so it is keyed by them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    host: String,
    addrs: Vec<SocketAddr>,
    https_only: bool,
}

/// Refuses every lookup. The client resolves only the host it was pinned to (through its
/// override); any other lookup means the request would go somewhere unchecked.
struct NoLookups;

impl reqwest::dns::Resolve for NoLookups {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move { Err(format!("`{name}` was not checked by the vault proxy").into()) })
    }
}

/// Sends rendered calls: resolution checked, connection pinned, answer capped.
/// A host's addresses, resolved and found allowed: the only addresses a call to it connects to.
#[derive(Debug, Clone)]
pub struct Destination {
    host: String,
    port: u16,
    addrs: Vec<SocketAddr>,
}

pub struct Egress {
    settings: EgressSettings,
    roots: Vec<reqwest::Certificate>,
    /// Built clients by pinned destination, each with when it was built. A client owns its
    /// connection pool: keeping it briefly lets repeated calls to one API reuse a TLS
    /// connection instead of paying a handshake each; dropping it after [`CLIENT_TTL`] bounds
    /// how long a destination stays pinned to addresses that DNS may since have moved.
    clients: moka::sync::Cache<ClientKey, reqwest::Client>,
    /// Hosts' checked addresses by `(host, port)` (see [`RESOLVED_TTL`]); at most
    /// [`MAX_CLIENTS`] of them.
    resolved: moka::sync::Cache<(String, u16), Vec<SocketAddr>>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("allow", &self.settings.allow)
            .field("extra_roots", &self.roots.len())
            .field("timeout", &self.settings.timeout)
            .field("max_response_bytes", &self.settings.max_response_bytes)
            .finish()
    }
}

impl Egress {
    /// Fails on extra roots that are not PEM certificates.
    pub fn new(settings: EgressSettings) -> Result<Egress, String> {
        let roots = match &settings.ca_pem {
            None => Vec::new(),
            Some(pem) => {
                let roots = reqwest::Certificate::from_pem_bundle(pem)
                    .map_err(|e| format!("the vault proxy's CA file is not PEM: {e}"))?;
                if roots.is_empty() {
                    return Err("the vault proxy's CA file holds no certificate".into());
                }
                roots
            }
        };
        let egress = Egress {
            settings,
            roots,
            clients: kept(MAX_CLIENTS, CLIENT_TTL),
            resolved: kept(MAX_CLIENTS, RESOLVED_TTL),
        };
        // A certificate that parses as PEM may still be refused by the TLS library: find out
        // now rather than on the first call.
        egress
            .build_client(&ClientKey {
                host: "localhost".into(),
                addrs: Vec::new(),
                https_only: true,
            })
            .map_err(|e| format!("the vault proxy's CA file cannot be used: {e}"))?;
        Ok(egress)
    }

    fn build_client(&self, key: &ClientKey) -> Result<reqwest::Client, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .https_only(key.https_only)
            .connect_timeout(self.settings.timeout)
            .pool_idle_timeout(CLIENT_TTL)
            .dns_resolver(Arc::new(NoLookups));
        if !key.addrs.is_empty() {
            builder = builder.resolve_to_addrs(&key.host, &key.addrs);
        }
        for root in &self.roots {
            builder = builder.add_root_certificate(root.clone());
        }
        builder.build()
    }

    fn client(&self, key: ClientKey) -> Result<reqwest::Client, reqwest::Error> {
        if let Some(client) = self.clients.get(&key) {
            return Ok(client);
        }
        // Built outside the cache: loading the roots takes a while, and other calls go on.
        let client = self.build_client(&key)?;
        self.clients.insert(key, client.clone());
        Ok(client)
    }

    /// The host's addresses, every one of them allowed: resolved and checked now, or within
    /// the last [`RESOLVED_TTL`].
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
        if METADATA_NAMES.contains(&host) {
            return Err(EgressError::DestinationNotAllowed(host.to_owned()));
        }
        let key = (host.to_owned(), port);
        if let Some(addrs) = self.resolved.get(&key) {
            return Ok(addrs);
        }
        let addrs = self.resolve_now(host, port).await?;
        self.resolved.insert(key, addrs.clone());
        Ok(addrs)
    }

    async fn resolve_now(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
        let mut addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|_| EgressError::Unresolvable(host.to_owned()))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(EgressError::Unresolvable(host.to_owned()));
        }
        if let Some(refused) = addrs
            .iter()
            .find(|a| !destination_allowed(a.ip(), &self.settings.allow))
        {
            return Err(EgressError::DestinationNotAllowed(refused.ip().to_string()));
        }
        addrs.sort();
        addrs.dedup();
        Ok(addrs)
    }

    /// The target's addresses, resolved and checked now, so that a destination the proxy may
    /// not reach is refused before anything is spent on the call (the vault checks it before
    /// a lease's use is taken). Bounded by the proxy's timeout.
    pub async fn destination(&self, target: &Target) -> Result<Destination, EgressError> {
        let host = target.host.trim_end_matches('.').to_owned();
        self.resolved(host, target.port).await
    }

    async fn resolved(&self, host: String, port: u16) -> Result<Destination, EgressError> {
        let resolved = tokio::time::timeout(self.settings.timeout, self.resolve(&host, port));
        let addrs = match resolved.await {
            Ok(addrs) => addrs?,
            Err(_) => return Err(EgressError::Timeout),
        };
        Ok(Destination { host, port, addrs })
    }

    /// The call's destination, resolved and checked now (as [`Egress::destination`] does for a
    /// proxy call's target).
    pub async fn destination_of(&self, out: &Outbound) -> Result<Destination, EgressError> {
        self.resolved(out.host.clone(), out.port).await
    }

    /// Whether the host of `raw_url` (an `https://` URL, as [`Outbound::post_https`] takes it)
    /// resolves, now, to addresses this egress may reach: `Err(DestinationNotAllowed)` when one
    /// of them is refused (or the name is a metadata name). A host that does not resolve, or
    /// not within the timeout, is no refusal here: it is tried again at each send, where every
    /// address is checked again.
    pub async fn check_destination(&self, raw_url: &str) -> Result<(), EgressError> {
        let url = parse_url(raw_url)?;
        let host = host_of(&url, "url")?;
        let port = url.port_or_known_default().unwrap_or(443);
        match tokio::time::timeout(self.settings.timeout, self.resolve(&host, port)).await {
            Ok(Err(refused @ EgressError::DestinationNotAllowed(_))) => Err(refused),
            _ => Ok(()),
        }
    }

    /// Sends the call to the checked addresses of its host and reads the answer (not scrubbed:
    /// see [`scrub`]). Redirects are answered as they are, never followed.
    pub async fn send(&self, out: Outbound) -> Result<Upstream, EgressError> {
        let started = Instant::now();
        let addrs = self.resolve(&out.host, out.port).await?;
        self.timed(&out, addrs, started).await
    }

    /// [`Egress::send`] to a destination checked earlier: connects to exactly those addresses.
    pub async fn send_to(
        &self,
        out: &Outbound,
        dest: &Destination,
    ) -> Result<Upstream, EgressError> {
        checked(out, dest)?;
        self.timed(out, dest.addrs.clone(), Instant::now()).await
    }

    async fn timed(
        &self,
        out: &Outbound,
        addrs: Vec<SocketAddr>,
        started: Instant,
    ) -> Result<Upstream, EgressError> {
        let exchange = self.exchange(out, addrs, started);
        match tokio::time::timeout(self.settings.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(EgressError::Timeout),
        }
    }

    async fn exchange(
        &self,
        out: &Outbound,
        addrs: Vec<SocketAddr>,
        started: Instant,
    ) -> Result<Upstream, EgressError> {
        let mut opened = self.opened(out, addrs).await?;
        let body = opened.body().await?;
        let Opened {
            status, headers, ..
        } = opened;
        Ok(Upstream {
            status,
            headers,
            body,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Sends the call to a destination checked earlier and answers as soon as the upstream's
    /// status and headers are in (within the timeout); the body is then read as it comes, each
    /// piece within the timeout and the whole bounded by the answer cap (the MCP gateway relays
    /// server-sent events this way). Not scrubbed: see [`Scrubber`].
    pub async fn open(&self, out: &Outbound, dest: &Destination) -> Result<Opened, EgressError> {
        checked(out, dest)?;
        let opening = self.opened(out, dest.addrs.clone());
        match tokio::time::timeout(self.settings.timeout, opening).await {
            Ok(opened) => opened,
            Err(_) => Err(EgressError::Timeout),
        }
    }

    async fn opened(&self, out: &Outbound, addrs: Vec<SocketAddr>) -> Result<Opened, EgressError> {
        // The override is looked up by the URL's host as sent: for a name exactly `out.host`
        // (trailing dot dropped by `parse_url`); an IP address is connected to as it is.
        let client = self
            .client(ClientKey {
                host: out.host.clone(),
                addrs,
                https_only: out.https_only,
            })
            .map_err(|e| EgressError::Unavailable(self.describe(out, &e)))?;
        let mut request = client.request(out.method.clone(), out.url.clone());
        for (name, value) in &out.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(body) = &out.body {
            request = request.body(body.clone());
        }
        let response = request.send().await.map_err(|e| self.failure(out, &e))?;
        let max = self.settings.max_response_bytes;
        // A HEAD answer's length is the one its GET would have; it carries no body.
        if out.method != reqwest::Method::HEAD
            && response
                .content_length()
                .is_some_and(|len| len > max as u64)
        {
            return Err(EgressError::ResponseTooLarge(max));
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let encoding = response
            .headers()
            .get(reqwest::header::CONTENT_ENCODING)
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .trim()
                    .to_ascii_lowercase()
            })
            .filter(|e| !e.is_empty() && e != "identity");
        Ok(Opened {
            status,
            headers,
            response,
            encoding,
            read: 0,
            max,
            timeout: self.settings.timeout,
            secrets: out.secrets.iter().map(|(_, v)| v.clone()).collect(),
        })
    }

    fn failure(&self, out: &Outbound, err: &reqwest::Error) -> EgressError {
        if err.is_timeout() {
            EgressError::Timeout
        } else {
            EgressError::Unavailable(self.describe(out, err))
        }
    }

    /// What went wrong, on one line, without the URL (its query may hold a secret) and with any
    /// secret value that a library quoted replaced.
    fn describe(&self, out: &Outbound, err: &reqwest::Error) -> String {
        out.redact(&error_text(err))
    }
}

/// A call may only go to the destination checked for it.
fn checked(out: &Outbound, dest: &Destination) -> Result<(), EgressError> {
    if dest.host != out.host || dest.port != out.port {
        return Err(EgressError::Unavailable(
            "the call does not go to the destination that was checked".into(),
        ));
    }
    Ok(())
}

/// What went wrong, on one line, without the URL.
fn error_text(err: &reqwest::Error) -> String {
    // reqwest's own text names the URL, so its kind is said in our words; its causes say
    // what happened.
    let mut text = String::from(if err.is_connect() {
        "cannot connect"
    } else if err.is_body() || err.is_decode() {
        "cannot read the answer"
    } else if err.is_builder() {
        "cannot build the request"
    } else {
        "the exchange failed"
    });
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text.replace(['\r', '\n'], " ")
}

/// `(secret set id, version, profile name)`.
pub type InjectedKey = (String, i64, String);

/// What a profile fills in on a call's way out: the profile, the secrets its templates inject,
/// and the scrubber of their spellings.
pub struct Injected {
    pub profile: Profile,
    pub secrets: BTreeMap<String, String>,
    pub scrubber: Arc<Scrubber>,
}

/// Credentials opened from a secret set's version, by `(set, version, profile)` (the MCP
/// gateway's upstream credentials): opening them (the version read, its entries decrypted, the
/// profile read, the scrubber's automaton built) would otherwise be done for every message of
/// every session. The caller reads the set itself each time all the same, so a new version or
/// a deleted set is seen at once; an entry lives 30 seconds from when it was opened.
pub type InjectedCache = moka::sync::Cache<InjectedKey, Arc<Injected>>;

/// An empty [`InjectedCache`], of at most 256 entries.
pub fn injected_cache() -> InjectedCache {
    kept(256, Duration::from_secs(30))
}

/// A cache of at most `max` entries, each living `ttl` from when it was put.
fn kept<K, V>(max: u64, ttl: Duration) -> moka::sync::Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    moka::sync::Cache::builder()
        .max_capacity(max)
        .time_to_live(ttl)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stripe() -> Profile {
        Profile::from_json(&json!({
            "hosts": ["api.stripe.com", "*.stripe.com"],
            "methods": ["GET", "POST"],
            "path_prefixes": ["/v1/"],
            "inject": {
                "headers": {"Authorization": "Bearer ${STRIPE_SECRET_KEY}"},
                "query": {"key": "${K}"}
            }
        }))
        .unwrap()
    }

    fn call(method: &str, url: &str) -> ProxyCall {
        ProxyCall::from_json(&json!({"method": method, "url": url})).unwrap()
    }

    fn secrets() -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "STRIPE_SECRET_KEY".into(),
                "sk_live_0123456789abcdef".into(),
            ),
            ("K".into(), "query-secret-value".into()),
        ])
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn profiles_read_the_stored_shape_and_name_their_keys() {
        let p = stripe();
        assert_eq!(p.hosts, ["api.stripe.com", "*.stripe.com"]);
        assert_eq!(p.methods, ["GET", "POST"]);
        assert!(!p.allow_http);
        assert_eq!(
            p.keys(),
            BTreeSet::from(["STRIPE_SECRET_KEY".to_owned(), "K".to_owned()])
        );
        let minimal =
            Profile::from_json(&json!({"hosts": ["API.Example.com."], "allow_http": true}))
                .unwrap();
        assert_eq!(minimal.hosts, ["api.example.com"]);
        assert!(minimal.methods.is_empty() && minimal.path_prefixes.is_empty());
        assert!(minimal.allow_http && minimal.keys().is_empty());
        for bad in [
            json!({"hosts": []}),
            json!({"hosts": ["a.com"], "methods": ["CONNECT"]}),
            json!({"hosts": ["a.com"], "path_prefixes": ["v1"]}),
            json!({"hosts": ["a.com"], "inject": {"headers": {"X": "${unclosed"}}}),
            json!({"hosts": ["a.com"], "inject": {"headers": {"bad header": "x"}}}),
            json!({"hosts": ["*.*.com"]}),
            json!({"hosts": ["a.com"], "allow_http": "yes"}),
        ] {
            assert!(Profile::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn calls_are_read_with_their_limits() {
        let c = ProxyCall::from_json(&json!({
            "method": "post", "url": "https://api.stripe.com/v1/charges",
            "headers": {"Content-Type": "application/json"}, "body": "{}"
        }))
        .unwrap();
        assert_eq!(c.method, "POST");
        assert_eq!(c.body.as_deref(), Some(&b"{}"[..]));
        let b = ProxyCall::from_json(
            &json!({"method": "PUT", "url": "https://a.com/", "body_base64": "AP8="}),
        )
        .unwrap();
        assert_eq!(b.body.as_deref(), Some(&[0u8, 255][..]));
        let field = |v: Value| match ProxyCall::from_json(&v) {
            Err(EgressError::InvalidRequest { field, .. }) => field,
            other => panic!("{v}: {other:?}"),
        };
        assert_eq!(field(json!("GET")), "request");
        assert_eq!(
            field(json!({"method": "GET", "url": "https://a.com/", "extra": 1})),
            "request"
        );
        assert_eq!(
            field(json!({"method": "CONNECT", "url": "https://a.com/"})),
            "request.method"
        );
        assert_eq!(field(json!({"method": "GET"})), "request.url");
        assert_eq!(
            field(
                json!({"method": "GET", "url": "https://a.com/", "headers": {"X-A": "a\r\nX-B: b"}})
            ),
            "request.headers"
        );
        assert_eq!(
            field(json!({"method": "GET", "url": "https://a.com/", "headers": {"X A": "a"}})),
            "request.headers"
        );
        assert_eq!(
            field(json!({"method": "GET", "url": "https://a.com/", "headers": {"X-A": "a\u{0}"}})),
            "request.headers"
        );
        assert_eq!(
            field(
                json!({"method": "POST", "url": "https://a.com/", "body": "x", "body_base64": "eA=="})
            ),
            "request.body"
        );
        assert_eq!(
            field(json!({"method": "POST", "url": "https://a.com/", "body_base64": "not base64!"})),
            "request.body_base64"
        );
        let big = "x".repeat(MAX_REQUEST_BODY + 1);
        assert_eq!(
            field(json!({"method": "POST", "url": "https://a.com/", "body": big})),
            "request.body"
        );
        // A header value is not quoted back in the message: it may be the agent's credential.
        let err = ProxyCall::from_json(
            &json!({"method": "GET", "url": "https://a.com/", "headers": {"X-A": "tok\nen"}}),
        )
        .unwrap_err();
        assert!(!err.to_string().contains("tok"), "{err}");
    }

    #[test]
    fn host_patterns_match_subdomains_at_any_depth_but_not_the_parent() {
        assert_eq!(host_patterns("a.b.com"), ["a.b.com", "*.b.com", "*.com"]);
        let p = stripe();
        for ok in [
            "https://api.stripe.com/v1/x",
            "https://a.b.stripe.com/v1/x",
            "https://API.Stripe.COM./v1/x",
        ] {
            let t = target(&p, &call("GET", ok)).unwrap();
            assert!(t.host.ends_with("stripe.com"), "{ok}");
        }
        // Another port only where the profile lists it.
        assert!(matches!(
            target(&p, &call("GET", "https://files.stripe.com:8443/v1/x")),
            Err(EgressError::PortNotAllowed(8443))
        ));
        let mut with_port = p.clone();
        with_port.ports = vec![8443];
        let t = target(
            &with_port,
            &call("GET", "https://files.stripe.com:8443/v1/x"),
        )
        .unwrap();
        assert_eq!(t.port, 8443);
        assert!(matches!(
            target(&with_port, &call("GET", "https://files.stripe.com/v1/x")),
            Err(EgressError::PortNotAllowed(443))
        ));
        let t = target(&p, &call("GET", "https://a.b.stripe.com./v1/x")).unwrap();
        assert_eq!(t.host, "a.b.stripe.com");
        assert_eq!(
            t.host_patterns,
            ["a.b.stripe.com", "*.b.stripe.com", "*.stripe.com", "*.com"]
        );
        assert_eq!(t.port, 443);
        let only_sub = Profile::from_json(&json!({"hosts": ["*.stripe.com"]})).unwrap();
        for refused in [
            "https://stripe.com/v1/x",
            "https://evilstripe.com/v1/x",
            "https://stripe.com.evil.net/v1/x",
            "https://api.stripe.co/v1/x",
        ] {
            assert!(
                matches!(
                    target(&only_sub, &call("GET", refused)),
                    Err(EgressError::HostNotAllowed(_))
                ),
                "{refused}"
            );
        }
        // An IP address matches itself only, never a wildcard over its octets.
        let ips = Profile::from_json(&json!({"hosts": ["*.0.1", "10.0.0.1"]})).unwrap();
        assert!(target(&ips, &call("GET", "https://10.0.0.1/")).is_ok());
        assert!(matches!(
            target(&ips, &call("GET", "https://10.1.0.1/")),
            Err(EgressError::HostNotAllowed(_))
        ));
        // Odd spellings of an address are normalised by the URL parser before matching.
        assert_eq!(
            target(&ips, &call("GET", "https://0x0a.0.0.1/"))
                .unwrap()
                .host,
            "10.0.0.1"
        );
    }

    #[test]
    fn scheme_userinfo_and_method_are_checked() {
        let p = stripe();
        for (url, scheme) in [
            ("http://api.stripe.com/v1/x", true),
            ("ftp://api.stripe.com/v1/x", true),
            ("file:///etc/passwd", true),
        ] {
            assert_eq!(
                matches!(
                    target(&p, &call("GET", url)),
                    Err(EgressError::SchemeNotAllowed)
                ),
                scheme,
                "{url}"
            );
        }
        let http =
            Profile::from_json(&json!({"hosts": ["api.stripe.com"], "allow_http": true})).unwrap();
        let t = target(&http, &call("GET", "http://api.stripe.com/v1/x")).unwrap();
        assert_eq!((t.scheme.as_str(), t.port), ("http", 80));
        assert!(matches!(
            target(&p, &call("GET", "https://user:pw@api.stripe.com/v1/x")),
            Err(EgressError::InvalidRequest {
                field: "request.url",
                ..
            })
        ));
        assert!(matches!(
            target(&p, &call("GET", "not a url")),
            Err(EgressError::InvalidRequest {
                field: "request.url",
                ..
            })
        ));
        assert!(matches!(
            target(&p, &call("DELETE", "https://api.stripe.com/v1/x")),
            Err(EgressError::MethodNotAllowed(m)) if m == "DELETE"
        ));
    }

    #[test]
    fn path_prefixes_cannot_be_escaped() {
        let p = stripe();
        let path = |url: &str| target(&p, &call("GET", url)).map(|t| t.path);
        assert_eq!(
            path("https://api.stripe.com/v1/charges?x=1#f").unwrap(),
            "/v1/charges"
        );
        assert_eq!(path("https://api.stripe.com/v1/a/../b").unwrap(), "/v1/b");
        for escape in [
            "https://api.stripe.com/v1/../admin",
            "https://api.stripe.com/v1/%2e%2e/admin",
            "https://api.stripe.com/v1/.%2E/admin",
            "https://api.stripe.com/v1/..%2fadmin",
            "https://api.stripe.com/v1/..%2Fadmin",
            "https://api.stripe.com/v1/..%5cadmin",
            "https://api.stripe.com/v1\\..\\admin",
            "https://api.stripe.com/v1/%252e%252e%252fadmin",
            "https://api.stripe.com/v1/..;/admin",
            "https://api.stripe.com/v1/..;jsessionid=x/admin",
            "https://api.stripe.com/v1/.;/admin",
            "https://api.stripe.com/v1/..%3b/admin",
            "https://api.stripe.com/v1/..%3B/admin",
            "https://api.stripe.com/v1/%2e%2E%3b/admin",
            "https://api.stripe.com/v1/..%253b/admin",
            "https://api.stripe.com/v1",
            "https://api.stripe.com/v2/x",
            "https://api.stripe.com/",
        ] {
            assert!(
                matches!(path(escape), Err(EgressError::PathNotAllowed(_))),
                "{escape}: {:?}",
                path(escape)
            );
        }
        // An encoded slash inside a name is fine when no dot segment comes of it.
        assert!(path("https://api.stripe.com/v1/projects/group%2Fproject").is_ok());
        // A parameter on an ordinary segment, or dots that are only part of a name, are fine.
        assert!(path("https://api.stripe.com/v1/charges;v=2").is_ok());
        assert!(path("https://api.stripe.com/v1/...;x/a..b").is_ok());
        assert!(under_prefix("/v1", "/v1") && under_prefix("/v1/x", "/v1"));
        assert!(!under_prefix("/v1x", "/v1") && !under_prefix("/v1/charges-admin", "/v1/charges"));
    }

    #[test]
    fn rendering_injects_into_the_declared_slots_only() {
        let p = stripe();
        let c = ProxyCall::from_json(&json!({
            "method": "POST",
            "url": "https://api.stripe.com/v1/charges?amount=5#frag",
            "headers": {
                "Content-Type": "application/json",
                "Connection": "close, X-Private",
                "X-Private": "hop",
                "Host": "evil.example",
                "Content-Length": "99",
                "Transfer-Encoding": "chunked",
                "Proxy-Authorization": "x",
                "Keep-Alive": "1",
                "TE": "trailers",
                "Upgrade": "h2c",
                "Accept-Encoding": "gzip",
                "Range": "bytes=3-",
                "X-Plain": "${STRIPE_SECRET_KEY}"
            },
            "body": "{\"k\": \"${K}\"}"
        }))
        .unwrap();
        let t = target(&p, &c).unwrap();
        let out = render(&p, &c, &t, &secrets()).unwrap();
        assert_eq!(out.method(), "POST");
        assert_eq!(
            out.url.as_str(),
            "https://api.stripe.com/v1/charges?amount=5&key=query-secret-value"
        );
        let names: Vec<&str> = out.header_names();
        assert_eq!(
            names,
            [
                "Content-Type",
                "X-Plain",
                "Accept-Encoding",
                "Authorization"
            ]
        );
        assert_eq!(out.headers[2].1, "identity");
        assert_eq!(out.headers[3].1, "Bearer sk_live_0123456789abcdef");
        // The agent's own text is sent as written: templates are filled in the profile's slots
        // only.
        assert_eq!(out.headers[1].1, "${STRIPE_SECRET_KEY}");
        assert_eq!(out.body.as_deref(), Some(&b"{\"k\": \"${K}\"}"[..]));
        assert_eq!(out.keys(), BTreeSet::from(["K", "STRIPE_SECRET_KEY"]));
    }

    #[test]
    fn rendering_refuses_conflicts_and_bad_secrets() {
        let p = stripe();
        let with_headers = |headers: Value| {
            let c = ProxyCall::from_json(&json!({
                "method": "GET", "url": "https://api.stripe.com/v1/x", "headers": headers
            }))
            .unwrap();
            let t = target(&p, &c).unwrap();
            render(&p, &c, &t, &secrets())
        };
        assert!(matches!(
            with_headers(json!({"authorization": "Bearer mine"})),
            Err(EgressError::InvalidRequest {
                field: "request.headers",
                ..
            })
        ));
        let c = call("GET", "https://api.stripe.com/v1/x?key=mine");
        let t = target(&p, &c).unwrap();
        assert!(matches!(
            render(&p, &c, &t, &secrets()),
            Err(EgressError::InvalidRequest {
                field: "request.url",
                ..
            })
        ));
        let c = call("GET", "https://api.stripe.com/v1/x?k%65y=mine");
        let t = target(&p, &c).unwrap();
        assert!(
            render(&p, &c, &t, &secrets()).is_err(),
            "an encoded name is the same name"
        );

        let c = call("GET", "https://api.stripe.com/v1/x");
        let t = target(&p, &c).unwrap();
        let mut missing = secrets();
        missing.remove("K");
        assert!(
            matches!(render(&p, &c, &t, &missing), Err(EgressError::KeyMissing(k)) if k == "K")
        );
        for bad in ["a\r\nX-Injected: 1", "a\nb", "a\0b", "a\x07b"] {
            let mut s = secrets();
            s.insert("STRIPE_SECRET_KEY".into(), bad.into());
            let err = render(&p, &c, &t, &s).unwrap_err();
            assert!(
                matches!(&err, EgressError::InvalidSecret(k) if k == "STRIPE_SECRET_KEY"),
                "{bad:?}: {err:?}"
            );
            assert!(!err.to_string().contains(bad), "{err}");
        }
        // A target checked for another call does not render this one.
        let other = target(&p, &call("GET", "https://a.stripe.com/v1/x")).unwrap();
        assert!(render(&p, &c, &other, &secrets()).is_err());
    }

    #[test]
    fn debug_of_outbound_shows_no_secret() {
        let p = stripe();
        let c = ProxyCall::from_json(&json!({
            "method": "GET", "url": "https://api.stripe.com/v1/x?agent=own-token-123",
            "headers": {"X-Agent": "agent-header-value"}
        }))
        .unwrap();
        let t = target(&p, &c).unwrap();
        let out = render(&p, &c, &t, &secrets()).unwrap();
        let shown = format!("{out:?} {out:#?} {c:?}");
        for hidden in [
            "sk_live_0123456789abcdef",
            "query-secret-value",
            "own-token-123",
            "agent-header-value",
            "Bearer",
        ] {
            assert!(!shown.contains(hidden), "{hidden} in {shown}");
        }
        assert!(
            shown.contains("api.stripe.com") && shown.contains("Authorization"),
            "{shown}"
        );
    }

    fn outbound_with(secret: &str) -> Outbound {
        let p = Profile::from_json(&json!({
            "hosts": ["a.com"], "inject": {"headers": {"Authorization": "Bearer ${T}"}}
        }))
        .unwrap();
        let c = call("GET", "https://a.com/");
        let t = target(&p, &c).unwrap();
        render(
            &p,
            &c,
            &t,
            &BTreeMap::from([("T".to_owned(), secret.to_owned())]),
        )
        .unwrap()
    }

    fn answer(body: &[u8], headers: &[(&str, &str)]) -> Upstream {
        Upstream {
            status: 200,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
            latency_ms: 1.0,
        }
    }

    #[test]
    fn scrubbing_replaces_every_form() {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        // `?>?` bytes make the standard and url-safe alphabets differ.
        let secret = "tok_?>?>~~~_secret";
        let out = outbound_with(secret);
        let forms = [
            ("raw", secret.to_owned()),
            ("base64", STANDARD.encode(secret)),
            ("base64", STANDARD_NO_PAD.encode(secret)),
            ("base64", URL_SAFE.encode(secret)),
            ("base64", URL_SAFE_NO_PAD.encode(secret)),
            ("base64", STANDARD.encode(format!("user:{secret}"))),
            ("base64", URL_SAFE.encode(format!("ab{secret}xyz"))),
            ("base64", STANDARD.encode(format!("abc{secret}"))),
            ("hex", hex::encode(secret)),
            ("hex", hex::encode_upper(secret)),
            ("url", "tok_%3F%3E%3F%3E%7E%7E%7E_secret".to_owned()),
        ];
        for (form, spelled) in &forms {
            let body = format!("before {spelled} after");
            let mut up = answer(
                body.as_bytes(),
                &[("X-Echo", &format!("v={spelled}")), ("Set-Cookie", "a=b")],
            );
            let leaks = scrub(&mut up, &out);
            let text = String::from_utf8(up.body.clone()).unwrap();
            assert!(!text.contains(spelled.as_str()), "{form} {spelled}: {text}");
            assert!(
                text.starts_with("before ") && text.ends_with(" after") && text.contains(REDACTED),
                "{text}"
            );
            assert!(up.headers[0].1.contains(REDACTED), "{:?}", up.headers);
            assert_eq!(up.headers[1], ("Set-Cookie".to_owned(), "a=b".to_owned()));
            assert!(
                leaks.contains(&Leak {
                    key: "T".into(),
                    place: "body".into(),
                    form
                }),
                "{form}: {leaks:?}"
            );
            assert!(
                leaks.contains(&Leak {
                    key: "T".into(),
                    place: "header:x-echo".into(),
                    form
                }),
                "{leaks:?}"
            );
        }
        // Every occurrence, and binary bodies too.
        let mut body = vec![0xff, 0xfe];
        body.extend_from_slice(secret.as_bytes());
        body.push(0);
        body.extend_from_slice(secret.as_bytes());
        let mut up = answer(&body, &[]);
        scrub(&mut up, &out);
        let mut expected = vec![0xff, 0xfe];
        expected.extend_from_slice(b"[REDACTED]\0[REDACTED]");
        assert_eq!(up.body, expected);
    }

    #[test]
    fn scrubbing_sees_through_percent_json_and_html_escapes() {
        let secret = "p@ss w/rd+<&>\"'é🔑~canary";
        let out = outbound_with(secret);
        let json_min = serde_json::to_string(secret).unwrap();
        let json_min = &json_min[1..json_min.len() - 1];
        let forms: Vec<(&str, String)> = vec![
            ("url", "p%40ss%20w%2frd%2b%3c%26%3e%22%27%c3%a9%f0%9f%94%91%7ecanary".into()),
            ("url", "p%40ss+w%2Frd%2B%3C%26%3E%22%27%C3%A9%F0%9F%94%91%7Ecanary".into()),
            ("url", secret.replace(' ', "%20").replace('/', "%2f")),
            ("url", secret.replace('+', "%2B").replace(' ', "+").replace('<', "%3C")),
            ("json", json_min.to_owned()),
            ("json", json_min.replace('/', "\\/")),
            ("json", r"\u0070\u0040\u0073\u0073\u0020\u0077\u002f\u0072\u0064\u002b\u003c\u0026\u003e\u0022\u0027\u00e9\ud83d\udd11\u007e\u0063\u0061\u006e\u0061\u0072\u0079".into()),
            ("json", r"p\u0040ss\u0020w\u002Frd\u002B\u003C\u0026\u003E\u0022\u0027\u00E9\uD83D\uDD11\u007Ecanary".into()),
            ("json", secret.replace('é', "\\u00e9").replace('"', "\\\"").replace('p', "\\u0070")),
            (
                "html",
                secret
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('"', "&quot;")
                    .replace('\'', "&#39;"),
            ),
            ("html", secret.replace('&', "&AMP;").replace('\'', "&apos;")),
            ("html", secret.chars().map(|c| format!("&#{};", c as u32)).collect()),
            ("html", "p&#x40;ss&#x20;w&#x2F;rd&#x2B;&#x3C;&#x26;&#x3E;&#x22;&#x27;&#xE9;&#x1F511;&#x7E;canary".into()),
            ("html", "p&#64ss&#32w&#47rd&#43&#60&#38&#62&#34&#39&#233&#128273&#126canary".into()),
        ];
        for (form, spelled) in &forms {
            let body = format!("before {spelled} after");
            let mut up = answer(
                body.as_bytes(),
                &[("Set-Cookie", &format!("t={spelled}; Path=/"))],
            );
            let leaks = scrub(&mut up, &out);
            let text = String::from_utf8(up.body.clone()).unwrap();
            assert_eq!(text, "before [REDACTED] after", "{form} {spelled}");
            assert_eq!(up.headers[0].1, "t=[REDACTED]; Path=/", "{form} {spelled}");
            for place in ["body", "header:set-cookie"] {
                let leak = Leak {
                    key: "T".into(),
                    place: place.into(),
                    form,
                };
                assert!(leaks.contains(&leak), "{form} {spelled}: {leaks:?}");
            }
        }
        // A spelling inside an escape (base64 with `\/` in JSON), several at once, overlapping
        // secrets, and escapes that stand for nothing of a secret are left as they are.
        use base64::engine::general_purpose::STANDARD;
        let b64 = STANDARD.encode(secret).replace('/', "\\/");
        let mut up = answer(
            format!("{{\"a\":\"{b64}\",\"b\":\"x%20y\\u0041&amp;\",\"c\":\"{json_min}\"}}")
                .as_bytes(),
            &[],
        );
        let leaks = scrub(&mut up, &out);
        assert_eq!(
            String::from_utf8(up.body).unwrap(),
            "{\"a\":\"[REDACTED]\",\"b\":\"x%20y\\u0041&amp;\",\"c\":\"[REDACTED]\"}"
        );
        assert!(leaks.iter().any(|l| l.form == "base64") && leaks.iter().any(|l| l.form == "json"));
        let two = Outbound {
            secrets: vec![
                ("A".into(), "first-secret-abc".into()),
                ("B".into(), "abc-second/secret".into()),
            ],
            ..outbound_with("unused-secret-value")
        };
        let mut up = answer(b"x first-secret-abc-second%2Fsecret y", &[]);
        let leaks = scrub(&mut up, &two);
        assert_eq!(up.body, b"x [REDACTED] y");
        assert_eq!(leaks.len(), 2, "{leaks:?}");
    }

    #[test]
    fn views_map_back_to_whole_escapes() {
        let view = Decoder::Json.view(b"ab\\u0063d\\/e").unwrap();
        assert_eq!(view.bytes, b"abcd/e");
        assert_eq!(view.source(2, 3), (2, 8));
        assert_eq!(view.source(0, 6), (0, 12));
        assert_eq!(view.source(3, 4), (8, 9));
        assert_eq!(view.source(4, 6), (9, 12));
        let view = Decoder::Html.view("x&#x1F511;y".as_bytes()).unwrap();
        assert_eq!(view.bytes, "x🔑y".as_bytes());
        assert_eq!(view.source(1, 5), (1, 10));
        assert_eq!(view.source(5, 6), (10, 11));
        assert!(Decoder::Percent.view(b"100% sure, %zz").is_none());
        assert!(
            Decoder::Form.view(b"a%20b").is_none(),
            "no plus: the percent view"
        );
        assert!(Decoder::Json.view(b"\\ud800 alone \\q").is_none());
        assert!(Decoder::Html.view(b"&nbsp; &#xD800; &#1114112;").is_none());
    }

    #[test]
    fn short_secrets_are_not_scrubbed_and_clean_answers_are_untouched() {
        let out = outbound_with("1234567");
        let mut up = answer(b"id 1234567", &[]);
        assert!(scrub(&mut up, &out).is_empty());
        assert_eq!(up.body, b"id 1234567");
        let out = outbound_with("a-long-enough-secret");
        let mut up = answer(b"{\"ok\": true}", &[("Content-Type", "application/json")]);
        assert!(scrub(&mut up, &out).is_empty());
        assert_eq!(up.body, b"{\"ok\": true}");
    }

    #[test]
    fn answer_headers_lose_hop_by_hop_and_framing_ones() {
        let out = outbound_with("a-long-enough-secret");
        let mut up = answer(
            b"",
            &[
                ("Connection", "keep-alive, X-Hop"),
                ("X-Hop", "1"),
                ("Keep-Alive", "timeout=5"),
                ("Transfer-Encoding", "chunked"),
                ("Content-Length", "0"),
                ("TE", "trailers"),
                ("Trailer", "X"),
                ("Upgrade", "h2c"),
                ("Proxy-Authenticate", "Basic"),
                ("Set-Cookie", "s=1"),
                ("Location", "https://example.com/"),
                ("Content-Type", "text/plain"),
            ],
        );
        scrub(&mut up, &out);
        let names: Vec<&str> = up.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Set-Cookie", "Location", "Content-Type"]);
        assert!(!format!("{up:?}").contains("s=1"));
    }

    #[test]
    fn addresses_outside_the_public_internet_are_blocked() {
        for b in [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "198.19.255.255",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "192.0.0.8",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::ffff:7f00:1",
            "64:ff9b::808:808",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001::1",
            "fec0::1",
            "100::1",
        ] {
            assert!(blocked(ip(b)), "{b} should be blocked");
            assert!(!destination_allowed(ip(b), &[]), "{b}");
        }
        for ok in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert!(!blocked(ip(ok)), "{ok} should be public");
            assert!(destination_allowed(ip(ok), &[]), "{ok}");
        }
    }

    #[test]
    fn the_allow_list_opens_what_it_contains() {
        let allow: Vec<IpNet> = vec![
            "127.0.0.0/8".parse().unwrap(),
            "10.1.0.0/16".parse().unwrap(),
        ];
        assert!(destination_allowed(ip("127.0.0.1"), &allow));
        assert!(
            destination_allowed(ip("::ffff:127.0.0.1"), &allow),
            "the mapped form is the address"
        );
        assert!(destination_allowed(ip("10.1.2.3"), &allow));
        assert!(!destination_allowed(ip("10.2.0.1"), &allow));
        assert!(!destination_allowed(ip("::1"), &allow));
        // Metadata addresses open only to an entry that names exactly them.
        let broad: Vec<IpNet> = vec![
            "169.254.0.0/16".parse().unwrap(),
            "100.64.0.0/10".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ];
        assert!(destination_allowed(ip("169.254.1.1"), &broad));
        for m in [
            "169.254.169.254",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
        ] {
            assert!(!destination_allowed(ip(m), &broad), "{m}");
        }
        let exact: Vec<IpNet> = vec![IpNet::from(ip("169.254.169.254"))];
        assert!(destination_allowed(ip("169.254.169.254"), &exact));
    }

    #[tokio::test]
    async fn metadata_names_and_refused_addresses_are_never_contacted() {
        let egress = Egress::new(plain_settings()).unwrap();
        for (host, shown) in [
            ("metadata.google.internal", "metadata.google.internal"),
            ("metadata", "metadata"),
            ("169.254.169.254", "169.254.169.254"),
            ("[::ffff:a9fe:a9fe]", "::ffff:169.254.169.254"),
        ] {
            let p = Profile::from_json(
                &json!({"hosts": [host.trim_matches(['[', ']'])], "allow_http": true}),
            )
            .unwrap();
            let url = format!("http://{host}/latest/meta-data/");
            let c = call("GET", &url);
            let t = match target(&p, &c) {
                Ok(t) => t,
                // An IPv6 literal cannot be named by a profile at all.
                Err(EgressError::HostNotAllowed(_)) => Target {
                    scheme: "http".into(),
                    host: shown.into(),
                    port: 80,
                    method: "GET".into(),
                    path: "/latest/meta-data/".into(),
                    host_patterns: vec![shown.into()],
                },
                Err(e) => panic!("{host}: {e:?}"),
            };
            let out = render(&p, &c, &t, &BTreeMap::new()).unwrap();
            match egress.send(out).await {
                Err(EgressError::DestinationNotAllowed(d)) => assert_eq!(d, shown),
                other => panic!("{host}: {other:?}"),
            }
        }
    }

    fn plain_settings() -> EgressSettings {
        EgressSettings {
            allow: Vec::new(),
            ca_pem: None,
            timeout: Duration::from_secs(5),
            max_response_bytes: 1024,
        }
    }

    /// A one-shot HTTP server on loopback that answers `pinned`.
    async fn plain_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\npinned",
                    )
                    .await;
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn clients_connect_to_the_checked_addresses_and_look_up_nothing() {
        let egress = Egress::new(plain_settings()).unwrap();
        let (addr, server) = plain_server().await;
        // `pinned.invalid` resolves nowhere: the answer proves the connection went to the
        // address the client was built with, not to what a lookup would say.
        let client = egress
            .client(ClientKey {
                host: "pinned.invalid".into(),
                addrs: vec![addr],
                https_only: false,
            })
            .unwrap();
        let url = format!("http://pinned.invalid:{}/", addr.port());
        let answer = client.get(&url).send().await.unwrap();
        assert_eq!(answer.text().await.unwrap(), "pinned");
        // Any other name is refused by the client's resolver rather than looked up.
        let err = client
            .get(format!("http://localhost:{}/", addr.port()))
            .send()
            .await
            .unwrap_err();
        let mut chain = String::new();
        let mut source: Option<&dyn std::error::Error> = Some(&err);
        while let Some(e) = source {
            chain.push_str(&e.to_string());
            source = e.source();
        }
        assert!(
            chain.contains("was not checked by the vault proxy"),
            "{chain}"
        );
        // The same destination gets the same client back; another pinning, another client.
        let again = ClientKey {
            host: "pinned.invalid".into(),
            addrs: vec![addr],
            https_only: false,
        };
        egress.client(again.clone()).unwrap();
        egress
            .client(ClientKey {
                addrs: vec![SocketAddr::new(ip("127.0.0.2"), addr.port())],
                ..again
            })
            .unwrap();
        egress.clients.run_pending_tasks();
        assert_eq!(egress.clients.entry_count(), 2);
        server.abort();
    }

    #[test]
    fn bad_extra_roots_fail_at_construction() {
        let settings = |pem: &[u8]| EgressSettings {
            allow: Vec::new(),
            ca_pem: Some(pem.to_vec()),
            timeout: Duration::from_secs(1),
            max_response_bytes: 1,
        };
        assert!(Egress::new(settings(b"not pem")).is_err());
        assert!(Egress::new(settings(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        ))
        .is_err());
    }
}
