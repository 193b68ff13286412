// The agent: its own Ed25519 key, registration and attestation, and every request it signs.

import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import type { KeyObject } from "node:crypto";

import { DEFAULT_TIMEOUT_MS, join, request } from "./http.js";
import {
  b64decode,
  bodyBytes,
  encodeJson,
  generateKey,
  loadPrivateKey,
  privateKeyB64,
  publicKeyB64,
  signBytes,
  signRequest,
  type Body,
  type SignatureHeaders,
  type SignOptions,
} from "./signing.js";
import {
  Decision,
  type HeartbeatAnswer,
  type PolicyChallenge,
  type ProxyAnswer,
  type RequestLease,
} from "./types.js";

/** The key file `acp agents new NAME --key-file FILE` writes, and the clients read. */
export interface KeyFile {
  agent_id: string;
  /** Standard base64 of the PKCS#8 DER of the Ed25519 key: the agent's secret. */
  private_key: string;
  /** Standard base64 of the raw 32-byte public key. */
  public_key: string;
  /** The base URL of the server. */
  server: string;
}

export interface AgentOptions {
  /** Per request; 30 s unless given. */
  timeoutMs?: number;
}

export interface CreateOptions extends AgentOptions {
  name: string;
  metadata?: Record<string, unknown>;
  /** A key of your own; a new one unless given. */
  privateKey?: KeyObject;
}

export interface WaitOptions {
  /** How long to wait for a decision; 300 s unless given. */
  timeoutMs?: number;
  /** How often to ask; 2 s unless given. */
  intervalMs?: number;
}

/** A secret set: its id (`ss_...`) or its number. */
export type SecretSetId = string | number;

