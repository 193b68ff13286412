//! Building and running the server: open the store, bootstrap the first workspace, start the
//! group-commit writer and background jobs, serve until asked to stop, then drain.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::net::TcpListener;

use crate::audit::{self, Actor};
use crate::config::Config;
use crate::context::{Context, SharedContext};
use crate::domain::{ids, Role};
use crate::identity::api_keys::NewApiKey;
use crate::secret::{redact_url, Secret};
use crate::store::{
    apply_one, AccountOp, ApiKeyRecord, Applied, Change, FirstOwner, GroupCommit, OpenOptions,
    SqlStore, Store, StoreError, Workspace, Writer, ALREADY_BOOTSTRAPPED,
};
use crate::time::now_ms;

/// What the first start of an empty database created.
#[derive(Debug)]
pub struct Bootstrap {
    pub workspace_id: String,
    /// The generated key, to print once; `None` when `ACP_BOOTSTRAP_API_KEY` supplied it.
    pub generated_key: Option<Secret>,
    /// The owner `--owner` named, made with the workspace.
    pub owner: Option<FirstOwnerMade>,
}

/// The first owner made with the default workspace, and their one-time login link (shown once;
/// also mailed, so with the `outbox` provider it is in the outbox as any login link).
#[derive(Debug)]
pub struct FirstOwnerMade {
    pub email: String,
    /// Set by [`App::build`] once the server's public URL is known.
    pub login_link: Option<Secret>,
    /// Why the link could not be mailed, when it could not (it is shown either way).
    pub mail_error: Option<String>,
    token: Secret,
}

/// What `--owner` found on a start that did not create the database: `--owner` acts on the
/// first start only, so that a member removed later is never added back by a restart whose
/// settings still name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerLater {
    /// A member of the default workspace, with this role.
    Member { workspace_id: String, role: Role },
    /// Not a member of the default workspace.
    NotMember { workspace_id: String },
    /// The database has no default workspace.
    NoDefault,
}

/// Opens the database named in the configuration and applies its migrations.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<SqlStore>> {
    let options = OpenOptions {
        max_connections: config.db_max_connections,
        sqlite_synchronous: config.sqlite_synchronous,
        ..OpenOptions::default()
    };
    let store = SqlStore::open(&config.database_url, &options)
        .await
        .with_context(|| {
            format!(
                "cannot open the database `{}`",
                redact_url(&config.database_url)
            )
        })?;
    Ok(Arc::new(store))
}

/// Opens a database that `acp serve` made before (the admin commands): never creates one. An
/// SQLite file that is not there, or a Postgres database `acp serve` never set up, is an error
/// naming the URL, not a new empty database.
pub async fn open_existing_store(config: &Config) -> anyhow::Result<Arc<SqlStore>> {
    let url = &config.database_url;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        use sqlx::Connection;
        let cannot = || format!("cannot open the database `{}`", redact_url(url));
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .with_context(cannot)?;
        let found: Option<String> = sqlx::query_scalar("SELECT to_regclass('workspaces')::text")
            .fetch_one(&mut conn)
            .await
            .with_context(cannot)?;
        let _ = conn.close().await;
        if found.is_none() {
            anyhow::bail!(
                "no acp database at {} (start `acp serve` first or pass --database-url)",
                redact_url(url)
            );
        }
    }
    if let Some((path, query)) = crate::store::sqlite_file(url) {
        if !std::path::Path::new(path).is_file() {
            anyhow::bail!(
                "no database at {} (start `acp serve` first or pass --database-url)",
                redact_url(url)
            );
        }
        // Read-write, never create: the file could go away before the connection opens it.
        if !query.contains("mode=") {
            let query = if query.is_empty() {
                "mode=rw".to_owned()
            } else {
                format!("{query}&mode=rw")
            };
            let config = Config {
                database_url: format!("sqlite:{path}?{query}"),
                ..config.clone()
            };
            return open_store(&config).await;
        }
    }
    open_store(config).await
}

/// `ACP_BOOTSTRAP_API_KEY`, checked.
fn supplied_bootstrap_key(supplied: &Secret) -> anyhow::Result<NewApiKey> {
    NewApiKey::from_supplied(supplied.expose()).context(
        "ACP_BOOTSTRAP_API_KEY must be `svc_test_` or `svc_live_` followed by at least 43 base62 or base64url characters",
    )
}

