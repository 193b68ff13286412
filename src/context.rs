//! What every use case needs at run time: the store for reads, the group-commit writer for
//! changes, and the resolved configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Config;
use crate::mail::Mailer;
use crate::policy::cache::Caches;
use crate::store::{GroupCommit, Store};

pub struct Context {
    pub store: Arc<dyn Store>,
    pub writer: GroupCommit,
    pub config: Config,
    /// The configured email provider.
    pub mailer: Arc<dyn Mailer>,
    /// Hot-path caches (keys, agents, compiled policies).
    pub caches: Caches,
    /// Wakes the change poller at once (after a local write others must see, or a NOTIFY).
    pub changes: tokio::sync::Notify,
    /// Base URL for links (`ACP_PUBLIC_URL`, else the address the server listens on).
    pub public_url: String,
    /// Encrypts the JWT signing keys at rest.
    pub master_key: crate::secret::MasterKey,
    /// Turns true when the server starts shutting down (long-lived streams end).
    pub closing: tokio::sync::watch::Sender<bool>,
    /// The vault proxy's outbound HTTPS, with its operator allow-list and pooled clients.
    pub egress: crate::net::egress::Egress,
    /// The audit sinks' outbound HTTPS: the proxy's allow-list and roots, the sinks' timeout.
    pub sink_egress: crate::net::egress::Egress,
    /// This process among the replicas (holds audit sink leases): random per start.
    pub instance_id: String,
    /// The live streams (`GET /v1/workspace/audit/stream`, `GET /mcp/{name}`), counted against
    /// their caps: each holds a connection for as long as it lasts.
    pub streams: StreamSlots,
    /// Work a request hands off so that its answer does not wait (the approvers' mail of a
    /// challenge): waited for at shutdown, after the last request, so none of it is lost.
    pub background: tokio_util::task::TaskTracker,
    /// The MCP gateway's opened upstream credentials, kept briefly.
    pub mcp_materials: crate::net::egress::InjectedCache,
}

pub type SharedContext = Arc<Context>;

impl Context {
    /// After a write other replicas cache: evict here (done by the caller) and tell them.
    pub async fn announce_change(&self) {
        if let Err(err) = self.store.notify_changes().await {
            tracing::warn!(error = %err, "change notification failed; other replicas will poll");
        }
    }

    /// Forgets a cached agent here and tells other replicas.
    pub async fn agent_changed(&self, agent_id: &str) {
        self.caches.forget_agent(agent_id);
        self.announce_change().await;
    }
}

/// Live audit streams, counted per principal and in all. A stream holds a connection (a file
/// descriptor) for as long as it lasts, so without a cap a few callers could hold every
/// descriptor the process may open and leave none for the API: each principal (an API key, a
/// personal access token, a person's sessions) may hold `per_principal` streams, and the server
/// `max` in all (derived from the process's descriptor limit, see [`crate::config`]).
pub struct StreamSlots {
    per_principal: usize,
    max: usize,
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_principal: HashMap<String, usize>,
}

/// A refused stream: the cap it would have gone past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamsFull {
    /// The principal holds `limit` streams already.
    Principal { limit: usize },
    /// The server holds `limit` streams already.
    Server { limit: usize },
}

/// One live stream's place; given back when dropped (the stream ended, or its client left).
pub struct StreamSlot {
    principal: String,
    held: Arc<Mutex<Held>>,
}

impl StreamSlots {
    pub fn new(per_principal: usize, max: usize) -> StreamSlots {
        StreamSlots {
            per_principal,
            max,
            held: Arc::default(),
        }
    }

    /// The most streams the server holds at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for one more stream of `principal`, if both caps allow it.
    pub fn acquire(&self, principal: String) -> Result<StreamSlot, StreamsFull> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.total >= self.max {
            crate::observe::audit_stream_refused("server");
            return Err(StreamsFull::Server { limit: self.max });
        }
        let mine = held.by_principal.entry(principal.clone()).or_insert(0);
        if *mine >= self.per_principal {
            crate::observe::audit_stream_refused("principal");
            return Err(StreamsFull::Principal {
                limit: self.per_principal,
            });
        }
        *mine += 1;
        held.total += 1;
        crate::observe::audit_streams_open(held.total);
        Ok(StreamSlot {
            principal,
            held: self.held.clone(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(1);
        if let Some(mine) = held.by_principal.get_mut(&self.principal) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                held.by_principal.remove(&self.principal);
            }
        }
        crate::observe::audit_streams_open(held.total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_slots_are_capped_per_principal_and_in_all_and_given_back() {
        let slots = StreamSlots::new(2, 3);
        let a1 = slots.acquire("a".into()).unwrap();
        let _a2 = slots.acquire("a".into()).unwrap();
        assert_eq!(
            slots.acquire("a".into()).err(),
            Some(StreamsFull::Principal { limit: 2 })
        );
        let _b1 = slots.acquire("b".into()).unwrap();
        assert_eq!(
            slots.acquire("c".into()).err(),
            Some(StreamsFull::Server { limit: 3 })
        );
        drop(a1);
        let _c1 = slots.acquire("c".into()).unwrap();
        assert!(slots.acquire("a".into()).is_err());
        let held = slots.held.lock().unwrap();
        assert_eq!(held.total, 3);
        assert_eq!(held.by_principal.get("a"), Some(&1));
    }
}
