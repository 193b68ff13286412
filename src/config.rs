//! Configuration in layers: built-in defaults, then an optional TOML file (`--config` /
//! `ACP_CONFIG`), then `ACP_*` environment variables, then command-line flags. clap reads the
//! flags and the environment (each flag names its variable, so `--help` shows both); figment
//! lays them over the file, keeping for every setting the highest layer that sets it and
//! naming the file and the key of a value it cannot take. [`Settings::resolve`] then applies
//! the defaults and checks every value, each refusal a [`ConfigError`] naming its setting.
//! Secrets are redacted in `Debug`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::secret::Secret;
use crate::store::SqliteSynchronous;

/// Every setting as it may appear in the file, the environment or on the command line.
/// `None` means "not set at this layer" (and is left out when a layer is laid over another).
#[serde_with::skip_serializing_none]
#[derive(Debug, Default, Clone, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Database URL: `sqlite:PATH` or `postgres://...` [default: sqlite:./data/acp.db]
    #[arg(long, env = "ACP_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "ACP_ADDR")]
    pub addr: Option<String>,
    /// Externally visible base URL used in links [default: http://ADDR]
    #[arg(long, env = "ACP_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Serve everything under this prefix, e.g. `/api` (stripped before signature checks)
    #[arg(long, env = "ACP_PATH_PREFIX")]
    pub path_prefix: Option<String>,
    /// Accepted clock skew of signed requests, seconds [default: 300]
    #[arg(long, env = "ACP_SIGNATURE_WINDOW_SECS")]
    pub signature_window_secs: Option<u64>,
    /// Lifetime of attestation challenges, seconds [default: 300]
    #[arg(long, env = "ACP_CHALLENGE_TTL_SECS")]
    pub challenge_ttl_secs: Option<u64>,
    /// Lifetime of agent claim codes, seconds [default: 3600]
    #[arg(long, env = "ACP_CLAIM_CODE_TTL_SECS")]
    pub claim_code_ttl_secs: Option<u64>,
    /// Largest number of changes committed in one group-commit batch [default: 256]
    #[arg(long, env = "ACP_COMMIT_BATCH_MAX")]
    pub commit_batch_max: Option<usize>,
    /// Maximum database connections (Postgres) [default: 16]
    #[arg(long, env = "ACP_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
    /// Seconds to wait for in-flight requests on shutdown [default: 30]
    #[arg(long, env = "ACP_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// `pretty` (default) or `json`
    #[arg(long, env = "ACP_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// SQLite: `full` syncs every commit, so an answered request survives a power loss; `normal`
    /// survives only a crash of the process (faster, opt-in) [default: full]
    #[arg(long, env = "ACP_SQLITE_SYNCHRONOUS")]
    pub sqlite_synchronous: Option<String>,
    /// `outbox` (store mail in the database) or `smtp://[user:pass@]host:port[?tls=none|starttls|tls]` [default: outbox]
    #[arg(long, env = "ACP_EMAIL_URL")]
    pub email_url: Option<String>,
    /// Sender address of the service's mail [default: acp@localhost]
    #[arg(long, env = "ACP_EMAIL_FROM")]
    pub email_from: Option<String>,
    /// Where contact-form notifications go (none: stored only)
    #[arg(long, env = "ACP_CONTACT_EMAIL")]
    pub contact_email: Option<String>,
    /// Lifetime of dashboard sessions, seconds [default: 604800]
    #[arg(long, env = "ACP_SESSION_TTL_SECS")]
    pub session_ttl_secs: Option<u64>,
    /// Login links one address may request per 15 minutes [default: 5]
    #[arg(long, env = "ACP_LOGIN_LIMIT_PER_EMAIL")]
    pub login_limit_per_email: Option<i64>,
    /// Login links one client IP may request per 15 minutes [default: 30]
    #[arg(long, env = "ACP_LOGIN_LIMIT_PER_IP")]
    pub login_limit_per_ip: Option<i64>,
    /// Registrations without an API key one client IP may make per 10 minutes [default: 60]
    #[arg(long, env = "ACP_REGISTER_LIMIT_PER_IP")]
    pub register_limit_per_ip: Option<i64>,
    /// Versions kept of each vault secret set (older ones are dropped) [default: 10]
    #[arg(long, env = "ACP_VAULT_HISTORY")]
    pub vault_history: Option<i64>,
    /// Contact submissions one client IP may send per hour [default: 5]
    #[arg(long, env = "ACP_CONTACT_LIMIT_PER_IP")]
    pub contact_limit_per_ip: Option<i64>,
    /// IP addresses or CIDRs the vault proxy may reach although they are loopback, private or
    /// link-local, comma-separated, e.g. `10.0.0.5,192.168.7.0/24` [default: none]
    #[arg(long, env = "ACP_VAULT_PROXY_ALLOW")]
    pub vault_proxy_allow: Option<String>,
    /// PEM file of root certificates the vault proxy trusts beside the built-in ones (a private
    /// CA), read at start
    #[arg(long, env = "ACP_VAULT_PROXY_CA_FILE")]
    pub vault_proxy_ca_file: Option<String>,
    /// Longest a vault proxy call may take, connection to last byte, seconds [default: 30]
    #[arg(long, env = "ACP_VAULT_PROXY_TIMEOUT_SECS")]
    pub vault_proxy_timeout_secs: Option<u64>,
    /// Largest upstream answer body the vault proxy relays, bytes [default: 4194304]
    #[arg(long, env = "ACP_VAULT_PROXY_MAX_RESPONSE_BYTES")]
    pub vault_proxy_max_response_bytes: Option<usize>,
    /// Longest one delivery of a batch to an audit sink may take, connection to answer,
    /// seconds [default: 10]
    #[arg(long, env = "ACP_AUDIT_SINK_TIMEOUT_SECS")]
    pub audit_sink_timeout_secs: Option<u64>,
    /// Longest wait between two attempts at a failing audit sink, seconds (the wait doubles
    /// from one second up to this) [default: 300]
    #[arg(long, env = "ACP_AUDIT_SINK_BACKOFF_MAX_SECS")]
    pub audit_sink_backoff_max_secs: Option<u64>,
    /// How often retention prunes old audit events and heartbeats, seconds [default: 600]
    #[arg(long, env = "ACP_RETENTION_INTERVAL_SECS")]
    pub retention_interval_secs: Option<u64>,
    /// Memory the cache of agents may hold (estimated; least recently used go first), MiB
    /// [default: 64]
    #[arg(long, env = "ACP_CACHE_AGENTS_MIB")]
    pub cache_agents_mib: Option<u64>,
    /// Memory the cache of API keys may hold (estimated; least recently used go first), MiB
    /// [default: 8]
    #[arg(long, env = "ACP_CACHE_KEYS_MIB")]
    pub cache_keys_mib: Option<u64>,
    /// Memory the cache of compiled policies may hold (estimated; least recently used go
    /// first), MiB [default: 256]
    #[arg(long, env = "ACP_CACHE_POLICIES_MIB")]
    pub cache_policies_mib: Option<u64>,
    /// Audit streams (`GET /v1/workspace/audit/stream`) one principal may hold open at once: an
    /// API key, a personal access token, or a person's sessions [default: 8]
    #[arg(long, env = "ACP_AUDIT_STREAMS_PER_PRINCIPAL")]
    pub audit_streams_per_principal: Option<usize>,
    /// Audit streams the server holds open at once, in all; never more than the descriptors
    /// left once the API's reserve is kept [default: derived from the descriptor limit, at
    /// most 1024]
    #[arg(long, env = "ACP_AUDIT_STREAMS_MAX")]
    pub audit_streams_max: Option<usize>,
    /// On the first start (an empty database): make the person with this email the owner of
    /// the default workspace and print their one-time login link; on later starts only say
    /// whether they are a member
    #[arg(long, env = "ACP_OWNER", value_name = "EMAIL")]
    pub owner: Option<String>,
    /// Key of the default workspace on first start (must be a well-formed `svc_` key)
    #[arg(long, env = "ACP_BOOTSTRAP_API_KEY", hide_env_values = true)]
    #[serde(default, deserialize_with = "deserialize_secret")]
    pub bootstrap_api_key: Option<SecretSetting>,
    /// Key that encrypts the JWT signing keys at rest: 32 bytes, standard base64, the same on
    /// every replica [default with SQLite: a key file `acp-master.key` next to the database,
    /// made on first start; required with Postgres]
    #[arg(long, env = "ACP_MASTER_KEY", hide_env_values = true)]
    #[serde(default, deserialize_with = "deserialize_secret")]
    pub master_key: Option<SecretSetting>,
    /// Who may sign up (log in for the first time and create a workspace): `invite` (members
    /// of some workspace only), `domains:example.com,example.org` (those, and any address of
    /// these domains) or `open` (anyone) [default: invite]
    #[arg(long, env = "ACP_SIGNUP")]
    pub signup: Option<String>,
    /// Requests and decisions per second an API key without a rate of its own may make on
    /// each replica (a batch counts each decision; beyond it 429 `rate_limited`); 0: no limit
    /// [default: 5000]
    #[arg(long, env = "ACP_API_KEY_RATE_LIMIT")]
    pub api_key_rate_limit: Option<u64>,
    /// Distinct policy ids `/metrics` labels decisions with; later ones count as `other`
    /// [default: 50]
    #[arg(long, env = "ACP_METRICS_MAX_POLICY_LABELS")]
    pub metrics_max_policy_labels: Option<usize>,
    /// Distinct reason codes `/metrics` labels decisions with; later ones count as `other`
    /// [default: 100]
    #[arg(long, env = "ACP_METRICS_MAX_REASON_LABELS")]
    pub metrics_max_reason_labels: Option<usize>,
    /// Distinct audit sinks `/metrics` reports the lag of by id; later ones together as
    /// `other` [default: 50]
    #[arg(long, env = "ACP_METRICS_MAX_SINK_LABELS")]
    pub metrics_max_sink_labels: Option<usize>,
    /// Distinct MCP server and tool pairs `/metrics` counts gateway calls by; later ones
    /// together as `other` [default: 200]
    #[arg(long, env = "ACP_METRICS_MAX_MCP_TOOL_LABELS")]
    pub metrics_max_mcp_tool_labels: Option<usize>,
    /// Bearer token `GET /metrics` requires (`Authorization: Bearer TOKEN`) [default: none, open]
    #[arg(long, env = "ACP_METRICS_TOKEN", hide_env_values = true)]
    #[serde(default, deserialize_with = "deserialize_secret")]
    pub metrics_token: Option<SecretSetting>,
}

