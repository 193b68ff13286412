//! Delivers each workspace's audit trail to its sinks: signed NDJSON batches POSTed in commit
//! order from the sink's durable cursor, at least once.
//!
//! Every replica runs [`run`]. A sink is delivered by one replica at a time, the holder of its
//! lease (taken and renewed before each batch, given up after each turn), so batches go out in
//! order. The cursor moves only when the receiver answered 2xx, and only while the lease is
//! held: a batch is sent again after a failure, a timeout, a restart or a replica's death, and
//! the receiver drops repeats by `event_id`. A failing sink is tried again after a backoff
//! that doubles from one second up to `audit_sink_backoff_max_secs`.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::Rng;
use serde::Serialize;
use sha2::Sha256;

use crate::api;
use crate::context::{Context, SharedContext};
use crate::net::egress::{EgressError, Outbound};
use crate::secret::{random_base62, sha256_hex};
use crate::store::{DeliveryOutcome, SinkCursor, SinkRecord};
use crate::time::now_ms;

use super::to_wire;

/// How often each replica looks for sinks with events to deliver.
const POLL: Duration = Duration::from_secs(1);
/// Pending events are counted up to this many (the API's `lag_events`, the lag gauge).
pub const LAG_COUNT_CAP: i64 = 100_000;
/// Events per batch at most.
pub const BATCH_EVENTS: i64 = 500;
/// A batch's body stops growing past this many bytes (it holds at least one event).
const BATCH_BYTES: usize = 1024 * 1024;
/// Batches one sink gets per turn, so that one busy sink does not starve the others.
const BATCHES_PER_TURN: usize = 20;
/// Sinks delivered at once by one replica.
const CONCURRENT_SINKS: usize = 4;
/// The first wait after a failure; it doubles with each failure in a row.
const BACKOFF_BASE_MS: i64 = 1_000;

/// The signature headers of a batch (documented in docs/operations.md).
pub const SIGNATURE_HEADER: &str = "X-Service-Signature";
pub const TIMESTAMP_HEADER: &str = "X-Service-Timestamp";
pub const NONCE_HEADER: &str = "X-Service-Nonce";
pub const SINK_HEADER: &str = "X-Service-Sink-Id";

/// What a sink's `last_error` and a refused URL say of a destination the sinks may not reach:
/// never the address a name resolved to, which would tell every member of the workspace where
/// an internal name points.
pub const DESTINATION_NOT_ALLOWED: &str = "destination not allowed";

/// The sealing context of one sink's secret (a sealed value opens only for its own purpose).
pub fn secret_context(sink_id: &str) -> String {
    format!("audit-sink-secret:{sink_id}")
}

/// One NDJSON line: the event as the audit API shows it, with its workspace.
#[derive(Serialize)]
struct Line<'a> {
    workspace_id: &'a str,
    #[serde(flatten)]
    event: api::AuditEvent,
}

