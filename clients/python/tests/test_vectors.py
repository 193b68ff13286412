"""The client signs exactly as docs/signing.md says: every documented vector, byte for byte."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import unittest

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from acp_client import AcpError, Agent, body_sha256, canonical_string, load_private_key
from acp_client._signing import b64decode, b64encode, private_key_b64, public_key_b64

from _support import vectors


class SigningVectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.v = vectors()
        cls.key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(cls.v["seed_hex"]))
        cls.agent = Agent("http://127.0.0.1:1", cls.v["agent_id"], cls.key)

    def test_the_key_is_the_seeds(self) -> None:
        self.assertEqual(public_key_b64(self.key), self.v["public_key_b64"])
        self.assertEqual(private_key_b64(self.key), self.v["private_key_pkcs8_b64"])
        loaded = load_private_key(self.v["private_key_pkcs8_b64"])
        self.assertEqual(public_key_b64(loaded), self.v["public_key_b64"])
        # The raw seed, in base64, is accepted too.
        seed = load_private_key(b64encode(bytes.fromhex(self.v["seed_hex"])))
        self.assertEqual(public_key_b64(seed), self.v["public_key_b64"])

    def test_the_attestation_signs_the_decoded_challenge(self) -> None:
        att = self.v["attestation"]
        signature = b64encode(self.key.sign(b64decode(att["challenge_b64"])))
        self.assertEqual(signature, att["signature_b64"])

    def test_every_request_vector(self) -> None:
        requests = self.v["requests"]
        self.assertGreaterEqual(len(requests), 5)
        for r in requests:
            with self.subTest(r["name"]):
                self.assertEqual(body_sha256(r["body"]), r["body_sha256"])
                self.assertEqual(body_sha256(r["body"].encode("utf-8")), r["body_sha256"])
                self.assertEqual(
                    canonical_string(
                        r["method"], r["target"], r["timestamp"], r["nonce"], r["body_sha256"]
                    ),
                    r["canonical_string"],
                )
                headers = self.agent.sign(
                    r["method"], r["target"], r["body"], r["timestamp"], r["nonce"]
                )
                self.assertEqual(
                    headers,
                    {
                        "X-Service-Agent-Id": self.v["agent_id"],
                        "X-Service-Timestamp": r["timestamp"],
                        "X-Service-Nonce": r["nonce"],
                        "X-Service-Signature": r["signature_b64"],
                    },
                )

    def test_a_fresh_signature_has_a_millisecond_timestamp_and_a_new_nonce(self) -> None:
        first = self.agent.sign("GET", "/v1/x")
        second = self.agent.sign("GET", "/v1/x")
        self.assertEqual(len(first["X-Service-Timestamp"]), 13)
        self.assertNotEqual(first["X-Service-Nonce"], second["X-Service-Nonce"])

    def test_only_exact_bytes_are_signed(self) -> None:
        with self.assertRaises(TypeError):
            self.agent.sign("POST", "/v1/x", {"a": 1})  # type: ignore[arg-type]

    def test_the_key_file_round_trips_and_is_private(self) -> None:
        expected = self.v["key_file"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(expected, f)
            agent = Agent.from_key_file(path)
            self.assertEqual(
                (agent.agent_id, agent.base_url, agent.public_key),
                (expected["agent_id"], expected["server"], expected["public_key"]),
            )
            self.assertEqual(agent.key_file(), expected)
            self.assertEqual(Agent.from_key_file(path, "http://other:1").base_url, "http://other:1")
            copy = os.path.join(d, "copy.json")
            agent.save_key_file(copy)
            self.assertEqual(stat.S_IMODE(os.stat(copy).st_mode), 0o600)
            with open(copy, encoding="utf-8") as f:
                self.assertEqual(json.load(f), expected)
            with self.assertRaises(FileExistsError):
                agent.save_key_file(copy)
            wrong = dict(expected, public_key=self.v["attestation"]["challenge_b64"])
            with open(path, "w", encoding="utf-8") as f:
                json.dump(wrong, f)
            with self.assertRaises(ValueError):
                Agent.from_key_file(path)

    def test_a_bad_signature_error_shows_the_servers_canonical_string(self) -> None:
        r = self.v["requests"][0]
        bad = self.v["bad_signatures"][2]
        body = {
            "error": "bad_signature",
            "message": "the signature decodes to 63 bytes; an Ed25519 signature is 64",
            "canonical_string": r["canonical_string"],
            "hint": bad["hint"],
            "signature_length": bad["signature_length"],
            "expected_signature_length": 64,
        }
        err = AcpError(401, "bad_signature", body["message"], body)
        self.assertEqual((err.canonical_string, err.hint), (r["canonical_string"], bad["hint"]))
        self.assertIn(r["canonical_string"], str(err))
        self.assertIn("signature_wrong_length", str(err))


if __name__ == "__main__":
    unittest.main()