/// A secret setting; prints redacted.
#[derive(Clone)]
pub struct SecretSetting(pub Secret);

impl std::fmt::Debug for SecretSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::str::FromStr for SecretSetting {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(Secret::new(s.to_owned())))
    }
}

/// The value itself, for the layering only: figment holds the layers as values in memory for
/// the moment it merges them, and none of them is ever printed or written.
impl Serialize for SecretSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.expose())
    }
}

fn deserialize_secret<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SecretSetting>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|s| SecretSetting(Secret::new(s))))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// The resolved configuration of a server.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub addr: SocketAddr,
    pub public_url: Option<String>,
    pub path_prefix: Option<String>,
    pub signature_window_ms: i64,
    pub challenge_ttl_ms: i64,
    pub claim_code_ttl_ms: i64,
    pub commit_batch_max: usize,
    pub db_max_connections: u32,
    pub shutdown_grace_secs: u64,
    pub log_format: LogFormat,
    pub sqlite_synchronous: SqliteSynchronous,
    pub bootstrap_api_key: Option<Secret>,
    /// The first owner of the default workspace, made with it on the first start.
    pub owner: Option<crate::domain::EmailAddress>,
    pub master_key: Option<Secret>,
    pub email_url: String,
    pub email_from: String,
    pub contact_email: Option<String>,
    pub session_ttl_ms: i64,
    pub login_limit_per_email: i64,
    pub login_limit_per_ip: i64,
    pub contact_limit_per_ip: i64,
    pub register_limit_per_ip: i64,
    pub vault_history: i64,
    /// Networks the vault proxy may reach although they are not public.
    pub vault_proxy_allow: Vec<IpNet>,
    /// Extra trusted roots of the vault proxy, the PEM text of `vault_proxy_ca_file`.
    pub vault_proxy_ca_pem: Option<Vec<u8>>,
    pub vault_proxy_timeout_secs: u64,
    pub vault_proxy_max_response_bytes: usize,
    pub audit_sink_timeout_secs: u64,
    pub audit_sink_backoff_max_secs: u64,
    pub retention_interval_secs: u64,
    /// Capacities of the in-process caches, MiB of estimated size.
    pub cache_agents_mib: u64,
    pub cache_keys_mib: u64,
    pub cache_policies_mib: u64,
    /// The bearer token `/metrics` requires; `None`: open.
    pub metrics_token: Option<Secret>,
    /// Who may sign up.
    pub signup: crate::domain::Signup,
    /// Requests and decisions per second of a key without a rate of its own, per replica;
    /// 0: none.
    pub api_key_rate_limit: u64,
    /// How many distinct values the labels tenants choose keep in `/metrics`.
    pub metrics_labels: crate::observe::LabelLimits,
    /// Live audit streams per principal.
    pub audit_streams_per_principal: usize,
    /// Live audit streams in all, as configured; `None`: derived from the descriptor limit
    /// ([`Config::audit_streams_cap`]).
    pub audit_streams_max: Option<usize>,
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite:./data/acp.db";

