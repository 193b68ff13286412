//! The SQL store. One implementation serves SQLite and Postgres through sqlx's `Any` driver:
//! every statement is portable SQL with `$N` placeholders, times are BIGINT milliseconds and
//! JSON is TEXT, so the two engines differ only in their migrations and connection setup.
//!
//! SQLite runs in WAL mode with one writer connection (the group-commit writer is the only hot
//! writer) and a small pool of readers. Postgres uses one pool for both.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Executor, Row, Transaction};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::*;

mod accounts;
mod credentials;
mod policies;
pub use policies::IDEMPOTENCY_KEY_TAKEN;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Options for opening the store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Connections to Postgres (SQLite readers are capped at 4).
    pub max_connections: u32,
    /// SQLite's `synchronous` setting: `FULL` (the default) syncs the WAL at every commit, so
    /// a committed change survives a power loss (CONTRACT section 7); `NORMAL`, an opt-in,
    /// survives a crash of the process but may lose the last commits on a power loss.
    pub sqlite_synchronous: SqliteSynchronous,
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
            let pool = AnyPoolOptions::new()
                .max_connections(options.max_connections.max(2))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(connect)
                .await?;
            SqlStore {
                backend: Backend::Postgres,
                url: url.to_owned(),
                read: pool.clone(),
                write: pool,
                held: None,
            }
        } else {
            let connect = AnyConnectOptions::from_str(&sqlite_url(url)?)?;
            let synchronous = options.sqlite_synchronous.pragma();
            let pool = |size: u32| {
                AnyPoolOptions::new()
                    .max_connections(size)
                    .acquire_timeout(Duration::from_secs(10))
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
    /// first time), waiting while another write uses it; on Postgres, one from the pool.
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

pub(super) fn agent_from_row(row: &AnyRow) -> Result<AgentRecord, sqlx::Error> {
    let status: String = row.try_get("status")?;
    Ok(AgentRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        name: row.try_get("name")?,
        public_key: row.try_get("public_key")?,
        key_type: row.try_get("key_type")?,
        metadata: json_value(&row.try_get::<String, _>("metadata")?),
        status: AgentStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("agent status `{status}`").into()))?,
        risk_tier: row.try_get("risk_tier")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        attested_at: row.try_get("attested_at")?,
        last_seen_at: row.try_get("last_seen_at")?,
    })
}

const API_KEY_COLUMNS: &str =
    "id, workspace_id, key_hash, mode, last_four, created_at, revoked_at, name, created_by, last_used_at";

fn api_key_from_row(row: &AnyRow) -> Result<ApiKeyRecord, sqlx::Error> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        key_hash: row.try_get("key_hash")?,
        mode: row.try_get("mode")?,
        last_four: row.try_get("last_four")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        last_used_at: row.try_get("last_used_at")?,
    })
}

pub(super) const AGENT_COLUMNS: &str =
    "id, workspace_id, name, public_key, key_type, metadata, status, risk_tier, \
     created_at, updated_at, attested_at, last_seen_at";

fn inventory_from_row(row: &AnyRow) -> Result<InventoryRecord, sqlx::Error> {
    Ok(InventoryRecord {
        workspace_id: row.try_get("workspace_id")?,
        external_agent_key: row.try_get("external_agent_key")?,
        agent_id: row.try_get("agent_id")?,
        display_name: row.try_get("display_name")?,
        labels: json_value(&row.try_get::<String, _>("labels")?),
        environment: row.try_get("environment")?,
        source: row.try_get("source")?,
        status: row.try_get("status")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

const INVENTORY_COLUMNS: &str =
    "workspace_id, external_agent_key, agent_id, display_name, labels, environment, source, status, created_at, updated_at";

fn heartbeat_from_row(row: &AnyRow) -> Result<HeartbeatRecord, sqlx::Error> {
    Ok(HeartbeatRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        agent_id: row.try_get("agent_id")?,
        status: row.try_get("status")?,
        latency_ms: row.try_get("latency_ms")?,
        observed_at: row.try_get("observed_at")?,
        created_at: row.try_get("created_at")?,
        source: row.try_get("source")?,
    })
}

fn audit_from_row(row: &AnyRow) -> Result<AuditEvent, sqlx::Error> {
    Ok(AuditEvent {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        created_at: row.try_get("created_at")?,
        event_type: row.try_get("event_type")?,
        agent_id: row.try_get("agent_id")?,
        action: row.try_get("action")?,
        decision: row.try_get("decision")?,
        policy_id: row.try_get("policy_id")?,
        policy_hash: row.try_get("policy_hash")?,
        trace_id: row.try_get("trace_id")?,
        reasons: string_list(&row.try_get::<String, _>("reasons")?),
        reason_codes: string_list(&row.try_get::<String, _>("reason_codes")?),
        actor: row.try_get("actor")?,
        details: json_value(&row.try_get::<String, _>("details")?),
    })
}

/// A value for a statement built at run time (filters that may or may not apply).
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

    fn cursor(&mut self, cursor: Option<&Cursor>) {
        if let Some(c) = cursor {
            self.push(
                "(created_at < ? OR (created_at = ? AND id < ?))",
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

    async fn fetch(self, pool: &AnyPool, sql: &str) -> Result<Vec<AnyRow>, sqlx::Error> {
        let mut query = sqlx::query::<Any>(sql);
        for arg in self.args {
            query = match arg {
                Arg::Text(v) => query.bind(v),
                Arg::Int(v) => query.bind(v),
            };
        }
        query.fetch_all(pool).await
    }
}

/// Columns of one audit row.
const AUDIT_COLUMNS: usize = 14;
/// Audit rows per INSERT statement when a batch's events are written together (14 × 64 = 896
/// bound values, far below both engines' limits).
const AUDIT_ROWS_PER_INSERT: usize = 64;

/// `INSERT INTO audit_events ... VALUES (...), (...)` for 1 to `AUDIT_ROWS_PER_INSERT` rows,
/// built once per engine. SQLite gets anonymous `?` parameters: binding hundreds of numbered
/// ones makes it look each name up in a list.
fn audit_insert_sql(rows: usize, sqlite: bool) -> &'static str {
    static SQL: std::sync::OnceLock<[Vec<String>; 2]> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        [false, true].map(|sqlite| {
            (1..=AUDIT_ROWS_PER_INSERT)
                .map(|rows| audit_values_sql(rows, sqlite))
                .collect()
        })
    });
    all[usize::from(sqlite)]
        .get(rows.saturating_sub(1))
        .map_or("", String::as_str)
}

fn audit_values_sql(rows: usize, sqlite: bool) -> String {
    let mut sql = String::from(
        "INSERT INTO audit_events (id, workspace_id, created_at, event_type, agent_id, action, decision, \
         policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details) VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..AUDIT_COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            if sqlite {
                sql.push('?');
            } else {
                let _ = write!(sql, "${}", row * AUDIT_COLUMNS + column + 1);
            }
        }
        sql.push(')');
    }
    sql
}

