//! `POST /v1/vault/proxy/request`: acp makes the agent's call with the set's secrets injected
//! into a profile's declared slots, so the agent uses a secret it never holds. The call is
//! judged like every vault action (lease, grant, policy, with the target host in the policy's
//! context), the lease's use is spent before the upstream is called, and what comes back is
//! scrubbed of the secrets before the agent sees it; the call's outcome event is committed
//! beside the answer, not before it. The egress itself (address checks,
//! pinned connection, bounds) is `egress.rs`.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{json, Map, Value};
use tracing::Instrument as _;

use crate::api;
use crate::context::Context;

use super::agent::{self, Scene, Signer, VaultAction};
use crate::enforce::{EnforceError, EnforceResult};
use crate::net::egress::{self, EgressError, Profile, ProxyCall, Target};
use crate::policy::check::Effect;

/// A proxy call read against its profile: where it goes, checked against where the profile
/// lets the secrets go.
pub(super) struct Call {
    profile_name: String,
    profile: Profile,
    call: ProxyCall,
    target: Target,
}

impl Call {
    pub(super) fn read(scene: &Scene, profile_name: &str, request: &Value) -> EnforceResult<Call> {
        let profile = scene.profile(profile_name)?;
        let call = ProxyCall::from_json(request).map_err(refusal)?;
        let target = egress::target(&profile, &call).map_err(refusal)?;
        Ok(Call {
            profile_name: profile_name.to_owned(),
            profile,
            call,
            target,
        })
    }

    /// The keys the profile injects, in order.
    pub(super) fn keys(&self) -> Vec<String> {
        self.profile.keys().into_iter().collect()
    }

    /// The context of a `vault.proxy` check (see docs/policy-spec.md, "Vault checks").
    pub(super) fn context(&self, scene: &Scene, keys: &[String]) -> Map<String, Value> {
        let mut context = scene.context(keys);
        let t = &self.target;
        context.insert("profile".into(), json!(self.profile_name));
        context.insert("method".into(), json!(t.method));
        context.insert("path".into(), json!(t.path));
        context.insert("target_host".into(), json!(t.host));
        context.insert("target_host_patterns".into(), json!(t.host_patterns));
        context
    }
}

/// The answer to an egress refusal or failure.
fn refusal(err: EgressError) -> EnforceError {
    let message = err.to_string();
    match err {
        EgressError::InvalidRequest { field, message } => {
            EnforceError::invalid("request", format!("`request.{field}`: {message}"))
        }
        EgressError::SchemeNotAllowed => EnforceError::forbidden("scheme_not_allowed", message),
        EgressError::HostNotAllowed(_) => EnforceError::forbidden("host_not_allowed", message),
        EgressError::MethodNotAllowed(_)
        | EgressError::PathNotAllowed(_)
        | EgressError::PortNotAllowed(_) => EnforceError::forbidden("request_not_allowed", message),
        EgressError::DestinationNotAllowed(_) => {
            EnforceError::forbidden("destination_not_allowed", message)
        }
        EgressError::InvalidSecret(_) => EnforceError::forbidden("invalid_secret", message),
        EgressError::KeyMissing(_) => EnforceError::not_found("unknown_key", message),
        EgressError::Unresolvable(_) | EgressError::Unavailable(_) => EnforceError::Upstream {
            code: "upstream_unavailable",
            message,
            timeout: false,
        },
        EgressError::ResponseTooLarge(_) => EnforceError::Upstream {
            code: "upstream_response_too_large",
            message,
            timeout: false,
        },
        EgressError::Timeout => EnforceError::Upstream {
            code: "upstream_timeout",
            message,
            timeout: true,
        },
    }
}

/// The code an egress failure is audited with.
fn failure_code(err: &EnforceError) -> &'static str {
    match err {
        EnforceError::Upstream { code, .. } => code,
        EnforceError::Refused(r) if r.code == "destination_not_allowed" => {
            "destination_not_allowed"
        }
        _ => "failed",
    }
}

