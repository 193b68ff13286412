//! Who may do what, answered from the policy itself: an agent's effective permissions, an
//! action's holders (the semantic model's cells, see `acp_engine::semantic::access`), and the
//! AuthZEN searches (subject, action, resource), each result decided as a check decides it.
//!
//! A search evaluates the policy for each agent or action it answers, as `/v1/check` would,
//! without recording anything: no decision event, no challenge. What a check reads beside the
//! policy is not part of it: a person's approval of one exact earlier request, and the email
//! rate limits (each agent's sent emails count as none).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::api;
use crate::context::Context;
use crate::domain::ids::PolicyId;
use crate::domain::Refusal;
use crate::store::{AgentQuery, AgentRecord, GroupMembers, IdRange, SelectorTerms};

use super::cache::{CachedAgent, CachedKey, LoadedPolicy};
use super::check::{unknown_policy, CheckInput};
use super::error::{CheckError, CheckResult};
use super::semantic::access::{AccessMatrix, ActionHolders, AgentAccess, Grantees};
use super::semantic::Reach;
use super::spec::{Outcome, PolicySpec, TestAgent};
use super::CompiledPolicy;

/// The most results one search page holds, and its default.
pub const MAX_PAGE: usize = 1000;
pub const DEFAULT_PAGE: usize = 50;
/// The most agents one subject search page decides: a page can come back with fewer results
/// than asked, and a `next_token`, when many agents in the candidates' groups are refused.
const MAX_EXAMINED: usize = 5000;
/// Agents read from the store at a time.
const CHUNK: i64 = 250;
/// Explicit members of the candidates' groups one read names.
const CHUNK_IDS: usize = 250;
/// Reads one page makes at most (each reads up to `CHUNK` agents, or moves past `CHUNK_IDS`
/// explicit members none of which is an agent of the workspace).
const MAX_ROUNDS: usize = 40;
/// Past this many selectors the candidates' groups are not read through the agents' indexes:
/// every agent is read, in order of its id, and decided.
const MAX_SELECTORS: usize = 500;

/// The policy the analysis is of.
#[derive(Debug, Clone)]
pub struct Analysed<T> {
    pub policy_id: String,
    pub version: i64,
    pub policy_hash: String,
    pub found: T,
}

/// A policy version, compiled, with its semantic model.
enum Held {
    Current(Arc<LoadedPolicy>),
    Past {
        compiled: Box<CompiledPolicy>,
        reach: Box<Reach>,
        version: i64,
    },
}

impl Held {
    fn compiled(&self) -> &CompiledPolicy {
        match self {
            Held::Current(p) => &p.compiled,
            Held::Past { compiled, .. } => compiled,
        }
    }

    fn reach(&self) -> &Reach {
        match self {
            Held::Current(p) => p.reach(),
            Held::Past { reach, .. } => reach,
        }
    }

    fn version(&self) -> i64 {
        match self {
            Held::Current(p) => p.version,
            Held::Past { version, .. } => *version,
        }
    }

    fn analysed<T>(&self, policy_id: &PolicyId, found: T) -> Analysed<T> {
        Analysed {
            policy_id: policy_id.as_str().to_owned(),
            version: self.version(),
            policy_hash: self.compiled().hash.clone(),
            found,
        }
    }
}

fn policy_id(given: Option<&str>) -> CheckResult<PolicyId> {
    match given.filter(|p| !p.is_empty()) {
        None => Ok(PolicyId::default_policy()),
        Some(id) => Ok(PolicyId::parse(id).ok_or_else(unknown_policy)?),
    }
}

/// The policy (`pol_default` unless named) at `version` (default: its current one).
async fn held(
    ctx: &Context,
    workspace_id: &str,
    policy_id: &PolicyId,
    version: Option<i64>,
) -> CheckResult<Held> {
    let store = ctx.store.as_ref();
    let view = ctx.caches.view(store, workspace_id).await?;
    let current = ctx
        .caches
        .policy(store, &view, policy_id.as_str())
        .await?
        .ok_or_else(unknown_policy)?;
    let version = match version {
        Some(v) if v != current.version => v,
        _ => return Ok(Held::Current(current)),
    };
    let stored = store
        .policy_version(workspace_id, policy_id.as_str(), version)
        .await?
        .ok_or_else(|| Refusal::not_found("unknown_version", "no such version of this policy"))?;
    // Compiled off the async threads: a large spec takes a second.
    let compiled = tokio::task::spawn_blocking(move || {
        let spec: PolicySpec = serde_json::from_value(stored.spec)
            .map_err(|e| CheckError::Internal(format!("a stored spec does not read: {e}")))?;
        let compiled = super::compile::compile(&spec).map_err(|errors| {
            CheckError::Internal(format!(
                "a stored version does not compile: {} error(s)",
                errors.len()
            ))
        })?;
        let reach = Reach::of(&compiled.spec);
        Ok::<_, CheckError>((compiled, reach))
    })
    .await
    .map_err(|e| CheckError::Internal(e.to_string()))??;
    Ok(Held::Past {
        compiled: Box::new(compiled.0),
        reach: Box::new(compiled.1),
        version,
    })
}

