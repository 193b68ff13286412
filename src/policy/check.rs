//! `POST /v1/check`: the decision hot path. The API key, the agent and the compiled policy come
//! from the caches ([`super::cache`]); evaluation is pure and in memory ([`super::evaluate`]);
//! the one database round trip is the group commit that makes the decision's audit event (and,
//! for a challenge, its policy challenge) durable before the answer goes out. (A `send_email`
//! check under a policy whose rules read the agent's email counts reads them first, and a
//! challenge looks for a human's answer to the same request.)

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tracing::Instrument as _;

use crate::api;
use crate::audit::Actor;
use crate::context::Context;
use crate::domain::challenge::{self, ChallengeStatus, Raiser};
use crate::domain::ids::{self, PolicyId};
use crate::domain::Refusal;
use crate::secret::{random_base62, sha256_hex};
use crate::store::{
    Applied, ApprovalNotice, AuditRecord, Change, Details, EmailOp, NonceClaim, Op,
    PolicyChallenge, PolicyOp, StoreError, APPROVAL_MAILS_SPENT, APPROVAL_USED,
};
use crate::time::{iso, now_ms};

use super::cache::{CachedAgent, KeyAccess, LoadedPolicy, View};
use super::error::{CheckError, CheckResult};
use super::evaluate::{ContextFields, Decision, EmailFacts, APPROVAL_DENIED, APPROVED};
use super::spec::{sort_keys, ApprovalRules, Outcome};

pub fn unknown_policy() -> Refusal {
    Refusal::not_found("unknown_policy", "no such policy in this workspace")
}

/// An email send to commit with its allow decision (see `Op::ReserveEmail`).
#[derive(Debug, Clone)]
pub struct EmailReservation {
    pub id: String,
    pub recipients: i64,
}

/// How often a send decides again when other sends of its agent got in between.
const RESERVE_ATTEMPTS: u32 = 8;

pub async fn check(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::CheckRequest,
) -> CheckResult<api::DecisionResponse> {
    check_with(ctx, Ground::Key(access), actor, req, None, RESERVE_ATTEMPTS).await
}

/// A `send_email` check whose allow also reserves the send (see `check_with`).
pub async fn check_reserving(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::CheckRequest,
    reserve: &EmailReservation,
) -> CheckResult<api::DecisionResponse> {
    check_with(
        ctx,
        Ground::Key(access),
        actor,
        req,
        Some(reserve),
        RESERVE_ATTEMPTS,
    )
    .await
}

/// The most checks one batch takes.
pub const MAX_BATCH_CHECKS: usize = 100;

/// Where a batch of checks stops deciding (AuthZEN's evaluation semantics): never, or after the
/// first check whose answer is a denial (an error, a deny or a challenge), or after the first
/// allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopAt {
    #[default]
    Never,
    FirstDenial,
    FirstAllow,
}

impl StopAt {
    fn stops(self, outcome: Option<Outcome>) -> bool {
        match self {
            StopAt::Never => false,
            StopAt::FirstDenial => outcome != Some(Outcome::Allow),
            StopAt::FirstAllow => outcome == Some(Outcome::Allow),
        }
    }
}

