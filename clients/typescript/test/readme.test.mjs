// The README opens with a working example: its first block, run exactly as written (as a
// module inside this package, so that `import ... from "acp-client"` is this package).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { PACKAGE, readmeExample, serverEnv } from "./support.mjs";

test("the README's first block runs as written", () => {
  serverEnv(); // the block reads ACP_URL and ACP_API_KEY: fail clearly without a server
  const code = readmeExample();
  assert.match(code, /Agent\.create\(/);
  const file = join(PACKAGE, "dist", "readme-example.mjs");
  writeFileSync(file, code);
  try {
    const out = execFileSync(process.execPath, [file], { encoding: "utf8", env: process.env, timeout: 60_000 });
    const [decision] = out.trim().split(/\s+/);
    assert.ok(["allow", "challenge", "deny"].includes(decision), out);
  } finally {
    rmSync(file, { force: true });
  }
});
