//! SQL of email: the sends each agent reserved or made (counted by policies, serialised per
//! agent by a counter row), and the outbox the database mailer delivers to.

use async_trait::async_trait;
use sqlx::{Any, Row, Transaction};

use super::SqlStore;
use crate::store::*;

/// Applies an email operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &EmailOp,
) -> Result<Applied, StoreError> {
    match op {
        EmailOp::Reserve {
            id,
            workspace_id,
            agent_id,
            recipients,
            seen,
            at,
        } => {
            // The counter row is the per-agent lock: the upsert holds it (Postgres row lock,
            // SQLite write lock) until this transaction ends, so two replicas reserve in turn.
            sqlx::query(
                "INSERT INTO email_counters (workspace_id, agent_id, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (workspace_id, agent_id) DO UPDATE SET updated_at = excluded.updated_at",
            )
            .bind(workspace_id)
            .bind(agent_id)
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            // An agent suspended or revoked on another replica since this one decided.
            let live = sqlx::query(
                "SELECT 1 AS live FROM agents WHERE id = $1 AND workspace_id = $2 AND status NOT IN ('revoked', 'suspended')",
            )
            .bind(agent_id)
            .bind(workspace_id)
            .fetch_optional(&mut **tx)
            .await?;
            if live.is_none() {
                return Err(StoreError::AgentNotActive);
            }
            if let Some((seen_minute, seen_day)) = *seen {
                let (minute, day) = count_emails(
                    &mut **tx,
                    workspace_id,
                    agent_id,
                    *at - 60_000,
                    *at - 86_400_000,
                )
                .await?;
                // Fewer sends than the decision saw (some aged out) cannot turn an allow around.
                if minute > seen_minute || day > seen_day {
                    return Err(StoreError::Conflict(
                        "another email of the agent was sent meanwhile".into(),
                    ));
                }
            }
            sqlx::query(
                "INSERT INTO email_sends (id, workspace_id, agent_id, sent_at, status, recipients) \
                 VALUES ($1, $2, $3, $4, 'reserved', $5)",
            )
            .bind(id)
            .bind(workspace_id)
            .bind(agent_id)
            .bind(*at)
            .bind(*recipients)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
        EmailOp::Finish {
            id,
            provider,
            provider_message_id,
        } => {
            match provider_message_id {
                Some(message_id) => {
                    sqlx::query(
                        "UPDATE email_sends SET status = 'sent', provider = $1, provider_message_id = $2 WHERE id = $3",
                    )
                    .bind(provider)
                    .bind(message_id)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                }
                None => {
                    sqlx::query("DELETE FROM email_sends WHERE id = $1")
                        .bind(id)
                        .execute(&mut **tx)
                        .await?;
                }
            }
            Ok(Applied::Done)
        }
        EmailOp::StoreOutboxMessage(m) => {
            sqlx::query(
                "INSERT INTO outbox_messages (id, recipients, subject, text_body, html_body, attachments, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&m.id)
            .bind(serde_json::to_string(&m.recipients).unwrap_or_else(|_| "[]".into()))
            .bind(&m.subject)
            .bind(m.text_body.clone())
            .bind(m.html_body.clone())
            .bind(attachments_json(&m.attachments))
            .bind(m.created_at)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
    }
}

async fn count_emails<'e, E>(
    executor: E,
    workspace_id: &str,
    agent_id: &str,
    minute_ago: i64,
    day_ago: i64,
) -> Result<(i64, i64), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = Any>,
{
    let row = sqlx::query(
        "SELECT COALESCE(SUM(CASE WHEN sent_at > $1 THEN 1 ELSE 0 END), 0) AS minute, COUNT(*) AS day \
         FROM email_sends WHERE workspace_id = $2 AND agent_id = $3 AND sent_at > $4",
    )
    .bind(minute_ago)
    .bind(workspace_id)
    .bind(agent_id)
    .bind(day_ago)
    .fetch_one(executor)
    .await?;
    Ok((row.try_get("minute")?, row.try_get("day")?))
}

/// `[{filename, content_type, content}]`, the content in standard base64.
fn attachments_json(attachments: &[OutboxAttachment]) -> String {
    use base64::Engine as _;
    serde_json::Value::Array(
        attachments
            .iter()
            .map(|a| {
                serde_json::json!({
                    "filename": a.filename,
                    "content_type": a.content_type,
                    "content": base64::engine::general_purpose::STANDARD.encode(&a.content),
                })
            })
            .collect(),
    )
    .to_string()
}

fn attachments_from_json(text: &str) -> Result<Vec<OutboxAttachment>, sqlx::Error> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct Stored {
        filename: String,
        content_type: String,
        content: String,
    }
    let corrupt = |e: String| sqlx::Error::Decode(format!("outbox attachments: {e}").into());
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    stored
        .into_iter()
        .map(|s| {
            Ok(OutboxAttachment {
                content: base64::engine::general_purpose::STANDARD
                    .decode(s.content)
                    .map_err(|e| corrupt(e.to_string()))?,
                filename: s.filename,
                content_type: s.content_type,
            })
        })
        .collect()
}

#[async_trait]
impl EmailStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn email_counts(
        &self,
        workspace_id: &str,
        agent_id: &str,
        minute_ago: i64,
        day_ago: i64,
    ) -> Result<(i64, i64), StoreError> {
        Ok(count_emails(&self.read, workspace_id, agent_id, minute_ago, day_ago).await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn outbox(&self, limit: i64) -> Result<Vec<OutboxMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, recipients, subject, text_body, html_body, attachments, created_at FROM outbox_messages \
             ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(OutboxMessage {
                    id: row.try_get("id")?,
                    recipients: serde_json::from_str(&row.try_get::<String, _>("recipients")?)
                        .unwrap_or_default(),
                    subject: row.try_get("subject")?,
                    text_body: row.try_get("text_body")?,
                    html_body: row.try_get("html_body")?,
                    attachments: attachments_from_json(&row.try_get::<String, _>("attachments")?)?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }
}