/// Why a configuration cannot be used: the file, or one setting's value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The settings file cannot be read, is not TOML, or holds a key or value no setting takes.
    #[error("invalid config file `{}`: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    /// A setting's value is refused; `reason` says what it must be.
    #[error("`{setting}` {reason}")]
    Invalid {
        setting: &'static str,
        reason: String,
    },
}

impl ConfigError {
    fn invalid(setting: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            setting,
            reason: reason.into(),
        }
    }
}

impl Settings {
    /// These settings (flags and environment, as clap read them) laid over the TOML file at
    /// `file`, when one is named: a setting the upper layer leaves unset comes from the file.
    pub fn over_file(self, file: Option<&Path>) -> Result<Settings, ConfigError> {
        let Some(path) = file else {
            return Ok(self);
        };
        let refused = |reason: String| ConfigError::File {
            path: path.to_owned(),
            reason,
        };
        // Read here rather than by `Toml::file`, which takes a missing file for an empty one.
        let text =
            std::fs::read_to_string(path).map_err(|e| refused(format!("cannot read it: {e}")))?;
        Figment::from(Toml::string(&text))
            .merge(Serialized::defaults(self))
            .extract()
            .map_err(|e| refused(file_errors(e)))
    }

    /// Applies defaults and checks every value.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let addr: SocketAddr = self
            .addr
            .as_deref()
            .unwrap_or("127.0.0.1:8080")
            .parse()
            .map_err(|e| {
                ConfigError::invalid("addr", format!("is not an address and port: {e}"))
            })?;
        let positive = |name: &'static str, value: Option<u64>, default: u64| {
            let v = value.unwrap_or(default);
            if v == 0 || v > 86_400 * 30 {
                return Err(ConfigError::invalid(
                    name,
                    "must be between 1 and 2592000 seconds",
                ));
            }
            Ok(v as i64 * 1000)
        };
        let limit =
            |name: &'static str, value: Option<i64>, default: i64| match value.unwrap_or(default) {
                v if v >= 1 => Ok(v),
                _ => Err(ConfigError::invalid(name, "must be at least 1")),
            };
        let path_prefix = match self.path_prefix.as_deref().map(|p| p.trim_end_matches('/')) {
            None | Some("") => None,
            Some(p) if p.starts_with('/') => Some(p.to_owned()),
            Some(p) => {
                return Err(ConfigError::invalid(
                    "path_prefix",
                    format!("must start with `/`, got `{p}`"),
                ))
            }
        };
        let log_format = match self.log_format.as_deref().unwrap_or("pretty") {
            "pretty" => LogFormat::Pretty,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::invalid(
                    "log_format",
                    format!("must be `pretty` or `json`, got `{other}`"),
                ))
            }
        };
        let sqlite_synchronous = match self.sqlite_synchronous.as_deref() {
            None => SqliteSynchronous::Full,
            Some(text) => SqliteSynchronous::parse(text).ok_or_else(|| {
                ConfigError::invalid(
                    "sqlite_synchronous",
                    format!("must be `full` or `normal`, got `{text}`"),
                )
            })?,
        };
        // Parsed here, so a bad address stops the start instead of the first mail.
        let email_from = self
            .email_from
            .unwrap_or_else(|| "acp@localhost".to_owned());
        if email_from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(ConfigError::invalid(
                "email_from",
                format!("must be an email address (`acp@example.com` or `acp <acp@example.com>`), got `{email_from}`"),
            ));
        }
        let contact_email = match self.contact_email.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(
                text.parse::<lettre::Address>()
                    .map_err(|_| {
                        ConfigError::invalid(
                            "contact_email",
                            format!("must be one email address, got `{text}`"),
                        )
                    })?
                    .to_string(),
            ),
        };
        let vault_proxy_allow = match self.vault_proxy_allow.as_deref() {
            None => Vec::new(),
            Some(text) => parse_networks(text)?,
        };
        // Read now, so a missing or broken file stops the start rather than the first call.
        let vault_proxy_ca_pem = match self.vault_proxy_ca_file.as_deref() {
            None | Some("") => None,
            Some(path) => Some(read_ca_file(Path::new(path))?),
        };
        let vault_proxy_timeout_secs = self.vault_proxy_timeout_secs.unwrap_or(30);
        if !(1..=300).contains(&vault_proxy_timeout_secs) {
            return Err(ConfigError::invalid(
                "vault_proxy_timeout_secs",
                format!("must be between 1 and 300, got {vault_proxy_timeout_secs}"),
            ));
        }
        let vault_proxy_max_response_bytes = self
            .vault_proxy_max_response_bytes
            .unwrap_or(4 * 1024 * 1024);
        if !(1..=MAX_PROXY_RESPONSE_BYTES).contains(&vault_proxy_max_response_bytes) {
            return Err(ConfigError::invalid(
                "vault_proxy_max_response_bytes",
                format!("must be between 1 and {MAX_PROXY_RESPONSE_BYTES}, got {vault_proxy_max_response_bytes}"),
            ));
        }
        let within = |name: &'static str, value: Option<u64>, default: u64, max: u64| {
            let value = value.unwrap_or(default);
            if (1..=max).contains(&value) {
                Ok(value)
            } else {
                Err(ConfigError::invalid(
                    name,
                    format!("must be between 1 and {max}, got {value}"),
                ))
            }
        };
        // Checked here, so a malformed address stops the first start before it creates anything.
        let owner = match self.owner.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(
                crate::domain::EmailAddress::parse(text)
                    .map_err(|e| ConfigError::invalid("owner", format!("{e}: `{text}`")))?,
            ),
        };
        let signup = match self.signup.as_deref() {
            None => crate::domain::Signup::default(),
            Some(text) => crate::domain::Signup::parse(text)
                .map_err(|reason| ConfigError::invalid("signup", reason))?,
        };
        let labels = |name: &'static str, value: Option<usize>, default: usize| match value {
            None => Ok(default),
            Some(n) if n <= MAX_METRICS_LABELS => Ok(n),
            Some(n) => Err(ConfigError::invalid(
                name,
                format!("must be at most {MAX_METRICS_LABELS}, got {n}"),
            )),
        };
        let defaults = crate::observe::LabelLimits::default();
        let metrics_labels = crate::observe::LabelLimits {
            policy_ids: labels(
                "metrics_max_policy_labels",
                self.metrics_max_policy_labels,
                defaults.policy_ids,
            )?,
            reasons: labels(
                "metrics_max_reason_labels",
                self.metrics_max_reason_labels,
                defaults.reasons,
            )?,
            sink_ids: labels(
                "metrics_max_sink_labels",
                self.metrics_max_sink_labels,
                defaults.sink_ids,
            )?,
            mcp_tools: labels(
                "metrics_max_mcp_tool_labels",
                self.metrics_max_mcp_tool_labels,
                defaults.mcp_tools,
            )?,
        };
        let api_key_rate_limit = self
            .api_key_rate_limit
            .unwrap_or(DEFAULT_API_KEY_RATE_LIMIT);
        if api_key_rate_limit > MAX_API_KEY_RATE_LIMIT {
            return Err(ConfigError::invalid(
                "api_key_rate_limit",
                format!("must be at most {MAX_API_KEY_RATE_LIMIT} (0: no limit), got {api_key_rate_limit}"),
            ));
        }
        let audit_streams_per_principal = self
            .audit_streams_per_principal
            .unwrap_or(DEFAULT_AUDIT_STREAMS_PER_PRINCIPAL);
        if !(1..=MAX_AUDIT_STREAMS).contains(&audit_streams_per_principal) {
            return Err(ConfigError::invalid(
                "audit_streams_per_principal",
                format!(
                    "must be between 1 and {MAX_AUDIT_STREAMS}, got {audit_streams_per_principal}"
                ),
            ));
        }
        if let Some(max) = self.audit_streams_max {
            if !(1..=MAX_AUDIT_STREAMS).contains(&max) {
                return Err(ConfigError::invalid(
                    "audit_streams_max",
                    format!("must be between 1 and {MAX_AUDIT_STREAMS}, got {max}"),
                ));
            }
        }
        Ok(Config {
            signup,
            api_key_rate_limit,
            metrics_labels,
            audit_streams_per_principal,
            audit_streams_max: self.audit_streams_max,
            audit_sink_timeout_secs: within(
                "audit_sink_timeout_secs",
                self.audit_sink_timeout_secs,
                10,
                300,
            )?,
            audit_sink_backoff_max_secs: within(
                "audit_sink_backoff_max_secs",
                self.audit_sink_backoff_max_secs,
                300,
                86_400,
            )?,
            retention_interval_secs: within(
                "retention_interval_secs",
                self.retention_interval_secs,
                600,
                86_400,
            )?,
            cache_agents_mib: within(
                "cache_agents_mib",
                self.cache_agents_mib,
                DEFAULT_CACHE_AGENTS_MIB,
                MAX_CACHE_MIB,
            )?,
            cache_keys_mib: within(
                "cache_keys_mib",
                self.cache_keys_mib,
                DEFAULT_CACHE_KEYS_MIB,
                MAX_CACHE_MIB,
            )?,
            cache_policies_mib: within(
                "cache_policies_mib",
                self.cache_policies_mib,
                DEFAULT_CACHE_POLICIES_MIB,
                MAX_CACHE_MIB,
            )?,
            vault_proxy_allow,
            vault_proxy_ca_pem,
            vault_proxy_timeout_secs,
            vault_proxy_max_response_bytes,
            sqlite_synchronous,
            database_url: self
                .database_url
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()),
            addr,
            public_url: self.public_url.map(|u| u.trim_end_matches('/').to_owned()),
            path_prefix,
            signature_window_ms: positive(
                "signature_window_secs",
                self.signature_window_secs,
                300,
            )?,
            challenge_ttl_ms: positive("challenge_ttl_secs", self.challenge_ttl_secs, 300)?,
            claim_code_ttl_ms: positive("claim_code_ttl_secs", self.claim_code_ttl_secs, 3600)?,
            commit_batch_max: self.commit_batch_max.unwrap_or(256).clamp(1, 10_000),
            db_max_connections: self.db_max_connections.unwrap_or(16).clamp(2, 1000),
            shutdown_grace_secs: self.shutdown_grace_secs.unwrap_or(30),
            log_format,
            bootstrap_api_key: self.bootstrap_api_key.map(|s| s.0),
            owner,
            master_key: self.master_key.map(|s| s.0),
            metrics_token: match self.metrics_token.map(|s| s.0) {
                Some(token) if token.expose().trim().is_empty() => None,
                Some(token) if token.expose().len() < 16 => {
                    return Err(ConfigError::invalid(
                        "metrics_token",
                        "must be at least 16 characters",
                    ))
                }
                token => token,
            },
            email_url: self.email_url.unwrap_or_else(|| "outbox".to_owned()),
            email_from,
            contact_email,
            session_ttl_ms: positive("session_ttl_secs", self.session_ttl_secs, 7 * 86_400)?,
            login_limit_per_email: limit("login_limit_per_email", self.login_limit_per_email, 5)?,
            login_limit_per_ip: limit("login_limit_per_ip", self.login_limit_per_ip, 30)?,
            contact_limit_per_ip: limit("contact_limit_per_ip", self.contact_limit_per_ip, 5)?,
            register_limit_per_ip: limit("register_limit_per_ip", self.register_limit_per_ip, 60)?,
            vault_history: limit("vault_history", self.vault_history, 10)?,
        })
    }
}

