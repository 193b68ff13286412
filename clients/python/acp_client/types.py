"""The answers that are more than a JSON object to read: decisions and verifications."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Decision:
    """A policy decision (`POST /v1/check`, `POST /v1/vault/policy/eval`).

    `decision` is `allow`, `challenge` or `deny` (lowercase); on `challenge`, `challenge_id`
    and `challenge` (`{type, url, expires_at, expires_in}`: an approval link for a backend, a
    status link for an agent asking for itself). `raw` is the whole answer."""

    decision: str
    trace_id: Optional[str]
    reasons: List[str]
    reason_codes: List[str]
    policy_id: Optional[str]
    policy_hash: Optional[str]
    determining_policies: List[str]
    challenge_id: Optional[str]
    challenge: Optional[Dict[str, Any]]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Decision":
        return cls(
            decision=str(body.get("decision", "")).lower(),
            trace_id=body.get("trace_id"),
            reasons=list(body.get("reasons") or []),
            reason_codes=list(body.get("reason_codes") or []),
            policy_id=body.get("policy_id"),
            policy_hash=body.get("policy_hash"),
            determining_policies=list(body.get("determining_policies") or []),
            challenge_id=body.get("challenge_id"),
            challenge=body.get("challenge"),
            raw=body,
        )

    @property
    def allowed(self) -> bool:
        """True only for `allow`: act on nothing else."""
        return self.decision == "allow"


@dataclass
class Verification:
    """The answer of `POST /v1/verify`. When `valid` is false, do not act on the request;
    `reason` says why, and for `bad_signature`, `canonical_string` is the string the server
    checked the signature against and `hint` says when the signature is not one at all."""

    valid: bool
    reason: Optional[str]
    agent_id: Optional[str]
    verified_at: Optional[str]
    verification_tier: Optional[str]
    risk_tier: Optional[str]
    revoked: bool
    canonical_string: Optional[str]
    hint: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Verification":
        return cls(
            valid=body.get("valid") is True,
            reason=body.get("reason"),
            agent_id=body.get("agent_id"),
            verified_at=body.get("verified_at"),
            verification_tier=body.get("verification_tier"),
            risk_tier=body.get("risk_tier"),
            revoked=body.get("revoked") is True,
            canonical_string=body.get("canonical_string"),
            hint=body.get("hint"),
            raw=body,
        )
