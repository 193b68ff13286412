"""The backend: what a service that agents call does with the workspace API key: decisions,
verifying an agent's signed request, token exchange, credentials, workflow leases."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import urlencode

from . import _http
from ._signing import (
    AGENT_ID_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Body,
    body_sha256,
    encode_json,
    signed_path,
)
from .agent import _challenge_path, _wait, _without_none
from .types import Decision, Verification

_SIGNATURE_HEADERS = (AGENT_ID_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)


def _signature_headers(headers: Mapping[str, str]) -> Optional[Dict[str, str]]:
    """The four signature headers of a received request (names compared case-insensitively),
    or None when one is absent or empty."""
    lower = {k.lower(): v for k, v in headers.items()}
    found = {name: lower.get(name.lower(), "") for name in _SIGNATURE_HEADERS}
    return found if all(found.values()) else None


class Backend:
    """A backend holding a workspace API key (`svc_live_...` or `svc_test_...`)."""

    def __init__(
        self, base_url: str, api_key: str, timeout: float = _http.DEFAULT_TIMEOUT
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Backend(base_url={self.base_url!r})"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else encode_json(body)
        return _http.request(
            method,
            _http.join(self.base_url, path),
            {"X-Service-Api-Key": self._api_key},
            data,
            self.timeout,
        )

    # ---- decisions ------------------------------------------------------------------------

    def check(
        self,
        agent_id: str,
        action: str,
        context: Optional[Dict[str, Any]] = None,
        policy_id: Optional[str] = None,
        email: Optional[Dict[str, Any]] = None,
    ) -> Decision:
        """May the agent do this, right now? Ask right before acting, and act only on
        `allow`; `challenge` and `deny` are answers, not errors."""
        body = _without_none(
            agent_id=agent_id,
            action=action,
            context=context if context is not None else {},
            policy_id=policy_id,
            email=email,
        )
        return Decision.from_json(self._call("POST", "/v1/check", body))

    def challenge_status(self, challenge_id: str) -> Dict[str, Any]:
        """A policy challenge's status (`pending`, `approved`, `denied`, `expired`)."""
        if not challenge_id or "/" in challenge_id:
            raise ValueError(f"not a challenge id: {challenge_id!r}")
        return self._call("GET", f"/v1/policy-challenges/{challenge_id}")["challenge"]

    def wait_for_challenge(
        self, challenge_id: str, timeout: float = 300.0, interval: float = 2.0
    ) -> Dict[str, Any]:
        """Polls until a person decides (or the challenge expires); then check again."""
        return _wait(lambda: self.challenge_status(challenge_id), timeout, interval)

    # ---- identity -------------------------------------------------------------------------

    def verify(
        self, method: str, path: str, headers: Mapping[str, str], body: Body = None
    ) -> Verification:
        """Asks the server whether a request this backend received was signed by an agent of
        its workspace: the request's method, path (the query string is left out), headers and
        raw body. A valid answer spends the request's nonce. A request without the four
        signature headers, or with a timestamp that is not a number, is not sent: it is not
        valid (`missing_signature_headers`, `timestamp_out_of_range`)."""
        found = _signature_headers(headers)
        if found is None:
            return _not_valid("missing_signature_headers", None)
        timestamp = found[TIMESTAMP_HEADER]
        if not timestamp.isdigit() or len(timestamp) > 18:
            return _not_valid("timestamp_out_of_range", found[AGENT_ID_HEADER])
        answer = self._call(
            "POST",
            "/v1/verify",
            {
                "agent_id": found[AGENT_ID_HEADER],
                "method": method.upper(),
                "path": signed_path(path),
                "timestamp_ms": int(timestamp),
                "nonce": found[NONCE_HEADER],
                "body_sha256": body_sha256(body),
                "signature_b64": found[SIGNATURE_HEADER],
            },
        )
        return Verification.from_json(answer)

    def exchange_token(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: Body = None,
        audience: Optional[str] = None,
        scopes: Optional[List[str]] = None,
        ttl_seconds: Optional[int] = None,
        policy_id: Optional[str] = None,
        context: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        """Trades a request the agent signed (as for `verify`) for a short-lived EdDSA JWT,
        if the policy allows `token_exchange`: `{ok, token, token_type, expires_in}`."""
        found = _signature_headers(headers)
        if found is None:
            raise ValueError(
                "the request carries no agent signature (X-Service-Agent-Id, "
                "X-Service-Timestamp, X-Service-Nonce, X-Service-Signature)"
            )
        proof = {
            "method": method.upper(),
            "path": signed_path(path),
            "timestamp_ms": found[TIMESTAMP_HEADER],
            "nonce": found[NONCE_HEADER],
            "body_sha256": body_sha256(body),
            "signature_b64": found[SIGNATURE_HEADER],
        }
        request = _without_none(
            agent_id=found[AGENT_ID_HEADER],
            agent_request=proof,
            audience=audience,
            scopes=scopes,
            ttl_seconds=ttl_seconds,
            policy_id=policy_id,
            context=context,
        )
        return self._call("POST", "/v1/token/exchange", request)

    # ---- credentials ----------------------------------------------------------------------

    def mint_credential(
        self,
        agent_id: str,
        audience: Optional[str] = None,
        scopes: Optional[List[str]] = None,
        ttl_seconds: Optional[int] = None,
        one_time: Optional[bool] = None,
        token_type: Optional[str] = None,
        provider: Optional[str] = None,
        policy_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Mints a short-lived credential for the agent, if the policy allows
        `mint_credential`: `{cred_id, token, token_type, expires_at, one_time, audience,
        scopes}` (the token is shown this once)."""
        body = _without_none(
            agent_id=agent_id,
            audience=audience,
            scopes=scopes,
            ttl_seconds=ttl_seconds,
            one_time=one_time,
            token_type=token_type,
            provider=provider,
            policy_id=policy_id,
        )
        return self._call("POST", "/v1/identity/credentials/mint", body)["credential"]

    def introspect(self, token: str) -> Dict[str, Any]:
        """Is this credential good now? `{active, cred_id, agent_id, audience, scopes, ...}`
        (a one-time credential is active for its first introspection only)."""
        return self._call("POST", "/v1/identity/introspect", {"token": token})

    def revoke_credential(
        self,
        token: Optional[str] = None,
        cred_id: Optional[str] = None,
        reason: Optional[str] = None,
    ) -> int:
        """Revokes one credential, by its token or its id; answers how many were revoked."""
        if (token is None) == (cred_id is None):
            raise ValueError("name the credential by token or by cred_id")
        body = _without_none(token=token, cred_id=cred_id, reason=reason)
        return int(self._call("POST", "/v1/identity/credentials/revoke", body)["revoked"])

    def revoke_agent_credentials(self, agent_id: str, reason: Optional[str] = None) -> int:
        """Revokes every live credential of the agent; answers how many."""
        body = _without_none(agent_id=agent_id, reason=reason)
        return int(
            self._call("POST", "/v1/identity/credentials/revoke-by-agent", body)["revoked"]
        )

    # ---- vault and telemetry --------------------------------------------------------------

    def workflow_lease(
        self,
        agent_id: str,
        secret_set_id: Union[str, int],
        purpose: str,
        actions: List[str],
        ttl_seconds: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Hands the agent a workflow lease for a job (`actions`: `read`, `proxy`):
        `{ok, lease_id, workflow_lease_token, expires_at}`."""
        body = _without_none(
            agent_id=agent_id,
            secret_set_id=secret_set_id,
            purpose=purpose,
            actions=actions,
            ttl_seconds=ttl_seconds,
        )
        return self._call("POST", "/v1/vault/leases/workflow", body)

    def recent_heartbeats(
        self, agent_id: Optional[str] = None, limit: Optional[int] = None
    ) -> List[Dict[str, Any]]:
        """The workspace's most recent heartbeats, newest first."""
        query = urlencode(_without_none(agent_id=agent_id, limit=limit))
        path = "/v1/telemetry/heartbeat/recent" + (f"?{query}" if query else "")
        return list(self._call("GET", path)["items"])


def _not_valid(reason: str, agent_id: Optional[str]) -> Verification:
    return Verification.from_json({"valid": False, "reason": reason, "agent_id": agent_id})
