"""Agent client for acp, the agent control plane.

`Agent` holds an agent's Ed25519 key and signs its requests (heartbeats, the vault's agent
side, challenge status); `Backend` holds a workspace API key (checks, verification, token
exchange, credentials, workflow leases). Every error answer raises `AcpError`.
"""

from ._signing import (
    body_sha256,
    canonical_string,
    encode_json,
    load_private_key,
    signed_path,
)
from .agent import Agent
from .backend import Backend
from .errors import AcpError
from .types import Decision, Verification

__all__ = [
    "AcpError",
    "Agent",
    "Backend",
    "Decision",
    "Verification",
    "body_sha256",
    "canonical_string",
    "encode_json",
    "load_private_key",
    "signed_path",
]
__version__ = "0.1.0"