/// Checks in one go: each answered as [`check`] would answer it alone (its own trace id, audit
/// event and challenge), and every decision recorded in one group-commit batch, so the batch
/// costs one commit. When the workspace moved on before the commit, the stale decisions are
/// made again together on the fresh state (one more batch); a check whose approval was used
/// meanwhile is decided again on its own, as a single check would be. With `stop`, the checks
/// after the one that stops are neither decided nor recorded, and have no answer. `shared`:
/// context fields every check has under its own (AuthZEN's top-level context), kept once for
/// all of them.
pub async fn check_batch(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    reqs: Vec<api::CheckRequest>,
    shared: Option<Arc<Map<String, Value>>>,
    stop: StopAt,
) -> CheckResult<Vec<CheckResult<api::DecisionResponse>>> {
    if reqs.is_empty() {
        return Err(CheckError::missing("checks"));
    }
    if reqs.len() > MAX_BATCH_CHECKS {
        return Err(CheckError::invalid(
            "checks",
            format_args!("must hold at most {MAX_BATCH_CHECKS} checks"),
        ));
    }
    let mut answers: Vec<Option<CheckResult<api::DecisionResponse>>> = Vec::new();
    let mut inputs: Vec<Option<CheckInput>> = Vec::new();
    for req in reqs {
        match CheckInput::read(req, shared.clone()) {
            Ok(input) => {
                inputs.push(Some(input));
                answers.push(None);
            }
            Err(err) => {
                inputs.push(None);
                answers.push(Some(Err(err)));
            }
        }
    }
    let mut ground = Ground::Key(access);
    let mut todo: Vec<usize> = (0..inputs.len()).collect();
    let mut included = inputs.len();
    let mut attempts = RESERVE_ATTEMPTS;
    let mut first = true;
    while !todo.is_empty() {
        // Decided in order, on one view of the workspace; nothing is written yet.
        let mut changes = Vec::with_capacity(todo.len());
        let mut decided = Vec::with_capacity(todo.len());
        for &i in &todo {
            let outcome = match &inputs[i] {
                None => None,
                Some(input) => match decide(
                    ctx,
                    ground.view(),
                    actor,
                    input,
                    None,
                    false,
                    Raiser::Backend,
                )
                .await
                {
                    Ok((change, d)) => {
                        let outcome = d.decision.outcome;
                        changes.push(change);
                        decided.push((i, d));
                        Some(outcome)
                    }
                    Err(err) => {
                        answers[i] = Some(Err(err));
                        None
                    }
                },
            };
            if first && stop.stops(outcome) {
                included = i + 1;
                break;
            }
        }
        first = false;
        let committed = ctx.writer.commit_all(changes).await;
        let mut stale: Option<i64> = None;
        let mut again = Vec::new();
        for ((i, decided), result) in decided.into_iter().zip(committed) {
            let Some(input) = &inputs[i] else { continue };
            match result {
                Ok(_) => {
                    decided.notify_approvers(ctx);
                    answers[i] = Some(Ok(decided.answer(input.policy_id.clone())));
                }
                // Decided on replaced state: decided again with the others, on fresh state.
                Err(StoreError::Stale(version)) if attempts > 1 => {
                    stale = stale.max(Some(version));
                    again.push(i);
                }
                // Its approval was used meanwhile: decided again alone, as a single check.
                Err(StoreError::Conflict(_)) => {
                    answers[i] = Some(
                        check_input(ctx, Ground::Key(access), actor, input, None, attempts).await,
                    );
                }
                Err(err) => answers[i] = Some(Err(err.into())),
            }
        }
        if let Some(version) = stale {
            ground = ground.renewed(ctx, version).await?;
            attempts -= 1;
        }
        todo = again;
    }
    answers.truncate(included);
    Ok(answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(CheckError::internal(
                    "the workspace kept changing while this request was decided; retry",
                ))
            })
        })
        .collect())
}

/// What an agent's own check does besides deciding.
pub enum AgentCheck<'a> {
    /// Only asks (`/v1/vault/policy/eval`): a person's approval of the same request is reported
    /// as an allow but not used up.
    Ask,
    /// Acts: with an allow, `effect` commits in the same transaction as the decision, so both
    /// happen or neither does (a refused effect is answered as its store error, the decision
    /// still audited, an approval not used up).
    Act(&'a Effect),
}

/// The change an allowed action makes, and its events (their `trace_id` is the decision's).
#[derive(Debug, Clone)]
pub struct Effect {
    pub op: Op,
    pub audit: Vec<AuditRecord>,
}

