//! SQL of the audit trail: records written together in multi-row `INSERT`s by the change
//! machinery (see `apply.rs`), and read back by audit queries.

use std::collections::HashMap;
use std::fmt::Write as _;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::{found, json_text, json_value, string_list, AnyQuery, Filters, SqlStore};
use crate::store::*;

/// Columns of one audit row.
pub(super) const AUDIT_COLUMNS: usize = 14;
/// Their names, in the order every INSERT binds them ([`bind_audit`]).
pub(super) const AUDIT_COLUMN_NAMES: &str =
    "id, workspace_id, created_at, event_type, agent_id, action, \
    decision, policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details";
/// Audit rows per INSERT statement when a batch's events are written together: a batch of
/// decisions (at most 100 checks) and a few single checks committed with it fit one statement
/// (16 × 128 = 2,048 bound values with the version check's two, far below both engines'
/// limits).
pub(super) const AUDIT_ROWS_PER_INSERT: usize = 128;

/// One statement text per row count (1 to [`AUDIT_ROWS_PER_INSERT`]), each built on its first
/// use: the counts a server meets are few, and a statement of 128 rows is several kilobytes.
type Built = [std::sync::OnceLock<String>; AUDIT_ROWS_PER_INSERT];

/// The text for `rows` rows from `cache`, made by `make` the first time; empty (a statement
/// the database refuses) outside 1 to [`AUDIT_ROWS_PER_INSERT`].
fn built(cache: &'static Built, rows: usize, make: impl FnOnce(usize) -> String) -> &'static str {
    match rows.checked_sub(1).and_then(|i| cache.get(i)) {
        Some(cell) => cell.get_or_init(|| make(rows)).as_str(),
        None => "",
    }
}

/// Where an audit INSERT runs: alone (its own transaction), or inside a transaction or
/// savepoint that the caller rolls back whole when any statement fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Enclosed {
    Alone,
    InTransaction,
}

/// `INSERT INTO audit_events ... VALUES (...), (...)` for 1 to `AUDIT_ROWS_PER_INSERT` rows,
/// built once per engine. SQLite gets anonymous `?` parameters: binding hundreds of numbered
/// ones makes it look each name up in a list. Inside a transaction SQLite's statement is
/// `INSERT OR FAIL`: a failing statement then keeps the rows it wrote, which the caller's
/// rollback removes anyway, so SQLite keeps no statement journal of the pages it changes (a
/// copy of each before its first change, 7 % of a batch of decisions' time). Alone, a failing
/// statement must undo itself, and does.
pub(super) fn audit_insert_sql(rows: usize, sqlite: bool, enclosed: Enclosed) -> &'static str {
    static POSTGRES: Built = [const { std::sync::OnceLock::new() }; AUDIT_ROWS_PER_INSERT];
    static SQLITE: Built = [const { std::sync::OnceLock::new() }; AUDIT_ROWS_PER_INSERT];
    static SQLITE_ENCLOSED: Built = [const { std::sync::OnceLock::new() }; AUDIT_ROWS_PER_INSERT];
    let (cache, verb) = match (sqlite, enclosed) {
        (false, _) => (&POSTGRES, "INSERT INTO"),
        (true, Enclosed::Alone) => (&SQLITE, "INSERT INTO"),
        (true, Enclosed::InTransaction) => (&SQLITE_ENCLOSED, "INSERT OR FAIL INTO"),
    };
    built(cache, rows, |rows| audit_values_sql(verb, rows, sqlite))
}

fn audit_values_sql(verb: &str, rows: usize, sqlite: bool) -> String {
    let mut sql = format!("{verb} audit_events ({AUDIT_COLUMN_NAMES}) VALUES ");
    if sqlite {
        anonymous_rows(&mut sql, rows, AUDIT_COLUMNS);
        return sql;
    }
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..AUDIT_COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "${}", row * AUDIT_COLUMNS + column + 1);
        }
        sql.push(')');
    }
    sql
}