/// An agent as the semantic model reads it.
fn test_agent(agent: &CachedAgent) -> TestAgent {
    TestAgent {
        id: agent.agent.id.clone(),
        status: agent.agent.status.as_str().to_owned(),
        risk_tier: agent.agent.risk_tier.as_str().to_owned(),
        metadata: agent.agent.metadata.clone(),
        labels: agent.labels.clone(),
    }
}

/// Runs `analyse` of the policy (`pol_default` unless named) at `version` (default: its
/// current one) on a blocking thread: the model of a large spec takes a while to make, and an
/// action of 10,000 groups many cells.
async fn analysed<T: Send + 'static>(
    ctx: &Context,
    workspace_id: &str,
    policy: Option<&str>,
    version: Option<i64>,
    analyse: impl FnOnce(&CompiledPolicy, &Reach) -> T + Send + 'static,
) -> CheckResult<Analysed<T>> {
    let policy_id = policy_id(policy)?;
    let held = held(ctx, workspace_id, &policy_id, version).await?;
    let (held, found) = tokio::task::spawn_blocking(move || {
        let found = analyse(held.compiled(), held.reach());
        (held, found)
    })
    .await
    .map_err(|e| CheckError::Internal(e.to_string()))?;
    Ok(held.analysed(&policy_id, found))
}

/// The agent's effective permissions under the policy.
pub async fn agent_access(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &str,
    policy: Option<&str>,
    version: Option<i64>,
) -> CheckResult<Analysed<AgentAccess>> {
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &view, agent_id)
        .await?;
    let agent = test_agent(&agent);
    analysed(
        ctx,
        workspace_id,
        policy,
        version,
        move |compiled, reach| reach.agent_access(compiled, &agent),
    )
    .await
}

/// Every kind of agent's cells for the action under the policy.
pub async fn action_holders(
    ctx: &Context,
    workspace_id: &str,
    action: &str,
    policy: Option<&str>,
    version: Option<i64>,
) -> CheckResult<Analysed<ActionHolders>> {
    let action = checked_action(action)?;
    analysed(
        ctx,
        workspace_id,
        policy,
        version,
        move |compiled, reach| reach.action_holders(compiled, &action),
    )
    .await
}

/// The policy's group × action matrix, at most `rows` kinds of agent.
pub async fn matrix(
    ctx: &Context,
    workspace_id: &str,
    policy: Option<&str>,
    version: Option<i64>,
    rows: usize,
) -> CheckResult<Analysed<AccessMatrix>> {
    analysed(
        ctx,
        workspace_id,
        policy,
        version,
        move |compiled, reach| reach.matrix(compiled, rows),
    )
    .await
}

/// An action as a check reads it: trimmed, at most 128 printable characters.
fn checked_action(action: &str) -> CheckResult<String> {
    let request = CheckInput::read(
        api::CheckRequest {
            agent_id: "-".into(),
            policy_id: None,
            action: action.to_owned(),
            context: None,
            email: Some(Value::Object(Map::new())),
        },
        None,
    )?;
    Ok(request.action().to_owned())
}

// ---------------------------------------------------------------------------------------------
// AuthZEN search.

/// A search's request, read as a check reads it (its agent aside).
pub struct Asked {
    pub action: Option<String>,
    pub context: Map<String, Value>,
    pub email: Option<Value>,
    pub policy_id: Option<String>,
    /// Challenged results too (marked).
    pub include_challenge: bool,
    pub token: Option<String>,
    pub limit: Option<usize>,
    /// The API key whose rate each evaluation past the first spends (`None`: not limited).
    pub key: Option<Arc<CachedKey>>,
}

/// One page of a search: each result with its outcome (allow, or challenge when asked for).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub results: Vec<(T, Outcome)>,
    /// Where the next page starts; `None` when there is none.
    pub next_token: Option<String>,
}