/// A check an agent asks for itself (the vault's actions, the MCP gateway's calls): the decision
/// is made under `view` (of the agent's workspace); with a signed request's `nonce`, it commits
/// with the nonce's claim, so a replay is refused and a request refused for another reason does
/// not spend it.
pub async fn check_for_agent(
    ctx: &Context,
    view: View,
    nonce: Option<NonceClaim>,
    actor: &Actor,
    req: api::CheckRequest,
    mode: AgentCheck<'_>,
) -> CheckResult<api::DecisionResponse> {
    let input = CheckInput::read(req, None)?;
    let mut ground = Ground::Agent(view, nonce);
    for _ in 1..RESERVE_ATTEMPTS {
        let dry = matches!(mode, AgentCheck::Ask);
        let (mut change, decided) =
            decide(ctx, ground.view(), actor, &input, None, dry, Raiser::Agent).await?;
        if let Ground::Agent(_, Some(nonce)) = &ground {
            change = change.with_nonce(nonce.clone());
        }
        let effect = match mode {
            AgentCheck::Act(effect) if decided.decision.outcome == Outcome::Allow => Some(effect),
            _ => None,
        };
        // The decision alone, to audit it when the effect is refused (nothing else of it
        // happens: no approval is used up).
        let alone = effect.map(|_| Change {
            op: Op::Nothing,
            ..change.clone()
        });
        if let Some(effect) = effect {
            change.op = one_op(
                [
                    std::mem::replace(&mut change.op, Op::Nothing),
                    effect.op.clone(),
                ]
                .into_iter()
                .filter(|op| !matches!(op, Op::Nothing))
                .collect(),
            );
            change
                .audit
                .extend(effect.audit.iter().cloned().map(|mut e| {
                    e.trace_id = Some(decided.trace_id.clone());
                    e
                }));
        }
        match ctx.writer.commit(change).await {
            Ok(_) => {
                decided.notify_approvers(ctx);
                return Ok(decided.answer(input.policy_id));
            }
            Err(StoreError::Stale(version)) => {
                ground = ground.renewed(ctx, version).await?;
            }
            // The approval was used by a concurrent request: decide again.
            Err(StoreError::Conflict(why)) if why == APPROVAL_USED && decided.human.is_some() => {}
            Err(refused) => {
                if let Some(mut alone) = alone {
                    for event in &mut alone.audit {
                        event
                            .details
                            .insert("effect_refused", serde_json::json!(true));
                    }
                    if let Err(err) = ctx.writer.commit(alone).await {
                        tracing::warn!(error = %err, "the decision of a refused vault action was not recorded");
                    }
                }
                return Err(refused.into());
            }
        }
    }
    Err(CheckError::internal(
        "the workspace kept changing while this request was decided; retry",
    ))
}

/// What a check stands on: an API key's access (renewed through the key when its workspace
/// moved on, so a key revoked meanwhile is refused), or an agent's signed request.
enum Ground<'a> {
    Key(&'a KeyAccess),
    RenewedKey(Box<KeyAccess>),
    Agent(View, Option<NonceClaim>),
}

impl Ground<'_> {
    fn view(&self) -> &View {
        match self {
            Ground::Key(access) => &access.view,
            Ground::RenewedKey(access) => &access.view,
            Ground::Agent(view, _) => view,
        }
    }

    /// The same ground on the workspace's state at `version` (read by a batch that found the
    /// decision stale).
    async fn renewed(self, ctx: &Context, version: i64) -> CheckResult<Self> {
        let store = ctx.store.as_ref();
        Ok(match self {
            Ground::Key(access) => Ground::RenewedKey(Box::new(
                ctx.caches
                    .renew(store, access, version)
                    .await?
                    .ok_or_else(Refusal::invalid_api_key)?,
            )),
            Ground::RenewedKey(access) => Ground::RenewedKey(Box::new(
                ctx.caches
                    .renew(store, &access, version)
                    .await?
                    .ok_or_else(Refusal::invalid_api_key)?,
            )),
            Ground::Agent(view, nonce) => {
                Ground::Agent(ctx.caches.advance(&view.workspace_id, version), nonce)
            }
        })
    }
}

/// A check; with `reserve`, an allow also reserves the email send in the same transaction as
/// the decision's audit event, against the very counts the decision saw (deciding again, at
/// most `attempts` times in all, when other sends of the agent got in first). The decision is
/// made on cached state under the ground's view and commits only if that view is still
/// current; otherwise it is made again on fresh state (a key revoked meanwhile answers 401).
async fn check_with(
    ctx: &Context,
    ground: Ground<'_>,
    actor: &Actor,
    req: api::CheckRequest,
    reserve: Option<&EmailReservation>,
    attempts: u32,
) -> CheckResult<api::DecisionResponse> {
    let input = CheckInput::read(req, None)?;
    check_input(ctx, ground, actor, &input, reserve, attempts).await
}