/// Writes audit events in as few statements as possible (one per 64 events), in order, on a
/// transaction or a plain connection.
async fn insert_audits(
    conn: &mut AnyConnection,
    events: &[&AuditEvent],
) -> Result<(), sqlx::Error> {
    let sqlite = conn.backend_name() == <sqlx::Sqlite as sqlx::Database>::NAME;
    for chunk in events.chunks(AUDIT_ROWS_PER_INSERT) {
        let mut query = sqlx::query(audit_insert_sql(chunk.len(), sqlite));
        for e in chunk {
            query = query
                .bind(&e.id)
                .bind(e.workspace_id.as_deref())
                .bind(e.created_at)
                .bind(&e.event_type)
                .bind(e.agent_id.as_deref())
                .bind(e.action.as_deref())
                .bind(e.decision.as_deref())
                .bind(e.policy_id.as_deref())
                .bind(e.policy_hash.as_deref())
                .bind(e.trace_id.as_deref())
                .bind(serde_json::to_string(&e.reasons).unwrap_or_else(|_| "[]".into()))
                .bind(serde_json::to_string(&e.reason_codes).unwrap_or_else(|_| "[]".into()))
                .bind(&e.actor)
                .bind(json_text(&e.details));
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_workspace(tx: &mut Transaction<'_, Any>, w: &Workspace) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)")
        .bind(&w.id)
        .bind(&w.name)
        .bind(w.created_at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn insert_api_key(
    tx: &mut Transaction<'_, Any>,
    k: &ApiKeyRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO api_keys (id, workspace_id, key_hash, mode, last_four, created_at, revoked_at, name, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&k.id)
    .bind(&k.workspace_id)
    .bind(&k.key_hash)
    .bind(&k.mode)
    .bind(&k.last_four)
    .bind(k.created_at)
    .bind(k.revoked_at)
    .bind(k.name.clone())
    .bind(k.created_by.clone())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_challenge(
    tx: &mut Transaction<'_, Any>,
    c: &ChallengeRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO attestation_challenges (id, agent_id, challenge, created_at, expires_at, used_at, name, metadata) \
         VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
    )
    .bind(&c.id)
    .bind(&c.agent_id)
    .bind(&c.challenge)
    .bind(c.created_at)
    .bind(c.expires_at)
    .bind(c.name.clone())
    .bind(c.metadata.as_ref().map(json_text))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn select_agent(
    tx: &mut Transaction<'_, Any>,
    id: &str,
) -> Result<Option<AgentRecord>, sqlx::Error> {
    let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1");
    sqlx::query(&sql)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| agent_from_row(&row))
        .transpose()
}

/// Marks a claim code used; `Conflict` when it was used or expired.
async fn redeem_claim_code(
    tx: &mut Transaction<'_, Any>,
    code_hash: &str,
    at: i64,
) -> Result<(), StoreError> {
    let used = sqlx::query(
        "UPDATE agent_claim_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1",
    )
    .bind(at)
    .bind(code_hash)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    changed_rows(used, || {
        StoreError::Conflict("the claim code was used or expired".into())
    })?;
    Ok(())
}

fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

/// Changes whose only precondition is checked before their first write: audit-only and
/// nonce-only changes (decisions, verifications) and heartbeats.
fn checks_before_writing(change: &Change) -> bool {
    matches!(change.op, Op::Nothing | Op::RecordHeartbeats(_))
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

/// `Done` when the statement changed a row; else `Conflict` with `why`.
fn affected_or_conflict(rows: u64, why: &str) -> Result<Outcome, StoreError> {
    changed_rows(rows, || StoreError::Conflict(why.into()))?;
    Ok(Outcome::Done)
}

/// Applies one change inside `tx` (a savepoint of the batch transaction).
async fn apply_change(
    tx: &mut Transaction<'_, Any>,
    change: &Change,
) -> Result<Outcome, StoreError> {
    let outcome = apply_unaudited(tx, change).await?;
    let events: Vec<&AuditEvent> = change.audit.iter().collect();
    insert_audits(tx, &events).await?;
    Ok(outcome)
}

/// Applies one change's nonce claim and operation, not its audit events.
async fn apply_unaudited(
    tx: &mut Transaction<'_, Any>,
    change: &Change,
) -> Result<Outcome, StoreError> {
    if let Some(claim) = &change.nonce {
        // Inserts the claim, or takes over an expired one not yet cleaned up; a live claim
        // leaves the row as it is and affects nothing. The claim also requires the agent to
        // be active at this moment, so a request checked before a revoke cannot commit after.
        let claimed = sqlx::query(
            "INSERT INTO nonces (scope, nonce, expires_at) SELECT $1, $2, $3 \
             WHERE $5 = '' OR EXISTS (SELECT 1 FROM agents WHERE id = $5 AND status = 'active') \
             ON CONFLICT (scope, nonce) DO UPDATE SET expires_at = excluded.expires_at \
             WHERE nonces.expires_at < $4",
        )
        .bind(&claim.scope)
        .bind(&claim.nonce)
        .bind(claim.expires_at)
        .bind(crate::time::now_ms())
        .bind(claim.agent_id.clone().unwrap_or_default())
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if claimed == 0 {
            if let Some(agent_id) = &claim.agent_id {
                let status: Option<String> = sqlx::query("SELECT status FROM agents WHERE id = $1")
                    .bind(agent_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(|row| row.try_get("status"))
                    .transpose()?;
                if status.as_deref() != Some("active") {
                    return Err(StoreError::AgentNotActive);
                }
            }
            return Err(StoreError::Replay);
        }
    }
    apply_op(tx, &change.op).await
}

/// Applies `op` and, when it changes what decisions or authentications rest on, bumps its
/// workspace's version in the same transaction (see [`Op::supersedes`]).
async fn apply_op(tx: &mut Transaction<'_, Any>, op: &Op) -> Result<Outcome, StoreError> {
    let outcome = apply_op_inner(tx, op).await?;
    if let Some(superseded) = op.supersedes() {
        bump_version(tx, superseded).await?;
    }
    Ok(outcome)
}

async fn bump_version(
    tx: &mut Transaction<'_, Any>,
    superseded: Supersedes<'_>,
) -> Result<(), StoreError> {
    const UPSERT: &str = " ON CONFLICT (workspace_id) DO UPDATE \
        SET version = workspace_versions.version + 1, changed_at = excluded.changed_at";
    let (sql, id) = match superseded {
        Supersedes::Workspace(ws) => (
            ["INSERT INTO workspace_versions (workspace_id, version, changed_at) VALUES ($1, 1, $2)", UPSERT].concat(),
            ws,
        ),
        Supersedes::AgentsWorkspace(agent) => (
            ["INSERT INTO workspace_versions (workspace_id, version, changed_at) \
              SELECT workspace_id, 1, $2 FROM agents WHERE id = $1 AND workspace_id IS NOT NULL", UPSERT].concat(),
            agent,
        ),
    };
    sqlx::query(&sql)
        .bind(id)
        .bind(crate::time::now_ms())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The current versions of the workspaces the changes were decided on.
async fn current_versions(
    conn: &mut AnyConnection,
    changes: &[Change],
) -> Result<HashMap<String, i64>, StoreError> {
    let mut ids: Vec<&str> = changes
        .iter()
        .filter_map(|c| c.basis.as_ref().map(|b| b.workspace_id.as_str()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut sql = String::from(
        "SELECT workspace_id, version FROM workspace_versions WHERE workspace_id IN (",
    );
    for i in 1..=ids.len() {
        let _ = write!(sql, "{}${i}", if i == 1 { "" } else { ", " });
    }
    sql.push(')');
    let mut query = sqlx::query(&sql);
    for id in &ids {
        query = query.bind(*id);
    }
    let mut versions: HashMap<String, i64> = ids.iter().map(|id| ((*id).to_owned(), 0)).collect();
    for row in query.fetch_all(conn).await? {
        versions.insert(row.try_get("workspace_id")?, row.try_get("version")?);
    }
    Ok(versions)
}

async fn apply_op_inner(tx: &mut Transaction<'_, Any>, op: &Op) -> Result<Outcome, StoreError> {
    match op {
        Op::Nothing => Ok(Outcome::Done),
        Op::Bootstrap { workspace, key } => {
            let first = sqlx::query("INSERT INTO instance_meta (key, value) VALUES ('bootstrapped', $1) ON CONFLICT (key) DO NOTHING")
                .bind(&workspace.id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if first == 0 {
                return Ok(Outcome::Bootstrapped(false));
            }
            insert_workspace(tx, workspace).await?;
            insert_api_key(tx, key).await?;
            Ok(Outcome::Bootstrapped(true))
        }
        Op::CreateWorkspace(workspace) => {
            insert_workspace(tx, workspace).await?;
            // A workspace made by hand also counts as the instance being set up.
            sqlx::query("INSERT INTO instance_meta (key, value) VALUES ('bootstrapped', $1) ON CONFLICT (key) DO NOTHING")
                .bind(&workspace.id)
                .execute(&mut **tx)
                .await?;
            Ok(Outcome::Done)
        }
        Op::CreateApiKey(key) => {
            insert_api_key(tx, key).await?;
            Ok(Outcome::Done)
        }
        Op::RegisterAgent { agent, challenge } => {
            let inserted = sqlx::query(
                "INSERT INTO agents (id, workspace_id, name, public_key, key_type, metadata, status, risk_tier, \
                 created_at, updated_at, attested_at, last_seen_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL)",
            )
            .bind(&agent.id)
            .bind(agent.workspace_id.clone())
            .bind(&agent.name)
            .bind(&agent.public_key)
            .bind(&agent.key_type)
            .bind(json_text(&agent.metadata))
            .bind(agent.status.as_str())
            .bind(&agent.risk_tier)
            .bind(agent.created_at)
            .bind(agent.updated_at)
            .execute(&mut **tx)
            .await;
            match inserted {
                Err(e) if is_unique_violation(&e) => {
                    return Err(StoreError::Conflict(
                        "an agent with this public key was registered at the same moment; retry to get its challenge".into(),
                    ))
                }
                other => other?,
            };
            insert_challenge(tx, challenge).await?;
            Ok(Outcome::Done)
        }
        Op::IssueChallenge(challenge) => {
            insert_challenge(tx, challenge).await?;
            Ok(Outcome::Done)
        }
        Op::Attest {
            challenge_id,
            agent_id,
            at,
        } => {
            let used = sqlx::query(
                "UPDATE attestation_challenges SET used_at = $1 \
                 WHERE id = $2 AND agent_id = $3 AND used_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(challenge_id)
            .bind(agent_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(used, || StoreError::ChallengeUsed)?;
            // Proof of possession: the name and metadata proposed with this challenge apply now.
            let updated = sqlx::query(
                "UPDATE agents SET status = CASE WHEN status = 'pending' THEN 'active' ELSE status END, \
                 attested_at = $1, updated_at = $1, \
                 name = COALESCE((SELECT c.name FROM attestation_challenges c WHERE c.id = $3), name), \
                 metadata = COALESCE((SELECT c.metadata FROM attestation_challenges c WHERE c.id = $3), metadata) \
                 WHERE id = $2 AND status <> 'revoked'",
            )
            .bind(*at)
            .bind(agent_id)
            .bind(challenge_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(updated, || {
                StoreError::Conflict("the agent was revoked".into())
            })?;
            let agent = select_agent(tx, agent_id)
                .await?
                .ok_or(StoreError::UnknownAgent)?;
            Ok(Outcome::Agent(Box::new(agent)))
        }
        Op::CreateClaimCode(code) => {
            let created = sqlx::query(
                "INSERT INTO agent_claim_codes (code_hash, agent_id, created_at, expires_at, used_at) \
                 SELECT $1, $2, $3, $4, NULL WHERE EXISTS (SELECT 1 FROM agents WHERE id = $2 AND workspace_id IS NULL)",
            )
            .bind(&code.code_hash)
            .bind(&code.agent_id)
            .bind(code.created_at)
            .bind(code.expires_at)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(created, || {
                StoreError::Conflict("the agent was claimed meanwhile".into())
            })?;
            Ok(Outcome::Done)
        }
        Op::ClaimAgent {
            code_hash,
            agent_id,
            workspace_id,
            at,
        } => {
            redeem_claim_code(tx, code_hash, *at).await?;
            let moved = sqlx::query(
                "UPDATE agents SET workspace_id = $1, updated_at = $2 WHERE id = $3 AND workspace_id IS NULL",
            )
            .bind(workspace_id)
            .bind(*at)
            .bind(agent_id)
            .execute(&mut **tx)
            .await;
            match moved {
                Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict(
                    "this workspace already has an agent with the same public key".into(),
                )),
                Err(e) => Err(e.into()),
                Ok(done) if done.rows_affected() == 0 => Err(StoreError::Conflict(
                    "the agent was claimed meanwhile".into(),
                )),
                Ok(_) => {
                    let agent = select_agent(tx, agent_id)
                        .await?
                        .ok_or(StoreError::UnknownAgent)?;
                    Ok(Outcome::Agent(Box::new(agent)))
                }
            }
        }
        Op::SetWorkspaceSettings {
            workspace_id,
            require_member_approval,
            at,
        } => {
            sqlx::query(
                "INSERT INTO workspace_settings (workspace_id, require_member_approval, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (workspace_id) DO UPDATE SET require_member_approval = excluded.require_member_approval, \
                 updated_at = excluded.updated_at",
            )
            .bind(workspace_id)
            .bind(i64::from(*require_member_approval))
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            Ok(Outcome::Done)
        }
        Op::RejectClaim { code_hash, at } => {
            redeem_claim_code(tx, code_hash, *at).await?;
            Ok(Outcome::Done)
        }
        Op::SetAgentStatus {
            agent_id,
            workspace_id,
            from,
            to,
            at,
        } => {
            let changed = sqlx::query(
                "UPDATE agents SET status = $1, updated_at = $2 WHERE id = $3 AND workspace_id = $4 AND status = $5",
            )
            .bind(to.as_str())
            .bind(*at)
            .bind(agent_id)
            .bind(workspace_id)
            .bind(from.as_str())
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(changed, || {
                StoreError::Conflict("the agent's status changed meanwhile; read it again".into())
            })?;
            let agent = select_agent(tx, agent_id)
                .await?
                .ok_or(StoreError::UnknownAgent)?;
            Ok(Outcome::Agent(Box::new(agent)))
        }
        Op::RecordHeartbeats(beats) => {
            for hb in beats {
                sqlx::query(
                    "INSERT INTO heartbeats (id, workspace_id, agent_id, status, latency_ms, observed_at, created_at, source) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(&hb.id)
                .bind(hb.workspace_id.clone())
                .bind(&hb.agent_id)
                .bind(&hb.status)
                .bind(hb.latency_ms)
                .bind(hb.observed_at)
                .bind(hb.created_at)
                .bind(&hb.source)
                .execute(&mut **tx)
                .await?;
                sqlx::query(
                    "UPDATE agents SET last_seen_at = $1 WHERE id = $2 AND (last_seen_at IS NULL OR last_seen_at < $1)",
                )
                .bind(hb.observed_at)
                .bind(&hb.agent_id)
                .execute(&mut **tx)
                .await?;
            }
            Ok(Outcome::Done)
        }
        Op::UpsertInventory(item) => {
            let written = sqlx::query(
                "INSERT INTO agent_inventory (workspace_id, external_agent_key, agent_id, display_name, labels, \
                 environment, source, status, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (workspace_id, external_agent_key) DO UPDATE SET \
                 display_name = excluded.display_name, labels = excluded.labels, environment = excluded.environment, \
                 source = excluded.source, status = excluded.status, updated_at = excluded.updated_at \
                 WHERE agent_inventory.agent_id = excluded.agent_id",
            )
            .bind(&item.workspace_id)
            .bind(&item.external_agent_key)
            .bind(&item.agent_id)
            .bind(item.display_name.clone())
            .bind(json_text(&item.labels))
            .bind(item.environment.clone())
            .bind(item.source.clone())
            .bind(&item.status)
            .bind(item.created_at)
            .bind(item.updated_at)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(written, || {
                StoreError::Conflict(format!(
                    "`{}` already maps to another agent",
                    item.external_agent_key
                ))
            })?;
            Ok(Outcome::Done)
        }
        Op::Batch(ops) => {
            let mut last = Outcome::Done;
            for op in ops {
                last = Box::pin(apply_op(tx, op)).await?;
            }
            Ok(last)
        }
        other => {
            if let Some(outcome) = accounts::apply(tx, other).await? {
                return Ok(outcome);
            }
            if let Some(outcome) = credentials::apply(tx, other).await? {
                return Ok(outcome);
            }
            policies::apply(tx, other)
                .await?
                .ok_or_else(|| StoreError::Database("operation without SQL".into()))
        }
    }
}

/// Applies changes (whose basis, if any, is current) in one transaction, each inside its own
/// savepoint (see [`Store::apply`]).
async fn apply_fresh(
    conn: &mut AnyConnection,
    changes: &[&Change],
) -> Result<Vec<Result<Outcome, StoreError>>, StoreError> {
    // A batch of pure records (decisions: no nonce, no operation) that fits one INSERT
    // needs no transaction: the statement is atomic on its own, so the `/v1/check` hot path
    // has no BEGIN and COMMIT round trips.
    if changes
        .iter()
        .all(|c| c.nonce.is_none() && matches!(c.op, Op::Nothing))
    {
        let events: Vec<&AuditEvent> = changes.iter().flat_map(|c| &c.audit).collect();
        if events.len() <= AUDIT_ROWS_PER_INSERT {
            if !events.is_empty() {
                // Nothing was written on failure: each change may be tried alone.
                insert_audits(conn, &events)
                    .await
                    .map_err(|e| StoreError::Retryable(e.to_string()))?;
            }
            return Ok(changes.iter().map(|_| Ok(Outcome::Done)).collect());
        }
    }
    let mut tx = conn.begin().await?;
    let mut results = Vec::with_capacity(changes.len());
    // A single change needs no savepoint: its failure rolls back the whole transaction.
    if let [change] = changes {
        let result = apply_change(&mut tx, change).await;
        return match result {
            Ok(outcome) => {
                tx.commit().await?;
                Ok(vec![Ok(outcome)])
            }
            Err(err @ StoreError::Retryable(_)) => {
                tx.rollback().await?;
                Err(err)
            }
            Err(err) => {
                tx.rollback().await?;
                Ok(vec![Err(err)])
            }
        };
    }
    // The audit events of such changes, written together before the next change that
    // needs a savepoint and at the end: one statement for many decisions.
    let mut pending: Vec<&AuditEvent> = Vec::new();
    for change in changes {
        if checks_before_writing(change) {
            // Its precondition (the nonce claim) fails before it writes anything, so it
            // needs no savepoint: two round trips fewer per change on the hot paths.
            match apply_unaudited(&mut tx, change).await {
                Ok(outcome) => {
                    pending.extend(change.audit.iter());
                    results.push(Ok(outcome));
                }
                Err(err @ (StoreError::Replay | StoreError::AgentNotActive)) => {
                    results.push(Err(err))
                }
                // Anything else may have left the transaction unusable (Postgres aborts it):
                // give the batch back to be applied change by change.
                Err(err) => {
                    tx.rollback().await?;
                    return Err(StoreError::Retryable(err.to_string()));
                }
            }
            continue;
        }
        if let Err(err) = insert_audits(&mut tx, &pending).await {
            tx.rollback().await?;
            return Err(StoreError::Retryable(err.to_string()));
        }
        pending.clear();
        let mut savepoint = tx.begin().await?;
        match apply_change(&mut savepoint, change).await {
            Ok(outcome) => {
                savepoint.commit().await?;
                results.push(Ok(outcome));
            }
            // A deadlock or serialization failure is the batch's, not the change's: roll
            // everything back and let the caller retry (nothing was committed).
            Err(err @ StoreError::Retryable(_)) => {
                drop(savepoint);
                tx.rollback().await?;
                return Err(err);
            }
            Err(err) => {
                savepoint.rollback().await?;
                results.push(Err(err));
            }
        }
    }
    if let Err(err) = insert_audits(&mut tx, &pending).await {
        tx.rollback().await?;
        return Err(StoreError::Retryable(err.to_string()));
    }
    // A failure here leaves the outcome unknown (the commit may have happened): it is
    // reported as a database error and never retried.
    tx.commit().await?;
    Ok(results)
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn listen_url(&self) -> Option<String> {
        (self.backend == Backend::Postgres).then(|| self.url.clone())
    }

    async fn notify_changes(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify('acp_changes', '')")
                .execute(&self.write)
                .await?;
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.read.acquire().await?;
        conn.ping().await?;
        Ok(())
    }

    async fn apply(
        &self,
        changes: &[Change],
    ) -> Result<Vec<Result<Outcome, StoreError>>, StoreError> {
        let mut conn = self.write_conn().await?;
        if changes.iter().all(|c| c.basis.is_none()) {
            return apply_fresh(&mut conn, &changes.iter().collect::<Vec<_>>()).await;
        }
        // Changes decided on a workspace version that has moved are answered `Stale` unwritten;
        // the rest are applied. The versions are read after every change in the batch was
        // decided, so a change answered (on any replica) before one of them was made is seen.
        let versions = current_versions(&mut conn, changes).await?;
        let is_stale = |c: &Change| {
            c.basis
                .as_ref()
                .and_then(|b| versions.get(&b.workspace_id).filter(|v| **v != b.version))
                .copied()
        };
        let fresh: Vec<&Change> = changes.iter().filter(|c| is_stale(c).is_none()).collect();
        let mut applied = apply_fresh(&mut conn, &fresh).await?.into_iter();
        let mut results = Vec::with_capacity(changes.len());
        for change in changes {
            results.push(match is_stale(change) {
                Some(version) => Err(StoreError::Stale(version)),
                None => applied
                    .next()
                    .unwrap_or(Err(StoreError::Database("missing batch result".into()))),
            });
        }
        Ok(results)
    }

    async fn workspace(&self, id: &str) -> Result<Option<Workspace>, StoreError> {
        let row = sqlx::query("SELECT id, name, created_at FROM workspaces WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(match row {
            Some(row) => Some(Workspace {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                created_at: row.try_get("created_at")?,
            }),
            None => None,
        })
    }

    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE key_hash = $1");
        let row = sqlx::query(&sql)
            .bind(key_hash)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| api_key_from_row(&row)).transpose()?)
    }

    async fn api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC");
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows
            .iter()
            .map(api_key_from_row)
            .collect::<Result<_, _>>()?)
    }

    async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        accounts::user(&self.read, id).await
    }

    async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
        accounts::user_by_email(&self.read, email).await
    }

    async fn memberships(&self, user_id: &str) -> Result<Vec<Membership>, StoreError> {
        accounts::memberships(&self.read, user_id).await
    }

    async fn role_in(&self, workspace_id: &str, user_id: &str) -> Result<Option<Role>, StoreError> {
        accounts::role_in(&self.read, workspace_id, user_id).await
    }

    async fn members(&self, workspace_id: &str) -> Result<Vec<(User, Role)>, StoreError> {
        accounts::members(&self.read, workspace_id).await
    }

    async fn session(&self, id_hash: &str) -> Result<Option<SessionRecord>, StoreError> {
        accounts::session(&self.read, id_hash).await
    }

    async fn login_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<(String, i64, Option<i64>)>, StoreError> {
        accounts::login_token(&self.read, token_hash).await
    }

    async fn pat_by_hash(&self, token_hash: &str) -> Result<Option<PatRecord>, StoreError> {
        accounts::pat_by_hash(&self.read, token_hash).await
    }

    async fn pats(&self, user_id: &str) -> Result<Vec<PatRecord>, StoreError> {
        accounts::pats(&self.read, user_id).await
    }

    async fn outbox(&self, limit: i64) -> Result<Vec<OutboxMessage>, StoreError> {
        accounts::outbox(&self.read, limit).await
    }

    async fn latest_status_checks(&self) -> Result<Vec<StatusCheck>, StoreError> {
        accounts::latest_status_checks(&self.read).await
    }

    async fn policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Option<PolicyRecord>, StoreError> {
        policies::policy(&self.read, workspace_id, policy_id).await
    }

    async fn policies(&self, workspace_id: &str) -> Result<Vec<PolicyRecord>, StoreError> {
        policies::policies(&self.read, Some(workspace_id)).await
    }

    async fn all_policies(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        policies::policies(&self.read, None).await
    }

    async fn policy_version(
        &self,
        workspace_id: &str,
        policy_id: &str,
        version: i64,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        policies::policy_version(&self.read, workspace_id, policy_id, version).await
    }

    async fn policy_versions(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Vec<PolicyVersion>, StoreError> {
        policies::policy_versions(&self.read, workspace_id, policy_id).await
    }

    async fn idempotency(
        &self,
        workspace_id: &str,
        key: &str,
        since: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        policies::idempotency(&self.read, workspace_id, key, since).await
    }

    async fn policy_challenge(&self, id: &str) -> Result<Option<PolicyChallenge>, StoreError> {
        policies::policy_challenge(&self.read, "id", id).await
    }

    async fn policy_challenge_by_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<PolicyChallenge>, StoreError> {
        policies::policy_challenge(&self.read, "token_hash", token_hash).await
    }

    async fn decided_challenge(
        &self,
        workspace_id: &str,
        agent_id: &str,
        fingerprint: &str,
        since: i64,
    ) -> Result<Option<PolicyChallenge>, StoreError> {
        policies::decided_challenge(&self.read, workspace_id, agent_id, fingerprint, since).await
    }

    async fn agent_labels(
        &self,
        workspace_id: &str,
        agent_id: &str,
    ) -> Result<serde_json::Value, StoreError> {
        policies::agent_labels(&self.read, workspace_id, agent_id).await
    }

    async fn changes_since(&self, since: i64) -> Result<Vec<Invalidation>, StoreError> {
        policies::changes_since(&self.read, since).await
    }

    async fn workspace_version(&self, workspace_id: &str) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT version FROM workspace_versions WHERE workspace_id = $1")
            .bind(workspace_id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.try_get("version")).transpose()?.unwrap_or(0))
    }

    async fn workspace_versions_since(&self, since: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT workspace_id, version FROM workspace_versions WHERE changed_at >= $1",
        )
        .bind(since)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("workspace_id")?, r.try_get("version")?)))
            .collect()
    }

    async fn policy_heads(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT workspace_id, id, current_version FROM policies")
            .fetch_all(&self.read)
            .await?;
        let mut heads = Vec::with_capacity(rows.len());
        for r in rows {
            heads.push((
                r.try_get("workspace_id")?,
                r.try_get("id")?,
                r.try_get("current_version")?,
            ));
        }
        Ok(heads)
    }

    async fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError> {
        let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| agent_from_row(&row)).transpose()?)
    }

    async fn agent_by_public_key(
        &self,
        workspace_id: Option<&str>,
        public_key: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE COALESCE(workspace_id, '') = $1 AND public_key = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id.unwrap_or(""))
            .bind(public_key)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| agent_from_row(&row)).transpose()?)
    }

    async fn agents_in_workspace(
        &self,
        workspace_id: &str,
        ids: &[String],
    ) -> Result<Vec<AgentRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (2..ids.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = $1 AND id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(workspace_id);
        for id in ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.read).await?;
        Ok(rows.iter().map(agent_from_row).collect::<Result<_, _>>()?)
    }

    async fn list_agents(&self, query: &AgentQuery) -> Result<Vec<AgentRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("status = ?", query.status.map(AgentStatus::as_str));
        f.text("name = ?", query.name.as_deref());
        f.cursor(query.after.as_ref());
        let sql = f.sql(
            &format!("SELECT {AGENT_COLUMNS} FROM agents"),
            &format!("ORDER BY created_at DESC, id DESC LIMIT {}", query.limit),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows.iter().map(agent_from_row).collect::<Result<_, _>>()?)
    }

    async fn challenge(&self, id: &str) -> Result<Option<ChallengeRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, agent_id, challenge, created_at, expires_at, used_at, name, metadata \
             FROM attestation_challenges WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(row) => Some(ChallengeRecord {
                id: row.try_get("id")?,
                agent_id: row.try_get("agent_id")?,
                challenge: row.try_get("challenge")?,
                created_at: row.try_get("created_at")?,
                expires_at: row.try_get("expires_at")?,
                used_at: row.try_get("used_at")?,
                name: row.try_get("name")?,
                metadata: row
                    .try_get::<Option<String>, _>("metadata")?
                    .map(|m| json_value(&m)),
            }),
            None => None,
        })
    }

    async fn credential_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        credentials::credential_by_hash(&self.read, token_hash).await
    }

    async fn kill_switch(&self, workspace_id: &str) -> Result<KillSwitch, StoreError> {
        credentials::kill_switch(&self.read, workspace_id).await
    }

    async fn email_counts(
        &self,
        workspace_id: &str,
        agent_id: &str,
        minute_ago: i64,
        day_ago: i64,
    ) -> Result<(i64, i64), StoreError> {
        credentials::email_counts(&self.read, workspace_id, agent_id, minute_ago, day_ago).await
    }

    async fn signing_keys(&self, now: i64) -> Result<Vec<SigningKeyRecord>, StoreError> {
        credentials::signing_keys(&self.read, now).await
    }

    async fn require_member_approval(&self, workspace_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT require_member_approval FROM workspace_settings WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => r.try_get::<i64, _>("require_member_approval")? != 0,
            None => false,
        })
    }

    async fn claim_code(&self, code_hash: &str) -> Result<Option<ClaimCodeRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT code_hash, agent_id, created_at, expires_at, used_at FROM agent_claim_codes WHERE code_hash = $1",
        )
        .bind(code_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => Some(ClaimCodeRecord {
                code_hash: r.try_get("code_hash")?,
                agent_id: r.try_get("agent_id")?,
                created_at: r.try_get("created_at")?,
                expires_at: r.try_get("expires_at")?,
                used_at: r.try_get("used_at")?,
            }),
            None => None,
        })
    }

    async fn recent_heartbeats(
        &self,
        workspace_id: &str,
        agent_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<HeartbeatRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(workspace_id));
        f.text("agent_id = ?", agent_id);
        let sql = f.sql(
            "SELECT id, workspace_id, agent_id, status, latency_ms, observed_at, created_at, source FROM heartbeats",
            &format!("ORDER BY created_at DESC, id DESC LIMIT {limit}"),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows
            .iter()
            .map(heartbeat_from_row)
            .collect::<Result<_, _>>()?)
    }

    async fn inventory(
        &self,
        workspace_id: &str,
        external_agent_key: &str,
    ) -> Result<Option<InventoryRecord>, StoreError> {
        let sql = format!("SELECT {INVENTORY_COLUMNS} FROM agent_inventory WHERE workspace_id = $1 AND external_agent_key = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(external_agent_key)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| inventory_from_row(&row)).transpose()?)
    }

    async fn list_inventory(
        &self,
        query: &InventoryQuery,
    ) -> Result<Vec<InventoryRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("environment = ?", query.environment.as_deref());
        f.text("status = ?", query.status.as_deref());
        let sql = f.sql(
            &format!("SELECT {INVENTORY_COLUMNS} FROM agent_inventory"),
            "ORDER BY external_agent_key",
        );
        let rows = f.fetch(&self.read, &sql).await?;
        let items = rows
            .iter()
            .map(inventory_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        // Labels are JSON (a list or an object) in a TEXT column; matching here keeps the SQL
        // portable.
        Ok(match &query.label {
            None => items,
            Some(label) => items
                .into_iter()
                .filter(|item| labels_hold(&item.labels, label))
                .collect(),
        })
    }

    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("agent_id = ?", query.agent_id.as_deref());
        f.text("action = ?", query.action.as_deref());
        f.text("decision = ?", query.decision.as_deref());
        f.text("trace_id = ?", query.trace_id.as_deref());
        f.text("event_type = ?", query.event_type.as_deref());
        f.int("created_at >= ?", query.start_ms);
        f.int("created_at < ?", query.end_ms);
        f.cursor(query.after.as_ref());
        let sql = f.sql(
            "SELECT id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id, policy_hash, \
             trace_id, reasons, reason_codes, actor, details FROM audit_events",
            &format!("ORDER BY created_at DESC, id DESC LIMIT {}", query.limit),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows.iter().map(audit_from_row).collect::<Result<_, _>>()?)
    }

    async fn delete_expired_nonces(&self, now: i64) -> Result<u64, StoreError> {
        let mut conn = self.write_conn().await?;
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
    fn sqlite_urls_are_normalised() {
        let dir = std::env::temp_dir().join(format!("acp-url-{}", std::process::id()));
        let path = dir.join("x.db");
        let url = sqlite_url(&format!("sqlite:{}", path.display())).unwrap();
        assert_eq!(url, format!("sqlite://{}?mode=rwc", path.display()));
        assert!(dir.is_dir());
        assert!(sqlite_url("sqlite::memory:").is_err());
    }
}