pub async fn proxy(
    ctx: &Context,
    signer: Signer<'_>,
    req: api::ProxyRequest,
) -> EnforceResult<api::ProxyResponse> {
    let leased = agent::Leased::request(
        ctx,
        &signer,
        &req.secret_set_id,
        &req.request_lease_token,
        VaultAction::Proxy,
    )
    .await?;
    let (scene, lease) = (&leased.scene, &leased.lease);
    let call = Call::read(scene, &req.profile, &req.request)?;
    let keys = scene.keys(Some(&call.keys()))?;
    agent::within_lease(lease, &keys, &scene.set.name)?;
    let grant = leased
        .grant(ctx, signer.agent, VaultAction::Proxy, &keys)
        .await?;
    scene.check_claims(req.environment.as_deref(), None)?;
    // Everything the agent's own input can fail is checked before the decision and the use:
    // the destination's addresses, then the call with the secrets in their slots.
    let destination = ctx
        .egress
        .destination(&call.target)
        .await
        .map_err(refusal)?;
    let entries = super::sets::open_entries(ctx, &scene.set, &scene.version)?;
    let secrets: BTreeMap<String, String> = entries
        .into_iter()
        .filter(|(k, _)| keys.contains(k))
        .collect();
    let outbound =
        egress::render(&call.profile, &call.call, &call.target, &secrets).map_err(refusal)?;
    drop(secrets);
    let t = &call.target;
    let base = json!({
        "lease_id": lease.id, "profile": call.profile_name, "method": t.method,
        "host": t.host, "port": t.port, "path": t.path, "keys": keys,
    });
    let effect = Effect {
        op: agent::use_of(&signer, scene, lease, &grant).into(),
        audit: vec![agent::event(
            &signer,
            scene,
            "vault.lease.used",
            "proxy",
            base.clone(),
        )],
    };
    let decision = agent::decide(
        ctx,
        &signer,
        VaultAction::Proxy,
        call.context(scene, &keys),
        &effect,
    )
    .await?;
    crate::observe::lease_used("proxy");
    let trace_id = decision.trace_id;

    let started = std::time::Instant::now();
    let sent = ctx.egress.send_to(&outbound, &destination).await;
    let outcome = match &sent {
        Ok(_) => "answered",
        Err(egress::EgressError::Timeout) => "timeout",
        Err(_) => "failed",
    };
    crate::observe::upstream_call(outcome, started.elapsed());
    let sent = sent.map_err(refusal);
    let mut details = base.clone();
    let mut events = Vec::new();
    let answered = match sent {
        Ok(mut upstream) => {
            let leaks = egress::scrub(&mut upstream, &outbound);
            details["status"] = json!(upstream.status);
            details["latency_ms"] = json!(upstream.latency_ms);
            if !leaks.is_empty() {
                let mut leak = base.clone();
                leak["leaks"] = leaks
                    .iter()
                    .map(|l| json!({"key": l.key, "place": l.place, "form": l.form}))
                    .collect();
                events.push(agent::event(
                    &signer,
                    scene,
                    "vault.proxy.leak_scrubbed",
                    "proxy",
                    leak,
                ));
            }
            Ok(upstream)
        }
        Err(err) => {
            details["error"] = json!(failure_code(&err));
            Err(err)
        }
    };
    events.insert(
        0,
        agent::event(&signer, scene, "vault.proxy.request", "proxy", details),
    );
    for event in &mut events {
        event.trace_id = Some(trace_id.clone());
    }
    let scrubbed = events
        .iter()
        .any(|e| e.event_type == "vault.proxy.leak_scrubbed");
    let change = crate::store::Change {
        audit: events,
        ..Default::default()
    };
    if scrubbed {
        // A scrubbed leak is committed before the answer, like the decision: the agent's
        // upstream echoed a secret, which the trail must hold whatever happens next.
        ctx.writer.commit(change).await?;
        return Ok(answer(answered?, trace_id));
    }
    // Otherwise the call's outcome is committed beside the answer, by a tracked task (a
    // graceful stop waits for it), with the next batch the writer makes (within 50 ms): the
    // request waits only on the decision and the lease's use, committed before the call, and
    // the outcome costs no commit of its own. A commit that fails is logged; the decision and
    // the use stay recorded.
    let writer = ctx.writer.clone();
    ctx.background.spawn(
        async move {
            if let Err(e) = writer.commit_lazily(change).await {
                tracing::error!(error = %e, "the proxied call's outcome event was not recorded");
            }
        }
        .in_current_span(),
    );
    Ok(answer(answered?, trace_id))
}

/// The agent's answer: the upstream's status, its headers (repeated ones joined) and its body,
/// as text when it is UTF-8.
fn answer(upstream: egress::Upstream, trace_id: String) -> api::ProxyResponse {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in upstream.headers {
        headers
            .entry(name)
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let (body, body_base64) = match String::from_utf8(upstream.body) {
        Ok(text) => (Some(text), None),
        Err(e) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
        ),
    };
    api::ProxyResponse {
        ok: true,
        status: upstream.status,
        headers,
        body,
        body_base64,
        trace_id,
    }
}
