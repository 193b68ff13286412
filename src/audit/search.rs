//! The audit search follower. An audit insert on the request path writes the event and the
//! workspace's order only; the columns the console and the sinks search by (trace, agent,
//! action, event type, and the sinks' commit order) are copied into a search table, with its
//! indexes, by this task, a few milliseconds behind the commits and many events per
//! transaction. A search reads the copy up to the follower's point and the events after it
//! from the table itself, so a search never misses a committed event while the follower
//! catches up. Every replica runs one; on Postgres one at a time copies.

use std::time::Duration;

use crate::context::SharedContext;
use crate::time::now_ms;

/// How often the follower looks for new events.
pub const EVERY: Duration = Duration::from_millis(50);
/// Events copied per transaction: small enough that the request path's commits, which share
/// SQLite's one writer, wait at most a millisecond or two behind one.
pub const CHUNK: i64 = 256;

/// Runs until the server closes.
pub async fn run(ctx: SharedContext) {
    let mut closing = ctx.closing.subscribe();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = closing.changed() => {}
        }
        if *closing.borrow() {
            return;
        }
        // Looked for on a reader first: an idle follower takes no write lock.
        let oldest = match ctx.store.search_backlog().await {
            Ok(oldest) => oldest,
            Err(err) => {
                tracing::warn!(error = %err, "audit search: reading the events to copy failed; will retry");
                continue;
            }
        };
        crate::observe::audit_search_lag(oldest.map_or(0.0, |at| {
            Duration::from_millis(u64::try_from(now_ms() - at).unwrap_or(0)).as_secs_f64()
        }));
        if oldest.is_none() {
            continue;
        }
        // Chunk after chunk while they come full, letting the request path's commits between.
        loop {
            match ctx.store.follow_search(CHUNK).await {
                Ok(copied) if copied >= CHUNK.unsigned_abs() && !*closing.borrow() => {
                    tokio::task::yield_now().await;
                }
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "audit search: copying new events failed; will retry");
                    break;
                }
            }
        }
    }
}
