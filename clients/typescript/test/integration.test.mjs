// Every method of the client against a real server (see `serverEnv` in support.mjs for what it
// needs; scripts/clients-check.sh starts one).

import assert from "node:assert/strict";
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { AcpError, Agent, Backend, encodeJson } from "../dist/index.js";
import { SUITE_METADATA, serverEnv, startUpstream } from "./support.mjs";

/** Awaits `promise`, which must throw `AcpError` with this status and code. */
async function refused(promise, status, code) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof AcpError, String(err));
    assert.deepEqual([err.status, err.code], [status, code], `${err.message}: ${JSON.stringify(err.body)}`);
    return err;
  }
  assert.fail(`expected HTTP ${status} ${code}`);
}

describe("against a real server", () => {
  let env, upstream, backend, agent, apiToken, openSet, guardedSet;

  before(async () => {
    env = serverEnv();
    await env.applyTestPolicy();
    upstream = await startUpstream();
    backend = new Backend(env.url, env.apiKey);
    agent = await Agent.create(env.url, env.apiKey, { name: "ts-client-test", metadata: SUITE_METADATA });
    const suffix = randomUUID().slice(0, 8);
    apiToken = `sk_test_${randomUUID().replaceAll("-", "")}`;
    // A set the agent may read one key of and proxy with the other, to the upstream only.
    openSet = (
      await env.owner("POST", "/v1/vault/secret-sets", {
        name: `ts-open-${suffix}`,
        provider: "example",
        environment: "test",
        entries: { API_TOKEN: apiToken, ACCOUNT_ID: "acct_1001" },
        profiles: {
          echo: {
            hosts: ["127.0.0.1"],
            ports: [upstream.port],
            allow_http: true,
            path_prefixes: ["/echo/"],
            inject: { headers: { Authorization: "Bearer ${API_TOKEN}" } },
          },
        },
      })
    ).secret_set.number;
    // A set whose reads need a person (the policy's `guarded` environment).
    guardedSet = (
      await env.owner("POST", "/v1/vault/secret-sets", {
        name: `ts-guarded-${suffix}`,
        provider: "example",
        environment: "guarded",
        entries: { NOTE: "approved reading" },
      })
    ).secret_set.number;
    for (const [set, keys, actions] of [
      [openSet, ["ACCOUNT_ID"], ["read"]],
      [openSet, "*", ["proxy_use", "mint_request_lease"]],
      [guardedSet, "*", ["read", "mint_request_lease"]],
    ]) {
      await env.owner("POST", "/v1/vault/grants", {
        secret_set_id: set,
        agent_id: agent.agentId,
        allowed_keys: keys,
        allowed_actions: actions,
      });
    }
  });

  after(async () => {
    await upstream?.close();
  });

  // ---- the agent --------------------------------------------------------------------------

  test("a created agent is active and its heartbeats are recorded", async () => {
    assert.match(agent.agentId, /^agt_/);
    const answer = await agent.heartbeat({ status: "ok", latencyMs: 7 });
    assert.deepEqual([answer.ok, answer.agent_id], [true, agent.agentId]);
    assert.match(answer.recorded_at, /Z$/);
    const recent = await backend.recentHeartbeats({ agentId: agent.agentId, limit: 5 });
    assert.ok(recent.some((h) => h.status === "ok"), JSON.stringify(recent));
  });

  test("an agent from its key file or its key signs as itself", async () => {
    const dir = mkdtempSync(join(tmpdir(), "acp-client-"));
    try {
      const path = join(dir, "agent.json");
      agent.saveKeyFile(path);
      assert.equal(statSync(path).mode & 0o777, 0o600);
      assert.deepEqual(Object.keys(JSON.parse(readFileSync(path, "utf8"))).sort(), ["agent_id", "private_key", "public_key", "server"]);
      const loaded = Agent.fromKeyFile(path);
      assert.equal((await loaded.heartbeat({ status: "from-file" })).status, "from-file");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const again = Agent.fromPrivateKey(env.url, agent.agentId, agent.privateKey);
    assert.equal(again.publicKey, agent.publicKey);
    assert.equal((await again.heartbeat({ status: "from-key" })).status, "from-key");
  });

  test("a wrong key is bad_signature with what the server saw", async () => {
    const impostor = new Agent(env.url, agent.agentId, generateKeyPairSync("ed25519").privateKey);
    const err = await refused(impostor.heartbeat(), 401, "bad_signature");
    const lines = err.canonicalString.split("\n");
    assert.deepEqual(lines.slice(0, 2), ["POST", "/v1/telemetry/heartbeat"]);
    assert.equal(lines.length, 5);
    assert.equal(err.hint, undefined);
    assert.ok(err.message.includes("the server checked the signature against"));
  });

  test("a signed request by hand", async () => {
    await refused(agent.request("GET", "/v1/policy-challenges/pch_0123456789abcdef0123456789abcdef/status"), 404, "unknown_challenge");
  });

  test("the server being unreachable is an error too", async () => {
    const err = await refused(new Backend("http://127.0.0.1:1", env.apiKey).check("agt_x", "read_report"), null, "unreachable");
    assert.match(err.message, /cannot reach/);
  });

  // ---- decisions --------------------------------------------------------------------------

  test("check: allow, deny, and a challenge a person approves", async () => {
    const allowed = await backend.check(agent.agentId, "read_report", { report: "daily" });
    assert.deepEqual([allowed.decision, allowed.allowed], ["allow", true]);
    assert.match(allowed.traceId, /^trc_/);
    assert.deepEqual(allowed.reasonCodes, ["action_allowed"]);
    assert.equal(allowed.policyId, "pol_default");
    const denied = await backend.check(agent.agentId, "delete_everything", {}, { policyId: "pol_default" });
    assert.deepEqual([denied.decision, denied.reasonCodes, denied.allowed], ["deny", ["action_denied"], false]);

    const context = { amount: 5000, to: "ACME" };
    const challenged = await backend.check(agent.agentId, "wire_money", context);
    assert.equal(challenged.decision, "challenge");
    assert.match(challenged.challengeId, /^pch_/);
    assert.equal(challenged.challenge.type, "approval_link");
    assert.equal((await backend.challengeStatus(challenged.challengeId)).status, "pending");
    await env.owner("POST", `/v1/policy-challenges/${challenged.challengeId}/decide`, { decision: "approve" });
    const decided = await backend.waitForChallenge(challenged.challengeId, { timeoutMs: 10_000, intervalMs: 200 });
    assert.equal(decided.status, "approved");
    const again = await backend.check(agent.agentId, "wire_money", context);
    assert.equal(again.decision, "allow", JSON.stringify(again.raw));
  });

  test("checking an unknown agent is an error", async () => {
    await refused(backend.check("agt_0123456789abcdef0123456789abcdef", "read_report"), 404, "unknown_agent");
  });

  // ---- verifying, exchanging --------------------------------------------------------------

  test("a backend verifies what the agent signed, once", async () => {
    const body = encodeJson({ order: "A-1001", note: "café ☕" });
    let headers = agent.sign("POST", "/orders/refund?dry_run=1", body);
    const ok = await backend.verify("POST", "/orders/refund?dry_run=1", headers, body);
    assert.equal(ok.valid, true, JSON.stringify(ok.raw));
    assert.deepEqual([ok.agentId, ok.verificationTier, ok.revoked], [agent.agentId, "attested", false]);
    const replay = await backend.verify("POST", "/orders/refund", headers, body);
    assert.deepEqual([replay.valid, replay.reason], [false, "replay_detected"]);

    headers = agent.sign("POST", "/orders/refund", body);
    const tampered = await backend.verify("POST", "/orders/refund", headers, Buffer.concat([body, Buffer.from(" ")]));
    assert.deepEqual([tampered.valid, tampered.reason], [false, "bad_signature"]);
    assert.deepEqual(tampered.canonicalString.split("\n").slice(0, 4), ["POST", "/orders/refund", headers["X-Service-Timestamp"], headers["X-Service-Nonce"]]);
    const hexed = { ...headers, "X-Service-Signature": "ab".repeat(64) };
    const wrong = await backend.verify("POST", "/orders/refund", hexed, body);
    assert.deepEqual([wrong.reason, wrong.hint, wrong.raw.signature_length], ["bad_signature", "signature_wrong_length", 96]);
    // A `Headers` object (as a server framework hands it) is read case-insensitively.
    assert.equal((await backend.verify("POST", "/orders/refund", new Headers(headers), body)).valid, true);
    const unsigned = await backend.verify("POST", "/orders/refund", {}, body);
    assert.deepEqual([unsigned.valid, unsigned.reason], [false, "missing_signature_headers"]);
  });

  test("a signed request is exchanged for a JWT", async () => {
    const body = '{"report":"daily"}';
    const headers = agent.sign("POST", "/reports", body);
    const exchanged = await backend.exchangeToken("POST", "/reports", headers, body, {
      audience: "reports-api",
      scopes: ["reports:read"],
      ttlSeconds: 120,
    });
    assert.deepEqual([exchanged.token_type, exchanged.expires_in], ["Bearer", 120]);
    assert.equal(exchanged.token.split(".").length, 3);
    const seen = await backend.introspect(exchanged.token);
    assert.deepEqual([seen.active, seen.agent_id, seen.audience], [true, agent.agentId, "reports-api"]);
    await refused(backend.exchangeToken("POST", "/reports", headers, body), 401, "replay_detected");
  });

  // ---- credentials ------------------------------------------------------------------------

  test("credentials are minted, introspected and revoked", async () => {
    const id = agent.agentId;
    const once = await backend.mintCredential(id, { audience: "reports-api", scopes: ["reports:read"], ttlSeconds: 60, oneTime: true });
    assert.match(once.cred_id, /^crd_/);
    assert.deepEqual([once.token_type, once.one_time], ["opaque", true]);
    assert.equal((await backend.introspect(once.token)).active, true);
    assert.equal((await backend.introspect(once.token)).active, false);

    const jwt = await backend.mintCredential(id, { tokenType: "jwt", provider: "example", policyId: "pol_default" });
    assert.equal(jwt.token_type, "jwt");
    assert.equal(await backend.revokeCredential({ credId: jwt.cred_id }, "test"), 1);
    assert.equal((await backend.introspect(jwt.token)).active, false);
    const opaque = await backend.mintCredential(id);
    assert.equal(await backend.revokeCredential({ token: opaque.token }), 1);

    const first = await backend.mintCredential(id);
    const second = await backend.mintCredential(id);
    assert.ok((await backend.revokeAgentCredentials(id, "rotation")) >= 2);
    for (const credential of [first, second]) {
      assert.equal((await backend.introspect(credential.token)).active, false);
    }
    await refused(backend.mintCredential(id, { ttlSeconds: 0 }), 400, "invalid_ttl");
  });

  // ---- the vault's agent side -------------------------------------------------------------

  test("the agent reads a granted key once per lease", async () => {
    const lease = await backend.workflowLease(agent.agentId, openSet, "client tests", ["read", "proxy"], { ttlSeconds: 600 });
    assert.match(lease.workflow_lease_token, /^vwl_/);
    const decision = await agent.vaultEval(openSet, "read", { keys: ["ACCOUNT_ID"], environment: "test", provider: "example" });
    assert.equal(decision.decision, "allow", JSON.stringify(decision.raw));
    const minted = await agent.requestLease(lease.workflow_lease_token, openSet, "read", { keys: ["ACCOUNT_ID"], ttlSeconds: 60 });
    assert.equal(minted.uses_left, 1);
    const secrets = await agent.readSecrets(minted.request_lease_token, openSet, ["ACCOUNT_ID"], { environment: "test" });
    assert.deepEqual(secrets, { ACCOUNT_ID: "acct_1001" });
    await refused(agent.readSecrets(minted.request_lease_token, openSet, ["ACCOUNT_ID"]), 409, "lease_used");
    await refused(agent.requestLease(lease.workflow_lease_token, openSet, "read", { keys: ["API_TOKEN"] }), 403, "key_not_granted");
  });

  test("the agent calls through the proxy without holding the secret", async () => {
    const lease = await backend.workflowLease(agent.agentId, openSet, "client tests", ["proxy"]);
    const minted = await agent.requestLease(lease.workflow_lease_token, openSet, "proxy", { uses: 2 });
    assert.equal(minted.uses_left, 2);
    const token = minted.request_lease_token;
    const decision = await agent.vaultEval(openSet, "proxy", {
      profile: "echo",
      request: { method: "POST", url: upstream.url("/echo/charges") },
    });
    assert.equal(decision.decision, "allow", JSON.stringify(decision.raw));
    // A host outside the profile is refused before the call, and spends no use.
    await refused(agent.proxy(token, openSet, "echo", { method: "GET", url: "https://example.com/echo/x" }), 403, "host_not_allowed");
    const answer = await agent.proxy(token, openSet, "echo", {
      method: "POST",
      url: upstream.url("/echo/charges"),
      headers: { "Content-Type": "application/json" },
      body: '{"amount":4200}',
      environment: "test",
    });
    assert.equal(answer.status, 200, JSON.stringify(answer));
    assert.ok(!JSON.stringify(answer).includes(apiToken));
    const echoed = JSON.parse(answer.body);
    assert.deepEqual([echoed.method, echoed.path, echoed.body], ["POST", "/echo/charges", '{"amount":4200}']);
    assert.equal(echoed.headers.authorization, "Bearer [REDACTED]");
    const binary = await agent.proxy(token, openSet, "echo", { method: "PUT", url: upstream.url("/echo/blob"), body: new Uint8Array([0, 1, 2]) });
    assert.equal(JSON.parse(binary.body).method, "PUT");
  });

  test("a guarded read waits for a person on the status link", async () => {
    const lease = await backend.workflowLease(agent.agentId, guardedSet, "client tests", ["read"]);
    const asked = await agent.vaultEval(guardedSet, "read", { keys: ["NOTE"] });
    assert.equal(asked.decision, "challenge", JSON.stringify(asked.raw));
    assert.equal(asked.challenge.type, "status_link");
    assert.ok(asked.challenge.url.endsWith(`/v1/policy-challenges/${asked.challengeId}/status`));
    assert.equal((await agent.challengeStatus(asked.challenge.url)).status, "pending");

    const first = await agent.requestLease(lease.workflow_lease_token, guardedSet, "read", { keys: ["NOTE"] });
    const err = await refused(agent.readSecrets(first.request_lease_token, guardedSet, ["NOTE"]), 403, "policy_challenge");
    assert.equal(err.challenge.type, "status_link");
    assert.equal((await agent.challengeStatus(err.challengeId)).status, "pending");
    await env.owner("POST", `/v1/policy-challenges/${err.challengeId}/decide`, { decision: "approve" });
    const decided = await agent.waitForChallenge(err.challenge.url, { timeoutMs: 10_000, intervalMs: 200 });
    assert.equal(decided.status, "approved");
    const second = await agent.requestLease(lease.workflow_lease_token, guardedSet, "read", { keys: ["NOTE"] });
    assert.deepEqual(await agent.readSecrets(second.request_lease_token, guardedSet, ["NOTE"]), { NOTE: "approved reading" });
  });
});
