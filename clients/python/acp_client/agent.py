"""The agent: its own Ed25519 key, registration and attestation, and every request it signs."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Union

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from . import _http
from ._signing import (
    Body,
    b64decode,
    b64encode,
    body_bytes,
    encode_json,
    load_private_key,
    private_key_b64,
    public_key_b64,
    sign_request,
)
from .types import Decision

KEY_FILE_KEYS = ("agent_id", "private_key", "public_key", "server")

_STATUS_LINK = re.compile(r"/v1/policy-challenges/([^/?#]+)/status")


def _challenge_path(challenge: str) -> str:
    """The status link's API path, from a challenge id or the link itself."""
    found = _STATUS_LINK.search(challenge)
    challenge_id = found.group(1) if found else challenge
    if not challenge_id or "/" in challenge_id:
        raise ValueError(f"not a challenge id or status link: {challenge!r}")
    return f"/v1/policy-challenges/{challenge_id}/status"


class Agent:
    """An agent registered with the server, holding its private key.

    Make one with `Agent.create` (a new key, registered and attested), `Agent.from_key_file`
    (the key file `acp agents new` writes) or `Agent.from_private_key`."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        private_key: Ed25519PrivateKey,
        timeout: float = _http.DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.agent_id = agent_id
        self._key = private_key
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Agent(agent_id={self.agent_id!r}, base_url={self.base_url!r})"

    # ---- making one -----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        base_url: str,
        api_key: Optional[str],
        name: str,
        metadata: Optional[Dict[str, Any]] = None,
        private_key: Optional[Ed25519PrivateKey] = None,
        timeout: float = _http.DEFAULT_TIMEOUT,
    ) -> "Agent":
        """Generates a key (unless one is given), registers the agent (into the API key's
        workspace; without a key it is created unclaimed) and attests it: the answer is an
        active agent. Only the public key leaves this process."""
        key = private_key or Ed25519PrivateKey.generate()
        headers = {"X-Service-Api-Key": api_key} if api_key else {}
        registered = _http.request(
            "POST",
            _http.join(base_url, "/v1/agents/register"),
            headers,
            encode_json(
                {
                    "name": name,
                    "public_key": public_key_b64(key),
                    "key_type": "ed25519",
                    "metadata": metadata or {},
                }
            ),
            timeout,
        )
        agent = cls(base_url, registered["agent_id"], key, timeout)
        agent.attest(registered["challenge_id"], registered["challenge"])
        return agent

    def attest(self, challenge_id: str, challenge: str) -> Dict[str, Any]:
        """Proves the key: signs the base64-decoded challenge bytes (not the text)."""
        signature = b64encode(self._key.sign(b64decode(challenge)))
        return _http.request(
            "POST",
            _http.join(self.base_url, "/v1/agents/attest"),
            {},
            encode_json(
                {"agent_id": self.agent_id, "challenge_id": challenge_id, "signature": signature}
            ),
            self.timeout,
        )

    @classmethod
    def from_private_key(
        cls,
        base_url: str,
        agent_id: str,
        private_key: str,
        timeout: float = _http.DEFAULT_TIMEOUT,
    ) -> "Agent":
        """An agent from its id and its key: standard base64 of the PKCS#8 DER (or of the raw
        32-byte seed)."""
        return cls(base_url, agent_id, load_private_key(private_key), timeout)

    @classmethod
    def from_key_file(
        cls,
        path: Union[str, "os.PathLike[str]"],
        base_url: Optional[str] = None,
        timeout: float = _http.DEFAULT_TIMEOUT,
    ) -> "Agent":
        """An agent from its key file (`{agent_id, private_key, public_key, server}`), talking
        to the file's `server` unless `base_url` is given."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a key file is a JSON object")
        missing = [k for k in ("agent_id", "private_key") if not isinstance(data.get(k), str)]
        if missing:
            raise ValueError(f"{path}: the key file has no {', '.join(missing)}")
        server = base_url or data.get("server")
        if not isinstance(server, str) or not server:
            raise ValueError(f"{path}: the key file names no server; pass base_url")
        agent = cls.from_private_key(server, data["agent_id"], data["private_key"], timeout)
        if data.get("public_key") not in (None, agent.public_key):
            raise ValueError(f"{path}: `public_key` is not the private key's")
        return agent

    def key_file(self) -> Dict[str, str]:
        """The key file's content."""
        return {
            "agent_id": self.agent_id,
            "private_key": self.private_key,
            "public_key": self.public_key,
            "server": self.base_url,
        }

    def save_key_file(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the key file, readable by its owner only (mode 0600). An existing file is
        never overwritten (`FileExistsError`)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.key_file(), f, indent=2)
            f.write("\n")

    @property
    def private_key(self) -> str:
        """Standard base64 of the private key's PKCS#8 DER: the agent's secret."""
        return private_key_b64(self._key)

    @property
    def public_key(self) -> str:
        """Standard base64 of the raw 32-byte public key."""
        return public_key_b64(self._key)

    # ---- signing --------------------------------------------------------------------------

    def sign(
        self,
        method: str,
        path: str,
        body: Body = None,
        timestamp_ms: Optional[Union[int, str]] = None,
        nonce: Optional[str] = None,
    ) -> Dict[str, str]:
        """The four signature headers of a request: `path` is the API path as it will be sent
        (a query string is left out of the signature, as the server does), `body` its exact
        bytes (or text, signed as UTF-8). A fresh timestamp and nonce unless given."""
        return sign_request(self._key, self.agent_id, method, path, body, timestamp_ms, nonce)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A signed request to the server: `body` is JSON-serialized (bytes and text are sent
        as they are); answers the JSON answer, raises `AcpError` for an error."""
        if body is None:
            data = None
        elif isinstance(body, (bytes, str)):
            data = body_bytes(body)
        else:
            data = encode_json(body)
        headers = self.sign(method, path, data)
        return _http.request(
            method, _http.join(self.base_url, path), headers, data, self.timeout
        )

    # ---- telemetry ------------------------------------------------------------------------

    def heartbeat(self, status: str = "ok", latency_ms: float = 0) -> Dict[str, Any]:
        """A signed heartbeat: `{ok, agent_id, status, recorded_at}`."""
        return self.request(
            "POST",
            "/v1/telemetry/heartbeat",
            {"agent_id": self.agent_id, "status": status, "latency_ms": latency_ms},
        )

    # ---- the vault's agent side -----------------------------------------------------------

    def vault_eval(
        self,
        secret_set_id: Union[str, int],
        action: str,
        keys: Optional[List[str]] = None,
        environment: Optional[str] = None,
        provider: Optional[str] = None,
        profile: Optional[str] = None,
        request: Optional[Dict[str, Any]] = None,
    ) -> Decision:
        """How the policy judges a vault action (`read`, `proxy`, `mint_lease`) of this agent;
        nothing is consumed."""
        body = _without_none(
            secret_set_id=secret_set_id,
            action=action,
            keys=keys,
            environment=environment,
            provider=provider,
            profile=profile,
            request=request,
        )
        return Decision.from_json(self.request("POST", "/v1/vault/policy/eval", body))

    def request_lease(
        self,
        workflow_lease_token: str,
        secret_set_id: Union[str, int],
        action: str,
        keys: Optional[List[str]] = None,
        ttl_seconds: Optional[int] = None,
        uses: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Mints a request lease (for `read` or `proxy`) from a workflow lease:
        `{ok, lease_id, request_lease_token, expires_at, uses_left}`."""
        body = _without_none(
            workflow_lease_token=workflow_lease_token,
            secret_set_id=secret_set_id,
            action=action,
            keys=keys,
            ttl_seconds=ttl_seconds,
            uses=uses,
        )
        return self.request("POST", "/v1/vault/leases/request/mint", body)

    def read_secrets(
        self,
        request_lease_token: str,
        secret_set_id: Union[str, int],
        keys: List[str],
        environment: Optional[str] = None,
    ) -> Dict[str, str]:
        """Reads granted keys with one use of a `read` lease: `{KEY: value}`."""
        body = _without_none(
            request_lease_token=request_lease_token,
            secret_set_id=secret_set_id,
            keys=keys,
            environment=environment,
        )
        return self.request("POST", "/v1/vault/secrets/read", body)["secrets"]

    def proxy(
        self,
        request_lease_token: str,
        secret_set_id: Union[str, int],
        profile: str,
        method: str,
        url: str,
        headers: Optional[Dict[str, str]] = None,
        body: Optional[Union[str, bytes]] = None,
        environment: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Has the server make the call with the set's secrets in the profile's slots, with one
        use of a `proxy` lease: `{ok, status, headers, body | body_base64, trace_id}`. A bytes
        body is sent as `body_base64`."""
        call: Dict[str, Any] = {"method": method, "url": url}
        if headers:
            call["headers"] = headers
        if isinstance(body, bytes):
            call["body_base64"] = b64encode(body)
        elif body is not None:
            call["body"] = body
        payload = _without_none(
            request_lease_token=request_lease_token,
            secret_set_id=secret_set_id,
            profile=profile,
            request=call,
            environment=environment,
        )
        return self.request("POST", "/v1/vault/proxy/request", payload)

    def challenge_status(self, challenge: str) -> Dict[str, Any]:
        """The status of a challenge this agent raised (by id, or its status link): the
        challenge, with `status` `pending`, `approved`, `denied` or `expired`."""
        return self.request("GET", _challenge_path(challenge))["challenge"]

    def wait_for_challenge(
        self, challenge: str, timeout: float = 300.0, interval: float = 2.0
    ) -> Dict[str, Any]:
        """Polls the status link until a person decides (or the challenge expires); answers the
        challenge. Raises `TimeoutError` after `timeout` seconds."""
        return _wait(lambda: self.challenge_status(challenge), timeout, interval)


def _without_none(**fields: Any) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _wait(poll: Any, timeout: float, interval: float) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        challenge = poll()
        if challenge.get("status") != "pending":
            return challenge
        if time.monotonic() + interval > deadline:
            raise TimeoutError(f"the challenge is still pending after {timeout} s")
        time.sleep(interval)
