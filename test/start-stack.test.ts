import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, isProcessAlive, resolveSecret, startStack, StackStartError, type Stack } from "../scripts/stack";
import { makeTestModelDir, type TestModelDir } from "./support/stack-fixture";

/** `npm start`'s orchestration: real backend and `wrangler dev` processes, started and stopped. */
describe("startStack (backend + wrangler dev)", () => {
  let tmp: TestModelDir | undefined;
  let dir: string;
  let modelDir: string;
  let stack: Stack | undefined;
  const lines: string[] = [];

  // The subject here is startStack itself, so each test calls it; only the temp dir and the tiny
  // model are shared with the other stack tests.
  beforeAll(async () => {
    tmp = await makeTestModelDir("stack");
    ({ dir, modelDir } = tmp);
  });

  afterAll(async () => {
    await stack?.stop();
    tmp?.remove();
  });

  it("starts both parts, answers /healthz on each, and leaves no process behind after stop()", async () => {
    stack = await startStack({
      modelDir,
      backendPorts: [await freePort()],
      edgePort: await freePort(),
      inspectorPort: await freePort(),
      persistTo: join(dir, "wrangler-state"),
      kvMemory: "32MiB",
      threads: 1,
      secret: "stack-test-secret",
      onLine: (line) => lines.push(line),
    });
    const [backendUrl] = stack.backendUrls;
    expect(stack.parts.map((p) => p.name)).toEqual([`backend-${new URL(backendUrl!).port}`, "wrangler"]);

    const edge = await fetch(`${stack.edgeUrl}/healthz`);
    expect(edge.status).toBe(200);
    expect(await edge.json()).toMatchObject({ ok: true });
    expect((await fetch(`${backendUrl}/healthz`)).status).toBe(200);
    // The backend got the secret it was given.
    expect((await fetch(`${backendUrl}/v1/models`)).status).toBe(401);
    expect((await fetch(`${backendUrl}/v1/models`, { headers: { "x-agent-edge-secret": "stack-test-secret" } })).status).toBe(200);

    // Output arrives line by line with the part's name in front.
    expect(lines.some((l) => l.startsWith(`[backend-${new URL(backendUrl!).port}] `))).toBe(true);
    expect(lines.some((l) => l.startsWith("[wrangler] "))).toBe(true);

    const pids = stack.pids();
    // At least the backend, wrangler's launcher, its cli and a workerd.
    expect(pids.length).toBeGreaterThanOrEqual(4);
    expect(pids.every(isProcessAlive)).toBe(true);
    expect(processesWithArgs(["dev", "--port", new URL(stack.edgeUrl).port]).length).toBeGreaterThan(0);
    await stack.stop();
    expect(pids.filter(isProcessAlive)).toEqual([]);
    expect(stack.pids()).toEqual([]);
    // Ports are released.
    expect(await canListen(Number(new URL(stack.edgeUrl).port))).toBe(true);
    expect(await canListen(Number(new URL(backendUrl!).port))).toBe(true);
    stack = undefined;
  });

  it("fails with the backend's name and last output when the backend cannot start, and stops wrangler", async () => {
    const edgePort = await freePort();
    const started = startStack({
      modelDir: join(dir, "no-such-model"),
      backendPorts: [await freePort()],
      edgePort,
      inspectorPort: await freePort(),
      persistTo: join(dir, "wrangler-state"),
      onLine: () => {},
    });
    const err = await started.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StackStartError);
    const e = err as StackStartError;
    expect(e.reason).toBe("exited");
    expect(e.part).toMatch(/^backend-\d+$/);
    expect(e.message).toMatch(/exited with code 1 before answering GET .*\/healthz/);
    expect(e.message).toContain("no-such-model/config.json: file not found");
    // wrangler, started alongside, was stopped too.
    expect(processesWithArgs(["dev", "--port", String(edgePort)])).toEqual([]);
    expect(await canListen(edgePort)).toBe(true);
  });

  it("refuses a port that is already taken, naming it", async () => {
    const server = createServer();
    const port = await new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)));
    try {
      const err = await startStack({ modelDir, backendPorts: [await freePort()], edgePort: port, onLine: () => {} }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StackStartError);
      expect((err as StackStartError).reason).toBe("port_in_use");
      expect((err as Error).message).toContain(`port ${port} (the edge)`);
    } finally {
      server.close();
    }
  });

  it("takes the secret from AGENT_EDGE_SECRET, else .dev.vars, else dev-secret", () => {
    const root = mkdtempSync(join(dir, "secret-"));
    expect(resolveSecret({ env: {}, root })).toEqual({ secret: "dev-secret", source: "default" });
    writeFileSync(join(root, ".dev.vars"), '# local\nOTHER=1\nAGENT_EDGE_SECRET="from file"\n');
    expect(resolveSecret({ env: {}, root })).toEqual({ secret: "from file", source: ".dev.vars" });
    expect(resolveSecret({ env: { AGENT_EDGE_SECRET: "from env" }, root })).toEqual({ secret: "from env", source: "env" });
  });
});

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/** Live pids whose command line contains `args` in a row (Linux /proc; [] elsewhere). */
function processesWithArgs(args: string[]): number[] {
  if (!existsSync("/proc/self/cmdline")) return [];
  const needle = args.join("\0");
  return readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(needle) && isProcessAlive(pid);
      } catch {
        return false;
      }
    });
}
