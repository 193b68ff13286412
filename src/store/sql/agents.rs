//! SQL of agents and their identity: agents, attestation challenges, claim codes.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{
    changed_rows, is_unique_violation, json_text, json_value, Arg, Backend, Filters, SqlStore,
};
use crate::domain::agent::metadata_pairs;
use crate::domain::{AgentStatus, RiskTier};
use crate::store::*;

pub(super) const AGENT_COLUMNS: &str =
    "id, workspace_id, name, public_key, key_type, metadata, status, risk_tier, \
     created_at, updated_at, attested_at, last_seen_at";

pub(super) fn agent_from_row(row: &AnyRow) -> Result<AgentRecord, sqlx::Error> {
    let status: String = row.try_get("status")?;
    let risk_tier: String = row.try_get("risk_tier")?;
    Ok(AgentRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        name: row.try_get("name")?,
        public_key: row.try_get("public_key")?,
        key_type: row.try_get("key_type")?,
        metadata: json_value(&row.try_get::<String, _>("metadata")?),
        status: AgentStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("agent status `{status}`").into()))?,
        risk_tier: RiskTier::parse(&risk_tier)
            .ok_or_else(|| sqlx::Error::Decode(format!("risk tier `{risk_tier}`").into()))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        attested_at: row.try_get("attested_at")?,
        last_seen_at: row.try_get("last_seen_at")?,
    })
}

/// The agent as the transaction sees it.
async fn select_agent(
    tx: &mut Transaction<'_, Any>,
    id: &str,
) -> Result<Option<AgentRecord>, sqlx::Error> {
    let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1");
    sqlx::query(&sql)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| agent_from_row(&row))
        .transpose()
}

async fn insert_challenge(
    tx: &mut Transaction<'_, Any>,
    c: &ChallengeRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO attestation_challenges (id, agent_id, challenge, created_at, expires_at, used_at, name, metadata) \
         VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
    )
    .bind(&c.id)
    .bind(&c.agent_id)
    .bind(&c.challenge)
    .bind(c.created_at)
    .bind(c.expires_at)
    .bind(c.name.clone())
    .bind(c.metadata.as_ref().map(json_text))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks a claim code used; `Conflict` when it was used or expired.
async fn redeem_claim_code(
    tx: &mut Transaction<'_, Any>,
    code_hash: &str,
    at: i64,
) -> Result<(), StoreError> {
    let used = sqlx::query(
        "UPDATE agent_claim_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1",
    )
    .bind(at)
    .bind(code_hash)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    changed_rows(used, || {
        StoreError::Conflict("the claim code was used or expired".into())
    })?;
    Ok(())
}

