// The request signature, exactly as the server checks it (docs/signing.md).
//
// The canonical string is five parts joined by a line feed, with no trailing newline: the
// uppercase method, the path without the query string (as sent: not decoded, not normalized),
// the timestamp header's text (Unix epoch milliseconds), the nonce, and the lowercase hex
// SHA-256 of the raw body bytes. The signature is Ed25519 over its UTF-8 bytes, sent as
// standard base64.

import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomUUID,
  sign,
  type KeyObject,
} from "node:crypto";

/** A body to sign: its exact bytes, or text (signed as UTF-8), or nothing. */
export type Body = Uint8Array | string | null | undefined;

export const AGENT_ID_HEADER = "X-Service-Agent-Id";
export const TIMESTAMP_HEADER = "X-Service-Timestamp";
export const NONCE_HEADER = "X-Service-Nonce";
export const SIGNATURE_HEADER = "X-Service-Signature";

/** The four signature headers of a request. */
export type SignatureHeaders = Record<
  typeof AGENT_ID_HEADER | typeof TIMESTAMP_HEADER | typeof NONCE_HEADER | typeof SIGNATURE_HEADER,
  string
>;

/** Standard base64 with padding, the form the server writes. */
export function b64encode(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("base64");
}

/** Standard base64, padded or not (as the server accepts it); anything else throws. */
export function b64decode(text: string): Buffer {
  const trimmed = text.trim();
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(trimmed) || trimmed.replace(/=+$/, "").length % 4 === 1) {
    throw new TypeError("not standard base64");
  }
  return Buffer.from(trimmed, "base64");
}

/** The bytes of a body: bytes as they are, text as UTF-8, nothing as empty. */
export function bodyBytes(body: Body): Buffer {
  if (body === null || body === undefined) return Buffer.alloc(0);
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError("sign the body's exact bytes (Uint8Array or string); serialize JSON once with encodeJson()");
}

/** JSON as the clients send it: compact, UTF-8. */
export function encodeJson(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value), "utf8");
}

/** Lowercase hex SHA-256 of the raw body bytes. */
export function bodySha256(body: Body): string {
  return createHash("sha256").update(bodyBytes(body)).digest("hex");
}

/** What the server signs of a request target: the path, without query string or fragment. */
export function signedPath(target: string): string {
  return target.split("#", 1)[0].split("?", 1)[0];
}

/** `METHOD\nPATH\nTIMESTAMP\nNONCE\nBODY_SHA256`, no trailing newline. */
export function canonicalString(
  method: string,
  path: string,
  timestamp: string,
  nonce: string,
  bodyHash: string,
): string {
  return [method.toUpperCase(), signedPath(path), timestamp, nonce, bodyHash].join("\n");
}

export function newNonce(): string {
  return randomUUID();
}

export interface SignOptions {
  /** Unix epoch milliseconds; now unless given. */
  timestampMs?: number | string;
  /** A fresh UUID unless given. */
  nonce?: string;
}

/** The four signature headers of a request. */
export function signRequest(
  key: KeyObject,
  agentId: string,
  method: string,
  path: string,
  body?: Body,
  options: SignOptions = {},
): SignatureHeaders {
  const timestamp = String(options.timestampMs ?? Date.now());
  const nonce = options.nonce ?? newNonce();
  const canonical = canonicalString(method, path, timestamp, nonce, bodySha256(body));
  return {
    [AGENT_ID_HEADER]: agentId,
    [TIMESTAMP_HEADER]: timestamp,
    [NONCE_HEADER]: nonce,
    [SIGNATURE_HEADER]: b64encode(sign(null, Buffer.from(canonical, "utf8"), key)),
  };
}

// The PKCS#8 DER of an Ed25519 key is this fixed prefix and the 32-byte seed (RFC 8410):
// node:crypto reads keys only in DER, PEM or JWK, so a raw seed is wrapped by hand.
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** A new Ed25519 private key. */
export function generateKey(): KeyObject {
  return generateKeyPairSync("ed25519").privateKey;
}

/** An Ed25519 private key from standard base64 of its PKCS#8 DER (the key file's form), or
 * of its raw 32-byte seed. */
export function loadPrivateKey(text: string): KeyObject {
  const raw = b64decode(text);
  const der = raw.length === 32 ? Buffer.concat([PKCS8_ED25519_PREFIX, raw]) : raw;
  const key = createPrivateKey({ key: der, format: "der", type: "pkcs8" });
  if (key.asymmetricKeyType !== "ed25519") {
    throw new TypeError("the private key is not an Ed25519 key");
  }
  return key;
}

/** Standard base64 of the key's PKCS#8 DER. */
export function privateKeyB64(key: KeyObject): string {
  return b64encode(key.export({ format: "der", type: "pkcs8" }));
}

/** Standard base64 of the raw 32-byte public key, as registered. */
export function publicKeyB64(key: KeyObject): string {
  const jwk = createPublicKey(key).export({ format: "jwk" });
  if (typeof jwk.x !== "string") throw new TypeError("not an Ed25519 key");
  return b64encode(Buffer.from(jwk.x, "base64url"));
}

/** An Ed25519 signature of `bytes`, standard base64. */
export function signBytes(key: KeyObject, bytes: Uint8Array): string {
  return b64encode(sign(null, bytes, key));
}
