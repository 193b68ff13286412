// The backend: what a service that agents call does with the workspace API key: decisions,
// verifying an agent's signed request, token exchange, credentials, workflow leases.

import { defined, waitFor, type SecretSetId, type WaitOptions } from "./agent.js";
import { DEFAULT_TIMEOUT_MS, join, request } from "./http.js";
import {
  AGENT_ID_HEADER,
  NONCE_HEADER,
  SIGNATURE_HEADER,
  TIMESTAMP_HEADER,
  bodySha256,
  encodeJson,
  signedPath,
  type Body,
} from "./signing.js";
import {
  Decision,
  Verification,
  type Credential,
  type ExchangedToken,
  type Heartbeat,
  type Introspection,
  type PolicyChallenge,
  type WorkflowLease,
} from "./types.js";

/** The headers of a received request: a `Headers` object or a plain object (names are
 * compared case-insensitively). */
export type ReceivedHeaders = Headers | Record<string, string | string[] | undefined>;

interface Found {
  agentId: string;
  timestamp: string;
  nonce: string;
  signature: string;
}

/** The four signature headers of a received request, or undefined when one is absent. */
function signatureHeaders(headers: ReceivedHeaders): Found | undefined {
  const lower = new Map<string, string>();
  const entries: Iterable<[string, unknown]> =
    headers instanceof Headers ? headers.entries() : Object.entries(headers);
  for (const [k, v] of entries) {
    const text = Array.isArray(v) ? v[0] : v;
    if (typeof text === "string") lower.set(k.toLowerCase(), text);
  }
  const get = (name: string) => lower.get(name.toLowerCase()) ?? "";
  const found = {
    agentId: get(AGENT_ID_HEADER),
    timestamp: get(TIMESTAMP_HEADER),
    nonce: get(NONCE_HEADER),
    signature: get(SIGNATURE_HEADER),
  };
  return Object.values(found).every((v) => v !== "") ? found : undefined;
}

/** A backend holding a workspace API key (`svc_live_...` or `svc_test_...`). */
export class Backend {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #apiKey: string;

  constructor(baseUrl: string, apiKey: string, options: { timeoutMs?: number } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = apiKey;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  #call(method: string, path: string, body?: unknown): Promise<any> {
    return request(
      method,
      join(this.baseUrl, path),
      { "X-Service-Api-Key": this.#apiKey },
      body === undefined ? undefined : encodeJson(body),
      this.timeoutMs,
    );
  }

  // ---- decisions --------------------------------------------------------------------------

  /** May the agent do this, right now? Ask right before acting, and act only on `allow`;
   * `challenge` and `deny` are answers, not errors. */
  async check(
    agentId: string,
    action: string,
    context: Record<string, unknown> = {},
    options: { policyId?: string; email?: Record<string, unknown> } = {},
  ): Promise<Decision> {
    const body = defined({ agent_id: agentId, action, context, policy_id: options.policyId, email: options.email });
    return new Decision(await this.#call("POST", "/v1/check", body));
  }

  /** A policy challenge's status (`pending`, `approved`, `denied`, `expired`). */
  async challengeStatus(challengeId: string): Promise<PolicyChallenge> {
    if (!challengeId || challengeId.includes("/")) throw new TypeError(`not a challenge id: ${challengeId}`);
    return (await this.#call("GET", `/v1/policy-challenges/${challengeId}`)).challenge;
  }

  /** Polls until a person decides (or the challenge expires); then check again. */
  waitForChallenge(challengeId: string, options: WaitOptions = {}): Promise<PolicyChallenge> {
    return waitFor(() => this.challengeStatus(challengeId), options);
  }

  // ---- identity ---------------------------------------------------------------------------

  /** Asks the server whether a request this backend received was signed by an agent of its
   * workspace: the request's method, path (the query string is left out), headers and raw
   * body. A valid answer spends the request's nonce. A request without the four signature
   * headers, or with a timestamp that is not a number, is not sent: it is not valid
   * (`missing_signature_headers`, `timestamp_out_of_range`). */
  async verify(method: string, path: string, headers: ReceivedHeaders, body?: Body): Promise<Verification> {
    const found = signatureHeaders(headers);
    if (!found) return new Verification({ valid: false, reason: "missing_signature_headers" });
    if (!/^[0-9]{1,15}$/.test(found.timestamp)) {
      return new Verification({ valid: false, reason: "timestamp_out_of_range", agent_id: found.agentId });
    }
    const answer = await this.#call("POST", "/v1/verify", {
      agent_id: found.agentId,
      method: method.toUpperCase(),
      path: signedPath(path),
      timestamp_ms: Number(found.timestamp),
      nonce: found.nonce,
      body_sha256: bodySha256(body),
      signature_b64: found.signature,
    });
    return new Verification(answer);
  }

  /** Trades a request the agent signed (as for `verify`) for a short-lived EdDSA JWT, if the
   * policy allows `token_exchange`. */
  exchangeToken(
    method: string,
    path: string,
    headers: ReceivedHeaders,
    body?: Body,
    options: {
      audience?: string;
      scopes?: string[];
      ttlSeconds?: number;
      policyId?: string;
      context?: Record<string, unknown>;
    } = {},
  ): Promise<ExchangedToken> {
    const found = signatureHeaders(headers);
    if (!found) {
      throw new TypeError(
        "the request carries no agent signature (X-Service-Agent-Id, X-Service-Timestamp, X-Service-Nonce, X-Service-Signature)",
      );
    }
    return this.#call(
      "POST",
      "/v1/token/exchange",
      defined({
        agent_id: found.agentId,
        agent_request: {
          method: method.toUpperCase(),
          path: signedPath(path),
          timestamp_ms: found.timestamp,
          nonce: found.nonce,
          body_sha256: bodySha256(body),
          signature_b64: found.signature,
        },
        audience: options.audience,
        scopes: options.scopes,
        ttl_seconds: options.ttlSeconds,
        policy_id: options.policyId,
        context: options.context,
      }),
    );
  }