/// Default capacities of the in-process caches, MiB of estimated size (`policy::cache`).
pub const DEFAULT_CACHE_KEYS_MIB: u64 = 8;
pub const DEFAULT_CACHE_AGENTS_MIB: u64 = 64;
pub const DEFAULT_CACHE_POLICIES_MIB: u64 = 1024;

/// Requests and decisions per second per key per replica when the key has no rate of its own:
/// far above what one backend asks of a replica, low enough to bound one key's abuse.
pub const DEFAULT_API_KEY_RATE_LIMIT: u64 = 5_000;
/// The highest default key rate (as a key's own).
const MAX_API_KEY_RATE_LIMIT: u64 = 1_000_000;

/// The most distinct values a tenant-chosen metrics label may be set to keep.
const MAX_METRICS_LABELS: usize = 10_000;
/// Live audit streams one principal may hold, by default.
pub const DEFAULT_AUDIT_STREAMS_PER_PRINCIPAL: usize = 8;
/// The server's cap on live audit streams when none is configured and descriptors allow more:
/// each stream reads the database twice a second, so a thousand streams already cost two
/// thousand queries a second.
pub const DEFAULT_AUDIT_STREAMS_MAX: usize = 1024;
/// The largest value either stream setting takes.
const MAX_AUDIT_STREAMS: usize = 1_000_000;
/// Descriptors kept for the API whatever the limit: the listener, the runtime's own, log and
/// database files, outbound calls (vault proxy, sinks, mail) and requests being answered;
/// three per pooled database connection on top (a SQLite connection opens the database, its
/// WAL and its shared memory).
const API_DESCRIPTOR_FLOOR: u64 = 64;