impl Asked {
    fn limit(&self) -> CheckResult<usize> {
        match self.limit {
            None => Ok(DEFAULT_PAGE),
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            Some(_) => Err(CheckError::invalid(
                "page",
                format!("`limit` must be between 1 and {MAX_PAGE}"),
            )),
        }
    }

    /// The check of `agent_id` doing `action` that this request asks about.
    fn input(&self, agent_id: &str, action: &str) -> CheckResult<CheckInput> {
        CheckInput::read(
            api::CheckRequest {
                agent_id: agent_id.to_owned(),
                policy_id: self.policy_id.clone(),
                action: action.to_owned(),
                context: Some(Value::Object(self.context.clone())),
                email: self.email.clone(),
            },
            None,
        )
    }

    /// Whether the search may make its evaluation number `done` + 1: the first is the
    /// request's own (its token was spent when the key was read), each other spends one of
    /// the key's tokens; once they are spent the page ends where it is, with a `next_token`.
    fn may_decide(&self, done: usize) -> bool {
        done == 0 || self.key.as_ref().is_none_or(|k| k.spend(1).is_ok())
    }

    fn wanted(&self, outcome: Outcome) -> bool {
        outcome == Outcome::Allow || self.include_challenge && outcome == Outcome::Challenge
    }
}

/// The decision of `input` for `agent` under `compiled`, as a check makes it (no approval, no
/// email counts).
fn decided(agent: &CachedAgent, compiled: &CompiledPolicy, input: &CheckInput) -> Outcome {
    let facts = agent.facts(input.action(), input.fields(), input.email(), (0, 0));
    super::evaluate::evaluate(compiled, &facts).map_or(Outcome::Deny, |d| d.outcome)
}

fn bad_token() -> CheckError {
    CheckError::invalid("page", "`token` is not one this search gave")
}

/// Subject search: the agents whose check of the action, resource and context the policy
/// allows (and challenges, when asked), in order of their ids.
///
/// The candidates are the members of the groups that can be granted the action: their explicit
/// members are taken from the compiled spec a chunk at a time (ids past the cursor, in order),
/// read together with the agents the groups' selectors match up to that chunk's last id, so a
/// page costs the same for ten members or a hundred thousand. When anyone could be granted it,
/// every agent is read in order of its id.
pub async fn subject_search(
    ctx: &Context,
    workspace_id: &str,
    asked: &Asked,
) -> CheckResult<Page<String>> {
    let limit = asked.limit()?;
    let action = asked
        .action
        .as_deref()
        .ok_or_else(|| CheckError::missing("action"))?;
    // Read once, as a check reads it: the errors a check would answer come first.
    let probe = asked.input("-", action)?;
    let policy_id = policy_id(asked.policy_id.as_deref())?;
    let held = held(ctx, workspace_id, &policy_id, None).await?;
    let mut after = match &asked.token {
        None => None,
        Some(token) => Some(read_cursor(token).ok_or_else(bad_token)?),
    };
    let candidates = match held
        .reach()
        .grantees(probe.action(), asked.include_challenge)
    {
        Grantees::Anyone => Candidates::Everyone,
        Grantees::Groups(groups) => members_of(held.compiled(), &groups),
    };
    let mut results = Vec::new();
    let mut examined = 0;
    for _ in 0..MAX_ROUNDS {
        let Some((group, through)) = candidates.chunk(after.as_deref()) else {
            return Ok(Page {
                results,
                next_token: None,
            });
        };
        let chunk = ctx
            .store
            .list_agents(&AgentQuery {
                workspace_id: workspace_id.to_owned(),
                group,
                by_id: Some(IdRange {
                    after: after.clone(),
                    through: through.clone(),
                }),
                limit: CHUNK,
                ..AgentQuery::default()
            })
            .await?;
        let full = chunk.len() as i64 == CHUNK;
        let ids: Vec<String> = chunk.iter().map(|a| a.id.clone()).collect();
        let mut labels = ctx.store.agents_labels(workspace_id, &ids).await?;
        for record in chunk {
            if examined >= MAX_EXAMINED || !asked.may_decide(examined) {
                return Ok(Page {
                    results,
                    next_token: after,
                });
            }
            after = Some(record.id.clone());
            let agent = cached(record, &mut labels);
            let outcome = decided(&agent, held.compiled(), &probe);
            examined += 1;
            if asked.wanted(outcome) {
                results.push((agent.agent.id.clone(), outcome));
                if results.len() == limit {
                    return Ok(Page {
                        results,
                        next_token: after,
                    });
                }
            }
        }
        match (full, through) {
            // More agents may follow within this chunk's range.
            (true, _) => {}
            // This chunk's range is read: the next starts past it.
            (false, Some(through)) => after = Some(through),
            (false, None) => {
                return Ok(Page {
                    results,
                    next_token: None,
                })
            }
        }
        if examined >= MAX_EXAMINED {
            break;
        }
    }
    Ok(Page {
        results,
        next_token: after,
    })
}

