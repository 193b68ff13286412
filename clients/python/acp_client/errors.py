"""The one error the client raises for an answer that is not a success."""

from __future__ import annotations

from typing import Any, Optional


class AcpError(Exception):
    """A refusal or failure: `status` (the HTTP status; `None` when the server could not be
    reached), `code` (the server's stable `error` code, such as `bad_signature`), `message`
    (the server's human text) and `body` (the whole error body, with extra fields such as
    `retry_after`, `challenge_id` or, for `bad_signature`, `canonical_string` and `hint`)."""

    def __init__(self, status: Optional[int], code: str, message: str, body: Any) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        detail = f"{code}: {message}" if message else code
        if status is not None:
            detail = f"HTTP {status} {detail}"
        if isinstance(body, dict) and code == "bad_signature":
            if body.get("hint"):
                detail += f" (hint: {body['hint']})"
            if body.get("canonical_string") is not None:
                detail += f"\nthe server checked the signature against:\n{body['canonical_string']}"
        super().__init__(detail)

    def _field(self, name: str) -> Any:
        return self.body.get(name) if isinstance(self.body, dict) else None

    @property
    def canonical_string(self) -> Optional[str]:
        """For `bad_signature`: the canonical string the server built and checked."""
        return self._field("canonical_string")

    @property
    def hint(self) -> Optional[str]:
        """For `bad_signature`: `signature_not_base64` or `signature_wrong_length`."""
        return self._field("hint")

    @property
    def challenge_id(self) -> Optional[str]:
        """For `policy_challenge`: the challenge a person must decide."""
        return self._field("challenge_id")

    @property
    def challenge(self) -> Optional[dict]:
        """For `policy_challenge`: `{type, url, expires_at, expires_in}` (an agent gets its
        status link)."""
        return self._field("challenge")