/// The largest capacity of one cache, MiB (64 GiB).
const MAX_CACHE_MIB: u64 = 64 * 1024;

/// The vault proxy holds a whole answer in memory (to scrub secrets from it), so its cap stays
/// well below what a server can hold for several calls at once.
const MAX_PROXY_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// What is wrong in a settings file, by key (figment's own text also names its profile and
/// source, which a file of settings has no use for).
fn file_errors(errors: figment::Error) -> String {
    errors
        .into_iter()
        .map(|e| match e.path.join(".") {
            key if key.is_empty() => e.kind.to_string(),
            key => format!("key `{key}`: {}", e.kind),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `10.0.0.5, 192.168.7.0/24, ::1`: addresses (one-address networks) and CIDRs.
fn parse_networks(text: &str) -> Result<Vec<IpNet>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    ConfigError::invalid(
                        "vault_proxy_allow",
                        format!("takes IP addresses and CIDRs: `{item}` is neither"),
                    )
                })
        })
        .collect()
}

/// The PEM text of a CA file, with at least one certificate in it.
fn read_ca_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let refused = |reason: String| ConfigError::invalid("vault_proxy_ca_file", reason);
    let pem = std::fs::read(path)
        .map_err(|e| refused(format!("cannot be read: `{}`: {e}", path.display())))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        Ok(_) => Err(refused(format!(
            "must hold a PEM certificate: `{}` holds none",
            path.display()
        ))),
        Err(e) => Err(refused(format!(
            "must be a PEM certificate file: `{}` is not: {e}",
            path.display()
        ))),
    }
}