/// [`check_with`] on a request already read.
async fn check_input(
    ctx: &Context,
    ground: Ground<'_>,
    actor: &Actor,
    input: &CheckInput,
    reserve: Option<&EmailReservation>,
    attempts: u32,
) -> CheckResult<api::DecisionResponse> {
    let mut attempts = attempts;
    let mut ground = ground;
    loop {
        let (change, decided) = decide(
            ctx,
            ground.view(),
            actor,
            input,
            reserve,
            false,
            Raiser::Backend,
        )
        .await?;
        match ctx.writer.commit(change).await {
            Ok(_) => {
                decided.notify_approvers(ctx);
                return Ok(decided.answer(input.policy_id.clone()));
            }
            // Decided on state another request replaced meanwhile: decide again on fresh state.
            Err(StoreError::Stale(version)) if attempts > 1 => {
                ground = ground.renewed(ctx, version).await?;
                attempts -= 1;
            }
            // The approval was used by a concurrent re-check: this request asks again.
            // Or another send of the agent got in first: decide again with the new counts.
            Err(StoreError::Conflict(_))
                if decided.human.is_some() || reserve.is_some() && attempts > 1 =>
            {
                attempts = attempts.saturating_sub(1);
            }
            Err(StoreError::Conflict(_)) if reserve.is_some() => {
                return Err(CheckError::ConcurrentSends);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A check request, read and validated once: every attempt at deciding it reads this.
pub(crate) struct CheckInput {
    agent_id: String,
    /// Trimmed.
    action: String,
    /// An object (`{}` when the request has none): the check's own context fields, over
    /// `shared`.
    context: Value,
    /// Fields shared with the other checks of the request, under its own.
    shared: Option<Arc<Map<String, Value>>>,
    /// The email facts as sent (`null` when absent), for the request's fingerprint.
    email_json: Value,
    email: Option<EmailFacts>,
    /// `pol_default` when the request names none.
    policy_id: PolicyId,
}

impl CheckInput {
    pub(crate) fn read(
        req: api::CheckRequest,
        shared: Option<Arc<Map<String, Value>>>,
    ) -> CheckResult<Self> {
        if req.agent_id.is_empty() {
            return Err(CheckError::missing("agent_id"));
        }
        let action = req.action.trim();
        if action.is_empty() {
            return Err(CheckError::missing("action"));
        }
        if action.chars().count() > 128
            || action
                .chars()
                .any(|c| c.is_control() || c == '"' || c == '\\')
        {
            return Err(CheckError::invalid(
                "action",
                "must be at most 128 printable characters",
            ));
        }
        let context = match req.context {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v,
            Some(_) => return Err(CheckError::invalid("context", "must be an object")),
        };
        let email_json = req.email.unwrap_or(Value::Null);
        let email = match &email_json {
            Value::Null if action == "send_email" => return Err(CheckError::missing("email")),
            Value::Null => None,
            v => Some(
                EmailFacts::from_json(v, crate::mail::address_of).map_err(|_| {
                    CheckError::invalid("email", "must be {to, cc, bcc, subject, attachments}")
                })?,
            ),
        };
        let policy_id = match req.policy_id.filter(|p| !p.is_empty()) {
            None => PolicyId::default_policy(),
            Some(id) => PolicyId::from_string(id).ok_or_else(unknown_policy)?,
        };
        Ok(Self {
            agent_id: req.agent_id,
            action: action.to_owned(),
            context,
            shared,
            email_json,
            email,
            policy_id,
        })
    }

    /// The action, trimmed.
    pub(crate) fn action(&self) -> &str {
        &self.action
    }

    /// The email facts, when the check has some.
    pub(crate) fn email(&self) -> Option<&EmailFacts> {
        self.email.as_ref()
    }

    /// The context's fields: its own over the shared ones.
    pub(crate) fn fields(&self) -> ContextFields<'_> {
        ContextFields::layered(&self.context, self.shared.as_deref())
    }

    /// The canonical request fingerprint: action, context and email facts, object keys sorted
    /// so that the client's key order does not matter.
    fn fingerprint(&self) -> String {
        let canonical = json!([
            self.action,
            sort_keys(self.fields().to_value()),
            sort_keys(self.email_json.clone())
        ]);
        sha256_hex(canonical.to_string().as_bytes())
    }
}

/// What one attempt decided: what the answer says, once the change that records it commits.
struct Decided {
    decision: Decision,
    policy: Arc<LoadedPolicy>,
    trace_id: String,
    /// A human's earlier answer to this very request, when one decided it.
    human: Option<PolicyChallenge>,
    challenge: Option<NewChallenge>,
    /// What the policy could not read in the request as its rules expect.
    warnings: Vec<api::DecisionWarning>,
}

/// One attempt at a check, on the caches' state under `view`, step by step: the decision and
/// the change that records it.
async fn decide(
    ctx: &Context,
    view: &View,
    actor: &Actor,
    input: &CheckInput,
    reserve: Option<&EmailReservation>,
    dry: bool,
    raiser: Raiser,
) -> CheckResult<(Change, Decided)> {
    let at = Attempt::load(ctx, view, input).await?;
    let counts = at.email_counts().await?;
    let mut decision = at.evaluate(counts)?;
    let warnings = at.warnings();
    let mut ops = Vec::new();
    // Only challenges need the fingerprint: allow and deny answers skip the hashing.
    let fingerprint = (decision.outcome == Outcome::Challenge).then(|| input.fingerprint());
    let human = match &fingerprint {
        Some(fingerprint) => at.human_answer(fingerprint, raiser).await?,
        None => None,
    };
    if let Some(human) = &human {
        let used = at.apply_human(&mut decision, human);
        if !dry {
            ops.extend(used);
        }
    }
    let trace_id = ids::new_id(ids::TRACE);
    let challenge = match fingerprint.filter(|_| decision.outcome == Outcome::Challenge) {
        Some(fingerprint) => {
            let (challenge, op) = at.challenge(&decision, fingerprint, &trace_id, raiser);
            ops.push(op);
            Some(challenge)
        }
        None => None,
    };
    if let (Some(reserve), Outcome::Allow) = (reserve, decision.outcome) {
        ops.push(at.reservation(reserve, counts));
    }
    let mut change = Change::default().on(view.basis());
    change.op = one_op(ops);
    change.audit.push(at.event(
        actor,
        &decision,
        &trace_id,
        challenge.as_ref().map(|c| c.id.as_str()),
        human.as_ref(),
        counts,
        &warnings,
    ));
    let decided = Decided {
        decision,
        policy: at.policy,
        trace_id,
        human,
        challenge,
        warnings,
    };
    Ok((change, decided))
}

impl Decided {
    /// Mails the approval link of a new challenge, when the deciding rules name approvers, from
    /// a task of its own: the answer never waits on the mail provider (the challenge is
    /// committed already; the mail is claimed and sent after the answer).
    fn notify_approvers(&self, ctx: &Context) {
        let Some(challenge) = &self.challenge else {
            return;
        };
        if let (Some(record), Some(approval)) = (&challenge.notify, &self.decision.approval) {
            let mail = Notify {
                writer: ctx.writer.clone(),
                store: ctx.store.clone(),
                mailer: ctx.mailer.clone(),
            };
            let (record, link, approval) = (
                record.clone(),
                challenge.approval_link.clone(),
                approval.clone(),
            );
            // In the request's span: its log lines keep the request's ids.
            ctx.background.spawn(
                async move { notify_approvers(&mail, &record, &link, &approval).await }
                    .in_current_span(),
            );
        }
    }

    /// The answer to the committed decision (counted in the decision metrics here: it is
    /// recorded).
    fn answer(self, policy_id: PolicyId) -> api::DecisionResponse {
        let (challenge_id, challenge) = match self.challenge {
            Some(c) => (Some(c.id), Some(c.info)),
            None => (None, None),
        };
        let decision = self.decision;
        self.policy
            .metrics
            .record(decision.outcome.as_str(), &decision.reason_codes);
        api::DecisionResponse {
            ok: true,
            decision: decision.outcome.as_str().into(),
            trace_id: self.trace_id,
            reasons: decision.reasons,
            reason_codes: decision.reason_codes,
            policy_id: policy_id.into_string(),
            policy_hash: self.policy.compiled.hash.clone(),
            policy_version: self.policy.version,
            determining_policies: decision.determining_policies,
            challenge_id,
            challenge,
            warnings: self.warnings,
        }
    }
}

/// What every step of one attempt reads: the request, the agent and the compiled policy as of
/// one view, and the time of the attempt.
struct Attempt<'a> {
    ctx: &'a Context,
    view: &'a View,
    input: &'a CheckInput,
    agent: Arc<CachedAgent>,
    policy: Arc<LoadedPolicy>,
    now: i64,
}

impl<'a> Attempt<'a> {
    /// The agent and the compiled policy from the caches: `unknown_agent` unless the agent is
    /// in the view's workspace, `unknown_policy` unless the policy is.
    async fn load(ctx: &'a Context, view: &'a View, input: &'a CheckInput) -> CheckResult<Self> {
        let store = ctx.store.as_ref();
        let agent = ctx.caches.known_agent(store, view, &input.agent_id).await?;
        let policy = ctx
            .caches
            .policy(store, view, &input.policy_id)
            .await?
            .ok_or_else(unknown_policy)?;
        Ok(Self {
            ctx,
            view,
            input,
            agent,
            policy,
            now: now_ms(),
        })
    }

    /// The agent's emails in the last minute and day, for a `send_email` check under a policy
    /// whose rules read them (emails sent through `/v1/email/send` count towards the email
    /// block's rate limits); `None`, and no read, otherwise.
    async fn email_counts(&self) -> CheckResult<Option<(i64, i64)>> {
        if self.input.action != "send_email" || !self.policy.compiled.counts_emails {
            return Ok(None);
        }
        let (minute_ago, day_ago) = (self.now - 60_000, self.now - 86_400_000);
        let counts = self
            .ctx
            .store
            .email_counts(
                &self.view.workspace_id,
                &self.agent.agent.id,
                minute_ago,
                day_ago,
            )
            .await?;
        Ok(Some(counts))
    }

    /// The policy's decision (see `Caches::decide`).
    fn evaluate(&self, counts: Option<(i64, i64)>) -> CheckResult<Decision> {
        let (sent_minute, sent_day) = counts.unwrap_or((0, 0));
        let sent = (
            u64::try_from(sent_minute).unwrap_or(0),
            u64::try_from(sent_day).unwrap_or(0),
        );
        let input = self.input;
        let facts = self
            .agent
            .facts(&input.action, input.fields(), input.email.as_ref(), sent);
        self.ctx
            .caches
            .decide(&self.agent, &self.policy.compiled, &facts)
            .map_err(CheckError::internal)
    }

    /// The request's context fields that the policy's rules read as numbers but that hold
    /// another JSON type. The compiled policy lists those fields: a check looks up only them,
    /// and allocates nothing when they are numbers or absent.
    fn warnings(&self) -> Vec<api::DecisionWarning> {
        super::evaluate::field_warnings(
            &self.policy.compiled,
            &self.input.action,
            self.input.fields(),
        )
        .into_iter()
        .map(api::DecisionWarning::from)
        .collect()
    }

    /// A human's answer to this very request (same agent and fingerprint) within the time an
    /// answer counts for. For an agent's own request only a person's approval counts: an
    /// approval link that decided a backend's challenge of the same request on its own (the
    /// public-link flow) must not approve what the agent asks for itself.
    async fn human_answer(
        &self,
        fingerprint: &str,
        raiser: Raiser,
    ) -> CheckResult<Option<PolicyChallenge>> {
        let since = self.now - crate::domain::challenge::DECISION_TTL_MS;
        Ok(self
            .ctx
            .store
            .decided_challenge(
                &self.view.workspace_id,
                &self.agent.agent.id,
                fingerprint,
                since,
                raiser == Raiser::Agent,
            )
            .await?)
    }

    /// A human already decided this very request: an approval allows it once (the operation
    /// that uses the approval up), a deny denies it.
    fn apply_human(&self, decision: &mut Decision, human: &PolicyChallenge) -> Option<Op> {
        if human.status == ChallengeStatus::Approved {
            decision.outcome = Outcome::Allow;
            decision.reasons = Vec::new();
            decision.reason_codes = vec![APPROVED.into()];
            Some(
                PolicyOp::ConsumeApproval {
                    id: human.id.clone(),
                    at: self.now,
                }
                .into(),
            )
        } else {
            decision.outcome = Outcome::Deny;
            decision.reasons = vec!["a human denied this request".into()];
            decision.reason_codes = vec![APPROVAL_DENIED.into()];
            None
        }
    }

    /// A policy challenge for a challenged request, and the operation that stores it: its
    /// approval link's token is made here and only its hash is stored. A backend's answer
    /// carries the approval link; an agent asking for itself gets a status link instead (the
    /// approval link reaches the approvers only, by mail).
    fn challenge(
        &self,
        decision: &Decision,
        fingerprint: String,
        trace_id: &str,
        raiser: Raiser,
    ) -> (NewChallenge, Op) {
        let (input, now) = (self.input, self.now);
        let ttl_ms = decision
            .approval
            .as_ref()
            .and_then(|a| a.ttl_secs)
            .map_or(challenge::CHALLENGE_TTL_MS, |s| {
                i64::try_from(s).unwrap_or(86_400) * 1000
            });
        let token = format!("apr_{}", random_base62(43));
        let id = ids::new_id(ids::POLICY_CHALLENGE);
        let record = PolicyChallenge {
            id: id.clone(),
            workspace_id: self.view.workspace_id.clone(),
            agent_id: self.agent.agent.id.clone(),
            policy_id: input.policy_id.as_str().to_owned(),
            action: input.action.clone(),
            fingerprint,
            token_hash: sha256_hex(token.as_bytes()),
            status: ChallengeStatus::Pending,
            reasons: decision.reasons.clone(),
            reason_codes: decision.reason_codes.clone(),
            // What an approver sees: the agent, and the values the deciding rules read.
            summary: super::challenge::request_summary(
                &self.agent.agent.name,
                &decision.reads,
                input.fields(),
                input.email.as_ref(),
            ),
            trace_id: trace_id.to_owned(),
            created_at: now,
            expires_at: now + ttl_ms,
            decided_at: None,
            decided_by: None,
            decision_reason: None,
            consumed_at: None,
            raised_by: raiser,
            approvers: decision
                .approval
                .as_ref()
                .map(|a| {
                    a.approvers
                        .iter()
                        .map(|e| e.trim().to_ascii_lowercase())
                        .collect()
                })
                .unwrap_or_default(),
        };
        let approval_link = format!("{}/v1/approval-links/{token}", self.ctx.public_url);
        let (kind, url) = match raiser {
            Raiser::Backend => ("approval_link", approval_link.clone()),
            Raiser::Agent => (
                "status_link",
                format!("{}/v1/policy-challenges/{id}/status", self.ctx.public_url),
            ),
        };
        let challenge = NewChallenge {
            id,
            info: api::ChallengeInfo {
                kind: kind.into(),
                url,
                expires_at: iso(record.expires_at),
                expires_in: ttl_ms / 1000,
            },
            approval_link,
            notify: decision.approval.is_some().then(|| record.clone()),
        };
        (
            challenge,
            PolicyOp::CreateChallenge(Box::new(record)).into(),
        )
    }

    /// The email send reserved with an allow decision.
    fn reservation(&self, reserve: &EmailReservation, counts: Option<(i64, i64)>) -> Op {
        EmailOp::Reserve {
            id: reserve.id.clone(),
            workspace_id: self.view.workspace_id.clone(),
            agent_id: self.agent.agent.id.clone(),
            recipients: reserve.recipients,
            // A decision that did not read the counts does not depend on them: no need to
            // decide again when other sends got in first.
            seen: counts,
            at: self.now,
        }
        .into()
    }

    /// The decision's audit event, its details written as text at once (see
    /// [`EventDetails`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "each is one field of the recorded event, borrowed from the attempt"
    )]
    fn event(
        &self,
        actor: &Actor,
        decision: &Decision,
        trace_id: &str,
        challenge_id: Option<&str>,
        human: Option<&PolicyChallenge>,
        counts: Option<(i64, i64)>,
        warnings: &[api::DecisionWarning],
    ) -> AuditRecord {
        let input = super::impact::replay_input(
            self.agent.facts_json(),
            self.input.fields(),
            self.input.email.as_ref(),
            counts,
        );
        let details = EventDetails {
            policy_version: self.policy.version,
            determining_policies: &decision.determining_policies,
            challenge_id,
            approval: human.map(|h| EventApproval {
                challenge_id: &h.id,
                status: h.status.as_str(),
                decided_by: h.decided_by.as_deref(),
            }),
            input: &input,
            warnings,
        };
        AuditRecord {
            id: ids::new_id(ids::EVENT),
            workspace_id: Some(self.view.workspace_id.clone()),
            created_at: self.now,
            event_type: "decision.check".into(),
            agent_id: Some(self.agent.agent.id.clone()),
            action: Some(self.input.action.clone()),
            decision: Some(decision.outcome.as_str().into()),
            policy_id: Some(self.input.policy_id.as_str().to_owned()),
            policy_hash: Some(self.policy.compiled.hash.clone()),
            trace_id: Some(trace_id.to_owned()),
            reasons: decision.reasons.clone(),
            reason_codes: decision.reason_codes.clone(),
            actor: actor.label(),
            details: Details::Text(super::impact::raw(&details)),
        }
    }
}