/// Postgres: `rows` rows of `per_row` numbered parameters from `$first + 1` on, for a `VALUES`
/// list, whose column types come from its first row: that row names them (`bigint` for the
/// columns `bigint`, `text` for the others).
pub(super) fn typed_rows(
    sql: &mut String,
    rows: usize,
    per_row: usize,
    first: usize,
    bigint: &[usize],
) {
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..per_row {
            let n = first + row * per_row + column + 1;
            let cast = match row {
                0 if bigint.contains(&column) => "::bigint",
                0 => "::text",
                _ => "",
            };
            let _ = write!(sql, "{}${n}{cast}", if column == 0 { "" } else { ", " });
        }
        sql.push(')');
    }
}

/// `rows` rows of `per_row` anonymous parameters, `(?, ?), (?, ?)`: SQLite binds them in order
/// without looking names up.
fn anonymous_rows(sql: &mut String, rows: usize, per_row: usize) {
    let row = format!("({})", vec!["?"; per_row].join(", "));
    sql.push_str(&vec![row.as_str(); rows].join(", "));
}

/// Writes audit events in as few statements as possible (one per 128 events), in order, on a
/// transaction or a plain connection.
pub(super) async fn insert_audits(
    conn: &mut AnyConnection,
    events: &[&AuditRecord],
    enclosed: Enclosed,
) -> Result<(), sqlx::Error> {
    let sqlite = conn.backend_name() == <sqlx::Sqlite as sqlx::Database>::NAME;
    // Several statements are one write only inside a transaction.
    debug_assert!(enclosed == Enclosed::InTransaction || events.len() <= AUDIT_ROWS_PER_INSERT);
    for chunk in events.chunks(AUDIT_ROWS_PER_INSERT) {
        let mut query = sqlx::query(audit_insert_sql(chunk.len(), sqlite, enclosed));
        for e in chunk {
            query = bind_audit(query, e);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Binds an event's [`AUDIT_COLUMNS`] values, in the column order of the INSERTs.
pub(super) fn bind_audit<'q>(query: AnyQuery<'q>, e: &'q AuditRecord) -> AnyQuery<'q> {
    let query = query
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
        .bind(&e.actor);
    match &e.details {
        Details::Text(text) => query.bind(text.get()),
        Details::Tree(tree) => query.bind(json_text(tree)),
    }
}

/// Postgres: writes the events of records decided on a workspace version (decisions), each
/// only if that version is still current, and answers the current versions of those
/// workspaces, in one statement: one round trip, where a read of the versions and then an
/// INSERT took two. The statement reads the versions and inserts in one snapshot, so what it
/// answers is what it judged by. `None` when the rows do not fit one statement.
pub(super) async fn insert_if_current(
    conn: &mut AnyConnection,
    rows: &[(&AuditRecord, Option<&Basis>)],
) -> Result<Option<HashMap<String, i64>>, sqlx::Error> {
    if rows.is_empty() || rows.len() > AUDIT_ROWS_PER_INSERT {
        return Ok(None);
    }
    let mut workspaces: Vec<&str> = rows
        .iter()
        .filter_map(|(_, basis)| basis.map(|b| b.workspace_id.as_str()))
        .collect();
    workspaces.sort_unstable();
    workspaces.dedup();
    if workspaces.is_empty() {
        return Ok(None);
    }
    let several;
    let sql = if workspaces.len() == 1 {
        // The hot path (one workspace): the statement is built once per row count.
        static SQL: Built = [const { std::sync::OnceLock::new() }; AUDIT_ROWS_PER_INSERT];
        built(&SQL, rows.len(), |n| insert_if_current_sql(n, 1))
    } else {
        several = insert_if_current_sql(rows.len(), workspaces.len());
        several.as_str()
    };
    let mut query = sqlx::query(sql);
    for id in &workspaces {
        query = query.bind(*id);
    }
    for (event, basis) in rows {
        query = bind_audit(query, event)
            .bind(basis.map(|b| b.workspace_id.as_str()))
            .bind(basis.map(|b| b.version));
    }
    let mut versions: HashMap<String, i64> =
        workspaces.iter().map(|id| ((*id).to_owned(), 0)).collect();
    for row in query.fetch_all(&mut *conn).await? {
        versions.insert(row.try_get("workspace_id")?, row.try_get("version")?);
    }
    Ok(Some(versions))
}

/// [`insert_if_current`]'s statement for `rows` events over `workspaces` workspace ids: the
/// ids first, then per row its [`AUDIT_COLUMNS`] values, its basis workspace and version.
fn insert_if_current_sql(rows: usize, workspaces: usize) -> String {
    let mut sql = String::from(
        "WITH versions AS (SELECT workspace_id, version FROM workspace_versions WHERE workspace_id IN (",
    );
    for i in 1..=workspaces {
        let _ = write!(sql, "{}${i}", if i == 1 { "" } else { ", " });
    }
    let _ = write!(
        sql,
        ")), written AS (INSERT INTO audit_events ({AUDIT_COLUMN_NAMES}) SELECT {AUDIT_COLUMN_NAMES} FROM (VALUES "
    );
    typed_rows(&mut sql, rows, AUDIT_COLUMNS + 2, workspaces, &[2, 15]);
    let _ = write!(
        sql,
        ") AS e ({AUDIT_COLUMN_NAMES}, basis, basis_version) WHERE e.basis IS NULL OR e.basis_version = \
         COALESCE((SELECT v.version FROM versions v WHERE v.workspace_id = e.basis), 0)) \
         SELECT workspace_id, version FROM versions"
    );
    sql
}

/// SQLite: [`insert_if_current`]'s fold for SQLite, which has no writable common table
/// expressions: the events of records decided on a workspace version are written, each only
/// if that version is still current, by one `INSERT ... SELECT` that judges every row against
/// the version table and returns the ids it wrote. One round trip to the connection's thread,
/// where a read of the versions and then an INSERT took two, and nothing can move a version
/// between the judgement and the write. `None` when the rows do not fit one statement.
pub(super) async fn insert_if_current_sqlite(
    conn: &mut AnyConnection,
    rows: &[(&AuditRecord, Option<&Basis>)],
) -> Result<Option<Written>, sqlx::Error> {
    if rows.is_empty() || rows.len() > AUDIT_ROWS_PER_INSERT {
        return Ok(None);
    }
    static SQL: Built = [const { std::sync::OnceLock::new() }; AUDIT_ROWS_PER_INSERT];
    let sql = built(&SQL, rows.len(), insert_if_current_sqlite_sql);
    let mut query = sqlx::query(sql);
    for (event, basis) in rows {
        query = bind_audit(query, event)
            .bind(basis.map(|b| b.workspace_id.as_str()))
            .bind(basis.map(|b| b.version));
    }
    let written = query.fetch_all(&mut *conn).await?;
    if written.len() == rows.len() {
        // The common case: no id read back, no set built.
        return Ok(Some(Written::All));
    }
    Ok(Some(Written::Only(
        written
            .iter()
            .map(|row| row.try_get::<String, _>("id"))
            .collect::<Result<_, _>>()?,
    )))
}

/// What [`insert_if_current_sqlite`] wrote: every row, or only the events with these ids.
pub(super) enum Written {
    All,
    Only(std::collections::HashSet<String>),
}

/// [`insert_if_current_sqlite`]'s statement for `rows` events: per row its [`AUDIT_COLUMNS`]
/// values, its basis workspace and version (a `VALUES` list names its columns `column1`, ...).
fn insert_if_current_sqlite_sql(rows: usize) -> String {
    let per_row = AUDIT_COLUMNS + 2;
    let values: Vec<String> = (1..=AUDIT_COLUMNS).map(|c| format!("column{c}")).collect();
    let mut sql = format!(
        "INSERT INTO audit_events ({AUDIT_COLUMN_NAMES}) SELECT {} FROM (VALUES ",
        values.join(", ")
    );
    anonymous_rows(&mut sql, rows, per_row);
    let (basis, version) = (AUDIT_COLUMNS + 1, AUDIT_COLUMNS + 2);
    let _ = write!(
        sql,
        ") WHERE column{basis} IS NULL OR column{version} = COALESCE((SELECT v.version FROM \
         workspace_versions v WHERE v.workspace_id = column{basis}), 0) RETURNING id"
    );
    sql
}

fn audit_from_row(row: &AnyRow) -> Result<AuditRecord, sqlx::Error> {
    Ok(AuditRecord {
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
        details: Details::Tree(json_value(&row.try_get::<String, _>("details")?)),
    })
}

#[async_trait]
impl AuditStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        // Each of these filters has an index that gives the page's order too (migration 0016).
        // With several, the search reads one index, the first given in this order, and the
        // others are written so that no index serves them (`column || '' = ?`): without
        // statistics (SQLite keeps none unless ANALYZE runs) the planner cannot tell which is
        // rarer, and a guess that walks a common event type to find a rare agent's events
        // reads the whole workspace.
        let mut indexed = false;
        for (column, value) in [
            ("trace_id", &query.trace_id),
            ("agent_id", &query.agent_id),
            ("action", &query.action),
            ("event_type", &query.event_type),
        ] {
            if let Some(value) = value.as_deref() {
                let template = if indexed {
                    format!("{column} || '' = ?")
                } else {
                    format!("{column} = ?")
                };
                f.text(&template, Some(value));
                indexed = true;
            }
        }
        // Not selective (allow, deny or challenge): filtered along the index read.
        f.text("decision = ?", query.decision.as_deref());
        f.text("id = ?", query.event_id.as_deref());
        f.text("policy_id = ?", query.policy_id.as_deref());
        // LIKE patterns with `\` escaping `%`, `_` and itself: the values match literally.
        let like = |text: &str| {
            text.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        };
        f.text(
            "event_type LIKE ? ESCAPE '\\'",
            query
                .event_type_prefix
                .as_deref()
                .map(|p| format!("{}%", like(p)))
                .as_deref(),
        );
        // Details are written by serde_json (compact, keys as given): the set's id appears as
        // `"secret_set_id":"ss_..."` exactly.
        f.text(
            "details LIKE ? ESCAPE '\\'",
            query
                .secret_set_id
                .as_deref()
                .map(|id| format!("%{}%", like(&format!("\"secret_set_id\":\"{id}\""))))
                .as_deref(),
        );
        f.int("created_at >= ?", query.start_ms);
        f.int("created_at < ?", query.end_ms);
        // The cursor as a bound on the index's `created_at` too: the OR of the cursor's clause
        // alone is a filter, and a page deep into the results would read every row before it.
        f.int(
            if query.oldest_first {
                "created_at >= ?"
            } else {
                "created_at <= ?"
            },
            query.after.as_ref().map(|c| c.created_at),
        );
        f.cursor_in(query.after.as_ref(), query.oldest_first);
        let order = if query.oldest_first { "ASC" } else { "DESC" };
        // A trace's few rows are read through its index and sorted: `created_at + 0` keeps
        // SQLite from reading the workspace's events in order instead, to spare the sort.
        let by_time = if query.trace_id.is_some() {
            "created_at + 0"
        } else {
            "created_at"
        };
        let sql = f.sql(
            "SELECT id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id, policy_hash, \
             trace_id, reasons, reason_codes, actor, details FROM audit_events",
            &format!(
                "ORDER BY {by_time} {order}, id {order} LIMIT {}",
                query.limit
            ),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows.iter().map(audit_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn all_sinks(&self) -> Result<Vec<SinkRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SINK_COLUMNS} FROM audit_sinks ORDER BY created_at, id"
        ))
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(sink_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn sinks(&self, workspace_id: &str) -> Result<Vec<SinkRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SINK_COLUMNS} FROM audit_sinks WHERE workspace_id = $1 ORDER BY created_at, id"
        ))
        .bind(workspace_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(sink_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn sink(&self, workspace_id: &str, sink_id: &str) -> Result<SinkRecord, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SINK_COLUMNS} FROM audit_sinks WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(sink_id)
        .fetch_optional(&self.read)
        .await?;
        match row {
            Some(row) => Ok(sink_from_row(&row)?),
            None => Err(StoreError::NotFound),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn sink_lag(
        &self,
        workspace_id: &str,
        cursor: &SinkCursor,
        cap: i64,
    ) -> Result<SinkLag, StoreError> {
        let events: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM audit_events WHERE {AFTER_CURSOR} LIMIT {cap}) AS pending"
        ))
        .bind(workspace_id)
        .bind(cursor.seq)
        .bind(&cursor.id)
        .fetch_one(&self.read)
        .await?;
        let oldest_at: Option<i64> = if events == 0 {
            None
        } else {
            sqlx::query_scalar(&format!(
                "SELECT created_at FROM audit_events WHERE {AFTER_CURSOR} ORDER BY seq, id LIMIT 1"
            ))
            .bind(workspace_id)
            .bind(cursor.seq)
            .bind(&cursor.id)
            .fetch_optional(&self.read)
            .await?
        };
        Ok(SinkLag { events, oldest_at })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn due_sinks(&self, now: i64, owner: &str) -> Result<Vec<SinkRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SINK_COLUMNS} FROM audit_sinks WHERE enabled = 1 AND next_attempt_at <= $1 \
             AND (lease_until < $1 OR lease_owner = $2) ORDER BY next_attempt_at, id"
        ))
        .bind(now)
        .bind(owner)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(sink_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn lease_sink(
        &self,
        sink_id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<Option<SinkRecord>, StoreError> {
        let mut conn = self.write_conn().await?;
        let row = sqlx::query(&format!(
            "UPDATE audit_sinks SET lease_owner = $2, lease_until = $4 \
             WHERE id = $1 AND enabled = 1 AND (lease_until < $3 OR lease_owner = $2) \
             RETURNING {SINK_COLUMNS}"
        ))
        .bind(sink_id)
        .bind(owner)
        .bind(now)
        .bind(until)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(row.as_ref().map(sink_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn release_sink(&self, sink_id: &str, owner: &str) -> Result<(), StoreError> {
        let mut conn = self.write_conn().await?;
        sqlx::query(
            "UPDATE audit_sinks SET lease_owner = NULL, lease_until = 0 WHERE id = $1 AND lease_owner = $2",
        )
        .bind(sink_id)
        .bind(owner)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn events_after(
        &self,
        workspace_id: &str,
        cursor: &SinkCursor,
        limit: i64,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let sql = format!(
            "SELECT seq, id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id, \
             policy_hash, trace_id, reasons, reason_codes, actor, details FROM audit_events \
             WHERE {AFTER_CURSOR}{} ORDER BY seq, id LIMIT {limit}",
            horizon_clause(self.sqlite())
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(cursor.seq)
            .bind(&cursor.id)
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("seq")?, audit_from_row(row)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn record_delivery(
        &self,
        sink_id: &str,
        owner: &str,
        at: i64,
        outcome: &DeliveryOutcome,
    ) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        let done = match outcome {
            DeliveryOutcome::Delivered {
                from,
                cursor,
                events,
            } => {
                sqlx::query(
                    "UPDATE audit_sinks SET cursor_seq = $3, cursor_id = $4, \
                     delivered_events = delivered_events + $5, last_delivered_at = $6, last_attempt_at = $6, \
                     last_error = NULL, failures = 0, next_attempt_at = 0 \
                     WHERE id = $1 AND lease_owner = $2 AND cursor_seq = $7 AND cursor_id = $8",
                )
                .bind(sink_id)
                .bind(owner)
                .bind(cursor.seq)
                .bind(&cursor.id)
                .bind(*events)
                .bind(at)
                .bind(from.seq)
                .bind(&from.id)
                .execute(&mut *conn)
                .await?
            }
            DeliveryOutcome::Failed { error, retry_at } => {
                sqlx::query(
                    "UPDATE audit_sinks SET last_attempt_at = $3, last_error = $4, failures = failures + 1, \
                     next_attempt_at = $5 WHERE id = $1 AND lease_owner = $2",
                )
                .bind(sink_id)
                .bind(owner)
                .bind(at)
                .bind(error)
                .bind(*retry_at)
                .execute(&mut *conn)
                .await?
            }
        };
        Ok(done.rows_affected() == 1)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn retention_settings(&self) -> Result<Vec<(String, Retention)>, StoreError> {
        let rows = sqlx::query(
            "SELECT workspace_id, audit_retention_days, heartbeat_retention_days FROM workspace_settings \
             WHERE audit_retention_days IS NOT NULL OR heartbeat_retention_days IS NOT NULL ORDER BY workspace_id",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("workspace_id")?, retention_from_row(row)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn retention(&self, workspace_id: &str) -> Result<Retention, StoreError> {
        let row = sqlx::query(
            "SELECT audit_retention_days, heartbeat_retention_days FROM workspace_settings WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(row) => retention_from_row(&row)?,
            None => Retention::default(),
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn prune(
        &self,
        what: Pruned,
        workspace_id: &str,
        before: i64,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let sqlite = self.sqlite();
        // The rows to delete, oldest first through the (workspace_id, created_at, id) index.
        // Audit events stay while a sink of the workspace has not delivered them; on SQLite
        // the newest event of the table stays too, so that `seq` never goes back (a rowid is
        // the largest plus one).
        let (table, keep) = match what {
            Pruned::Heartbeats => ("heartbeats", ""),
            Pruned::AuditEvents if sqlite => (
                "audit_events",
                " AND seq < (SELECT MAX(seq) FROM audit_events) \
                 AND seq < COALESCE((SELECT MIN(cursor_seq) FROM audit_sinks WHERE workspace_id = $1), seq + 1)",
            ),
            Pruned::AuditEvents => (
                "audit_events",
                " AND (seq IS NULL OR seq < COALESCE((SELECT MIN(cursor_seq) FROM audit_sinks WHERE workspace_id = $1), seq + 1))",
            ),
        };
        // Postgres finds rows by `ctid` (`= ANY(ARRAY(...))` is read as a TID scan).
        let (row_key, any, close) = if sqlite {
            ("rowid", "IN (", ")")
        } else {
            ("ctid", "= ANY(ARRAY(", "))")
        };
        let sql = format!(
            "DELETE FROM {table} WHERE {row_key} {any}SELECT {row_key} FROM {table} \
             WHERE workspace_id = $1 AND created_at < $2{keep} ORDER BY created_at, id LIMIT $3{close}"
        );
        let mut conn = self.range_write_conn().await?;
        let done = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(before)
            .bind(limit)
            .execute(&mut *conn)
            .await?;
        Ok(done.rows_affected())
    }
}

fn retention_from_row(row: &AnyRow) -> Result<Retention, sqlx::Error> {
    Ok(Retention {
        audit_days: row.try_get("audit_retention_days")?,
        heartbeat_days: row.try_get("heartbeat_retention_days")?,
    })
}

// ---- sinks and retention ---------------------------------------------------------------------

/// Where a new sink starts: the end of the trail now. SQLite: the last event, `(seq, id)`
/// (every later event gets a larger `seq`). Postgres: just below the oldest running
/// transaction, so every event that commits from now on (its creation event included) is after
/// it.
fn sink_start_sql(sqlite: bool) -> &'static str {
    if sqlite {
        "SELECT seq AS start, id AS start_id FROM audit_events ORDER BY seq DESC LIMIT 1"
    } else {
        "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1 AS start, '' AS start_id"
    }
}

const SINK_COLUMNS: &str = "id, workspace_id, name, url, secret_sealed, enabled, created_at, created_by, \
     cursor_seq, cursor_id, delivered_events, last_delivered_at, last_attempt_at, last_error, failures, \
     next_attempt_at";

fn sink_from_row(row: &AnyRow) -> Result<SinkRecord, sqlx::Error> {
    Ok(SinkRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        name: row.try_get("name")?,
        url: row.try_get("url")?,
        secret_sealed: row.try_get("secret_sealed")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        cursor: SinkCursor {
            seq: row.try_get("cursor_seq")?,
            id: row.try_get("cursor_id")?,
        },
        delivered_events: row.try_get("delivered_events")?,
        last_delivered_at: row.try_get("last_delivered_at")?,
        last_attempt_at: row.try_get("last_attempt_at")?,
        last_error: row.try_get("last_error")?,
        failures: row.try_get("failures")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
    })
}

/// Applies a sink or retention operation inside `tx`.
pub(super) async fn apply(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    op: &AuditOp,
) -> Result<Applied, StoreError> {
    let sqlite = tx.backend_name() == <sqlx::Sqlite as sqlx::Database>::NAME;
    match op {
        AuditOp::CreateSink { sink, max } => {
            let count: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM audit_sinks WHERE workspace_id = $1")
                    .bind(&sink.workspace_id)
                    .fetch_one(&mut **tx)
                    .await?;
            if count >= *max {
                return Err(StoreError::Conflict(format!(
                    "a workspace has at most {max} audit sinks"
                )));
            }
            let start: Option<(i64, String)> = sqlx::query_as(sink_start_sql(sqlite))
                .fetch_optional(&mut **tx)
                .await?;
            let (start, start_id) = start.unwrap_or_default();
            sqlx::query(
                "INSERT INTO audit_sinks (id, workspace_id, name, url, secret_sealed, enabled, created_at, created_by, \
                 cursor_seq, cursor_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&sink.id)
            .bind(&sink.workspace_id)
            .bind(&sink.name)
            .bind(&sink.url)
            .bind(&sink.secret_sealed)
            .bind(i64::from(sink.enabled))
            .bind(sink.created_at)
            .bind(&sink.created_by)
            .bind(start)
            .bind(start_id)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
        AuditOp::UpdateSink {
            workspace_id,
            sink_id,
            name,
            url,
            enabled,
        } => {
            // Resuming (or moving) a sink tries it at once: its backoff belonged to the old state.
            let retry_now = enabled == &Some(true) || url.is_some();
            let done = sqlx::query(
                "UPDATE audit_sinks SET name = COALESCE($3, name), url = COALESCE($4, url), \
                 enabled = COALESCE($5, enabled), \
                 failures = CASE WHEN $6 = 1 THEN 0 ELSE failures END, \
                 next_attempt_at = CASE WHEN $6 = 1 THEN 0 ELSE next_attempt_at END \
                 WHERE workspace_id = $1 AND id = $2",
            )
            .bind(workspace_id)
            .bind(sink_id)
            .bind(name.as_deref())
            .bind(url.as_deref())
            .bind(enabled.map(i64::from))
            .bind(i64::from(retry_now))
            .execute(&mut **tx)
            .await?;
            found(done.rows_affected())
        }
        AuditOp::RotateSinkSecret {
            workspace_id,
            sink_id,
            secret_sealed,
        } => {
            let done = sqlx::query(
                "UPDATE audit_sinks SET secret_sealed = $3 WHERE workspace_id = $1 AND id = $2",
            )
            .bind(workspace_id)
            .bind(sink_id)
            .bind(secret_sealed)
            .execute(&mut **tx)
            .await?;
            found(done.rows_affected())
        }
        AuditOp::DeleteSink {
            workspace_id,
            sink_id,
        } => {
            let done = sqlx::query("DELETE FROM audit_sinks WHERE workspace_id = $1 AND id = $2")
                .bind(workspace_id)
                .bind(sink_id)
                .execute(&mut **tx)
                .await?;
            found(done.rows_affected())
        }
        AuditOp::ResealSinkSecret {
            sink_id,
            previous,
            sealed,
        } => {
            let done = sqlx::query(
                "UPDATE audit_sinks SET secret_sealed = $3 WHERE id = $1 AND secret_sealed = $2",
            )
            .bind(sink_id)
            .bind(previous)
            .bind(sealed)
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::Conflict(format!(
                    "the secret of audit sink {sink_id} changed meanwhile, or the sink is gone"
                )));
            }
            Ok(Applied::Done)
        }
        AuditOp::SetRetention {
            workspace_id,
            retention,
            at,
        } => {
            sqlx::query(
                "INSERT INTO workspace_settings (workspace_id, require_member_approval, updated_at, \
                 audit_retention_days, heartbeat_retention_days) VALUES ($1, 1, $2, $3, $4) \
                 ON CONFLICT (workspace_id) DO UPDATE SET updated_at = excluded.updated_at, \
                 audit_retention_days = excluded.audit_retention_days, \
                 heartbeat_retention_days = excluded.heartbeat_retention_days",
            )
            .bind(workspace_id)
            .bind(*at)
            .bind(retention.audit_days)
            .bind(retention.heartbeat_days)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
    }
}

/// The events a sink may read: on Postgres those of transactions below the oldest running one
/// (see migration 0020); on SQLite every committed event.
fn horizon_clause(sqlite: bool) -> &'static str {
    if sqlite {
        ""
    } else {
        " AND seq < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    }
}

/// A workspace's events after a cursor, in `(seq, id)` order: a row comparison, read as a range
/// of the sequence index on both engines.
const AFTER_CURSOR: &str = "workspace_id = $1 AND (seq, id) > ($2, $3)";

impl SqlStore {
    fn sqlite(&self) -> bool {
        self.backend == Backend::Sqlite
    }
}
