//! The SQL store. One implementation serves SQLite and Postgres through sqlx's `Any` driver:
//! every statement is portable SQL with `$N` placeholders, times are BIGINT milliseconds and
//! JSON is TEXT, so the two engines differ only in their migrations and connection setup.
//!
//! SQLite runs in WAL mode with one writer connection (the group-commit writer is the only hot
//! writer) and a small pool of readers. Postgres has a pool for reads and a smaller one for
//! the writes of the group-commit writer and the audit sinks (see [`postgres_pools`]).
//!
//! Each area's SQL, its operations and its reads, is a file of its own (`agents.rs`,
//! `accounts.rs`, ...); `apply.rs` applies changes (transactions, savepoints, nonce claims,
//! workspace versions). This file holds the connection setup, the helpers the areas share and
//! the `Store` methods that cross areas.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Executor, Row};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::*;

/// A query with its values bound, on either engine.
type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

mod accounts;
mod agents;
mod apply;
mod audit;
pub mod backup;
mod credentials;
mod email;
mod mcp;
mod policies;
mod script;
mod site;
mod telemetry;
mod vault;
pub use policies::IDEMPOTENCY_KEY_TAKEN;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Options for opening the store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Connections to Postgres (SQLite readers are capped at 4).
    pub max_connections: u32,
    /// SQLite's `synchronous` setting: `FULL` (the default) syncs the WAL at every commit, so
    /// a committed change survives a power loss; `NORMAL`, an opt-in,
    /// survives a crash of the process but may lose the last commits on a power loss.
    pub sqlite_synchronous: SqliteSynchronous,
    /// An agents list filtered by labels or a policy group whose filters keep at most this
    /// many agents looks them up by id and sorts them; past it, it walks the newest agents and
    /// looks each up in the labels or selectors (see `list_agents`). Both read the same agents.
    pub list_candidates: usize,
}

/// See [`OpenOptions::sqlite_synchronous`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SqliteSynchronous {
    #[default]
    Full,
    Normal,
}

impl SqliteSynchronous {
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "full" => Some(Self::Full),
            "normal" => Some(Self::Normal),
            _ => None,
        }
    }

    fn pragma(self) -> &'static str {
        match self {
            Self::Full => "PRAGMA synchronous = FULL",
            Self::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            sqlite_synchronous: SqliteSynchronous::Full,
            list_candidates: 5_000,
        }
    }
}

pub struct SqlStore {
    backend: Backend,
    url: String,
    read: AnyPool,
    write: AnyPool,
    /// SQLite: the write pool's one connection, kept here between writes instead of going back
    /// to the pool after each. sqlx pings a connection as it returns to the pool, in a task of
    /// its own (a round trip to the connection's worker thread), and the next write waits for
    /// that: once per group-commit batch on the `/v1/check` path. `None` for Postgres, whose
    /// connections come from the pool (which tests them) for each write.
    held: Option<Mutex<Option<PoolConnection<Any>>>>,
    /// See [`OpenOptions::list_candidates`].
    list_candidates: usize,
    /// SQLite: a shared lock on the database's lock file while the store is open, so that
    /// `acp admin restore` never replaces a database in use (see `backup.rs`).
    _lock: Option<backup::DatabaseLock>,
}

/// A connection to write on: SQLite's held one, or one from the Postgres pool.
enum WriteConn<'a> {
    Held(MappedMutexGuard<'a, PoolConnection<Any>>),
    Pooled(PoolConnection<Any>),
}

impl std::ops::Deref for WriteConn<'_> {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            WriteConn::Held(conn) => conn,
            WriteConn::Pooled(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for WriteConn<'_> {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            WriteConn::Held(conn) => conn,
            WriteConn::Pooled(conn) => conn,
        }
    }
}

/// The file path and query of an SQLite URL (`sqlite:PATH`, `sqlite://PATH` or a bare path);
/// `None` for other engines and for in-memory databases.
pub fn sqlite_file(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .or_else(|| (!url.contains("://")).then_some(url))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    (!path.is_empty() && path != ":memory:").then_some((path, query))
}

/// Turns `sqlite:PATH`, `sqlite://PATH` or a bare path into a URL sqlx accepts, creating the
/// parent directory and asking for the file to be created when missing.
fn sqlite_url(url: &str) -> Result<String, StoreError> {
    let (path, query) = sqlite_file(url).ok_or_else(|| {
        StoreError::Database(
            "an SQLite database needs a file path, for example `sqlite:./data/acp.db`".into(),
        )
    })?;
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            StoreError::Database(format!("cannot create `{}`: {e}", parent.display()))
        })?;
    }
    let query = if query.contains("mode=") {
        query.to_owned()
    } else if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok(format!("sqlite://{path}?{query}"))
}