/// Creates the default workspace and its first API key when the database has never been set up.
/// Replicas starting together on one database create it exactly once.
pub async fn bootstrap(store: &dyn Store, config: &Config) -> anyhow::Result<Option<Bootstrap>> {
    let (key, generated) = match &config.bootstrap_api_key {
        Some(supplied) => (supplied_bootstrap_key(supplied)?, false),
        None => (NewApiKey::generate(false), true),
    };
    let now = now_ms();
    let workspace = Workspace {
        id: ids::new_id(ids::WORKSPACE),
        name: "default".into(),
        created_at: now,
    };
    let record = ApiKeyRecord {
        id: ids::new_id(ids::API_KEY),
        workspace_id: workspace.id.clone(),
        key_hash: key.hash.clone(),
        mode: key.mode.into(),
        last_four: key.last_four.clone(),
        created_at: now,
        revoked_at: None,
        name: None,
        created_by: None,
        last_used_at: None,
        scopes: None,
        rate_limit: None,
    };
    let events = [
        audit::state_change(
            "workspace.created",
            "create",
            Some(&workspace.id),
            None,
            &Actor::System,
            json!({ "name": "default" }),
        ),
        audit::state_change(
            "api_key.created",
            "create",
            Some(&workspace.id),
            None,
            &Actor::System,
            json!({ "key_id": record.id, "mode": record.mode, "bootstrap": true }),
        ),
    ];
    let workspace_id = workspace.id.clone();
    let mut owner = None;
    let mut first_owner = None;
    if let Some(email) = &config.owner {
        let (token, token_hash) = crate::identity::accounts::new_login_token();
        first_owner = Some(FirstOwner {
            email: email.as_str().to_owned(),
            user_id: ids::new_id(ids::USER),
            login_token_hash: token_hash,
            login_expires_at: now + crate::identity::accounts::LOGIN_LINK_TTL_MS,
        });
        owner = Some(FirstOwnerMade {
            email: email.as_str().to_owned(),
            login_link: None,
            mail_error: None,
            token,
        });
    }
    let mut change = Change::new(AccountOp::Bootstrap {
        workspace,
        key: record,
        owner: first_owner,
    });
    change.audit.extend(events);
    if let Some(email) = &config.owner {
        // As `acp admin add-member` records a membership: never the address itself.
        change.audit.push(audit::state_change(
            "membership.granted",
            "grant",
            Some(&workspace_id),
            None,
            &Actor::System,
            json!({ "email_domain": email.as_str().split('@').nth(1), "role": Role::Owner.as_str(), "first_owner": true }),
        ));
    }
    match apply_one(store, change).await {
        Ok(Applied::Bootstrapped(true)) => Ok(Some(Bootstrap {
            workspace_id,
            generated_key: generated.then_some(key.secret),
            owner,
        })),
        Ok(_) => Ok(None),
        Err(StoreError::Conflict(why)) if why == ALREADY_BOOTSTRAPPED => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Where `--owner` stands on a database set up before: `--owner` changes nothing then.
async fn owner_later(store: &dyn Store, email: &str) -> anyhow::Result<OwnerLater> {
    let Some(workspace_id) = store.default_workspace_id().await? else {
        return Ok(OwnerLater::NoDefault);
    };
    let role = match store.user_by_email(email).await? {
        Some(user) => store.role_in(&workspace_id, &user.id).await?,
        None => None,
    };
    Ok(match role {
        Some(role) => OwnerLater::Member { workspace_id, role },
        None => OwnerLater::NotMember { workspace_id },
    })
}

/// A server ready to run: bound to its address, database open and migrated.
pub struct App {
    ctx: SharedContext,
    store: Arc<SqlStore>,
    listener: TcpListener,
    writer: Writer,
    pub bootstrap: Option<Bootstrap>,
    /// With `--owner` on a database set up before: where that person stands.
    pub owner_later: Option<OwnerLater>,
}

impl App {
    pub async fn build(config: Config) -> anyhow::Result<App> {
        // Process-wide and idempotent: every server of the process renders the same registry.
        crate::observe::install(config.metrics_labels);
        // Every prerequisite is checked before the bootstrap, the last step that can fail: a
        // first start that stops creates nothing, and one that bootstraps shows its key.
        if let Some(supplied) = &config.bootstrap_api_key {
            supplied_bootstrap_key(supplied)?;
        }
        // A configured master key (required unless SQLite keeps a key file) needs no database.
        let configured = match (
            &config.master_key,
            crate::store::sqlite_file(&config.database_url),
        ) {
            (None, Some(_)) => None,
            _ => Some(load_master_key(&config, false)?.0),
        };
        let store = open_store(&config).await?;
        let (master_key, new_key_file) = match configured {
            Some(key) => (key, None),
            None => load_master_key(&config, true)?,
        };
        // Every sealed item must open with this key, or the server does not start (rather than
        // answer 500 on first use): the JWT signing keys, the vault's data keys, the audit
        // sinks' secrets. A key file is written only once that holds.
        let sealed = crate::vault::sets::sealed_keys(store.as_ref()).await?;
        let unopened = crate::vault::sets::unopened(&master_key, &sealed);
        if let Some(first) = unopened.first() {
            let count = unopened.len();
            if let Some(file) = &new_key_file {
                anyhow::bail!(
                    "no master key file at `{}` and ACP_MASTER_KEY is not set, but the database holds {count} \
                     item(s) sealed with a master key (first: {first}): put back the key file that sealed them, \
                     or set ACP_MASTER_KEY to that key; no key file was written",
                    file.display()
                );
            }
            anyhow::bail!(
                "the database holds {count} sealed item(s) this master key cannot open (first: {first}): start \
                 with the master key that sealed them (ACP_MASTER_KEY, or the key file), or, after rotating the \
                 master key, run `acp admin vault rewrap --from-key OLD_KEY` with the new key configured"
            );
        }
        let master_key = match new_key_file {
            Some(file) => match write_key_file(&file, master_key)? {
                KeyFile::Written(key) => key,
                // Another server on this database wrote the file first: its key is the one,
                // and it is checked like a key file found at start.
                KeyFile::Found(key) => {
                    let sealed = crate::vault::sets::sealed_keys(store.as_ref()).await?;
                    if let Some(first) = crate::vault::sets::unopened(&key, &sealed).first() {
                        anyhow::bail!(
                            "the key file `{}` written meanwhile by another server does not open \
                             what the database holds sealed (first: {first}); this server wrote no key file",
                            file.display()
                        );
                    }
                    key
                }
            },
            None => master_key,
        };
        crate::enforce::jwt::ensure_key(store.as_ref(), &master_key)
            .await
            .context("cannot make the JWT signing key")?;
        let listener = TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("cannot listen on {}", config.addr))?;
        let local = listener.local_addr()?;
        let public_url = config.public_url.clone().unwrap_or_else(|| {
            format!(
                "http://{local}{}",
                config.path_prefix.as_deref().unwrap_or("")
            )
        });
        let dyn_store: Arc<dyn Store> = store.clone();
        let mailer =
            crate::mail::from_url(&config.email_url, &config.email_from, dyn_store.clone())
                .map_err(anyhow::Error::msg)?;
        let egress = crate::net::egress::Egress::new(crate::net::egress::EgressSettings {
            allow: config.vault_proxy_allow.clone(),
            ca_pem: config.vault_proxy_ca_pem.clone(),
            timeout: std::time::Duration::from_secs(config.vault_proxy_timeout_secs),
            max_response_bytes: config.vault_proxy_max_response_bytes,
        })
        .map_err(anyhow::Error::msg)?;
        let sink_egress = crate::net::egress::Egress::new(crate::net::egress::EgressSettings {
            allow: config.vault_proxy_allow.clone(),
            ca_pem: config.vault_proxy_ca_pem.clone(),
            timeout: std::time::Duration::from_secs(config.audit_sink_timeout_secs),
            // The receiver's answer is not read, only its status.
            max_response_bytes: 64 * 1024,
        })
        .map_err(anyhow::Error::msg)?;
        let mut bootstrap = bootstrap(store.as_ref(), &config).await?;
        let owner_later = match (&bootstrap, &config.owner) {
            (None, Some(email)) => Some(owner_later(store.as_ref(), email.as_str()).await?),
            _ => None,
        };
        if let Some(owner) = bootstrap.as_mut().and_then(|b| b.owner.as_mut()) {
            let link = crate::identity::accounts::login_link(&public_url, &owner.token);
            // Mailed as any login link (with the outbox provider: stored in the outbox). A
            // relay that fails does not stop the start: the link is shown anyway.
            let sent =
                match crate::identity::accounts::login_email(owner.email.clone(), link.expose()) {
                    Ok(message) => mailer
                        .send(&message)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
            if let Err(err) = sent {
                tracing::warn!(error = %err, "the first owner's login link was not mailed");
                owner.mail_error = Some(err);
            }
            owner.login_link = Some(link);
        }
        let (commits, writer) = GroupCommit::start(dyn_store.clone(), config.commit_batch_max);
        let caches =
            crate::policy::cache::Caches::new(crate::policy::cache::CacheLimits::of(&config));
        let audit_streams = audit_stream_slots(&config);
        let ctx = Arc::new(Context {
            store: dyn_store,
            writer: commits,
            config,
            mailer,
            caches,
            changes: tokio::sync::Notify::new(),
            public_url,
            master_key,
            closing: tokio::sync::watch::Sender::new(false),
            egress,
            sink_egress,
            instance_id: crate::domain::ids::new_id("rep"),
            streams: audit_streams,
            mcp_materials: crate::net::egress::injected_cache(),
            background: tokio_util::task::TaskTracker::new(),
        });
        Ok(App {
            ctx,
            store,
            listener,
            writer,
            bootstrap,
            owner_later,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| self.ctx.config.addr)
    }

    pub fn context(&self) -> &SharedContext {
        &self.ctx
    }

    /// Serves until `shutdown` resolves, then stops accepting, lets in-flight requests finish
    /// (for at most the configured grace period), commits everything queued and closes the
    /// database.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let App {
            ctx,
            store,
            listener,
            writer,
            ..
        } = self;
        let cleanup = tokio::spawn(clean_nonces(ctx.clone()));
        let upkeep = tokio::spawn(metrics_upkeep());
        let follow = tokio::spawn(follow_changes(ctx.clone()));
        let listen = ctx
            .store
            .listen_url()
            .map(|url| tokio::spawn(listen_for_changes(ctx.clone(), url)));
        tokio::spawn(warm_policies(ctx.clone()));
        let deliver = tokio::spawn(crate::audit::delivery::run(ctx.clone()));
        let retain = tokio::spawn(crate::audit::retention::run(ctx.clone()));
        let close_mcp = tokio::spawn(crate::mcp::gateway::close_ended_sessions(ctx.clone()));
        let router = crate::http::router(ctx.clone());
        let grace = Duration::from_secs(ctx.config.shutdown_grace_secs);
        let stopping = Arc::new(tokio::sync::Notify::new());
        let notify = stopping.clone();
        let closing = ctx.clone();
        // One grace period for everything a stop waits for: the requests, then what they
        // handed off (approval mails), counted from the signal.
        let deadline = Arc::new(std::sync::OnceLock::new());
        let started_stopping = deadline.clone();
        let server = axum::serve(
            crate::http::wire::Listener::new(listener),
            router.into_make_service_with_connect_info::<crate::http::wire::Peer>(),
        )
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = started_stopping.set(tokio::time::Instant::now() + grace);
            tracing::info!("shutting down: finishing in-flight requests");
            closing.closing.send_replace(true);
            notify.notify_one();
        });
        tokio::select! {
            result = server => result.context("server error")?,
            _ = async { stopping.notified().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(seconds = grace.as_secs(), "grace period over; dropping the requests still running");
            }
        }
        for task in [
            Some(cleanup),
            Some(upkeep),
            Some(follow),
            Some(deliver),
            Some(retain),
            Some(close_mcp),
            listen,
        ]
        .into_iter()
        .flatten()
        {
            task.abort();
            let _ = task.await;
        }
        // What the last requests handed off (approval mails, proxied calls' outcome events)
        // still commits through the writer, within what is left of the grace period.
        ctx.background.close();
        let deadline = deadline
            .get()
            .copied()
            .unwrap_or_else(|| tokio::time::Instant::now() + grace);
        if tokio::time::timeout_at(deadline, ctx.background.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = ctx.background.len(),
                "grace period over; approval mails still being sent and proxied calls' outcome events not yet recorded are dropped (challenges are listed for approvers all the same; the calls' decisions and lease uses are recorded)"
            );
        }
        drop(ctx);
        writer.shutdown().await;
        store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Raises the process's soft limit on open descriptors to its hard limit (what the system lets