/// Replaces the agent's metadata pairs (migration 0019) with those of `metadata`.
async fn write_metadata_pairs(
    tx: &mut Transaction<'_, Any>,
    agent_id: &str,
    metadata: &serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM agent_metadata_pairs WHERE agent_id = $1")
        .bind(agent_id)
        .execute(&mut **tx)
        .await?;
    for (key, value) in metadata_pairs(metadata) {
        sqlx::query("INSERT INTO agent_metadata_pairs (agent_id, key, value) VALUES ($1, $2, $3)")
            .bind(agent_id)
            .bind(key)
            .bind(value)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Applies an agent operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &AgentOp,
) -> Result<Applied, StoreError> {
    match op {
        AgentOp::Register { agent, challenge } => {
            let inserted = sqlx::query(
                "INSERT INTO agents (id, workspace_id, name, public_key, key_type, metadata, status, risk_tier, \
                 created_at, updated_at, attested_at, last_seen_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL)",
            )
            .bind(&agent.id)
            .bind(agent.workspace_id.clone())
            .bind(&agent.name)
            .bind(&agent.public_key)
            .bind(&agent.key_type)
            .bind(json_text(&agent.metadata))
            .bind(agent.status.as_str())
            .bind(agent.risk_tier.as_str())
            .bind(agent.created_at)
            .bind(agent.updated_at)
            .execute(&mut **tx)
            .await;
            match inserted {
                Err(e) if is_unique_violation(&e) => {
                    return Err(StoreError::Conflict(
                        "an agent with this public key was registered at the same moment; retry to get its challenge".into(),
                    ))
                }
                other => other?,
            };
            write_metadata_pairs(tx, &agent.id, &agent.metadata).await?;
            insert_challenge(tx, challenge).await?;
            Ok(Applied::Done)
        }
        AgentOp::IssueChallenge(challenge) => {
            insert_challenge(tx, challenge).await?;
            Ok(Applied::Done)
        }
        AgentOp::Attest {
            challenge_id,
            agent_id,
            at,
        } => {
            let used = sqlx::query(
                "UPDATE attestation_challenges SET used_at = $1 \
                 WHERE id = $2 AND agent_id = $3 AND used_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(challenge_id)
            .bind(agent_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(used, || StoreError::ChallengeUsed)?;
            // Proof of possession: the name and metadata proposed with this challenge apply now.
            let updated = sqlx::query(
                "UPDATE agents SET status = CASE WHEN status = 'pending' THEN 'active' ELSE status END, \
                 attested_at = $1, updated_at = $1, \
                 name = COALESCE((SELECT c.name FROM attestation_challenges c WHERE c.id = $3), name), \
                 metadata = COALESCE((SELECT c.metadata FROM attestation_challenges c WHERE c.id = $3), metadata) \
                 WHERE id = $2 AND status <> 'revoked'",
            )
            .bind(*at)
            .bind(agent_id)
            .bind(challenge_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(updated, || {
                StoreError::Conflict("the agent was revoked".into())
            })?;
            let agent = select_agent(tx, agent_id)
                .await?
                .ok_or(StoreError::UnknownAgent)?;
            write_metadata_pairs(tx, &agent.id, &agent.metadata).await?;
            Ok(Applied::Agent(Box::new(agent)))
        }
        AgentOp::CreateClaimCode(code) => {
            let created = sqlx::query(
                "INSERT INTO agent_claim_codes (code_hash, agent_id, created_at, expires_at, used_at) \
                 SELECT $1, $2, $3, $4, NULL WHERE EXISTS (SELECT 1 FROM agents WHERE id = $2 AND workspace_id IS NULL)",
            )
            .bind(&code.code_hash)
            .bind(&code.agent_id)
            .bind(code.created_at)
            .bind(code.expires_at)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(created, || {
                StoreError::Conflict("the agent was claimed meanwhile".into())
            })?;
            Ok(Applied::Done)
        }
        AgentOp::Claim {
            code_hash,
            agent_id,
            workspace_id,
            at,
        } => {
            redeem_claim_code(tx, code_hash, *at).await?;
            let moved = sqlx::query(
                "UPDATE agents SET workspace_id = $1, updated_at = $2 WHERE id = $3 AND workspace_id IS NULL",
            )
            .bind(workspace_id)
            .bind(*at)
            .bind(agent_id)
            .execute(&mut **tx)
            .await;
            match moved {
                Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict(
                    "this workspace already has an agent with the same public key".into(),
                )),
                Err(e) => Err(e.into()),
                Ok(done) if done.rows_affected() == 0 => Err(StoreError::Conflict(
                    "the agent was claimed meanwhile".into(),
                )),
                Ok(_) => {
                    let agent = select_agent(tx, agent_id)
                        .await?
                        .ok_or(StoreError::UnknownAgent)?;
                    Ok(Applied::Agent(Box::new(agent)))
                }
            }
        }
        AgentOp::RejectClaim { code_hash, at } => {
            redeem_claim_code(tx, code_hash, *at).await?;
            Ok(Applied::Done)
        }
        AgentOp::SetStatus {
            agent_id,
            workspace_id,
            from,
            to,
            at,
        } => {
            let changed = sqlx::query(
                "UPDATE agents SET status = $1, updated_at = $2 WHERE id = $3 AND workspace_id = $4 AND status = $5",
            )
            .bind(to.as_str())
            .bind(*at)
            .bind(agent_id)
            .bind(workspace_id)
            .bind(from.as_str())
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(changed, || {
                StoreError::Conflict("the agent's status changed meanwhile; read it again".into())
            })?;
            if matches!(to, AgentStatus::Suspended | AgentStatus::Revoked) {
                let reason = if *to == AgentStatus::Suspended {
                    "agent_suspended"
                } else {
                    "agent_revoked"
                };
                super::mcp::end_sessions(tx, super::mcp::Sessions::Agent(agent_id), *at, reason)
                    .await?;
            }
            let agent = select_agent(tx, agent_id)
                .await?
                .ok_or(StoreError::UnknownAgent)?;
            Ok(Applied::Agent(Box::new(agent)))
        }
    }
}

#[async_trait]
impl AgentStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError> {
        let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| agent_from_row(&row)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn agent_by_public_key(
        &self,
        workspace_id: Option<&str>,
        public_key: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE COALESCE(workspace_id, '') = $1 AND public_key = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id.unwrap_or(""))
            .bind(public_key)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| agent_from_row(&row)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn agents_in_workspace(
        &self,
        workspace_id: &str,
        ids: &[String],
    ) -> Result<Vec<AgentRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (2..ids.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = $1 AND id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(workspace_id);
        for id in ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.read).await?;
        Ok(rows.iter().map(agent_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_agents(&self, query: &AgentQuery) -> Result<Vec<AgentRecord>, StoreError> {
        let read = self.membership_read(query).await?;
        let mut f = Filters::new();
        f.text(
            if read == MembershipRead::FromCandidates {
                // Not an index on `workspace_id`: the few candidates are looked up by id and
                // sorted instead (SQLite, without statistics, would otherwise take any index on
                // `workspace_id` and sort every agent: 400 ms at a million). In order of the
                // ids the index on (workspace_id, id) gives the order and the range.
                "workspace_id || '' = ?"
            } else {
                "workspace_id = ?"
            },
            Some(&query.workspace_id),
        );
        // A name is rarer than a status: with both, the name's index is read and the status
        // filtered (`|| ''` keeps the planner off the status index, which would spare it the
        // sort but read every agent of that status).
        f.text("name = ?", query.name.as_deref());
        f.text(
            if query.name.is_some() {
                "status || '' = ?"
            } else {
                "status = ?"
            },
            query.status.map(AgentStatus::as_str),
        );
        f.text("risk_tier = ?", query.risk_tier.map(RiskTier::as_str));
        if let Some(search) = query.search.as_deref() {
            let mut pattern = String::with_capacity(search.len() + 2);
            pattern.push('%');
            for ch in search.to_ascii_lowercase().chars() {
                if matches!(ch, '%' | '_' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(ch);
            }
            pattern.push('%');
            f.push(
                "(id = ? OR LOWER(name) LIKE ? ESCAPE '\\')",
                [Arg::Text(search.to_owned()), Arg::Text(pattern)],
            );
        }
        if let Some(group) = &query.group {
            let (clause, args) = self.group_clause(&query.workspace_id, group, read);
            f.push(&clause, args);
        }
        match query.last_seen {
            Some(LastSeen::Since(at)) => f.push("last_seen_at >= ?", [Arg::Int(at)]),
            Some(LastSeen::Before(at)) => f.push("last_seen_at < ?", [Arg::Int(at)]),
            Some(LastSeen::Never) => f.push("last_seen_at IS NULL", []),
            None => {}
        }
        if let Some(label) = &query.label {
            f.push(
                &self.member_of(LABEL_TERM, read),
                [
                    Arg::Text(query.workspace_id.clone()),
                    Arg::Text(label.clone()),
                ],
            );
        }
        let order = match &query.by_id {
            Some(range) => {
                f.text("id > ?", range.after.as_deref());
                f.text("id <= ?", range.through.as_deref());
                "id"
            }
            None => {
                // The cursor bounds `created_at` in the index too, not only as a filter.
                f.int(
                    "created_at <= ?",
                    query.after.as_ref().map(|c| c.created_at),
                );
                f.cursor(query.after.as_ref());
                "created_at DESC, id DESC"
            }
        };
        let sql = f.sql(
            &format!("SELECT {AGENT_COLUMNS} FROM agents"),
            &format!("ORDER BY {order} LIMIT {}", query.limit),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows.iter().map(agent_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn agent_status_counts(
        &self,
        workspace_id: &str,
    ) -> Result<Vec<(AgentStatus, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) AS n FROM agents WHERE workspace_id = $1 GROUP BY status",
        )
        .bind(workspace_id)
        .fetch_all(&self.read)
        .await?;
        let mut counts = Vec::with_capacity(rows.len());
        for row in rows {
            let status: String = row.try_get("status")?;
            let status = AgentStatus::parse(&status)
                .ok_or_else(|| sqlx::Error::Decode(format!("agent status `{status}`").into()))?;
            counts.push((status, row.try_get::<i64, _>("n")?));
        }
        Ok(counts)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn challenge(&self, id: &str) -> Result<Option<ChallengeRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, agent_id, challenge, created_at, expires_at, used_at, name, metadata \
             FROM attestation_challenges WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(row) => Some(ChallengeRecord {
                id: row.try_get("id")?,
                agent_id: row.try_get("agent_id")?,
                challenge: row.try_get("challenge")?,
                created_at: row.try_get("created_at")?,
                expires_at: row.try_get("expires_at")?,
                used_at: row.try_get("used_at")?,
                name: row.try_get("name")?,
                metadata: row
                    .try_get::<Option<String>, _>("metadata")?
                    .map(|m| json_value(&m)),
            }),
            None => None,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn claim_code(&self, code_hash: &str) -> Result<Option<ClaimCodeRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT code_hash, agent_id, created_at, expires_at, used_at FROM agent_claim_codes WHERE code_hash = $1",
        )
        .bind(code_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => Some(ClaimCodeRecord {
                code_hash: r.try_get("code_hash")?,
                agent_id: r.try_get("agent_id")?,
                created_at: r.try_get("created_at")?,
                expires_at: r.try_get("expires_at")?,
                used_at: r.try_get("used_at")?,
            }),
            None => None,
        })
    }
}

impl SqlStore {
    /// The `WHERE` clause (with `?` marks) and its values that keep a group's members: its
    /// explicit ids, or any selector's keys all holding their values, read in the indexed
    /// metadata pairs (migration 0019) and label terms (0018), compared as text as policies
    /// compare them. A group with neither members nor selectors keeps none.
    fn group_clause(
        &self,
        workspace_id: &str,
        group: &GroupMembers,
        read: MembershipRead,
    ) -> (String, Vec<Arg>) {
        let mut any = Vec::new();
        let mut args = Vec::new();
        if !group.ids.is_empty() {
            any.push(format!("id IN ({})", vec!["?"; group.ids.len()].join(", ")));
            args.extend(group.ids.iter().map(|id| Arg::Text(id.clone())));
        }
        for selector in &group.selectors {
            let mut all = Vec::new();
            for (key, value) in &selector.metadata {
                all.push(self.member_of(METADATA_PAIR, read));
                args.extend([Arg::Text(key.clone()), Arg::Text(value.clone())]);
            }
            for (key, value) in &selector.labels {
                args.extend([
                    Arg::Text(workspace_id.to_owned()),
                    Arg::Text(format!("{key}={value}")),
                ]);
                if value == "true" {
                    // A list entry `k` reads as `k` = "true".
                    all.push(self.member_of_either(LABEL_PAIR, LABEL_ENTRY, read));
                    args.extend([Arg::Text(workspace_id.to_owned()), Arg::Text(key.clone())]);
                } else {
                    all.push(self.member_of(LABEL_PAIR, read));
                }
            }
            any.push(if all.is_empty() {
                "1 = 1".to_owned()
            } else {
                format!("({})", all.join(" AND "))
            });
        }
        if any.is_empty() {
            ("1 = 0".to_owned(), args)
        } else {
            (format!("({})", any.join(" OR ")), args)
        }
    }

    /// The clause keeping the agents `rows` (a [`MembershipRows`], its `?` marks in order)
    /// names, written for `read`: the candidates listed once (`id IN`), or each agent walked
    /// looked up in them (`EXISTS`, an index probe per agent).
    fn member_of(&self, rows: MembershipRows, read: MembershipRead) -> String {
        match read {
            MembershipRead::FromCandidates => {
                format!(
                    "id IN (SELECT agent_id FROM {} WHERE {})",
                    rows.table, rows.condition
                )
            }
            MembershipRead::Walking => format!(
                "EXISTS (SELECT 1 FROM {} WHERE {} AND agent_id = agents.id{})",
                rows.table,
                rows.condition,
                // Postgres would otherwise read every matching row into a hash table first
                // (a "hashed SubPlan": 200-500 ms for 50,000 of a million agents) rather than
                // probe its index for the few agents the page walks; a subquery with an
                // OFFSET is never turned into one.
                if self.backend == Backend::Postgres {
                    " OFFSET 0"
                } else {
                    ""
                }
            ),
        }
    }

    /// The agents either `rows` or `other` name, as [`Self::member_of`] writes each (the marks
    /// of `rows` first). Listed once, both go in one list: Postgres reads two `id IN` joined by
    /// OR by walking every agent.
    fn member_of_either(
        &self,
        rows: MembershipRows,
        other: MembershipRows,
        read: MembershipRead,
    ) -> String {
        match read {
            MembershipRead::FromCandidates => format!(
                "id IN (SELECT agent_id FROM {} WHERE {} UNION ALL SELECT agent_id FROM {} WHERE {})",
                rows.table, rows.condition, other.table, other.condition
            ),
            MembershipRead::Walking => format!(
                "({} OR {})",
                self.member_of(rows, read),
                self.member_of(other, read)
            ),
        }
    }

    /// How a list filtered by labels or a group reads its members, from the number of agents
    /// its filters could keep at most (each membership's rows counted up to
    /// `list_candidates` + 1, in one statement): a few thousand candidates are looked up by id
    /// and sorted; more are found by walking the newest agents and probing each, which reaches
    /// a page within a few thousand agents when one in a few hundred matches. (Without this,
    /// SQLite walked all of a million agents for a label ten of them hold, and listed every
    /// holder of a common label before walking.)
    async fn membership_read(&self, query: &AgentQuery) -> Result<MembershipRead, StoreError> {
        if query.label.is_none() && query.group.is_none() {
            return Ok(MembershipRead::Walking);
        }
        // The rows to count; a key's agents are at most the sum of its rows' counts.
        let mut counts: Vec<(MembershipRows, [Arg; 2])> = Vec::new();
        let mut count = |rows: MembershipRows, args: [Arg; 2]| {
            counts.push((rows, args));
            counts.len() - 1
        };
        let ws = || Arg::Text(query.workspace_id.clone());
        let label: Option<Vec<usize>> = query
            .label
            .as_ref()
            .map(|label| vec![count(LABEL_TERM, [ws(), Arg::Text(label.clone())])]);
        // Per selector, per key, the rows of that key.
        let group: Option<(usize, Vec<Vec<Vec<usize>>>)> = query.group.as_ref().map(|group| {
            let selectors = group
                .selectors
                .iter()
                .map(|selector| {
                    let pairs = selector.metadata.iter().map(|(key, value)| {
                        vec![count(
                            METADATA_PAIR,
                            [Arg::Text(key.clone()), Arg::Text(value.clone())],
                        )]
                    });
                    let mut keys: Vec<Vec<usize>> = pairs.collect();
                    for (key, value) in &selector.labels {
                        let mut rows = vec![count(
                            LABEL_PAIR,
                            [ws(), Arg::Text(format!("{key}={value}"))],
                        )];
                        if value == "true" {
                            rows.push(count(LABEL_ENTRY, [ws(), Arg::Text(key.clone())]));
                        }
                        keys.push(rows);
                    }
                    keys
                })
                .collect();
            (group.ids.len(), selectors)
        });
        let mut f = Filters::new();
        for (i, (rows, args)) in counts.iter().enumerate() {
            // Only to number the marks: the clauses are read back as one select list.
            f.push(
                &format!(
                    "(SELECT COUNT(*) FROM (SELECT 1 FROM {} WHERE {} LIMIT {}) c{i}) AS n{i}",
                    rows.table,
                    rows.condition,
                    self.list_candidates.saturating_add(1)
                ),
                args.clone(),
            );
        }
        let mut found = Vec::with_capacity(counts.len());
        if !counts.is_empty() {
            let sql = format!("SELECT {}", f.clauses.join(", "));
            let row = f
                .fetch(&self.read, &sql)
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| StoreError::Database("no row of counts".into()))?;
            for i in 0..counts.len() {
                let n: i64 = row.try_get(format!("n{i}").as_str())?;
                found.push(usize::try_from(n).unwrap_or(usize::MAX));
            }
        }
        let sum = |rows: &Vec<usize>| rows.iter().fold(0usize, |n, &i| n.saturating_add(found[i]));
        // Each selector's keys are ANDed: it keeps at most its rarest key's agents, and every
        // agent when it has no key (no bound). Selectors and explicit ids are ORed: they add up.
        let group_bound = group.and_then(|(ids, selectors)| {
            selectors.iter().try_fold(ids, |total, keys| {
                keys.iter().map(sum).min().map(|n| total.saturating_add(n))
            })
        });
        let bound = [label.as_ref().map(sum), group_bound]
            .into_iter()
            .flatten()
            .min();
        Ok(match bound {
            Some(n) if n <= self.list_candidates => MembershipRead::FromCandidates,
            _ => MembershipRead::Walking,
        })
    }
}

/// How a filtered list reads the members of a label or a group (see `membership_read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MembershipRead {
    FromCandidates,
    Walking,
}

/// Rows that name agents: a table and a condition with two `?` marks.
#[derive(Debug, Clone, Copy)]
struct MembershipRows {
    table: &'static str,
    condition: &'static str,
}

/// Agents whose inventory labels hold a term (`?` workspace, `?` term), whatever its source.
const LABEL_TERM: MembershipRows = MembershipRows {
    table: "agent_inventory_labels",
    condition: "workspace_id = ? AND term = ?",
};
/// Agents with the label pair `k=v` (`?` workspace, `?` `k=v`).
const LABEL_PAIR: MembershipRows = MembershipRows {
    table: "agent_inventory_labels",
    condition: "workspace_id = ? AND term = ? AND source = 'pair'",
};
/// Agents with the list entry `k` (`?` workspace, `?` `k`).
const LABEL_ENTRY: MembershipRows = MembershipRows {
    table: "agent_inventory_labels",
    condition: "workspace_id = ? AND term = ? AND source = 'entry'",
};
/// Agents with the metadata pair (`?` key, `?` value).
const METADATA_PAIR: MembershipRows = MembershipRows {
    table: "agent_metadata_pairs",
    condition: "key = ? AND value = ?",
};
