"""The request signature, exactly as the server checks it (docs/signing.md).

The canonical string is five parts joined by a line feed, with no trailing newline: the
uppercase method, the path without the query string (as sent: not decoded, not normalized),
the timestamp header's text (Unix epoch milliseconds), the nonce, and the lowercase hex SHA-256
of the raw body bytes. The signature is Ed25519 over its UTF-8 bytes, sent as standard base64.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from typing import Any, Dict, Optional, Union

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

Body = Union[bytes, str, None]

AGENT_ID_HEADER = "X-Service-Agent-Id"
TIMESTAMP_HEADER = "X-Service-Timestamp"
NONCE_HEADER = "X-Service-Nonce"
SIGNATURE_HEADER = "X-Service-Signature"


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, the form the server writes."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Standard base64, padded or not (as the server accepts it)."""
    text = text.strip()
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def body_bytes(body: Body) -> bytes:
    """The bytes of a body: bytes as they are, text as UTF-8, nothing as empty."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(
        "sign the body's exact bytes (bytes or str); serialize JSON once with encode_json()"
    )


def encode_json(value: Any) -> bytes:
    """JSON as the clients send it: compact, UTF-8 (non-ASCII text is not escaped)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def body_sha256(body: Body) -> str:
    """Lowercase hex SHA-256 of the raw body bytes."""
    return hashlib.sha256(body_bytes(body)).hexdigest()


def signed_path(target: str) -> str:
    """What the server signs of a request target: the path, without query string or fragment."""
    return target.split("#", 1)[0].split("?", 1)[0]


def canonical_string(method: str, path: str, timestamp: str, nonce: str, body_hash: str) -> str:
    """`METHOD\\nPATH\\nTIMESTAMP\\nNONCE\\nBODY_SHA256`, no trailing newline."""
    return "\n".join([method.upper(), signed_path(path), timestamp, nonce, body_hash])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_nonce() -> str:
    return str(uuid.uuid4())


def sign_request(
    key: Ed25519PrivateKey,
    agent_id: str,
    method: str,
    path: str,
    body: Body = None,
    timestamp_ms: Optional[Union[int, str]] = None,
    nonce: Optional[str] = None,
) -> Dict[str, str]:
    """The four signature headers of a request (a fresh timestamp and nonce unless given)."""
    timestamp = str(now_ms() if timestamp_ms is None else timestamp_ms)
    nonce = new_nonce() if nonce is None else nonce
    canonical = canonical_string(method, path, timestamp, nonce, body_sha256(body))
    return {
        AGENT_ID_HEADER: agent_id,
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: b64encode(key.sign(canonical.encode("utf-8"))),
    }


def load_private_key(text: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from standard base64 of its PKCS#8 DER (the key file's form), or
    of its raw 32-byte seed."""
    raw = b64decode(text)
    if len(raw) == 32:
        return Ed25519PrivateKey.from_private_bytes(raw)
    key = serialization.load_der_private_key(raw, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the private key is not an Ed25519 key")
    return key


def private_key_b64(key: Ed25519PrivateKey) -> str:
    """Standard base64 of the key's PKCS#8 DER."""
    return b64encode(
        key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def public_key_b64(key: Ed25519PrivateKey) -> str:
    """Standard base64 of the raw 32-byte public key, as registered."""
    return b64encode(
        key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