/// it have) and answers the limit in force; `None` where it cannot be read.
fn descriptor_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(err) => {
            tracing::warn!(error = %err, "cannot raise the limit on open descriptors");
            rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
        }
    }
}

/// The caps on live audit streams: per principal as configured, in all from the descriptor
/// limit (so that streams never take the descriptors the API needs).
fn audit_stream_slots(config: &Config) -> crate::context::StreamSlots {
    let descriptors = descriptor_limit();
    let (max, lowered) = config.audit_streams_cap(descriptors);
    if lowered {
        tracing::warn!(
            configured = config.audit_streams_max,
            max,
            descriptors,
            "audit_streams_max lowered: the descriptor limit leaves room for no more streams beside the API's reserve"
        );
    }
    if max == 0 {
        tracing::warn!(
            descriptors,
            "the descriptor limit leaves no room for audit streams; raise it (ulimit -n) to serve them"
        );
    }
    tracing::debug!(
        descriptors,
        max,
        per_principal = config.audit_streams_per_principal,
        "audit stream caps"
    );
    crate::context::StreamSlots::new(config.audit_streams_per_principal, max)
}

/// Deletes expired nonce claims once a minute.
async fn clean_nonces(ctx: SharedContext) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        // A margin of one window keeps a claim alive on this replica while a replica whose clock
        // is behind may still accept its timestamp.
        match ctx
            .store
            .delete_expired_nonces(now_ms() - ctx.config.signature_window_ms)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "expired nonces cleaned up"),
            Err(err) => tracing::warn!(error = %err, "nonce cleanup failed; will retry"),
        }
    }
}

