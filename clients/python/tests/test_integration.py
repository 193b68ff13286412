"""Every method of the client against a real server (see `_support.ServerEnv` for what it
needs; `scripts/clients-check.sh` starts one)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import unittest
import uuid

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from acp_client import AcpError, Agent, Backend, encode_json

from _support import SUITE_METADATA, ServerEnv, Upstream


class Integration(unittest.TestCase):
    env: ServerEnv
    upstream: Upstream
    backend: Backend
    agent: Agent
    api_token: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.env = ServerEnv()
        cls.env.apply_test_policy()
        cls.upstream = Upstream()
        cls.backend = Backend(cls.env.url, cls.env.api_key)
        cls.agent = Agent.create(
            cls.env.url, cls.env.api_key, name="py-client-test", metadata=SUITE_METADATA
        )
        suffix = uuid.uuid4().hex[:8]
        cls.api_token = f"sk_test_{uuid.uuid4().hex}"
        # A set the agent may read one key of and proxy with the other, to the upstream only.
        cls.open_set = cls.env.owner(
            "POST",
            "/v1/vault/secret-sets",
            {
                "name": f"py-open-{suffix}",
                "provider": "example",
                "environment": "test",
                "entries": {"API_TOKEN": cls.api_token, "ACCOUNT_ID": "acct_1001"},
                "profiles": {
                    "echo": {
                        "hosts": ["127.0.0.1"],
                        "ports": [cls.upstream.port],
                        "allow_http": True,
                        "path_prefixes": ["/echo/"],
                        "inject": {"headers": {"Authorization": "Bearer ${API_TOKEN}"}},
                    }
                },
            },
        )["secret_set"]["number"]
        # A set whose reads need a person (the policy's `guarded` environment).
        cls.guarded_set = cls.env.owner(
            "POST",
            "/v1/vault/secret-sets",
            {
                "name": f"py-guarded-{suffix}",
                "provider": "example",
                "environment": "guarded",
                "entries": {"NOTE": "approved reading"},
            },
        )["secret_set"]["number"]
        for set_id, keys, actions in [
            (cls.open_set, ["ACCOUNT_ID"], ["read"]),
            (cls.open_set, "*", ["proxy_use", "mint_request_lease"]),
            (cls.guarded_set, "*", ["read", "mint_request_lease"]),
        ]:
            cls.env.owner(
                "POST",
                "/v1/vault/grants",
                {
                    "secret_set_id": set_id,
                    "agent_id": cls.agent.agent_id,
                    "allowed_keys": keys,
                    "allowed_actions": actions,
                },
            )

    @classmethod
    def tearDownClass(cls) -> None:
        cls.upstream.close()

    def assertRefused(self, err: AcpError, status: int, code: str) -> None:
        self.assertEqual((err.status, err.code), (status, code), f"{err}: {err.body}")

    # ---- the agent ------------------------------------------------------------------------

    def test_a_created_agent_is_active_and_its_heartbeats_are_recorded(self) -> None:
        self.assertTrue(self.agent.agent_id.startswith("agt_"))
        answer = self.agent.heartbeat(status="ok", latency_ms=7)
        self.assertEqual((answer["ok"], answer["agent_id"]), (True, self.agent.agent_id))
        self.assertTrue(answer["recorded_at"].endswith("Z"))
        recent = self.backend.recent_heartbeats(agent_id=self.agent.agent_id, limit=5)
        self.assertTrue(any(h["status"] == "ok" for h in recent), recent)

    def test_an_agent_from_its_key_file_or_its_key_signs_as_itself(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.json")
            self.agent.save_key_file(path)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            with open(path, encoding="utf-8") as f:
                self.assertEqual(
                    sorted(json.load(f)), ["agent_id", "private_key", "public_key", "server"]
                )
            loaded = Agent.from_key_file(path)
            self.assertEqual(loaded.heartbeat(status="from-file")["status"], "from-file")
        again = Agent.from_private_key(self.env.url, self.agent.agent_id, self.agent.private_key)
        self.assertEqual(again.public_key, self.agent.public_key)
        self.assertEqual(again.heartbeat(status="from-key")["status"], "from-key")

    def test_a_wrong_key_is_bad_signature_with_what_the_server_saw(self) -> None:
        impostor = Agent(self.env.url, self.agent.agent_id, Ed25519PrivateKey.generate())
        with self.assertRaises(AcpError) as caught:
            impostor.heartbeat()
        err = caught.exception
        self.assertRefused(err, 401, "bad_signature")
        lines = err.canonical_string.split("\n")
        self.assertEqual(lines[:2], ["POST", "/v1/telemetry/heartbeat"])
        self.assertEqual(len(lines), 5)
        self.assertIsNone(err.hint)
        self.assertIn("the server checked the signature against", str(err))

    def test_a_signed_request_by_hand(self) -> None:
        # `request` signs any call; an unknown challenge is this agent's 404.
        with self.assertRaises(AcpError) as caught:
            self.agent.request(
                "GET", "/v1/policy-challenges/pch_0123456789abcdef0123456789abcdef/status"
            )
        self.assertRefused(caught.exception, 404, "unknown_challenge")

    def test_the_server_being_unreachable_is_an_error_too(self) -> None:
        with self.assertRaises(AcpError) as caught:
            Backend("http://127.0.0.1:1", self.env.api_key).check("agt_x", "read_report")
        self.assertEqual((caught.exception.status, caught.exception.code), (None, "unreachable"))

    # ---- decisions ------------------------------------------------------------------------

    def test_check_allow_deny_and_a_challenge_a_person_approves(self) -> None:
        agent_id = self.agent.agent_id
        allowed = self.backend.check(agent_id, "read_report", {"report": "daily"})
        self.assertEqual((allowed.decision, allowed.allowed), ("allow", True))
        self.assertTrue(allowed.trace_id.startswith("trc_"))
        self.assertEqual(allowed.reason_codes, ["action_allowed"])
        self.assertEqual(allowed.policy_id, "pol_default")
        denied = self.backend.check(agent_id, "delete_everything", policy_id="pol_default")
        self.assertEqual((denied.decision, denied.reason_codes), ("deny", ["action_denied"]))
        self.assertFalse(denied.allowed)

        context = {"amount": 5000, "to": "ACME"}
        challenged = self.backend.check(agent_id, "wire_money", context)
        self.assertEqual(challenged.decision, "challenge")
        self.assertTrue(challenged.challenge_id.startswith("pch_"))
        self.assertEqual(challenged.challenge["type"], "approval_link")
        status = self.backend.challenge_status(challenged.challenge_id)
        self.assertEqual(status["status"], "pending")
        self.env.owner(
            "POST",
            f"/v1/policy-challenges/{challenged.challenge_id}/decide",
            {"decision": "approve"},
        )
        decided = self.backend.wait_for_challenge(challenged.challenge_id, timeout=10, interval=0.2)
        self.assertEqual(decided["status"], "approved")
        again = self.backend.check(agent_id, "wire_money", context)
        self.assertEqual(again.decision, "allow", again.raw)

    def test_checking_an_unknown_agent_is_an_error(self) -> None:
        with self.assertRaises(AcpError) as caught:
            self.backend.check("agt_0123456789abcdef0123456789abcdef", "read_report")
        self.assertRefused(caught.exception, 404, "unknown_agent")

    # ---- verifying, exchanging ------------------------------------------------------------

    def test_a_backend_verifies_what_the_agent_signed_once(self) -> None:
        body = encode_json({"order": "A-1001", "note": "café ☕"})
        headers = self.agent.sign("POST", "/orders/refund?dry_run=1", body)
        ok = self.backend.verify("POST", "/orders/refund?dry_run=1", headers, body)
        self.assertTrue(ok.valid, ok.raw)
        self.assertEqual((ok.agent_id, ok.verification_tier, ok.revoked), (self.agent.agent_id, "attested", False))
        replay = self.backend.verify("POST", "/orders/refund", headers, body)
        self.assertEqual((replay.valid, replay.reason), (False, "replay_detected"))

        headers = self.agent.sign("POST", "/orders/refund", body)
        tampered = self.backend.verify("POST", "/orders/refund", headers, body + b" ")
        self.assertEqual((tampered.valid, tampered.reason), (False, "bad_signature"))
        self.assertEqual(tampered.canonical_string.split("\n")[:4], ["POST", "/orders/refund", headers["X-Service-Timestamp"], headers["X-Service-Nonce"]])
        hexed = dict(headers, **{"X-Service-Signature": "ab" * 64})
        wrong = self.backend.verify("POST", "/orders/refund", hexed, body)
        self.assertEqual((wrong.reason, wrong.hint, wrong.raw["signature_length"]), ("bad_signature", "signature_wrong_length", 96))
        # Header names are read case-insensitively; a request without them is not valid.
        lower = {k.lower(): v for k, v in headers.items()}
        self.assertTrue(self.backend.verify("POST", "/orders/refund", lower, body).valid)
        unsigned = self.backend.verify("POST", "/orders/refund", {}, body)
        self.assertEqual((unsigned.valid, unsigned.reason), (False, "missing_signature_headers"))

    def test_a_signed_request_is_exchanged_for_a_jwt(self) -> None:
        body = b'{"report":"daily"}'
        headers = self.agent.sign("POST", "/reports", body)
        exchanged = self.backend.exchange_token(
            "POST", "/reports", headers, body, audience="reports-api", scopes=["reports:read"], ttl_seconds=120
        )
        self.assertEqual((exchanged["token_type"], exchanged["expires_in"]), ("Bearer", 120))
        self.assertEqual(exchanged["token"].count("."), 2)
        seen = self.backend.introspect(exchanged["token"])
        self.assertEqual((seen["active"], seen["agent_id"], seen["audience"]), (True, self.agent.agent_id, "reports-api"))
        with self.assertRaises(AcpError) as caught:
            self.backend.exchange_token("POST", "/reports", headers, body)
        self.assertRefused(caught.exception, 401, "replay_detected")

    # ---- credentials ----------------------------------------------------------------------

    def test_credentials_are_minted_introspected_and_revoked(self) -> None:
        agent_id = self.agent.agent_id
        once = self.backend.mint_credential(agent_id, audience="reports-api", scopes=["reports:read"], ttl_seconds=60, one_time=True)
        self.assertTrue(once["cred_id"].startswith("crd_"))
        self.assertEqual((once["token_type"], once["one_time"]), ("opaque", True))
        self.assertTrue(self.backend.introspect(once["token"])["active"])
        self.assertFalse(self.backend.introspect(once["token"])["active"])

        jwt = self.backend.mint_credential(agent_id, token_type="jwt", provider="example", policy_id="pol_default")
        self.assertEqual(jwt["token_type"], "jwt")
        self.assertEqual(self.backend.revoke_credential(cred_id=jwt["cred_id"], reason="test"), 1)
        self.assertFalse(self.backend.introspect(jwt["token"])["active"])
        opaque = self.backend.mint_credential(agent_id)
        self.assertEqual(self.backend.revoke_credential(token=opaque["token"]), 1)
        with self.assertRaises(ValueError):
            self.backend.revoke_credential()

        first, second = self.backend.mint_credential(agent_id), self.backend.mint_credential(agent_id)
        self.assertGreaterEqual(self.backend.revoke_agent_credentials(agent_id, reason="rotation"), 2)
        for credential in (first, second):
            self.assertFalse(self.backend.introspect(credential["token"])["active"])
        with self.assertRaises(AcpError) as caught:
            self.backend.mint_credential(agent_id, ttl_seconds=0)
        self.assertRefused(caught.exception, 400, "invalid_ttl")

    # ---- the vault's agent side -----------------------------------------------------------

    def test_the_agent_reads_a_granted_key_once_per_lease(self) -> None:
        lease = self.backend.workflow_lease(self.agent.agent_id, self.open_set, "client tests", ["read", "proxy"], ttl_seconds=600)
        self.assertTrue(lease["workflow_lease_token"].startswith("vwl_"))
        decision = self.agent.vault_eval(self.open_set, "read", keys=["ACCOUNT_ID"], environment="test", provider="example")
        self.assertEqual(decision.decision, "allow", decision.raw)
        minted = self.agent.request_lease(lease["workflow_lease_token"], self.open_set, "read", keys=["ACCOUNT_ID"], ttl_seconds=60)
        self.assertEqual(minted["uses_left"], 1)
        secrets = self.agent.read_secrets(minted["request_lease_token"], self.open_set, ["ACCOUNT_ID"], environment="test")
        self.assertEqual(secrets, {"ACCOUNT_ID": "acct_1001"})
        with self.assertRaises(AcpError) as caught:
            self.agent.read_secrets(minted["request_lease_token"], self.open_set, ["ACCOUNT_ID"])
        self.assertRefused(caught.exception, 409, "lease_used")
        with self.assertRaises(AcpError) as caught:
            self.agent.request_lease(lease["workflow_lease_token"], self.open_set, "read", keys=["API_TOKEN"])
        self.assertRefused(caught.exception, 403, "key_not_granted")

    def test_the_agent_calls_through_the_proxy_without_holding_the_secret(self) -> None:
        lease = self.backend.workflow_lease(self.agent.agent_id, self.open_set, "client tests", ["proxy"])
        minted = self.agent.request_lease(lease["workflow_lease_token"], self.open_set, "proxy", uses=2)
        self.assertEqual(minted["uses_left"], 2)
        token = minted["request_lease_token"]
        decision = self.agent.vault_eval(
            self.open_set, "proxy", profile="echo", request={"method": "POST", "url": self.upstream.url("/echo/charges")}
        )
        self.assertEqual(decision.decision, "allow", decision.raw)
        # A host outside the profile is refused before the call, and spends no use.
        with self.assertRaises(AcpError) as caught:
            self.agent.proxy(token, self.open_set, "echo", "GET", "https://example.com/echo/x")
        self.assertRefused(caught.exception, 403, "host_not_allowed")
        answer = self.agent.proxy(
            token, self.open_set, "echo", "POST", self.upstream.url("/echo/charges"),
            headers={"Content-Type": "application/json"}, body='{"amount":4200}', environment="test",
        )
        self.assertEqual(answer["status"], 200, answer)
        self.assertNotIn(self.api_token, json.dumps(answer))
        echoed = json.loads(answer["body"])
        self.assertEqual((echoed["method"], echoed["path"], echoed["body"]), ("POST", "/echo/charges", '{"amount":4200}'))
        self.assertEqual(echoed["headers"]["authorization"], "Bearer [REDACTED]")
        binary = self.agent.proxy(token, self.open_set, "echo", "PUT", self.upstream.url("/echo/blob"), body=b"\x00\x01binary")
        self.assertEqual(json.loads(binary["body"])["method"], "PUT")

    def test_a_guarded_read_waits_for_a_person_on_the_status_link(self) -> None:
        lease = self.backend.workflow_lease(self.agent.agent_id, self.guarded_set, "client tests", ["read"])
        asked = self.agent.vault_eval(self.guarded_set, "read", keys=["NOTE"])
        self.assertEqual(asked.decision, "challenge", asked.raw)
        self.assertEqual(asked.challenge["type"], "status_link")
        self.assertTrue(asked.challenge["url"].endswith(f"/v1/policy-challenges/{asked.challenge_id}/status"))
        self.assertEqual(self.agent.challenge_status(asked.challenge["url"])["status"], "pending")

        first = self.agent.request_lease(lease["workflow_lease_token"], self.guarded_set, "read", keys=["NOTE"])
        with self.assertRaises(AcpError) as caught:
            self.agent.read_secrets(first["request_lease_token"], self.guarded_set, ["NOTE"])
        err = caught.exception
        self.assertRefused(err, 403, "policy_challenge")
        self.assertEqual(err.challenge["type"], "status_link")
        self.assertEqual(self.agent.challenge_status(err.challenge_id)["status"], "pending")
        self.env.owner("POST", f"/v1/policy-challenges/{err.challenge_id}/decide", {"decision": "approve"})
        decided = self.agent.wait_for_challenge(err.challenge["url"], timeout=10, interval=0.2)
        self.assertEqual(decided["status"], "approved")
        second = self.agent.request_lease(lease["workflow_lease_token"], self.guarded_set, "read", keys=["NOTE"])
        self.assertEqual(self.agent.read_secrets(second["request_lease_token"], self.guarded_set, ["NOTE"]), {"NOTE": "approved reading"})


if __name__ == "__main__":
    unittest.main()
