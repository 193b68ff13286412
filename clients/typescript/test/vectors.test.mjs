// The client signs exactly as docs/signing.md says: every documented vector, byte for byte.

import assert from "node:assert/strict";
import { sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { AcpError, Agent, bodySha256, canonicalString, loadPrivateKey } from "../dist/index.js";
import { vectors } from "./support.mjs";

const v = vectors();
const seedB64 = Buffer.from(v.seed_hex, "hex").toString("base64");
const agent = Agent.fromPrivateKey("http://127.0.0.1:1", v.agent_id, seedB64);

test("the key is the seed's", () => {
  assert.equal(agent.publicKey, v.public_key_b64);
  assert.equal(agent.privateKey, v.private_key_pkcs8_b64);
  const loaded = Agent.fromPrivateKey("http://127.0.0.1:1", v.agent_id, v.private_key_pkcs8_b64);
  assert.equal(loaded.publicKey, v.public_key_b64);
});

test("the attestation signs the decoded challenge", () => {
  const key = loadPrivateKey(v.private_key_pkcs8_b64);
  const challenge = Buffer.from(v.attestation.challenge_b64, "base64");
  assert.equal(sign(null, challenge, key).toString("base64"), v.attestation.signature_b64);
});

test("every request vector", () => {
  assert.ok(v.requests.length >= 5);
  for (const r of v.requests) {
    assert.equal(bodySha256(r.body), r.body_sha256, r.name);
    assert.equal(bodySha256(Buffer.from(r.body, "utf8")), r.body_sha256, r.name);
    assert.equal(canonicalString(r.method, r.target, r.timestamp, r.nonce, r.body_sha256), r.canonical_string, r.name);
    const headers = agent.sign(r.method, r.target, r.body, { timestampMs: r.timestamp, nonce: r.nonce });
    assert.deepEqual(
      headers,
      {
        "X-Service-Agent-Id": v.agent_id,
        "X-Service-Timestamp": r.timestamp,
        "X-Service-Nonce": r.nonce,
        "X-Service-Signature": r.signature_b64,
      },
      r.name,
    );
  }
});

test("a fresh signature has a millisecond timestamp and a new nonce", () => {
  const first = agent.sign("GET", "/v1/x");
  const second = agent.sign("GET", "/v1/x");
  assert.equal(first["X-Service-Timestamp"].length, 13);
  assert.notEqual(first["X-Service-Nonce"], second["X-Service-Nonce"]);
});

test("only exact bytes are signed", () => {
  assert.throws(() => agent.sign("POST", "/v1/x", { a: 1 }), TypeError);
  assert.throws(() => loadPrivateKey("not base64!"), TypeError);
});

test("the key file round-trips and is private", () => {
  const dir = mkdtempSync(join(tmpdir(), "acp-client-"));
  try {
    const path = join(dir, "agent.json");
    writeFileSync(path, JSON.stringify(v.key_file));
    const loaded = Agent.fromKeyFile(path);
    assert.deepEqual([loaded.agentId, loaded.baseUrl, loaded.publicKey], [v.key_file.agent_id, v.key_file.server, v.key_file.public_key]);
    assert.deepEqual(loaded.keyFile(), v.key_file);
    assert.equal(Agent.fromKeyFile(path, { baseUrl: "http://other:1" }).baseUrl, "http://other:1");
    const copy = join(dir, "copy.json");
    loaded.saveKeyFile(copy);
    assert.equal(statSync(copy).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(readFileSync(copy, "utf8")), v.key_file);
    assert.throws(() => loaded.saveKeyFile(copy), { code: "EEXIST" });
    writeFileSync(path, JSON.stringify({ ...v.key_file, public_key: v.attestation.challenge_b64 }));
    assert.throws(() => Agent.fromKeyFile(path), TypeError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a bad signature error shows the server's canonical string", () => {
  const r = v.requests[0];
  const bad = v.bad_signatures[2];
  const body = {
    error: "bad_signature",
    message: "the signature decodes to 63 bytes; an Ed25519 signature is 64",
    canonical_string: r.canonical_string,
    hint: bad.hint,
    signature_length: bad.signature_length,
    expected_signature_length: 64,
  };
  const err = new AcpError(401, "bad_signature", body.message, body);
  assert.equal(err.canonicalString, r.canonical_string);
  assert.equal(err.hint, bad.hint);
  assert.ok(err.message.includes(r.canonical_string));
  assert.ok(err.message.includes("signature_wrong_length"));
});
