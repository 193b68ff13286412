//! What every use case needs at run time: the store for reads, the group-commit writer for
//! changes, and the resolved configuration.

use std::sync::Arc;

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
    pub egress: crate::enforce::egress::Egress,
    /// The audit sinks' outbound HTTPS: the proxy's allow-list and roots, the sinks' timeout.
    pub sink_egress: crate::enforce::egress::Egress,
    /// This process among the replicas (holds audit sink leases): random per start.
    pub instance_id: String,
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
