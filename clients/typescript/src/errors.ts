/** A refusal or failure: `status` (the HTTP status; `null` when the server could not be
 * reached), `code` (the server's stable `error` code, such as `bad_signature`), the server's
 * `message`, and `body` (the whole error body, with extra fields such as `retry_after`,
 * `challenge_id` or, for `bad_signature`, `canonical_string` and `hint`). */
export class AcpError extends Error {
  readonly status: number | null;
  readonly code: string;
  readonly body: unknown;

  constructor(status: number | null, code: string, message: string, body: unknown) {
    let detail = message ? `${code}: ${message}` : code;
    if (status !== null) detail = `HTTP ${status} ${detail}`;
    const fields = isObject(body) ? body : {};
    if (code === "bad_signature") {
      if (typeof fields.hint === "string") detail += ` (hint: ${fields.hint})`;
      if (typeof fields.canonical_string === "string") {
        detail += `\nthe server checked the signature against:\n${fields.canonical_string}`;
      }
    }
    super(detail);
    this.name = "AcpError";
    this.status = status;
    this.code = code;
    this.body = body;
  }

  private field(name: string): unknown {
    return isObject(this.body) ? this.body[name] : undefined;
  }

  /** For `bad_signature`: the canonical string the server built and checked. */
  get canonicalString(): string | undefined {
    const v = this.field("canonical_string");
    return typeof v === "string" ? v : undefined;
  }

  /** For `bad_signature`: `signature_not_base64` or `signature_wrong_length`. */
  get hint(): string | undefined {
    const v = this.field("hint");
    return typeof v === "string" ? v : undefined;
  }

  /** For `policy_challenge`: the challenge a person must decide. */
  get challengeId(): string | undefined {
    const v = this.field("challenge_id");
    return typeof v === "string" ? v : undefined;
  }

  /** For `policy_challenge`: `{type, url, expires_at, expires_in}` (an agent gets its status
   * link). */
  get challenge(): ChallengeLink | undefined {
    const v = this.field("challenge");
    return isObject(v) ? (v as unknown as ChallengeLink) : undefined;
  }
}

/** How a challenge is decided or followed: an approval link for a backend, a status link for
 * an agent asking for itself. */
export interface ChallengeLink {
  type: string;
  url: string;
  expires_at: string;
  expires_in: number;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
