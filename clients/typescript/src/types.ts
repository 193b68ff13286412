// The answers that are more than a JSON object to read: decisions and verifications. Other
// answers are the server's JSON as it is (snake_case), typed below.

import type { ChallengeLink } from "./errors.js";

/** A policy decision (`POST /v1/check`, `POST /v1/vault/policy/eval`). */
export class Decision {
  /** `allow`, `challenge` or `deny` (lowercase). */
  readonly decision: string;
  readonly traceId: string | undefined;
  readonly reasons: string[];
  readonly reasonCodes: string[];
  readonly policyId: string | undefined;
  readonly policyHash: string | undefined;
  readonly determiningPolicies: string[];
  /** On `challenge`: the challenge a person decides. */
  readonly challengeId: string | undefined;
  /** On `challenge`: an approval link for a backend, a status link for an agent. */
  readonly challenge: ChallengeLink | undefined;
  /** The whole answer. */
  readonly raw: Record<string, any>;

  constructor(body: Record<string, any>) {
    this.decision = String(body.decision ?? "").toLowerCase();
    this.traceId = body.trace_id ?? undefined;
    this.reasons = [...(body.reasons ?? [])];
    this.reasonCodes = [...(body.reason_codes ?? [])];
    this.policyId = body.policy_id ?? undefined;
    this.policyHash = body.policy_hash ?? undefined;
    this.determiningPolicies = [...(body.determining_policies ?? [])];
    this.challengeId = body.challenge_id ?? undefined;
    this.challenge = body.challenge ?? undefined;
    this.raw = body;
  }

  /** True only for `allow`: act on nothing else. */
  get allowed(): boolean {
    return this.decision === "allow";
  }
}

/** The answer of `POST /v1/verify`. When `valid` is false, do not act on the request. */
export class Verification {
  readonly valid: boolean;
  /** Why `valid` is false. */
  readonly reason: string | undefined;
  readonly agentId: string | undefined;
  readonly verifiedAt: string | undefined;
  readonly verificationTier: string | undefined;
  readonly riskTier: string | undefined;
  readonly revoked: boolean;
  /** For `bad_signature`: the string the server checked the signature against. */
  readonly canonicalString: string | undefined;
  /** For `bad_signature`: `signature_not_base64` or `signature_wrong_length`. */
  readonly hint: string | undefined;
  readonly raw: Record<string, any>;

  constructor(body: Record<string, any>) {
    this.valid = body.valid === true;
    this.reason = body.reason ?? undefined;
    this.agentId = body.agent_id ?? undefined;
    this.verifiedAt = body.verified_at ?? undefined;
    this.verificationTier = body.verification_tier ?? undefined;
    this.riskTier = body.risk_tier ?? undefined;
    this.revoked = body.revoked === true;
    this.canonicalString = body.canonical_string ?? undefined;
    this.hint = body.hint ?? undefined;
    this.raw = body;
  }
}

/** A policy challenge's state. */
export interface PolicyChallenge {
  challenge_id: string;
  /** `pending`, `approved`, `denied` or `expired`. */
  status: string;
  agent_id: string;
  action: string;
  policy_id: string;
  reasons: string[];
  reason_codes: string[];
  trace_id: string;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  decided_by: string | null;
  used: boolean;
  [field: string]: unknown;
}

export interface HeartbeatAnswer {
  ok: boolean;
  agent_id: string;
  status: string;
  recorded_at: string;
  [field: string]: unknown;
}

export interface RequestLease {
  ok: boolean;
  lease_id: string;
  request_lease_token: string;
  expires_at: string;
  uses_left: number;
  [field: string]: unknown;
}

export interface WorkflowLease {
  ok: boolean;
  lease_id: string;
  workflow_lease_token: string;
  expires_at: string;
  [field: string]: unknown;
}

export interface ProxyAnswer {
  ok: boolean;
  /** The upstream's status. */
  status: number;
  headers: Record<string, string>;
  body?: string;
  body_base64?: string;
  trace_id: string;
  [field: string]: unknown;
}

export interface Credential {
  cred_id: string;
  /** Shown this once. */
  token: string;
  token_type: string;
  expires_at: string;
  one_time: boolean;
  audience: string | null;
  scopes: string[];
  [field: string]: unknown;
}

export interface ExchangedToken {
  ok: boolean;
  token: string;
  token_type: string;
  expires_in: number;
  [field: string]: unknown;
}

export interface Introspection {
  active: boolean;
  cred_id?: string;
  agent_id?: string;
  audience?: string | null;
  scopes?: string[];
  expires_at?: string;
  token_type?: string;
  reason?: string;
  [field: string]: unknown;
}

export interface Heartbeat {
  agent_id: string;
  status: string;
  latency_ms: number;
  created_at: string;
  [field: string]: unknown;
}