/// A decision event's details, written as JSON text straight from the decision (no tree).
#[derive(serde::Serialize)]
struct EventDetails<'a> {
    policy_version: i64,
    determining_policies: &'a [String],
    challenge_id: Option<&'a str>,
    /// The human answer the decision used.
    approval: Option<EventApproval<'a>>,
    /// What the evaluation read, for the replay of a policy change.
    input: &'a serde_json::value::RawValue,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    warnings: &'a [api::DecisionWarning],
}

#[derive(serde::Serialize)]
struct EventApproval<'a> {
    challenge_id: &'a str,
    status: &'a str,
    decided_by: Option<&'a str>,
}

/// The operations of one change as one: none, the one, or a batch in order.
fn one_op(mut ops: Vec<Op>) -> Op {
    match ops.len() {
        0 => Op::Nothing,
        1 => ops.remove(0),
        _ => Op::Batch(ops),
    }
}

/// A policy challenge made by a check, committed with its decision.
struct NewChallenge {
    id: String,
    /// What the caller is answered.
    info: api::ChallengeInfo,
    /// The deciding link, for the approvers' mail.
    approval_link: String,
    /// The record, when the deciding rules name approvers to mail once it is committed.
    notify: Option<PolicyChallenge>,
}

/// What the approvers' mail needs of the server's context, owned by the task that sends it.
struct Notify {
    writer: crate::store::GroupCommit,
    store: Arc<dyn crate::store::Store>,
    mailer: Arc<dyn crate::mail::Mailer>,
}