fn cached(record: AgentRecord, labels: &mut HashMap<String, Value>) -> CachedAgent {
    let own = labels
        .remove(&record.id)
        .unwrap_or_else(|| Value::Object(Map::new()));
    CachedAgent::new(record, own, 0)
}

/// The agents a subject search reads.
enum Candidates {
    /// Every agent of the workspace.
    Everyone,
    /// The members of some groups: explicit ids (sorted, once each) and selectors.
    Members {
        ids: Vec<String>,
        selectors: Vec<SelectorTerms>,
    },
}

impl Candidates {
    /// The next read past `after`: the members it keeps (`None`: every agent) and the last id
    /// it reaches (`None`: to the end); `None` when no candidate is left.
    fn chunk(&self, after: Option<&str>) -> Option<(Option<GroupMembers>, Option<String>)> {
        let Candidates::Members { ids, selectors } = self else {
            return Some((None, None));
        };
        let from = after.map_or(0, |a| ids.partition_point(|id| id.as_str() <= a));
        let next = &ids[from..];
        if next.is_empty() && selectors.is_empty() {
            return None;
        }
        let taken = &next[..next.len().min(CHUNK_IDS)];
        // Past this chunk's last id more explicit members wait: the read stops there.
        let through = (taken.len() < next.len()).then(|| taken[taken.len() - 1].clone());
        Some((
            Some(GroupMembers {
                ids: taken.to_vec(),
                selectors: selectors.clone(),
            }),
            through,
        ))
    }
}

/// The members of `groups` as the agents list reads them; every agent when their selectors
/// are too many to read through the indexes.
fn members_of(compiled: &CompiledPolicy, groups: &BTreeSet<String>) -> Candidates {
    let mut ids = Vec::new();
    let mut selectors = Vec::new();
    for group in &compiled.spec.agent_groups {
        if !groups.contains(&group.name) {
            continue;
        }
        // An agent's id is lower-case hex: a member spelled with upper case names no agent,
        // and left out it cannot sort apart from a database's own collation of the ids.
        ids.extend(
            group
                .members
                .iter()
                .filter(|m| !m.bytes().any(|b| b.is_ascii_uppercase()))
                .cloned(),
        );
        selectors.extend(group.selectors.iter().map(|s| SelectorTerms {
            metadata: s.metadata.clone().into_iter().collect(),
            labels: s.labels.clone().into_iter().collect(),
        }));
    }
    if selectors.len() > MAX_SELECTORS {
        return Candidates::Everyone;
    }
    ids.sort();
    ids.dedup();
    Candidates::Members { ids, selectors }
}

/// A page token: the id of the last agent a page read.
fn read_cursor(token: &str) -> Option<String> {
    let id = crate::domain::ids::AgentId::parse(token)?;
    Some(id.as_str().to_owned())
}

/// Action search: the actions the policy names for the agent that it allows (and
/// challenges, when asked) on this resource and context, in order.
pub async fn action_search(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &str,
    asked: &Asked,
) -> CheckResult<Page<String>> {
    let limit = asked.limit()?;
    let policy_id = policy_id(asked.policy_id.as_deref())?;
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &view, agent_id)
        .await?;
    let held = held(ctx, workspace_id, &policy_id, None).await?;
    let named = held
        .reach()
        .actions_named(held.compiled(), &test_agent(&agent));
    let mut results = Vec::new();
    let start = asked.token.as_deref();
    let mut done = 0;
    let mut last: Option<&String> = None;
    for action in named
        .iter()
        .filter(|a| start.is_none_or(|s| a.as_str() > s))
    {
        // `send_email` without the email's facts is no check that could be allowed; any other
        // input a check could not read is the request's error (a malformed `email`, say).
        if action == "send_email" && asked.email.as_ref().is_none_or(Value::is_null) {
            continue;
        }
        let input = asked.input(agent_id, action)?;
        if !asked.may_decide(done) {
            return Ok(Page {
                results,
                next_token: last.cloned(),
            });
        }
        done += 1;
        last = Some(action);
        let outcome = decided(&agent, held.compiled(), &input);
        if asked.wanted(outcome) {
            if results.len() == limit {
                let last: Option<&(String, Outcome)> = results.last();
                return Ok(Page {
                    next_token: last.map(|(a, _)| a.clone()),
                    results,
                });
            }
            results.push((action.clone(), outcome));
        }
    }
    Ok(Page {
        results,
        next_token: None,
    })
}

