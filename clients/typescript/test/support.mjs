// What the tests share: the documented signing vectors, the server under test (from the
// environment), an owner's calls that set the stage, and a plain HTTP upstream for the proxy.

import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGE = join(here, "..");
export const REPO = join(here, "..", "..", "..");
export const README = join(PACKAGE, "README.md");

// The metadata that puts an agent in the test policy's group.
export const SUITE_METADATA = { suite: "acp-client-tests" };

// The policy the integration tests apply (the Python suite applies the same): agents of the
// group may read reports, need a person to wire money, may never delete everything; they may
// use the vault with the proxy to loopback only, and a read in the `guarded` environment needs
// a person.
export const TEST_SPEC = {
  reusable_policy_blocks: {
    "client-tests": {
      actions: {
        allow: ["read_report", "mint_credential", "token_exchange"],
        challenge: ["wire_money"],
        deny: ["delete_everything"],
      },
      vault: {
        allow: ["mint_lease", "read", "proxy"],
        proxy_hosts: ["127.0.0.1"],
        require_approval: { actions: ["read"], environments: ["guarded"] },
      },
    },
  },
  agent_groups: [{ name: "client-tests", selectors: [{ metadata: SUITE_METADATA }] }],
  bindings: [{ name: "client-tests", group: "client-tests", blocks: ["client-tests"] }],
};

/** The JSON block between the `signing-vectors` markers of docs/signing.md. */
export function vectors() {
  const text = readFileSync(join(REPO, "docs", "signing.md"), "utf8");
  const found = /<!-- signing-vectors:begin -->\s*```json\n([\s\S]*?)\n```\s*<!-- signing-vectors:end -->/.exec(text);
  if (!found) throw new Error("docs/signing.md has no signing-vectors block");
  return JSON.parse(found[1]);
}

/** The first fenced JavaScript block of the README: the example it opens with. */
export function readmeExample() {
  const found = /```js\n([\s\S]*?)\n```/.exec(readFileSync(README, "utf8"));
  if (!found) throw new Error("README.md has no js block");
  return found[1];
}

/** The server under test: `ACP_URL`, `ACP_API_KEY` (a workspace API key) and `ACP_TOKEN` (a
 * personal access token of an owner of that workspace, for the vault's administration and for
 * deciding challenges). The server must let the vault's proxy reach loopback
 * (`ACP_VAULT_PROXY_ALLOW=127.0.0.1/32`). `scripts/clients-check.sh` starts one so. */
export function serverEnv() {
  const missing = ["ACP_URL", "ACP_API_KEY", "ACP_TOKEN"].filter((v) => !process.env[v]);
  if (missing.length > 0) {
    throw new Error(
      `the integration tests need a running server: set ${missing.join(", ")} (scripts/clients-check.sh starts a server and sets them)`,
    );
  }
  const url = process.env.ACP_URL.replace(/\/+$/, "");
  const token = process.env.ACP_TOKEN;
  /** A call as the owner (the personal access token); throws on an error. */
  async function owner(method, path, body) {
    const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`);
    return JSON.parse(text);
  }
  async function applyTestPolicy() {
    const applied = await owner("POST", "/v1/policies/sync", { dry_run: false, spec: TEST_SPEC });
    if (applied.ok !== true) throw new Error(`the test policy was not applied: ${JSON.stringify(applied)}`);
  }
  return { url, apiKey: process.env.ACP_API_KEY, token, owner, applyTestPolicy };
}

/** A plain HTTP server on loopback that answers every request with what it received, as
 * JSON: the proxy's destination. */
export async function startUpstream() {
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const payload = JSON.stringify({
        method: req.method,
        path: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) });
      res.end(payload);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = server.address().port;
  return {
    port,
    url: (path) => `http://127.0.0.1:${port}${path}`,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