impl Config {
    /// The most audit streams this server holds open at once, given the process's limit on
    /// open descriptors (`None`: unknown). At least half of the descriptors, and never fewer
    /// than [`API_DESCRIPTOR_FLOOR`] plus three per database connection, stay for the API; the
    /// streams may take the rest, up to `audit_streams_max` when set, else up to
    /// [`DEFAULT_AUDIT_STREAMS_MAX`]. Answers the cap and whether a configured
    /// `audit_streams_max` was lowered to fit.
    pub fn audit_streams_cap(&self, descriptors: Option<u64>) -> (usize, bool) {
        let wanted = self.audit_streams_max.unwrap_or(DEFAULT_AUDIT_STREAMS_MAX);
        let Some(descriptors) = descriptors else {
            return (wanted, false);
        };
        let reserve =
            (descriptors / 2).max(API_DESCRIPTOR_FLOOR + 3 * u64::from(self.db_max_connections));
        let room = usize::try_from(descriptors.saturating_sub(reserve)).unwrap_or(usize::MAX);
        (
            wanted.min(room),
            self.audit_streams_max.is_some_and(|m| m > room),
        )
    }

    /// A configuration with every default, on the given database (tests, tools).
    pub fn for_database(database_url: &str) -> Result<Config, ConfigError> {
        Settings {
            database_url: Some(database_url.to_owned()),
            ..Settings::default()
        }
        .resolve()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_layers_win_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("acp.toml");
        std::fs::write(
            &file,
            "addr = \"0.0.0.0:9000\"\nsignature_window_secs = 60\n",
        )
        .unwrap();
        let flags = Settings {
            addr: Some("127.0.0.1:7000".into()),
            ..Settings::default()
        };
        let config = flags.over_file(Some(&file)).unwrap().resolve().unwrap();
        assert_eq!(config.addr.port(), 7000);
        assert_eq!(config.signature_window_ms, 60_000);
        assert_eq!(config.challenge_ttl_ms, 300_000);
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
    }