/// Resource search: the resource ids the policy names for the agent and action (in its raw
/// Cedar rules, as `resource_id=<id>`) that it allows (and challenges, when asked), in order;
/// and how it decides an id it does not name.
pub async fn resource_search(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &str,
    resource_type: &str,
    asked: &Asked,
) -> CheckResult<(Page<String>, Outcome)> {
    let limit = asked.limit()?;
    let action = asked
        .action
        .as_deref()
        .ok_or_else(|| CheckError::missing("action"))?;
    let policy_id = policy_id(asked.policy_id.as_deref())?;
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &view, agent_id)
        .await?;
    let held = held(ctx, workspace_id, &policy_id, None).await?;
    let probe = asked.input(agent_id, action)?;
    let named =
        held.reach()
            .resource_ids_named(held.compiled(), &test_agent(&agent), probe.action());
    let decide_id = |id: &str| -> CheckResult<Outcome> {
        let mut with = Asked {
            action: asked.action.clone(),
            context: asked.context.clone(),
            email: asked.email.clone(),
            policy_id: asked.policy_id.clone(),
            include_challenge: asked.include_challenge,
            token: None,
            limit: None,
            key: None,
        };
        with.context
            .insert("resource_type".into(), Value::String(resource_type.into()));
        with.context
            .insert("resource_id".into(), Value::String(id.into()));
        let input = with.input(agent_id, action)?;
        Ok(decided(&agent, held.compiled(), &input))
    };
    let other = (0..)
        .map(|i| format!("unnamed-resource-{i}"))
        .find(|id| !named.contains(id))
        .unwrap_or_default();
    let others = decide_id(&other)?;
    let mut results = Vec::new();
    let start = asked.token.as_deref();
    let mut last: Option<&String> = None;
    for (done, id) in named
        .iter()
        .filter(|a| start.is_none_or(|s| a.as_str() > s))
        .enumerate()
    {
        // The first id is decided with the request's own token too (as the other ids' is):
        // a page that stops always names where to go on from.
        if !asked.may_decide(done) {
            return Ok((
                Page {
                    results,
                    next_token: last.cloned(),
                },
                others,
            ));
        }
        last = Some(id);
        let outcome = decide_id(id)?;
        if asked.wanted(outcome) {
            if results.len() == limit {
                let next = results.last().map(|(a, _): &(String, Outcome)| a.clone());
                return Ok((
                    Page {
                        results,
                        next_token: next,
                    },
                    others,
                ));
            }
            results.push((id.clone(), outcome));
        }
    }
    Ok((
        Page {
            results,
            next_token: None,
        },
        others,
    ))
}

// ---------------------------------------------------------------------------------------------
// The wire.

fn cell_body(c: &super::semantic::access::AccessCell) -> api::AccessCellBody {
    api::AccessCellBody {
        condition: c.condition.clone(),
        outcome: c.outcome.as_str().to_owned(),
        decided_by: c.decided_by.clone(),
        reason_codes: c.reason_codes.clone(),
        example: serde_json::to_value(&c.example).unwrap_or(Value::Null),
    }
}

impl Analysed<AgentAccess> {
    pub fn into_body(self, agent_id: &str) -> api::AgentAccessResponse {
        api::AgentAccessResponse {
            ok: true,
            agent_id: agent_id.to_owned(),
            policy_id: self.policy_id,
            version: self.version,
            policy_hash: self.policy_hash,
            groups: self.found.groups,
            actions: self
                .found
                .actions
                .iter()
                .map(|a| api::ActionCellsBody {
                    action: a.action.clone(),
                    cells: a.cells.iter().map(cell_body).collect(),
                })
                .collect(),
            not_analysed: self.found.not_analysed,
        }
    }
}

