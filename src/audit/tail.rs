//! Following the audit trail as events are committed (`acp audit tail --follow`, served as
//! server-sent events).
//!
//! Events are ordered by `(created_at, id)`, but an event's time is taken before its batch
//! commits, and replicas' clocks differ: an event can become visible after a later-stamped one.
//! So each poll reads again the window from [`LAG_MS`] before the previous poll began and skips
//! the ids it has already sent (kept for that window). Within one stream every event is sent
//! once. A resumed stream (from a cursor) reads the window before the cursor again, so after a
//! reconnect events of those seconds may arrive twice: each carries its `id` to drop repeats.

use std::collections::HashMap;
use std::sync::Arc;

use crate::store::{AuditQuery, AuditRecord, Cursor, Store, StoreError};
use crate::time::now_ms;

/// How late an event may become visible, measured against its `created_at`.
pub const LAG_MS: i64 = 5_000;

/// Rows read per query; a full page is followed by the next at once.
const PAGE: i64 = 500;

/// One follower of one workspace's trail (with the filters of `filter`).
pub struct Tail {
    store: Arc<dyn Store>,
    filter: AuditQuery,
    /// Events from here on are read at the next poll.
    from: i64,
    /// Ids sent with their time, for the window that is read again.
    seen: HashMap<String, i64>,
}

impl Tail {
    /// Follows events committed from now on, or, with `after` (a cursor this stream issued),
    /// from `LAG_MS` before that event.
    pub fn new(store: Arc<dyn Store>, mut filter: AuditQuery, after: Option<&Cursor>) -> Self {
        filter.oldest_first = true;
        filter.after = None;
        filter.limit = PAGE;
        let from = after.map_or_else(now_ms, |c| c.created_at - LAG_MS);
        let mut seen = HashMap::new();
        if let Some(c) = after {
            seen.insert(c.id.clone(), c.created_at);
        }
        Self {
            store,
            filter,
            from,
            seen,
        }
    }

    /// The events committed since the previous poll (oldest first), each once.
    pub async fn poll(&mut self) -> Result<Vec<AuditRecord>, StoreError> {
        let started = now_ms();
        let mut query = self.filter.clone();
        query.start_ms = Some(self.from.max(self.filter.start_ms.unwrap_or(i64::MIN)));
        let mut fresh = Vec::new();
        loop {
            let rows = self.store.audit_events(&query).await?;
            let full = rows.len() as i64 >= PAGE;
            query.after = rows.last().map(|r| Cursor {
                created_at: r.created_at,
                id: r.id.clone(),
            });
            for row in rows {
                if self.seen.insert(row.id.clone(), row.created_at).is_none() {
                    fresh.push(row);
                }
            }
            if !full {
                break;
            }
        }
        // What the next poll reads: everything committed after this one began, allowing for
        // events stamped up to LAG_MS before they became visible.
        self.from = self.from.max(started - LAG_MS);
        let from = self.from;
        self.seen.retain(|_, at| *at >= from);
        Ok(fresh)
    }

    /// The cursor that resumes after `record`.
    pub fn cursor(record: &AuditRecord) -> String {
        super::encode_cursor(record.created_at, &record.id)
    }
}
