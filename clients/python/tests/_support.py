"""What the tests share: the documented signing vectors, the server under test (from the
environment), an owner's calls that set the stage, and a plain HTTP upstream for the proxy."""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Optional

REPO = Path(__file__).resolve().parents[3]
SIGNING_DOC = REPO / "docs" / "signing.md"
README = Path(__file__).resolve().parents[1] / "README.md"

# The metadata that puts an agent in the test policy's group.
SUITE_METADATA = {"suite": "acp-client-tests"}

# The policy the integration tests apply (the TypeScript suite applies the same): agents of
# the group may read reports, need a person to wire money, may never delete everything; they
# may use the vault with the proxy to loopback only, and a read in the `guarded` environment
# needs a person.
TEST_SPEC = {
    "reusable_policy_blocks": {
        "client-tests": {
            "actions": {
                "allow": ["read_report", "mint_credential", "token_exchange"],
                "challenge": ["wire_money"],
                "deny": ["delete_everything"],
            },
            "vault": {
                "allow": ["mint_lease", "read", "proxy"],
                "proxy_hosts": ["127.0.0.1"],
                "require_approval": {"actions": ["read"], "environments": ["guarded"]},
            },
        }
    },
    "agent_groups": [{"name": "client-tests", "selectors": [{"metadata": SUITE_METADATA}]}],
    "bindings": [{"name": "client-tests", "group": "client-tests", "blocks": ["client-tests"]}],
}


def vectors() -> Dict[str, Any]:
    """The JSON block between the `signing-vectors` markers of docs/signing.md."""
    text = SIGNING_DOC.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- signing-vectors:begin -->\s*```json\n(.*?)\n```\s*<!-- signing-vectors:end -->",
        text,
        re.S,
    )
    if not found:
        raise AssertionError(f"{SIGNING_DOC} has no signing-vectors block")
    return json.loads(found.group(1))


def readme_example() -> str:
    """The first fenced Python block of the README: the example it opens with."""
    text = README.read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)\n```", text, re.S)
    if not found:
        raise AssertionError(f"{README} has no python block")
    return found.group(1)


class ServerEnv:
    """The server under test: `ACP_URL`, `ACP_API_KEY` (a workspace API key) and `ACP_TOKEN`
    (a personal access token of an owner of that workspace, for the vault's administration
    and for deciding challenges). The server must let the vault's proxy reach loopback
    (`ACP_VAULT_PROXY_ALLOW=127.0.0.1/32`). `scripts/clients-check.sh` starts one so."""

    def __init__(self) -> None:
        missing = [v for v in ("ACP_URL", "ACP_API_KEY", "ACP_TOKEN") if not os.environ.get(v)]
        if missing:
            raise RuntimeError(
                f"the integration tests need a running server: set {', '.join(missing)} "
                "(scripts/clients-check.sh starts a server and sets them)"
            )
        self.url = os.environ["ACP_URL"].rstrip("/")
        self.api_key = os.environ["ACP_API_KEY"]
        self.token = os.environ["ACP_TOKEN"]

    def owner(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        """A call as the owner (the personal access token); fails the test on an error."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return json.loads(res.read())
        except urllib.error.HTTPError as err:
            raise AssertionError(f"{method} {path}: HTTP {err.code}: {err.read()!r}") from err

    def apply_test_policy(self) -> None:
        applied = self.owner("POST", "/v1/policies/sync", {"dry_run": False, "spec": TEST_SPEC})
        if applied.get("ok") is not True:
            raise AssertionError(f"the test policy was not applied: {applied}")


class Upstream:
    """A plain HTTP server on loopback that answers every request with what it received, as
    JSON: the proxy's destination."""

    def __init__(self) -> None:
        class Echo(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace")
                payload = json.dumps(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
