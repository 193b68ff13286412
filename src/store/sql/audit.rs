//! SQL of the audit trail: records written together in multi-row `INSERT`s by the change
//! machinery (see `apply.rs`), and read back by audit queries.

use std::collections::HashMap;
use std::fmt::Write as _;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Connection, Row};

use super::{found, json_text, json_value, string_list, Arg, Filters, SqlStore};
use crate::store::*;

/// Columns of one audit row.
const AUDIT_COLUMNS: usize = 14;
/// Their names, in the order every INSERT binds them ([`bind_audit`]).
const AUDIT_COLUMN_NAMES: &str = "id, workspace_id, created_at, event_type, agent_id, action, \
    decision, policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details";
/// Audit rows per INSERT statement when a batch's events are written together (14 × 64 = 896
/// bound values, far below both engines' limits).
pub(super) const AUDIT_ROWS_PER_INSERT: usize = 64;

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
fn audit_insert_sql(rows: usize, sqlite: bool, enclosed: Enclosed) -> &'static str {
    static SQL: std::sync::OnceLock<[Vec<String>; 3]> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        [
            (false, "INSERT INTO"),
            (true, "INSERT INTO"),
            (true, "INSERT OR FAIL INTO"),
        ]
        .map(|(sqlite, verb)| {
            (1..=AUDIT_ROWS_PER_INSERT)
                .map(|rows| audit_values_sql(verb, rows, sqlite))
                .collect()
        })
    });
    let which = match (sqlite, enclosed) {
        (false, _) => 0,
        (true, Enclosed::Alone) => 1,
        (true, Enclosed::InTransaction) => 2,
    };
    all[which]
        .get(rows.saturating_sub(1))
        .map_or("", String::as_str)
}