    #[test]
    fn bad_values_and_unknown_file_keys_are_errors() {
        assert!(toml::from_str::<Settings>("adr = \"x\"").is_err());
        let dir = tempfile::tempdir().unwrap();
        let (typo, missing) = (dir.path().join("typo.toml"), dir.path().join("none.toml"));
        std::fs::write(&typo, "adr = \"x\"\n").unwrap();
        for (path, says) in [(&typo, "adr"), (&missing, "cannot read it")] {
            let err = Settings::default().over_file(Some(path)).unwrap_err();
            assert!(matches!(err, ConfigError::File { .. }), "{err}");
            let shown = err.to_string();
            assert!(
                shown.contains(says) && shown.contains(&path.display().to_string()),
                "{shown}"
            );
        }
        let bad = Settings {
            signature_window_secs: Some(0),
            ..Settings::default()
        };
        assert!(bad.resolve().is_err());
        for (from, contact) in [("acp", None), ("acp@localhost", Some("ops@x, b@y"))] {
            let bad = Settings {
                email_from: Some(from.into()),
                contact_email: contact.map(str::to_owned),
                ..Settings::default()
            };
            assert!(bad.resolve().is_err(), "{from} {contact:?}");
        }
        let good = Settings {
            email_from: Some("acp <acp@example.com>".into()),
            contact_email: Some(" ops@example.com ".into()),
            ..Settings::default()
        };
        let good = good.resolve().unwrap();
        assert_eq!(good.contact_email.as_deref(), Some("ops@example.com"));
        let secret: Settings = toml::from_str("bootstrap_api_key = \"svc_test_x\"").unwrap();
        assert!(!format!("{secret:?}").contains("svc_test_x"));
    }

    #[test]
    fn the_metrics_token_is_optional_long_enough_and_never_printed() {
        assert!(Settings::default()
            .resolve()
            .unwrap()
            .metrics_token
            .is_none());
        let file: Settings = toml::from_str("metrics_token = \"scrape-me-please-0123\"\n").unwrap();
        assert!(!format!("{file:?}").contains("scrape-me-please"));
        let config = file.resolve().unwrap();
        assert_eq!(
            config.metrics_token.as_ref().map(|t| t.expose()),
            Some("scrape-me-please-0123")
        );
        assert!(!format!("{config:?}").contains("scrape-me-please"));
        let short: Settings = toml::from_str("metrics_token = \"short\"\n").unwrap();
        assert!(short
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("metrics_token"));
        let blank: Settings = toml::from_str("metrics_token = \" \"\n").unwrap();
        assert!(blank.resolve().unwrap().metrics_token.is_none());
    }