impl Analysed<ActionHolders> {
    pub fn into_body(self) -> api::ActionAccessResponse {
        api::ActionAccessResponse {
            ok: true,
            action: self.found.action,
            policy_id: self.policy_id,
            version: self.version,
            policy_hash: self.policy_hash,
            principals: self
                .found
                .principals
                .iter()
                .map(|p| api::PrincipalCellsBody {
                    groups: p.groups.clone(),
                    principals: p.principals.clone(),
                    cells: p.cells.iter().map(cell_body).collect(),
                })
                .collect(),
            not_analysed: self.found.not_analysed,
        }
    }
}

/// The columns of an access review export.
const CSV_COLUMNS: [&str; 10] = [
    "policy_id",
    "version",
    "agent",
    "groups",
    "action",
    "condition",
    "outcome",
    "decided_by",
    "reason_codes",
    "example",
];

/// CSV rows (CRLF line ends, a header row), one per cell; list fields joined by `;`, the
/// example as JSON; a field that a spreadsheet would read as a formula is quoted.
fn csv_of<'a>(
    policy: (&str, i64),
    rows: impl Iterator<Item = (String, String, &'a str, &'a api::AccessCellBody)>,
) -> Result<String, csv::Error> {
    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    out.write_record(CSV_COLUMNS)?;
    for (agent, groups, action, c) in rows {
        let row = [
            policy.0.to_owned(),
            policy.1.to_string(),
            agent,
            groups,
            action.to_owned(),
            c.condition.clone(),
            c.outcome.clone(),
            c.decided_by.join(";"),
            c.reason_codes.join(";"),
            c.example.to_string(),
        ];
        out.write_record(row.map(crate::audit::defuse_formula))?;
    }
    let bytes = out.into_inner().map_err(|e| e.into_error())?;
    // Every field was a `String`, so the bytes are UTF-8.
    String::from_utf8(bytes).map_err(|e| csv::Error::from(std::io::Error::other(e)))
}

/// An agent's effective permissions as CSV rows.
pub fn agent_csv(body: &api::AgentAccessResponse) -> Result<String, csv::Error> {
    let groups = body.groups.join(";");
    csv_of(
        (&body.policy_id, body.version),
        body.actions.iter().flat_map(|a| {
            let groups = groups.clone();
            a.cells
                .iter()
                .map(move |c| (body.agent_id.clone(), groups.clone(), a.action.as_str(), c))
        }),
    )
}

/// An action's holders as CSV rows (the agents column names each kind of agent).
pub fn action_csv(body: &api::ActionAccessResponse) -> Result<String, csv::Error> {
    csv_of(
        (&body.policy_id, body.version),
        body.principals.iter().flat_map(|p| {
            let (agents, groups) = (p.principals.join(";"), p.groups.join(";"));
            p.cells
                .iter()
                .map(move |c| (agents.clone(), groups.clone(), body.action.as_str(), c))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_members_are_read_a_chunk_at_a_time_past_the_cursor() {
        let ids: Vec<String> = (0..600).map(|n| format!("agt_{n:032}")).collect();
        let members = Candidates::Members {
            ids: ids.clone(),
            selectors: Vec::new(),
        };
        let (group, through) = members.chunk(None).unwrap();
        assert_eq!(group.unwrap().ids, ids[..250]);
        assert_eq!(through.as_deref(), Some(ids[249].as_str()));
        let (group, through) = members.chunk(Some(&ids[249])).unwrap();
        assert_eq!(group.unwrap().ids, ids[250..500]);
        assert_eq!(through.as_deref(), Some(ids[499].as_str()));
        // A cursor between two members (an agent a selector matched) starts past it.
        let between = format!("{}x", ids[520]);
        let (group, through) = members.chunk(Some(&between)).unwrap();
        assert_eq!(group.unwrap().ids, ids[521..]);
        assert_eq!(through, None, "the last chunk reads to the end");
        assert!(members.chunk(Some(&ids[599])).is_none(), "nobody is left");

        // With selectors, agents past the last explicit member are still read.
        let selectors = vec![SelectorTerms {
            metadata: vec![("team".into(), "t".into())],
            labels: Vec::new(),
        }];
        let with_selectors = Candidates::Members {
            ids: ids.clone(),
            selectors: selectors.clone(),
        };
        let (group, through) = with_selectors.chunk(Some(&ids[599])).unwrap();
        assert_eq!(
            group,
            Some(GroupMembers {
                ids: Vec::new(),
                selectors
            })
        );
        assert_eq!(through, None);
        assert_eq!(
            Candidates::Everyone.chunk(Some(&ids[3])),
            Some((None, None))
        );
    }
}