impl SqlStore {
    /// Connects to the database named by `url` (`sqlite:PATH` or `postgres://...`) and applies
    /// the migrations of its engine.
    pub async fn open(url: &str, options: &OpenOptions) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let store = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let connect = AnyConnectOptions::from_str(url)?;
            let (readers, writers) = postgres_pools(options.max_connections);
            let read = pool_options(readers).connect_with(connect.clone()).await?;
            // The writes' connections plan every prepared statement once, for any values
            // (a generic plan). Left to choose, Postgres plans a batch of decisions anew for
            // its values on every execution (its custom plans fold the constants and so always
            // look cheaper): a third of the batch's time in the database went to planning.
            // The writer's changes name their rows by key, so a plan for any values is the
            // plan for these; reads and the range deletes of retention and cleanup (whose best
            // plan depends on the values) run on the read pool with the default.
            let write = pool_options(writers)
                .after_connect(|conn, _meta| {
                    Box::pin(async move {
                        conn.execute("SET plan_cache_mode = force_generic_plan")
                            .await?;
                        Ok(())
                    })
                })
                .connect_with(connect)
                .await?;
            SqlStore {
                backend: Backend::Postgres,
                url: url.to_owned(),
                read,
                write,
                held: None,
                list_candidates: options.list_candidates,
                _lock: None,
            }
        } else {
            let connect = AnyConnectOptions::from_str(&sqlite_url(url)?)?;
            let lock = match sqlite_file(url) {
                Some((path, _)) => Some(
                    backup::lock_shared(Path::new(path))
                        .map_err(|e| StoreError::Database(e.to_string()))?,
                ),
                None => None,
            };
            let synchronous = options.sqlite_synchronous.pragma();
            let pool = |size: u32| {
                pool_options(size)
                    // A file in this process cannot drop the connection: no ping round trip
                    // before each use.
                    .test_before_acquire(false)
                    .after_connect(move |conn, _meta| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute(synchronous).await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            Ok(())
                        })
                    })
            };
            let write = pool(1).connect_with(connect.clone()).await?;
            // Migrate before the readers open so they see the final schema.
            SQLITE_MIGRATIONS.run(&write).await?;
            let read = pool(4).connect_with(connect).await?;
            return Ok(SqlStore {
                backend: Backend::Sqlite,
                url: url.to_owned(),
                read,
                write,
                held: Some(Mutex::new(None)),
                list_candidates: options.list_candidates,
                _lock: lock,
            });
        };
        POSTGRES_MIGRATIONS.run(&store.write).await?;
        Ok(store)
    }

    /// Closes every connection, waiting for them to be returned.
    pub async fn close(&self) {
        if let Some(held) = &self.held {
            held.lock().await.take();
        }
        self.write.close().await;
        self.read.close().await;
    }

    /// The connection to write on: SQLite's held connection (taken from the write pool the
    /// first time), waiting while another write uses it; on Postgres, one from the write pool.
    async fn write_conn(&self) -> Result<WriteConn<'_>, StoreError> {
        let Some(held) = &self.held else {
            return Ok(WriteConn::Pooled(self.write.acquire().await?));
        };
        let mut slot = held.lock().await;
        let conn = match slot.take() {
            Some(conn) => conn,
            None => self.write.acquire().await?,
        };
        Ok(WriteConn::Held(MutexGuard::map(slot, |slot| {
            slot.insert(conn)
        })))
    }

    /// The connection for a write whose best plan depends on its values (the range deletes of
    /// retention and cleanup): SQLite's one writer; on Postgres, one from the read pool, which
    /// plans for the values given (the write pool plans once for any values).
    async fn range_write_conn(&self) -> Result<WriteConn<'_>, StoreError> {
        match self.backend {
            Backend::Sqlite => self.write_conn().await,
            Backend::Postgres => Ok(WriteConn::Pooled(self.read.acquire().await?)),
        }
    }
}

/// A pool of at most `size` connections that waits up to 10 s for one.
fn pool_options(size: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(10))
}