    #[test]
    fn cache_capacities_default_and_stay_within_bounds() {
        let defaults = Settings::default().resolve().unwrap();
        assert_eq!(
            (
                defaults.cache_keys_mib,
                defaults.cache_agents_mib,
                defaults.cache_policies_mib
            ),
            (8, 64, 1024)
        );
        let file: Settings =
            toml::from_str("cache_agents_mib = 1\ncache_policies_mib = 2048\n").unwrap();
        let config = file.resolve().unwrap();
        assert_eq!(
            (config.cache_agents_mib, config.cache_policies_mib),
            (1, 2048)
        );
        for bad in ["cache_keys_mib = 0", "cache_agents_mib = 65537"] {
            let err = toml::from_str::<Settings>(bad)
                .unwrap()
                .resolve()
                .unwrap_err()
                .to_string();
            assert!(err.contains("must be between 1 and 65536"), "{err}");
        }
    }

    #[test]
    fn audit_stream_caps_default_and_keep_descriptors_for_the_api() {
        let config = Settings::default().resolve().unwrap();
        assert_eq!(config.audit_streams_per_principal, 8);
        assert_eq!(config.audit_streams_max, None);
        // Half the descriptors stay for the API; the default cap bounds a large limit.
        assert_eq!(config.audit_streams_cap(Some(256)), (128, false));
        assert_eq!(config.audit_streams_cap(Some(1024)), (512, false));
        assert_eq!(config.audit_streams_cap(Some(1 << 20)), (1024, false));
        assert_eq!(config.audit_streams_cap(None), (1024, false));
        // A small limit keeps the floor (64 + 3 per database connection) and may leave none.
        assert_eq!(config.audit_streams_cap(Some(150)), (38, false));
        assert_eq!(config.audit_streams_cap(Some(64)), (0, false));
        let file: Settings =
            toml::from_str("audit_streams_max = 5000\naudit_streams_per_principal = 2\n").unwrap();
        let config = file.resolve().unwrap();
        assert_eq!(config.audit_streams_per_principal, 2);
        assert_eq!(config.audit_streams_cap(Some(1 << 20)), (5000, false));
        assert_eq!(
            config.audit_streams_cap(Some(4096)),
            (2048, true),
            "lowered to fit"
        );
        for bad in ["audit_streams_max = 0", "audit_streams_per_principal = 0"] {
            let err = toml::from_str::<Settings>(bad)
                .unwrap()
                .resolve()
                .unwrap_err()
                .to_string();
            assert!(err.contains("must be between 1 and"), "{err}");
        }
    }

    #[test]
    fn vault_proxy_settings_resolve_and_refuse_bad_values() {
        let defaults = Settings::default().resolve().unwrap();
        assert!(defaults.vault_proxy_allow.is_empty() && defaults.vault_proxy_ca_pem.is_none());
        assert_eq!(defaults.vault_proxy_timeout_secs, 30);
        assert_eq!(defaults.vault_proxy_max_response_bytes, 4_194_304);

        let file: Settings = toml::from_str(
            "vault_proxy_allow = \"10.0.0.5, 192.168.7.0/24,::1\"\nvault_proxy_timeout_secs = 5\n",
        )
        .unwrap();
        let config = file.resolve().unwrap();
        let allow: Vec<String> = config
            .vault_proxy_allow
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(allow, ["10.0.0.5/32", "192.168.7.0/24", "::1/128"]);
        assert_eq!(config.vault_proxy_timeout_secs, 5);

        for bad in [
            Settings {
                vault_proxy_allow: Some("10.0.0.300".into()),
                ..Settings::default()
            },
            Settings {
                vault_proxy_timeout_secs: Some(0),
                ..Settings::default()
            },
            Settings {
                vault_proxy_timeout_secs: Some(301),
                ..Settings::default()
            },
            Settings {
                vault_proxy_max_response_bytes: Some(0),
                ..Settings::default()
            },
        ] {
            let shown = format!("{bad:?}");
            assert!(bad.resolve().is_err(), "{shown}");
        }

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        for path in [&missing, &garbage] {
            let err = Settings {
                vault_proxy_ca_file: Some(path.display().to_string()),
                ..Settings::default()
            }
            .resolve()
            .unwrap_err()
            .to_string();
            assert!(err.starts_with("`vault_proxy_ca_file`"), "{err}");
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
    }
}