const STATUS_LINK = /\/v1\/policy-challenges\/([^/?#]+)\/status/;

/** The status link's API path, from a challenge id or the link itself. */
function challengePath(challenge: string): string {
  const found = STATUS_LINK.exec(challenge);
  const id = found ? found[1] : challenge;
  if (!id || id.includes("/")) throw new TypeError(`not a challenge id or status link: ${challenge}`);
  return `/v1/policy-challenges/${id}/status`;
}

/** Polls until the challenge is no longer `pending`. */
export async function waitFor(
  poll: () => Promise<PolicyChallenge>,
  options: WaitOptions = {},
): Promise<PolicyChallenge> {
  const timeoutMs = options.timeoutMs ?? 300_000;
  const intervalMs = options.intervalMs ?? 2_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const challenge = await poll();
    if (challenge.status !== "pending") return challenge;
    if (Date.now() + intervalMs > deadline) {
      throw new Error(`the challenge is still pending after ${timeoutMs} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Drops the fields that are `undefined`. */
export function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
}

/** An agent registered with the server, holding its private key. Make one with
 * `Agent.create` (a new key, registered and attested), `Agent.fromKeyFile` or
 * `Agent.fromPrivateKey`. */
export class Agent {
  readonly baseUrl: string;
  readonly agentId: string;
  readonly timeoutMs: number;
  readonly #key: KeyObject;

  constructor(baseUrl: string, agentId: string, privateKey: KeyObject, options: AgentOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.agentId = agentId;
    this.#key = privateKey;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  // ---- making one -------------------------------------------------------------------------

  /** Generates a key (unless one is given), registers the agent (into the API key's
   * workspace; without a key it is created unclaimed) and attests it: the answer is an active
   * agent. Only the public key leaves this process. */
  static async create(baseUrl: string, apiKey: string | null, options: CreateOptions): Promise<Agent> {
    const key = options.privateKey ?? generateKey();
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const registered = await request(
      "POST",
      join(baseUrl, "/v1/agents/register"),
      apiKey ? { "X-Service-Api-Key": apiKey } : {},
      encodeJson({
        name: options.name,
        public_key: publicKeyB64(key),
        key_type: "ed25519",
        metadata: options.metadata ?? {},
      }),
      timeoutMs,
    );
    const agent = new Agent(baseUrl, registered.agent_id, key, { timeoutMs });
    await agent.attest(registered.challenge_id, registered.challenge);
    return agent;
  }

  /** Proves the key: signs the base64-decoded challenge bytes (not the text). */
  async attest(challengeId: string, challenge: string): Promise<Record<string, unknown>> {
    const signature = signBytes(this.#key, b64decode(challenge));
    return request(
      "POST",
      join(this.baseUrl, "/v1/agents/attest"),
      {},
      encodeJson({ agent_id: this.agentId, challenge_id: challengeId, signature }),
      this.timeoutMs,
    );
  }

  /** An agent from its id and its key: standard base64 of the PKCS#8 DER (or of the raw
   * 32-byte seed). */
  static fromPrivateKey(baseUrl: string, agentId: string, privateKey: string, options: AgentOptions = {}): Agent {
    return new Agent(baseUrl, agentId, loadPrivateKey(privateKey), options);
  }

  /** An agent from its key file, talking to the file's `server` unless `baseUrl` is given. */
  static fromKeyFile(path: string, options: AgentOptions & { baseUrl?: string } = {}): Agent {
    const data: unknown = JSON.parse(readFileSync(path, "utf8"));
    if (typeof data !== "object" || data === null || Array.isArray(data)) {
      throw new TypeError(`${path}: a key file is a JSON object`);
    }
    const file = data as Partial<Record<keyof KeyFile, unknown>>;
    if (typeof file.agent_id !== "string" || typeof file.private_key !== "string") {
      throw new TypeError(`${path}: the key file needs agent_id and private_key`);
    }
    const server = options.baseUrl ?? file.server;
    if (typeof server !== "string" || server === "") {
      throw new TypeError(`${path}: the key file names no server; pass baseUrl`);
    }
    const agent = Agent.fromPrivateKey(server, file.agent_id, file.private_key, options);
    if (file.public_key !== undefined && file.public_key !== agent.publicKey) {
      throw new TypeError(`${path}: \`public_key\` is not the private key's`);
    }
    return agent;
  }

  /** The key file's content. */
  keyFile(): KeyFile {
    return {
      agent_id: this.agentId,
      private_key: this.privateKey,
      public_key: this.publicKey,
      server: this.baseUrl,
    };
  }

  /** Writes the key file, readable by its owner only (mode 0600). An existing file is never
   * overwritten (the error's `code` is `EEXIST`). */
  saveKeyFile(path: string): void {
    const fd = openSync(path, "wx", 0o600);
    try {
      writeSync(fd, JSON.stringify(this.keyFile(), null, 2) + "\n");
    } finally {
      closeSync(fd);
    }
  }

  /** Standard base64 of the private key's PKCS#8 DER: the agent's secret. */
  get privateKey(): string {
    return privateKeyB64(this.#key);
  }

  /** Standard base64 of the raw 32-byte public key. */
  get publicKey(): string {
    return publicKeyB64(this.#key);
  }

  // ---- signing ----------------------------------------------------------------------------

  /** The four signature headers of a request: `path` is the API path as it will be sent (a
   * query string is left out of the signature, as the server does), `body` its exact bytes
   * (or text, signed as UTF-8). A fresh timestamp and nonce unless given. */
  sign(method: string, path: string, body?: Body, options: SignOptions = {}): SignatureHeaders {
    return signRequest(this.#key, this.agentId, method, path, body, options);
  }

  /** A signed request to the server: `body` is JSON-serialized (bytes and text are sent as
   * they are); answers the JSON answer, throws `AcpError` for an error. */
  async request(method: string, path: string, body?: unknown): Promise<any> {
    let data: Uint8Array | undefined;
    if (body === undefined || body === null) data = undefined;
    else if (typeof body === "string" || body instanceof Uint8Array) data = bodyBytes(body);
    else data = encodeJson(body);
    const headers = this.sign(method, path, data);
    return request(method, join(this.baseUrl, path), headers, data, this.timeoutMs);
  }

  // ---- telemetry --------------------------------------------------------------------------

  /** A signed heartbeat. */
  heartbeat(options: { status?: string; latencyMs?: number } = {}): Promise<HeartbeatAnswer> {
    return this.request("POST", "/v1/telemetry/heartbeat", {
      agent_id: this.agentId,
      status: options.status ?? "ok",
      latency_ms: options.latencyMs ?? 0,
    });
  }

  // ---- the vault's agent side -------------------------------------------------------------

  /** How the policy judges a vault action (`read`, `proxy`, `mint_lease`) of this agent;
   * nothing is consumed. */
  async vaultEval(
    secretSetId: SecretSetId,
    action: string,
    options: {
      keys?: string[];
      environment?: string;
      provider?: string;
      profile?: string;
      request?: { method: string; url: string; headers?: Record<string, string>; body?: string };
    } = {},
  ): Promise<Decision> {
    const body = defined({ secret_set_id: secretSetId, action, ...options });
    return new Decision(await this.request("POST", "/v1/vault/policy/eval", body));
  }

  /** Mints a request lease (for `read` or `proxy`) from a workflow lease. */
  requestLease(
    workflowLeaseToken: string,
    secretSetId: SecretSetId,
    action: string,
    options: { keys?: string[]; ttlSeconds?: number; uses?: number } = {},
  ): Promise<RequestLease> {
    return this.request(
      "POST",
      "/v1/vault/leases/request/mint",
      defined({
        workflow_lease_token: workflowLeaseToken,
        secret_set_id: secretSetId,
        action,
        keys: options.keys,
        ttl_seconds: options.ttlSeconds,
        uses: options.uses,
      }),
    );
  }

  /** Reads granted keys with one use of a `read` lease: `{KEY: value}`. */
  async readSecrets(
    requestLeaseToken: string,
    secretSetId: SecretSetId,
    keys: string[],
    options: { environment?: string } = {},
  ): Promise<Record<string, string>> {
    const answer = await this.request(
      "POST",
      "/v1/vault/secrets/read",
      defined({
        request_lease_token: requestLeaseToken,
        secret_set_id: secretSetId,
        keys,
        environment: options.environment,
      }),
    );
    return answer.secrets;
  }

  /** Has the server make the call with the set's secrets in the profile's slots, with one use
   * of a `proxy` lease. A `Uint8Array` body is sent as `body_base64`. */
  proxy(
    requestLeaseToken: string,
    secretSetId: SecretSetId,
    profile: string,
    call: {
      method: string;
      url: string;
      headers?: Record<string, string>;
      body?: string | Uint8Array;
      environment?: string;
    },
  ): Promise<ProxyAnswer> {
    const req: Record<string, unknown> = { method: call.method, url: call.url };
    if (call.headers) req.headers = call.headers;
    if (call.body instanceof Uint8Array) req.body_base64 = Buffer.from(call.body).toString("base64");
    else if (call.body !== undefined) req.body = call.body;
    return this.request(
      "POST",
      "/v1/vault/proxy/request",
      defined({
        request_lease_token: requestLeaseToken,
        secret_set_id: secretSetId,
        profile,
        request: req,
        environment: call.environment,
      }),
    );
  }

  /** The status of a challenge this agent raised (by id, or its status link). */
  async challengeStatus(challenge: string): Promise<PolicyChallenge> {
    return (await this.request("GET", challengePath(challenge))).challenge;
  }

  /** Polls the status link until a person decides (or the challenge expires). */
  waitForChallenge(challenge: string, options: WaitOptions = {}): Promise<PolicyChallenge> {
    return waitFor(() => this.challengeStatus(challenge), options);
  }
}
