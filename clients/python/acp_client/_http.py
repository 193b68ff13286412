"""HTTP with the standard library: JSON in, JSON out, the service's error envelope raised as
`AcpError`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Dict, Optional

from .errors import AcpError

DEFAULT_TIMEOUT = 30.0
USER_AGENT = "acp-client-python/0.1.0"


def join(base_url: str, path: str) -> str:
    """The URL of an API path (`/v1/...`) under the base URL (which may carry a path prefix)."""
    if not path.startswith("/"):
        raise ValueError(f"an API path starts with `/`: {path!r}")
    return base_url.rstrip("/") + path


def request(
    method: str,
    url: str,
    headers: Optional[Dict[str, str]] = None,
    body: Optional[bytes] = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Any:
    """Sends the request; answers the parsed JSON body of a 2xx answer, raises `AcpError`
    otherwise (also when the server cannot be reached or does not answer JSON)."""
    all_headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if body is not None:
        # urllib would otherwise declare a form body.
        all_headers["Content-Type"] = "application/json"
    all_headers.update(headers or {})
    req = urllib.request.Request(url, data=body, method=method.upper(), headers=all_headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise AcpError(None, "unreachable", f"cannot reach {url}: {reason}", None) from err
    try:
        parsed = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        parsed = None
        if 200 <= status < 300:
            raise AcpError(status, "invalid_response", f"{url} did not answer JSON", None)
    if 200 <= status < 300:
        return parsed
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        raise AcpError(status, parsed["error"], str(parsed.get("message", "")), parsed)
    text = raw.decode("utf-8", "replace")[:200]
    raise AcpError(status, f"http_{status}", text or f"HTTP {status}", parsed)
