//! SQL of the audit trail: records written together in multi-row `INSERT`s by the change
//! machinery (see `apply.rs`), and read back by audit queries.

use std::fmt::Write as _;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::{json_text, json_value, string_list, Filters, SqlStore};
use crate::store::*;

/// Columns of one audit row.
const AUDIT_COLUMNS: usize = 14;
/// Audit rows per INSERT statement when a batch's events are written together (14 × 64 = 896
/// bound values, far below both engines' limits).
pub(super) const AUDIT_ROWS_PER_INSERT: usize = 64;

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
pub(super) async fn insert_audits(
    conn: &mut AnyConnection,
    events: &[&AuditRecord],
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
        details: json_value(&row.try_get::<String, _>("details")?),
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
}