/// `table.column AS alias, ...` for each pair of `columns`: a joined read names one table's
/// columns apart from the others'.
fn aliased(table: &str, columns: &[(&str, &str)]) -> String {
    columns
        .iter()
        .map(|(column, alias)| format!("{table}.{column} AS {alias}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `name`'s alias among `columns` (see [`aliased`]); a name missing there reads a column no
/// statement has (an error), never another table's column of the same name.
fn alias_in(columns: &[(&'static str, &'static str)], name: &'static str) -> &'static str {
    columns
        .iter()
        .find(|(column, _)| *column == name)
        .map_or("unmapped_joined_column", |(_, alias)| alias)
}

/// The record a `LEFT JOIN` brought into `row` under the aliases of `columns` (see
/// [`aliased`]), read by `read` through those aliases; `None` when the join found none (its
/// `key` column is NULL).
fn joined<T>(
    row: &AnyRow,
    columns: &[(&'static str, &'static str)],
    key: &'static str,
    read: impl FnOnce(&dyn Fn(&'static str) -> &'static str) -> Result<T, sqlx::Error>,
) -> Result<Option<T>, sqlx::Error> {
    if row
        .try_get::<Option<String>, _>(alias_in(columns, key))?
        .is_none()
    {
        return Ok(None);
    }
    read(&|name| alias_in(columns, name)).map(Some)
}

/// Postgres's connections (`max_connections`, at least 2) split between reads and writes: a
/// quarter for writes (1 to 8: the group-commit writer applies one batch at a time, the audit
/// sinks' short updates beside it), the rest for reads.
fn postgres_pools(max_connections: u32) -> (u32, u32) {
    let max = max_connections.max(2);
    let writers = (max / 4).clamp(1, 8);
    (max - writers, writers)
}

/// ` AND condition`, to end a `WHERE` with a condition a caller adds (nothing when empty).
fn and_also(condition: &str) -> String {
    if condition.is_empty() {
        String::new()
    } else {
        format!(" AND {condition}")
    }
}

fn json_text(value: &Value) -> String {
    value.to_string()
}

fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn string_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A value for a statement built at run time (filters that may or may not apply).
#[derive(Debug, Clone)]
enum Arg {
    Text(String),
    Int(i64),
}

/// Builds `WHERE` clauses with `$N` placeholders for optional filters.
struct Filters {
    clauses: Vec<String>,
    args: Vec<Arg>,
}

impl Filters {
    fn new() -> Self {
        Self {
            clauses: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds `template` with each `?` replaced by the next placeholder.
    fn push(&mut self, template: &str, args: impl IntoIterator<Item = Arg>) {
        let mut clause = String::with_capacity(template.len() + 4);
        let mut args = args.into_iter();
        for ch in template.chars() {
            if ch == '?' {
                if let Some(arg) = args.next() {
                    self.args.push(arg);
                }
                clause.push_str(&format!("${}", self.args.len()));
            } else {
                clause.push(ch);
            }
        }
        self.clauses.push(clause);
    }

    fn text(&mut self, template: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.push(template, [Arg::Text(value.to_owned())]);
        }
    }

    fn int(&mut self, template: &str, value: Option<i64>) {
        if let Some(value) = value {
            self.push(template, [Arg::Int(value)]);
        }
    }

    /// Rows past `cursor` in newest-first order.
    fn cursor(&mut self, cursor: Option<&Cursor>) {
        self.cursor_in(cursor, false);
    }

    /// Rows past `cursor` in newest-first order, or in oldest-first order.
    fn cursor_in(&mut self, cursor: Option<&Cursor>, oldest_first: bool) {
        if let Some(c) = cursor {
            self.push(
                if oldest_first {
                    "(created_at > ? OR (created_at = ? AND id > ?))"
                } else {
                    "(created_at < ? OR (created_at = ? AND id < ?))"
                },
                [
                    Arg::Int(c.created_at),
                    Arg::Int(c.created_at),
                    Arg::Text(c.id.clone()),
                ],
            );
        }
    }

    fn sql(&self, head: &str, tail: &str) -> String {
        format!("{head} WHERE {} {tail}", self.clauses.join(" AND "))
    }

    /// Runs the listing. Not a cached prepared statement: Postgres plans a cached statement
    /// generically after five runs, without the filter's values, and a list's best plan depends
    /// on them (a group of 33,000 agents read by their pairs and sorted took 86 ms where walking
    /// the newest agents takes 1 ms). Planned each time with its values, as SQLite prepares it.
    async fn fetch(self, pool: &AnyPool, sql: &str) -> Result<Vec<AnyRow>, sqlx::Error> {
        let mut query = sqlx::query::<Any>(sql).persistent(false);
        for arg in self.args {
            query = match arg {
                Arg::Text(v) => query.bind(v),
                Arg::Int(v) => query.bind(v),
            };
        }
        query.fetch_all(pool).await
    }
}

fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

/// `Ok` when the statement changed a row; else the error `refused` makes (a precondition in its
/// WHERE clause no longer held).
fn changed_rows(rows: u64, refused: impl FnOnce() -> StoreError) -> Result<(), StoreError> {
    if rows == 0 {
        Err(refused())
    } else {
        Ok(())
    }
}

/// `Done` when the statement changed a row; else `NotFound` (the row it names is not there).
fn found(rows: u64) -> Result<Applied, StoreError> {
    changed_rows(rows, || StoreError::NotFound)?;
    Ok(Applied::Done)
}

/// `Done` when the statement changed a row; else `Conflict` with `why`.
fn affected_or_conflict(rows: u64, why: &str) -> Result<Applied, StoreError> {
    changed_rows(rows, || StoreError::Conflict(why.into()))?;
    Ok(Applied::Done)
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn listen_url(&self) -> Option<String> {
        (self.backend == Backend::Postgres).then(|| self.url.clone())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn notify_changes(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify('acp_changes', '')")
                .execute(&self.read)
                .await?;
        }
        Ok(())
    }

    fn report_pools(&self) {
        let report = |name: &'static str, pool: &AnyPool| {
            crate::observe::pool(
                name,
                pool.size(),
                pool.num_idle(),
                pool.options().get_max_connections(),
            );
        };
        // SQLite's writer's one connection is held between writes (see `held`): it counts as
        // in use.
        report("read", &self.read);
        report("write", &self.write);
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.read.acquire().await?;
        conn.ping().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(changes = changes.len()))]
    async fn apply(
        &self,
        changes: &[Change],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let mut conn = self.write_conn().await?;
        apply::apply(&mut conn, changes).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn workspace_version(&self, workspace_id: &str) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT version FROM workspace_versions WHERE workspace_id = $1")
            .bind(workspace_id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.try_get("version")).transpose()?.unwrap_or(0))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn workspace_versions_since(
        &self,
        since: i64,
    ) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT workspace_id, version, changed_at FROM workspace_versions WHERE changed_at >= $1",
        )
        .bind(since)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("workspace_id")?,
                    r.try_get("version")?,
                    r.try_get("changed_at")?,
                ))
            })
            .collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn changes_since(&self, since: i64) -> Result<Vec<Invalidation>, StoreError> {
        let rows = sqlx::query(
            "SELECT 'agent' AS kind, id AS a, '' AS b FROM agents WHERE updated_at >= $1 \
             UNION ALL SELECT 'agent', agent_id, '' FROM agent_inventory WHERE updated_at >= $1 \
             UNION ALL SELECT 'key', id, '' FROM api_keys WHERE revoked_at >= $1 \
             UNION ALL SELECT 'policy', workspace_id, id FROM policies WHERE updated_at >= $1",
        )
        .bind(since)
        .fetch_all(&self.read)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let a: String = row.try_get("a")?;
            let b: String = row.try_get("b")?;
            out.push(match kind.as_str() {
                "agent" => Invalidation::Agent(a),
                "key" => Invalidation::ApiKey(a),
                _ => Invalidation::Policy(a, b),
            });
        }
        Ok(out)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete_expired_nonces(&self, now: i64) -> Result<u64, StoreError> {
        let mut conn = self.range_write_conn().await?;
        let mut deleted = 0;
        for sql in [
            "DELETE FROM nonces WHERE expires_at < $1",
            "DELETE FROM login_tokens WHERE expires_at < $1",
            // Windows are at most a day long.
            "DELETE FROM rate_limit_hits WHERE window_start < $1 - 86400000",
            // Email rate limits look back a day; a reservation whose send never finished
            // (the process died) counts for that day too.
            "DELETE FROM email_sends WHERE sent_at < $1 - 172800000",
            "DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND publish_until < $1 - 86400000",
            // MCP sessions (every one expires a day after it opened) are kept a day past that.
            "DELETE FROM mcp_sessions WHERE expires_at < $1 - 86400000",
        ] {
            deleted += sqlx::query(sql)
                .bind(now)
                .execute(&mut *conn)
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_connections_are_split_between_reads_and_writes() {
        assert_eq!(postgres_pools(16), (12, 4));
        assert_eq!(postgres_pools(2), (1, 1));
        assert_eq!(postgres_pools(0), (1, 1));
        assert_eq!(postgres_pools(3), (2, 1));
        assert_eq!(postgres_pools(10), (8, 2));
        assert_eq!(postgres_pools(1000), (992, 8));
    }

    #[test]
    fn sqlite_urls_are_normalised() {
        let dir = std::env::temp_dir().join(format!("acp-url-{}", std::process::id()));
        let path = dir.join("x.db");
        let url = sqlite_url(&format!("sqlite:{}", path.display())).unwrap();
        assert_eq!(url, format!("sqlite://{}?mode=rwc", path.display()));
        assert!(dir.is_dir());
        assert!(sqlite_url("sqlite::memory:").is_err());
    }
}