/// `base64(HMAC-SHA256(secret, "{timestamp}\n{nonce}\n{hex(sha256(body))}"))`: the feedback
/// signature's message, keyed with the sink's secret as given.
pub fn signature(secret: &str, timestamp: &str, nonce: &str, body: &[u8]) -> String {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(format!("{timestamp}\n{nonce}\n{}", sha256_hex(body)).as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// The wait before attempt `failures + 1`, with a fifth of jitter either way.
fn backoff_ms(failures: i64, max_ms: i64) -> i64 {
    let exp = failures.clamp(1, 30) - 1;
    let base = BACKOFF_BASE_MS.saturating_mul(1_i64 << exp).min(max_ms);
    let jitter = base / 5;
    (base + rand::thread_rng().gen_range(-jitter..=jitter)).max(1)
}

/// How often each replica refreshes the sinks' lag in the metrics, in polls.
const LAG_REFRESH_POLLS: u64 = 15;

/// Runs until the server closes.
pub async fn run(ctx: SharedContext) {
    let mut closing = ctx.closing.subscribe();
    let mut polls: u64 = 0;
    let mut known = std::collections::HashSet::new();
    loop {
        if polls.is_multiple_of(LAG_REFRESH_POLLS) {
            known = refresh_lag(&ctx, known).await;
        }
        polls += 1;
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = closing.changed() => {}
        }
        if *closing.borrow() {
            return;
        }
        let due = match ctx.store.due_sinks(now_ms(), &ctx.instance_id).await {
            Ok(due) => due,
            Err(err) => {
                tracing::warn!(error = %err, "audit sinks: reading the sinks failed; will retry");
                continue;
            }
        };
        use futures::StreamExt;
        futures::stream::iter(due)
            .for_each_concurrent(CONCURRENT_SINKS, |sink| {
                let ctx = ctx.clone();
                async move { turn(&ctx, sink).await }
            })
            .await;
    }
}

/// Sets every sink's lag gauges (and zero for those gone since the last refresh); answers the
/// sinks seen.
async fn refresh_lag(
    ctx: &Context,
    before: std::collections::HashSet<String>,
) -> std::collections::HashSet<String> {
    let sinks = match ctx.store.all_sinks().await {
        Ok(sinks) => sinks,
        Err(err) => {
            tracing::warn!(error = %err, "audit sinks: reading the sinks for their lag failed");
            return before;
        }
    };
    let now = now_ms();
    let mut seen = std::collections::HashSet::new();
    let mut lags = Vec::with_capacity(sinks.len());
    for sink in sinks {
        match ctx
            .store
            .sink_lag(&sink.workspace_id, &sink.cursor, LAG_COUNT_CAP)
            .await
        {
            Ok(lag) => lags.push((sink.id.clone(), lag.events, lag.seconds(now), sink.failures)),
            Err(err) => {
                tracing::warn!(error = %err, sink = %sink.id, "audit sinks: reading a lag failed")
            }
        }
        seen.insert(sink.id);
    }
    crate::observe::sink_lags(
        lags.iter()
            .map(|(id, events, seconds, failures)| (id.as_str(), *events, *seconds, *failures)),
    );
    for gone in before.difference(&seen) {
        crate::observe::sink_gone(gone);
    }
    seen
}

/// One sink's turn: batches until it is caught up, fails, or has had its share.
async fn turn(ctx: &Context, sink: SinkRecord) {
    let timeout_ms = i64::try_from(ctx.config.audit_sink_timeout_secs).unwrap_or(300) * 1000;
    let lease_ms = 2 * timeout_ms + 5_000;
    let owner = ctx.instance_id.as_str();
    // A caught-up sink costs one read a second, no write (the lease is taken only to send).
    match ctx
        .store
        .events_after(&sink.workspace_id, &sink.cursor, 1)
        .await
    {
        Ok(next) if next.is_empty() => return,
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(error = %err, sink = %sink.id, "audit sink: reading the events failed");
            return;
        }
    }
    for _ in 0..BATCHES_PER_TURN {
        let now = now_ms();
        // Each batch starts from the sink as it is now: another replica may have moved its
        // cursor, a person its URL or secret, since it was listed.
        let current = match ctx
            .store
            .lease_sink(&sink.id, owner, now, now + lease_ms)
            .await
        {
            Ok(Some(current)) => current,
            // Paused, deleted, or another replica's now: what this one held is given up below.
            Ok(None) => break,
            Err(err) => {
                tracing::warn!(error = %err, sink = %sink.id, "audit sink: taking the lease failed");
                break;
            }
        };
        match batch(ctx, &current).await {
            Ok(Some(sent)) => {
                let full = sent.events >= BATCH_EVENTS || sent.capped;
                crate::observe::sink_delivery("delivered", u64::try_from(sent.events).unwrap_or(0));
                let outcome = DeliveryOutcome::Delivered {
                    from: current.cursor.clone(),
                    cursor: sent.cursor,
                    events: sent.events,
                };
                if !record(ctx, &current, owner, &outcome).await || !full {
                    break;
                }
            }
            Ok(None) => break,
            Err(error) => {
                let max_ms =
                    i64::try_from(ctx.config.audit_sink_backoff_max_secs).unwrap_or(86_400) * 1000;
                let retry_at = now_ms() + backoff_ms(current.failures + 1, max_ms);
                crate::observe::sink_delivery("failed", 0);
                tracing::warn!(sink = %current.id, workspace = %current.workspace_id, %error, "audit sink: delivery failed; will retry");
                record(
                    ctx,
                    &current,
                    owner,
                    &DeliveryOutcome::Failed { error, retry_at },
                )
                .await;
                break;
            }
        }
    }
    if let Err(err) = ctx.store.release_sink(&sink.id, owner).await {
        tracing::warn!(error = %err, sink = %sink.id, "audit sink: giving the lease up failed");
    }
}

