// HTTP with Node's built-in fetch: JSON in, JSON out, the service's error envelope thrown as
// `AcpError`.

import { AcpError, isObject } from "./errors.js";

export const DEFAULT_TIMEOUT_MS = 30_000;
const USER_AGENT = "acp-client-typescript/0.1.0";

/** The URL of an API path (`/v1/...`) under the base URL (which may carry a path prefix). */
export function join(baseUrl: string, path: string): string {
  if (!path.startsWith("/")) throw new TypeError(`an API path starts with \`/\`: ${path}`);
  return baseUrl.replace(/\/+$/, "") + path;
}

/** Sends the request; answers the parsed JSON body of a 2xx answer, throws `AcpError`
 * otherwise (also when the server cannot be reached or does not answer JSON). */
export async function request(
  method: string,
  url: string,
  headers: Record<string, string>,
  body: Uint8Array | undefined,
  timeoutMs: number,
): Promise<any> {
  const all: Record<string, string> = { Accept: "application/json", "User-Agent": USER_AGENT };
  if (body !== undefined) all["Content-Type"] = "application/json";
  Object.assign(all, headers);
  let res: Response;
  try {
    res = await fetch(url, {
      method: method.toUpperCase(),
      headers: all,
      body,
      redirect: "follow",
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const cause = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
    throw new AcpError(null, "unreachable", `cannot reach ${url}: ${cause}`, null);
  }
  const text = await res.text();
  let parsed: unknown = null;
  let isJson = true;
  if (text.length > 0) {
    try {
      parsed = JSON.parse(text);
    } catch {
      isJson = false;
    }
  }
  if (res.ok) {
    if (!isJson) throw new AcpError(res.status, "invalid_response", `${url} did not answer JSON`, null);
    return parsed;
  }
  if (isObject(parsed) && typeof parsed.error === "string") {
    throw new AcpError(res.status, parsed.error, String(parsed.message ?? ""), parsed);
  }
  throw new AcpError(res.status, `http_${res.status}`, text.slice(0, 200) || `HTTP ${res.status}`, parsed);
}