fn audit_values_sql(verb: &str, rows: usize, sqlite: bool) -> String {
    let mut sql = format!("{verb} audit_events ({AUDIT_COLUMN_NAMES}) VALUES ");
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

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds an event's [`AUDIT_COLUMNS`] values, in the column order of the INSERTs.
fn bind_audit<'q>(query: AnyQuery<'q>, e: &'q AuditRecord) -> AnyQuery<'q> {
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
    let built;
    let sql = if workspaces.len() == 1 {
        // The hot path (one workspace): the statement is built once per row count.
        static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        SQL.get_or_init(|| {
            (1..=AUDIT_ROWS_PER_INSERT)
                .map(|n| insert_if_current_sql(n, 1))
                .collect()
        })
        .get(rows.len() - 1)
        .map_or("", String::as_str)
    } else {
        built = insert_if_current_sql(rows.len(), workspaces.len());
        built.as_str()
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
    const COLUMNS: &str = AUDIT_COLUMN_NAMES;
    let mut sql = String::from(
        "WITH versions AS (SELECT workspace_id, version FROM workspace_versions WHERE workspace_id IN (",
    );
    for i in 1..=workspaces {
        let _ = write!(sql, "{}${i}", if i == 1 { "" } else { ", " });
    }
    let _ = write!(
        sql,
        ")), written AS (INSERT INTO audit_events ({COLUMNS}) SELECT {COLUMNS} FROM (VALUES "
    );
    let per_row = AUDIT_COLUMNS + 2;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..per_row {
            let n = workspaces + row * per_row + column + 1;
            // The first row names the types: a VALUES list takes its column types from it.
            let cast = match (row, column) {
                (0, 2) | (0, 15) => "::bigint",
                (0, _) => "::text",
                _ => "",
            };
            let _ = write!(sql, "{}${n}{cast}", if column == 0 { "" } else { ", " });
        }
        sql.push(')');
    }
    let _ = write!(
        sql,
        ") AS e ({COLUMNS}, basis, basis_version) WHERE e.basis IS NULL OR e.basis_version = \
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
) -> Result<Option<Vec<String>>, sqlx::Error> {
    if rows.is_empty() || rows.len() > AUDIT_ROWS_PER_INSERT {
        return Ok(None);
    }
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let sql = SQL
        .get_or_init(|| {
            (1..=AUDIT_ROWS_PER_INSERT)
                .map(insert_if_current_sqlite_sql)
                .collect()
        })
        .get(rows.len() - 1)
        .map_or("", String::as_str);
    let mut query = sqlx::query(sql);
    for (event, basis) in rows {
        query = bind_audit(query, event)
            .bind(basis.map(|b| b.workspace_id.as_str()))
            .bind(basis.map(|b| b.version));
    }
    let written = query.fetch_all(&mut *conn).await?;
    Ok(Some(
        written
            .iter()
            .map(|row| row.try_get::<String, _>("id"))
            .collect::<Result<_, _>>()?,
    ))
}

/// [`insert_if_current_sqlite`]'s statement for `rows` events: per row its [`AUDIT_COLUMNS`]
/// values, its basis workspace and version (a `VALUES` list names its columns `column1`, ...).
fn insert_if_current_sqlite_sql(rows: usize) -> String {
    const COLUMNS: &str = AUDIT_COLUMN_NAMES;
    let per_row = AUDIT_COLUMNS + 2;
    let values: Vec<String> = (1..=AUDIT_COLUMNS).map(|c| format!("column{c}")).collect();
    let mut sql = format!(
        "INSERT INTO audit_events ({COLUMNS}) SELECT {} FROM (VALUES ",
        values.join(", ")
    );
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        sql.push_str(&vec!["?"; per_row].join(", "));
        sql.push(')');
    }
    let (basis, version) = (AUDIT_COLUMNS + 1, AUDIT_COLUMNS + 2);
    let _ = write!(
        sql,
        ") WHERE column{basis} IS NULL OR column{version} = COALESCE((SELECT v.version FROM \
         workspace_versions v WHERE v.workspace_id = column{basis}), 0) RETURNING id"
    );
    sql
}

/// The audit row's columns as [`audit_from_row`] reads them, taken from the table named by
/// `table` (`"e."`, or `""`).
fn audit_select(table: &str) -> String {
    AUDIT_COLUMN_NAMES
        .split(", ")
        .map(|column| format!("{table}{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The filters of an audit listing. `s` names the table of the searched columns (workspace,
/// time, id, event type, agent, action, trace: the search copy's or the events' own), `e` the
/// table of the others (decision, policy, details).
fn audit_filters(f: &mut Filters, query: &AuditQuery, s: &str, e: &str) {
    f.text(&format!("{s}workspace_id = ?"), Some(&query.workspace_id));
    // Each of these filters has an index that gives the page's order too (on the search copy).
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
                format!("{s}{column} || '' = ?")
            } else {
                format!("{s}{column} = ?")
            };
            f.text(&template, Some(value));
            indexed = true;
        }
    }
    // Not selective (allow, deny or challenge): filtered along the index read.
    f.text(&format!("{e}decision = ?"), query.decision.as_deref());
    f.text(&format!("{s}id = ?"), query.event_id.as_deref());
    f.text(&format!("{e}policy_id = ?"), query.policy_id.as_deref());
    // LIKE patterns with `\` escaping `%`, `_` and itself: the values match literally.
    let like = |text: &str| {
        text.replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_")
    };
    f.text(
        &format!("{s}event_type LIKE ? ESCAPE '\\'"),
        query
            .event_type_prefix
            .as_deref()
            .map(|p| format!("{}%", like(p)))
            .as_deref(),
    );
    // Details are written by serde_json (compact, keys as given): the set's id appears as
    // `"secret_set_id":"ss_..."` exactly.
    f.text(
        &format!("{e}details LIKE ? ESCAPE '\\'"),
        query
            .secret_set_id
            .as_deref()
            .map(|id| format!("%{}%", like(&format!("\"secret_set_id\":\"{id}\""))))
            .as_deref(),
    );
    f.int(&format!("{s}created_at >= ?"), query.start_ms);
    f.int(&format!("{s}created_at < ?"), query.end_ms);
    // The cursor as a bound on the index's `created_at` too: the OR of the cursor's clause
    // alone is a filter, and a page deep into the results would read every row before it.
    if let Some(c) = query.after.as_ref() {
        let (bound, past) = if query.oldest_first {
            (">=", ">")
        } else {
            ("<=", "<")
        };
        f.int(&format!("{s}created_at {bound} ?"), Some(c.created_at));
        f.push(
            &format!("({s}created_at {past} ? OR ({s}created_at = ? AND {s}id {past} ?))"),
            [
                Arg::Int(c.created_at),
                Arg::Int(c.created_at),
                Arg::Text(c.id.clone()),
            ],
        );
    }
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
        let order = if query.oldest_first { "ASC" } else { "DESC" };
        let limit = query.limit;
        let mut f = Filters::new();
        let searched = [
            &query.trace_id,
            &query.agent_id,
            &query.action,
            &query.event_type,
        ]
        .iter()
        .any(|v| v.is_some());
        if !searched {
            // The workspace's own order (written with each event): no copy to consult.
            audit_filters(&mut f, query, "", "");
            let sql = f.sql(
                &format!("SELECT {} FROM audit_events", audit_select("")),
                &format!("ORDER BY created_at {order}, id {order} LIMIT {limit}"),
            );
            let rows = f.fetch(&self.read, &sql).await?;
            return Ok(rows.iter().map(audit_from_row).collect::<Result<_, _>>()?);
        }
        // A searched column: the follower's copy up to its point, through the copy's indexes,
        // and the few events after the point from the table itself (see migration 0032). The
        // point is read first; if the follower moves it meanwhile, the events it moved are
        // found by both halves, and `UNION` keeps each once.
        let (point_seq, point_id) = self.search_point().await?;
        audit_filters(&mut f, query, "s.", "e.");
        let copied = f.take_where();
        audit_filters(&mut f, query, "", "");
        f.push(
            "seq >= ? AND (seq, id) > (?, ?)",
            [
                Arg::Int(point_seq),
                Arg::Int(point_seq),
                Arg::Text(point_id),
            ],
        );
        let recent = f.take_where();
        // A trace's few rows are read through its index and sorted: `created_at + 0` keeps
        // SQLite from reading the workspace's events in order instead, to spare the sort.
        let by_time = if query.trace_id.is_some() {
            "s.created_at + 0"
        } else {
            "s.created_at"
        };
        let sql = format!(
            "SELECT * FROM (SELECT {} FROM audit_search AS s CROSS JOIN audit_events AS e \
             WHERE e.seq = s.seq AND e.id = s.id AND {copied} \
             ORDER BY {by_time} {order}, s.id {order} LIMIT {limit}) AS copied \
             UNION SELECT * FROM (SELECT {} FROM audit_events{} WHERE {recent} \
             ORDER BY created_at {order}, id {order} LIMIT {limit}) AS recent \
             ORDER BY created_at {order}, id {order} LIMIT {limit}",
            audit_select("e."),
            audit_select(""),
            self.by_key()
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows.iter().map(audit_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn search_backlog(&self) -> Result<Option<i64>, StoreError> {
        // Every event past the point, below the Postgres horizon or not: one that a running
        // transaction holds back from the copy counts too.
        let (seq, id) = self.search_point().await?;
        Ok(sqlx::query_scalar(&format!(
            "SELECT created_at FROM audit_events{} WHERE seq >= $1 AND (seq, id) > ($1, $2) \
             ORDER BY seq, id LIMIT 1",
            self.by_key()
        ))
        .bind(seq)
        .bind(&id)
        .fetch_optional(&self.read)
        .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn follow_search(&self, limit: i64) -> Result<u64, StoreError> {
        let sqlite = self.sqlite();
        let mut conn = self.write_conn().await?;
        let mut tx = conn.begin().await?;
        let copy = format!(
            "INSERT INTO audit_search (seq, id, workspace_id, created_at, event_type, agent_id, action, trace_id) \
             SELECT seq, id, workspace_id, created_at, event_type, agent_id, action, trace_id \
             FROM audit_events{} WHERE {{past_point}} ORDER BY seq, id LIMIT {limit} RETURNING seq, id",
            self.by_key()
        );
        let copied = if sqlite {
            // The INSERT is the transaction's first statement, so it takes the write lock
            // before reading the point (another process on the file waits its turn; a read
            // first would make the transaction's snapshot stale the moment another copied).
            sqlx::query(&copy.replace("{past_point}", "seq > (SELECT seq FROM audit_search_point)"))
                .fetch_all(&mut *tx)
                .await?
        } else {
            // One replica at a time, the others waiting on the point's row; only events that no
            // running transaction can precede (as a sink reads them), so the point never passes
            // an event that commits later.
            let point = sqlx::query("SELECT seq, id FROM audit_search_point FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
            let (seq, id): (i64, String) = (point.try_get("seq")?, point.try_get("id")?);
            sqlx::query(&copy.replace(
                "{past_point}",
                &format!(
                    "seq >= $1 AND (seq, id) > ($1, $2){}",
                    horizon_clause(false)
                ),
            ))
            .bind(seq)
            .bind(&id)
            .fetch_all(&mut *tx)
            .await?
        };
        let mut last: Option<(i64, String)> = None;
        for row in &copied {
            let key = (row.try_get("seq")?, row.try_get("id")?);
            if last.as_ref().is_none_or(|l| key > *l) {
                last = Some(key);
            }
        }
        let Some((seq, id)) = last else {
            tx.rollback().await?;
            return Ok(0);
        };
        sqlx::query("UPDATE audit_search_point SET seq = $1, id = $2")
            .bind(seq)
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(copied.len() as u64)
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
        let (from_seq, from_id) = self.recent_from(cursor).await?;
        let pending = self.after_cursor_sql("seq, id, created_at", "", cap);
        let counted: i64 =
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM ({pending}) AS pending"))
                .bind(workspace_id)
                .bind(cursor.seq)
                .bind(&cursor.id)
                .bind(from_seq)
                .bind(&from_id)
                .fetch_one(&self.read)
                .await?;
        let events = counted.min(cap);
        let oldest_at: Option<i64> = if events == 0 {
            None
        } else {
            sqlx::query_scalar(&format!(
                "SELECT created_at FROM ({}) AS pending",
                self.after_cursor_sql("seq, id, created_at", "", 1)
            ))
            .bind(workspace_id)
            .bind(cursor.seq)
            .bind(&cursor.id)
            .bind(from_seq)
            .bind(&from_id)
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
        let (from_seq, from_id) = self.recent_from(cursor).await?;
        let sql = self.after_cursor_sql(
            &format!("seq, {AUDIT_COLUMN_NAMES}"),
            horizon_clause(self.sqlite()),
            limit,
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(cursor.seq)
            .bind(&cursor.id)
            .bind(from_seq)
            .bind(&from_id)
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
        let chosen = format!(
            "FROM {table} WHERE workspace_id = $1 AND created_at < $2{keep} ORDER BY created_at, id LIMIT $3"
        );
        let mut conn = self.write_conn().await?;
        let removed = match what {
            Pruned::Heartbeats => {
                // Postgres finds rows by `ctid` (`= ANY(ARRAY(...))` is read as a TID scan).
                let (row_key, any, close) = if sqlite {
                    ("rowid", "IN (", ")")
                } else {
                    ("ctid", "= ANY(ARRAY(", "))")
                };
                sqlx::query(&format!(
                    "DELETE FROM heartbeats WHERE {row_key} {any}SELECT {row_key} {chosen}{close}"
                ))
                .bind(workspace_id)
                .bind(before)
                .bind(limit)
                .execute(&mut *conn)
                .await?
                .rows_affected()
            }
            // An event and its search copy go together. SQLite: the same choice twice in one
            // transaction (no other writer between them; the copy's key is the event's).
            Pruned::AuditEvents if sqlite => {
                let mut tx = conn.begin().await?;
                sqlx::query(&format!(
                    "DELETE FROM audit_search WHERE seq IN (SELECT seq {chosen})"
                ))
                .bind(workspace_id)
                .bind(before)
                .bind(limit)
                .execute(&mut *tx)
                .await?;
                let removed = sqlx::query(&format!(
                    "DELETE FROM audit_events WHERE seq IN (SELECT seq {chosen})"
                ))
                .bind(workspace_id)
                .bind(before)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                removed
            }
            // Postgres: one statement, the copies of the events it removed removed with them.
            Pruned::AuditEvents => {
                let removed: i64 = sqlx::query_scalar(&format!(
                    "WITH gone AS (DELETE FROM audit_events WHERE ctid = ANY(ARRAY(SELECT ctid {chosen})) \
                     RETURNING seq, id), \
                     copies AS (DELETE FROM audit_search AS s USING gone WHERE s.seq = gone.seq AND s.id = gone.id) \
                     SELECT COUNT(*) FROM gone"
                ))
                .bind(workspace_id)
                .bind(before)
                .bind(limit)
                .fetch_one(&mut *conn)
                .await?;
                u64::try_from(removed).unwrap_or(0)
            }
        };
        Ok(removed)
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

impl SqlStore {
    fn sqlite(&self) -> bool {
        self.backend == Backend::Sqlite
    }

    /// How a search reads the events after the follower's point: on SQLite by the table's own
    /// key (`seq`, the rowid), named so that the planner cannot prefer walking the workspace's
    /// order instead (it keeps no statistics to tell a few recent rows from many); Postgres
    /// plans it with the point's value and its statistics.
    fn by_key(&self) -> &'static str {
        if self.sqlite() {
            " NOT INDEXED"
        } else {
            ""
        }
    }

    /// A workspace's first `limit` events after a sink's cursor (`$1` the workspace, `$2`, `$3`
    /// the cursor), in `(seq, id)` order, with `columns` (of the events' table; `seq` and `id`
    /// among them): those the follower copied, through the copy's sequence index, then those
    /// after `$4`, `$5` ([`Self::recent_from`]: the follower's point, or the cursor when it is
    /// past the point) read from the table, `recent` (a further condition) holding. The second
    /// half names only that one lower bound: given the cursor's too, both planners start the
    /// range at the cursor (a quiet workspace's sink, far behind, would walk every other
    /// workspace's events since). `UNION` keeps an event once if the follower copied it between
    /// the point's read and this.
    fn after_cursor_sql(&self, columns: &str, recent: &str, limit: i64) -> String {
        let copied = columns
            .split(", ")
            .map(|c| format!("e.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT * FROM (SELECT {copied} FROM audit_search AS s CROSS JOIN audit_events AS e \
             WHERE e.seq = s.seq AND e.id = s.id AND s.workspace_id = $1 AND (s.seq, s.id) > ($2, $3) \
             ORDER BY s.seq, s.id LIMIT {limit}) AS copied \
             UNION SELECT * FROM (SELECT {columns} FROM audit_events{} \
             WHERE workspace_id = $1 AND seq >= $4 AND (seq, id) > ($4, $5){recent} \
             ORDER BY seq, id LIMIT {limit}) AS recent \
             ORDER BY seq, id LIMIT {limit}",
            self.by_key()
        )
    }

    /// Where a sink's read of the events after the follower's point starts: the point, or the
    /// sink's cursor if that is further.
    async fn recent_from(&self, cursor: &SinkCursor) -> Result<(i64, String), StoreError> {
        let point = self.search_point().await?;
        let cursor = (cursor.seq, cursor.id.clone());
        Ok(point.max(cursor))
    }

    /// The last event the follower copied into the search table.
    async fn search_point(&self) -> Result<(i64, String), StoreError> {
        let row = sqlx::query("SELECT seq, id FROM audit_search_point")
            .fetch_optional(&self.read)
            .await?;
        Ok(match row {
            Some(row) => (row.try_get("seq")?, row.try_get("id")?),
            // Never without its row (migration 0032); were it gone, every event is after it.
            None => (-1, String::new()),
        })
    }
}