  // ---- credentials ------------------------------------------------------------------------

  /** Mints a short-lived credential for the agent, if the policy allows `mint_credential`
   * (the token is shown this once). */
  async mintCredential(
    agentId: string,
    options: {
      audience?: string;
      scopes?: string[];
      ttlSeconds?: number;
      oneTime?: boolean;
      tokenType?: "opaque" | "jwt";
      provider?: string;
      policyId?: string;
    } = {},
  ): Promise<Credential> {
    const answer = await this.#call(
      "POST",
      "/v1/identity/credentials/mint",
      defined({
        agent_id: agentId,
        audience: options.audience,
        scopes: options.scopes,
        ttl_seconds: options.ttlSeconds,
        one_time: options.oneTime,
        token_type: options.tokenType,
        provider: options.provider,
        policy_id: options.policyId,
      }),
    );
    return answer.credential;
  }

  /** Is this credential good now? (A one-time credential is active for its first
   * introspection only.) */
  introspect(token: string): Promise<Introspection> {
    return this.#call("POST", "/v1/identity/introspect", { token });
  }

  /** Revokes one credential, by its token or its id; answers how many were revoked. */
  async revokeCredential(which: { token: string } | { credId: string }, reason?: string): Promise<number> {
    const body =
      "token" in which
        ? defined({ token: which.token, reason })
        : defined({ cred_id: which.credId, reason });
    return Number((await this.#call("POST", "/v1/identity/credentials/revoke", body)).revoked);
  }

  /** Revokes every live credential of the agent; answers how many. */
  async revokeAgentCredentials(agentId: string, reason?: string): Promise<number> {
    const answer = await this.#call("POST", "/v1/identity/credentials/revoke-by-agent", defined({ agent_id: agentId, reason }));
    return Number(answer.revoked);
  }

  // ---- vault and telemetry ----------------------------------------------------------------

  /** Hands the agent a workflow lease for a job (`actions`: `read`, `proxy`). */
  workflowLease(
    agentId: string,
    secretSetId: SecretSetId,
    purpose: string,
    actions: string[],
    options: { ttlSeconds?: number } = {},
  ): Promise<WorkflowLease> {
    return this.#call(
      "POST",
      "/v1/vault/leases/workflow",
      defined({ agent_id: agentId, secret_set_id: secretSetId, purpose, actions, ttl_seconds: options.ttlSeconds }),
    );
  }

  /** The workspace's most recent heartbeats, newest first. */
  async recentHeartbeats(options: { agentId?: string; limit?: number } = {}): Promise<Heartbeat[]> {
    const query = new URLSearchParams();
    if (options.agentId !== undefined) query.set("agent_id", options.agentId);
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    const q = query.toString();
    return (await this.#call("GET", `/v1/telemetry/heartbeat/recent${q ? `?${q}` : ""}`)).items;
  }
}
