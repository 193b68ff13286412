//! Email: the sends of each agent (reserved, then sent or dropped) that policies count, and
//! the outbox the database mailer delivers to.

use async_trait::async_trait;

use super::{StoreError, Supersedes};

/// Reads of email sends and the outbox.
#[async_trait]
pub trait EmailStore: Send + Sync {
    /// Emails of the agent sent (or reserved) since `minute_ago` and since `day_ago`.
    async fn email_counts(
        &self,
        workspace_id: &str,
        agent_id: &str,
        minute_ago: i64,
        day_ago: i64,
    ) -> Result<(i64, i64), StoreError>;
    /// Newest first.
    async fn outbox(&self, limit: i64) -> Result<Vec<OutboxMessage>, StoreError>;
}

/// Changes to email sends and the outbox.
#[derive(Debug, Clone)]
pub enum EmailOp {
    /// Reserves one email send of an agent, serialised per agent across replicas: `Conflict`
    /// when more emails were sent in the last minute and day than the decision saw (`seen`,
    /// `None` when the decision does not depend on them: then nothing is counted), which the
    /// caller answers by deciding again with the new counts; `AgentNotActive` when the agent
    /// was suspended or revoked meanwhile.
    Reserve {
        id: String,
        workspace_id: String,
        agent_id: String,
        recipients: i64,
        seen: Option<(i64, i64)>,
        at: i64,
    },
    /// Ends a reservation: sent with the provider's message id, or (`None`) not sent, when the
    /// reservation is removed and the email does not count.
    Finish {
        id: String,
        provider: String,
        provider_message_id: Option<String>,
    },
    StoreOutboxMessage(OutboxMessage),
}

impl EmailOp {
    /// See [`super::Op::supersedes`]: nothing here is read by decisions from a cache.
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            EmailOp::Reserve { .. } | EmailOp::Finish { .. } | EmailOp::StoreOutboxMessage(_) => {
                None
            }
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

#[derive(Debug, Clone)]
pub struct OutboxMessage {
    pub id: String,
    pub recipients: Vec<String>,
    pub subject: String,
    pub text_body: Option<String>,
    pub html_body: Option<String>,
    /// Files delivered with the message, in order.
    pub attachments: Vec<OutboxAttachment>,
    pub created_at: i64,
}

/// A file of an outbox message (stored as JSON with the content in base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxAttachment {
    pub filename: String,
    pub content_type: String,
    pub content: Vec<u8>,
}