/// Mails the approval link to the approvers the deciding rules name: once per agent and
/// request while a mailed challenge for it is pending, and at most
/// [`challenge::APPROVAL_MAILS_PER_AGENT`] an hour per agent (the challenge itself is made and
/// listed either way). A delivery failure is logged, not fatal: the challenge is on the
/// console's approvals page and in `acp challenges list`.
async fn notify_approvers(
    ctx: &Notify,
    record: &PolicyChallenge,
    approval_link: &str,
    approval: &ApprovalRules,
) {
    let workspace_id = &record.workspace_id;
    let notice = ApprovalNotice {
        workspace_id: workspace_id.clone(),
        agent_id: record.agent_id.clone(),
        fingerprint: record.fingerprint.clone(),
        challenge_id: record.id.clone(),
        now: record.created_at,
        expires_at: record.expires_at,
        window_start: record.created_at - challenge::APPROVAL_MAIL_WINDOW_MS,
        max_per_window: challenge::APPROVAL_MAILS_PER_AGENT,
    };
    match ctx
        .writer
        .commit(Change::new(PolicyOp::ClaimApprovalNotice(Box::new(notice))))
        .await
    {
        Ok(Applied::Count(n)) if n > 0 => {}
        Ok(_) => {
            tracing::debug!(challenge_id = %record.id, "approval mail not sent: one is open for this request");
            return;
        }
        Err(StoreError::Conflict(why)) if why == APPROVAL_MAILS_SPENT => {
            tracing::info!(challenge_id = %record.id, agent_id = %record.agent_id, "approval mail not sent: the agent reached its hourly bound");
            return;
        }
        Err(err) => {
            tracing::error!(error = %err, "approval mail could not be claimed");
            return;
        }
    }
    let mut to: Vec<String> = approval
        .approvers
        .iter()
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    if let Some(role) = approval
        .approver_role
        .as_deref()
        .and_then(crate::domain::Role::parse)
    {
        match ctx.store.members(workspace_id).await {
            Ok(members) => to.extend(
                members
                    .into_iter()
                    .filter(|(_, r)| *r >= role)
                    .map(|(u, _)| u.email),
            ),
            Err(err) => tracing::error!(error = %err, "approvers by role could not be read"),
        }
    }
    to.sort();
    to.dedup();
    if to.is_empty() {
        return;
    }
    let text = super::challenge::approval_email_text(
        &record.agent_id,
        &record.action,
        &record.reasons,
        &record.summary,
        approval_link,
        record.expires_at,
    );
    let mail = crate::mail::Email {
        to,
        subject: format!(
            "Approval needed: {} by {}",
            record.action,
            super::challenge::agent_label(&record.summary, &record.agent_id)
        ),
        text: Some(text),
        ..Default::default()
    };
    if let Err(err) = ctx.mailer.send(&mail).await {
        tracing::error!(error = %err, "approval notification failed");
    }
}