/// Records an attempt; `false` when the lease was lost meanwhile (or the write failed).
async fn record(ctx: &Context, sink: &SinkRecord, owner: &str, outcome: &DeliveryOutcome) -> bool {
    match ctx
        .store
        .record_delivery(&sink.id, owner, now_ms(), outcome)
        .await
    {
        Ok(held) => held,
        Err(err) => {
            tracing::warn!(error = %err, sink = %sink.id, "audit sink: recording the attempt failed");
            false
        }
    }
}

struct Sent {
    cursor: SinkCursor,
    events: i64,
    /// The body reached its byte cap before the batch's last event.
    capped: bool,
}

/// Sends the sink's next batch after its cursor: `None` when there is nothing to send, `Err` with a
/// short reason (never the answer's body) when the receiver did not take it.
async fn batch(ctx: &Context, sink: &SinkRecord) -> Result<Option<Sent>, String> {
    let events = ctx
        .store
        .events_after(&sink.workspace_id, &sink.cursor, BATCH_EVENTS)
        .await
        .map_err(|e| format!("reading the events failed: {e}"))?;
    let total = events.len();
    let mut body = Vec::new();
    let mut last = None;
    let mut count = 0_i64;
    for (seq, record) in events {
        if !body.is_empty() && body.len() >= BATCH_BYTES {
            break;
        }
        let id = record.id.clone();
        let line = Line {
            workspace_id: &sink.workspace_id,
            event: to_wire(record),
        };
        serde_json::to_writer(&mut body, &line)
            .map_err(|e| format!("encoding an event failed: {e}"))?;
        body.push(b'\n');
        last = Some(SinkCursor { seq, id });
        count += 1;
    }
    let Some(last) = last else {
        return Ok(None);
    };
    let secret = ctx
        .master_key
        .open(&sink.secret_sealed, &secret_context(&sink.id))
        .map_err(|_| "the sink's secret does not open with the master key".to_owned())?;
    let secret =
        String::from_utf8(secret).map_err(|_| "the sink's secret is not text".to_owned())?;
    let timestamp = now_ms().to_string();
    let nonce = random_base62(24);
    let headers = vec![
        ("content-type".to_owned(), "application/x-ndjson".to_owned()),
        (
            "user-agent".to_owned(),
            concat!("acp-audit-sink/", env!("CARGO_PKG_VERSION")).to_owned(),
        ),
        (SINK_HEADER.to_owned(), sink.id.clone()),
        (TIMESTAMP_HEADER.to_owned(), timestamp.clone()),
        (NONCE_HEADER.to_owned(), nonce.clone()),
        (
            SIGNATURE_HEADER.to_owned(),
            signature(&secret, &timestamp, &nonce, &body),
        ),
    ];
    let out = Outbound::post_https(&sink.url, headers, body).map_err(|e| e.to_string())?;
    let answer = ctx.sink_egress.send(out).await.map_err(|e| match e {
        // Every member reads `last_error`: the address a name resolved to stays unsaid.
        EgressError::DestinationNotAllowed(_) => DESTINATION_NOT_ALLOWED.to_owned(),
        other => other.to_string(),
    })?;
    if !(200..300).contains(&answer.status) {
        return Err(format!("the receiver answered HTTP {}", answer.status));
    }
    Ok(Some(Sent {
        cursor: last,
        events: count,
        capped: (count as usize) < total,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        for (failures, base) in [
            (1, 1_000),
            (2, 2_000),
            (3, 4_000),
            (10, 300_000),
            (60, 300_000),
        ] {
            let wait = backoff_ms(failures, 300_000);
            assert!(
                wait >= base * 4 / 5 && wait <= base * 6 / 5,
                "{failures}: {wait}"
            );
        }
    }

    #[test]
    fn signatures_cover_time_nonce_and_body() {
        let sig = signature("whsec_x", "1700000000000", "n1", b"{}\n");
        assert_eq!(STANDARD.decode(&sig).unwrap().len(), 32);
        assert_ne!(sig, signature("whsec_x", "1700000000001", "n1", b"{}\n"));
        assert_ne!(sig, signature("whsec_x", "1700000000000", "n2", b"{}\n"));
        assert_ne!(
            sig,
            signature("whsec_x", "1700000000000", "n1", b"{}\n{}\n")
        );
        assert_ne!(sig, signature("whsec_y", "1700000000000", "n1", b"{}\n"));
    }
}