/// Folds the metrics' histogram samples into their buckets every five seconds, so that memory
/// stays bounded however rarely `/metrics` is scraped.
async fn metrics_upkeep() {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        crate::observe::upkeep();
    }
}

/// Keeps the caches in step with what other replicas change: every second, or at once when
/// woken (a local write, a Postgres NOTIFY).
async fn follow_changes(ctx: SharedContext) {
    let mut since = now_ms();
    let mut polls: u64 = 0;
    loop {
        polls += 1;
        // Once a minute, compare every cached policy with the store's current version.
        if polls.is_multiple_of(60) {
            match ctx.store.policy_heads().await {
                Ok(heads) => {
                    let stale = ctx.caches.stale_policies(&heads);
                    if !stale.is_empty() {
                        tracing::warn!(
                            count = stale.len(),
                            "cached policies were stale; reloading"
                        );
                        ctx.caches.apply(ctx.store.as_ref(), stale).await;
                    }
                }
                Err(err) => tracing::warn!(error = %err, "policy version check failed; will retry"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = ctx.changes.notified() => {}
        }
        let started = now_ms();
        // Overlap the windows: clocks of replicas differ a little, and a change seen twice is
        // harmless.
        // Views move first: entries loaded from here on count under the new versions.
        let versions = ctx.store.workspace_versions_since(since - 2_000).await;
        match (versions, ctx.store.changes_since(since - 2_000).await) {
            (Ok(versions), Ok(changes)) => {
                ctx.caches.advance_known(&versions);
                ctx.caches.apply(ctx.store.as_ref(), changes).await;
                since = started;
            }
            (Err(err), _) | (_, Err(err)) => {
                tracing::warn!(error = %err, "change poll failed; will retry")
            }
        }
    }
}

/// Postgres: LISTEN for other replicas' changes and wake the poller.
async fn listen_for_changes(ctx: SharedContext, url: String) {
    loop {
        match sqlx::postgres::PgListener::connect(&url).await {
            Ok(mut listener) => {
                if let Err(err) = listener.listen("acp_changes").await {
                    tracing::warn!(error = %err, "LISTEN failed; polling only");
                } else {
                    while listener.recv().await.is_ok() {
                        ctx.changes.notify_one();
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "LISTEN connection failed; polling only"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// The master key as the admin commands find it: the configured one, else (SQLite) the key
/// file next to the database; a missing key file is an error (only `acp serve` makes one).
pub fn existing_master_key(config: &Config) -> anyhow::Result<crate::secret::MasterKey> {
    Ok(load_master_key(config, false)?.0)
}

/// The configured master key, else (SQLite) the key file next to the database. Postgres
/// deployments must configure it: every replica needs the same key. With `create`, a missing
/// key file is a new key, answered with the file to write it to once the database is known to
/// hold nothing sealed with another key ([`write_key_file`]).
fn load_master_key(
    config: &Config,
    create: bool,
) -> anyhow::Result<(crate::secret::MasterKey, Option<std::path::PathBuf>)> {
    use crate::secret::MasterKey;
    if let Some(text) = &config.master_key {
        return MasterKey::from_base64(text.expose())
            .map(|key| (key, None))
            .map_err(|e| anyhow::anyhow!("ACP_MASTER_KEY: {e}"));
    }
    let Some((db_path, _)) = crate::store::sqlite_file(&config.database_url) else {
        anyhow::bail!(
            "set ACP_MASTER_KEY (32 random bytes in standard base64, the same on every replica; \
             for example `openssl rand -base64 32`): it encrypts the JWT signing keys in the database"
        );
    };
    let file = std::path::Path::new(db_path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .join("acp-master.key");
    match read_key_file(&file) {
        Ok(key) => Ok((key, None)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !create => Err(anyhow::anyhow!(
            "no master key file at `{}` and ACP_MASTER_KEY is not set (the server makes the file on its first start)",
            file.display()
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            Ok((MasterKey::generate(), Some(file)))
        }
        Err(err) if err.kind() == std::io::ErrorKind::InvalidData => Err(anyhow::anyhow!("{err}")),
        Err(err) => Err(anyhow::anyhow!("cannot read `{}`: {err}", file.display())),
    }
}

/// The master key in the key file at `file`; a file that holds no key is `InvalidData`.
fn read_key_file(file: &std::path::Path) -> std::io::Result<crate::secret::MasterKey> {
    let text = std::fs::read_to_string(file)?;
    crate::secret::MasterKey::from_base64(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("`{}`: {e}", file.display()),
        )
    })
}

/// What [`write_key_file`] did.
enum KeyFile {
    /// The new key is in the file now.
    Written(crate::secret::MasterKey),
    /// The file was there already (written by a server starting beside this one): its key.
    Found(crate::secret::MasterKey),
}

/// Writes a new master key to its key file (mode 0600), never over one: if a replica starting
/// beside this one wrote the file first, its key is answered instead.
///
/// The key is written whole to a temporary file beside it, synced, and then hard-linked to its
/// name, which fails if the name exists: the key file never exists half written (a server that
/// stopped midway, or one reading it at that moment, would find no key in it), and is never
/// replaced.
fn write_key_file(
    file: &std::path::Path,
    key: crate::secret::MasterKey,
) -> anyhow::Result<KeyFile> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let folder = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = folder.join(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        crate::secret::random_base62(8)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut out| {
            out.write_all(key.to_base64().expose().as_bytes())?;
            out.sync_all()
        });
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, file));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return read_key_file(file)
                .map(KeyFile::Found)
                .with_context(|| format!("cannot read `{}`", file.display()));
        }
        Err(err) => return Err(err).with_context(|| format!("cannot create `{}`", file.display())),
    }
    // The new name is durable once the folder is.
    if let Ok(dir) = std::fs::File::open(folder) {
        let _ = dir.sync_all();
    }
    tracing::info!(path = %file.display(), "made the master key file (back it up, apart from the database's backups)");
    Ok(KeyFile::Written(key))
}

/// Compiles every stored policy once at start, so that checks find them ready.
async fn warm_policies(ctx: SharedContext) {
    let Ok(all) = ctx.store.all_policies().await else {
        return;
    };
    for p in all {
        let store = ctx.store.as_ref();
        let loaded = match ctx.caches.view(store, &p.workspace_id).await {
            Ok(view) => ctx.caches.policy(store, &view, &p.id).await,
            Err(err) => Err(err),
        };
        if let Err(err) = loaded {
            tracing::warn!(error = %err, policy = %p.id, "policy not loaded at start");
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is called, not
/// when the future is first polled: a signal that comes right after the server says it listens
/// still shuts it down cleanly.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (interrupt, term) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = wait(interrupt) => {},
                _ = wait(term) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
