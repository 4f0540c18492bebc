import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { shortBlockHash } from "../../protocol/block-hash";
import type { KvEventBatch } from "../../protocol/messages";
import { tinyModelDir } from "../model/testing/tiny-model";
import { createBackend, type Backend } from "./backend";
import { startHeartbeat } from "./heartbeat";

/**
 * The heartbeat's side of the KV event protocol, against a small HTTP server standing in for the
 * edge's POST /v1/pool/heartbeat (the real route and PoolDO are tested in test/workers/pool.test.ts
 * and end to end in test/edge-e2e.test.ts): what it sends after ok, resync and failed answers.
 */
describe("startHeartbeat publishes KV events", () => {
  let dir: string;
  let backend: Backend;
  let server: Server;
  let edgeUrl: string;
  const bodies: { kvEvents: KvEventBatch; id: string; queuedTokens?: number; prefillTokensPerS?: number }[] = [];
  /** Answers in order; the last one repeats. `fail` answers HTTP 500. */
  let answers: ("ok" | "resync" | "fail")[] = [];
  let inFlight = 0;
  let maxInFlight = 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "agent-edge-heartbeat-"));
    backend = await createBackend({
      modelDir: await tinyModelDir(dir),
      kvMemoryBytes: 1 << 20,
      blockSize: 16,
      maxBatchTokens: 256,
      enablePrefixCache: true,
      threads: 1,
      executor: "cpu",
      backendId: "hb-test",
    });
    server = createServer((req, res) => {
      let raw = "";
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      req.on("data", (c: Buffer) => (raw += c.toString()));
      req.on("end", () => {
        const body = JSON.parse(raw) as (typeof bodies)[number];
        const answer = answers[Math.min(bodies.length, answers.length - 1)]!;
        bodies.push(body);
        // Answer slower than the beat interval: beats must not overlap.
        setTimeout(() => {
          inFlight--;
          if (answer === "fail") res.writeHead(500).end("boom");
          else res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ registered: bodies.length === 1, kv: answer }));
        }, 60);
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    edgeUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server?.close();
    await backend?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("sends a snapshot first, deltas after ok, and a snapshot again after a resync answer or a failed beat", async () => {
    const engine = backend.engine;
    await engine.generateTokens({ tokenIds: Array.from({ length: 70 }, (_, i) => 200 + i), sampling: { maxTokens: 1, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true } });
    const cached = [...engine.kv.cachedBlockHashes()].map(shortBlockHash);
    expect(cached.length).toBe(4);

    answers = ["ok", "ok", "resync", "ok", "fail", "ok"];
    const stop = startHeartbeat({ edgeUrl, secret: "s", backendId: "hb-test", advertiseUrl: "http://127.0.0.1:1", engine, intervalMs: 20 });
    try {
      for (let i = 0; i < 500 && bodies.length < 8; i++) await new Promise((r) => setTimeout(r, 20));
    } finally {
      stop.stop();
    }
    const batches = bodies.map((b) => b.kvEvents);
    expect(batches.length).toBeGreaterThanOrEqual(8);
    expect(batches.map((b) => b.kind).slice(0, 8)).toEqual([
      "snapshot", // first of all
      "delta", // after ok
      "delta", // after ok (answered resync)
      "snapshot", // after the resync
      "delta", // after ok (this one fails)
      "snapshot", // after the failure
      "delta",
      "delta",
    ]);
    expect(batches.map((b) => b.seq).slice(0, 8)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (const i of [0, 3, 5]) expect(batches[i]!.stored.sort()).toEqual([...cached].sort());
    expect(maxInFlight).toBe(1);
    // The queue fields: nothing queued now, and the rate measured from the 70-token prefill step.
    expect(bodies[0]!.queuedTokens).toBe(0);
    expect(bodies[0]!.prefillTokensPerS).toBeGreaterThan(0);
    expect(bodies[0]!.prefillTokensPerS).toBe(engine.prefillRate.tokensPerS);
  });
});

/**
 * A fake edge (its heartbeat route answers with `answer`, which may hold the response) and a
 * tiny-model backend heartbeating to it every 400 ms (keepalive grace 1 s). `close` ends all.
 */
async function heartbeatFixture(backendId: string, answer: (body: Record<string, unknown>, res: ServerResponse) => void) {
  const received: { at: number; body: Record<string, unknown> }[] = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.on("data", (c: Buffer) => (raw += c.toString()));
    req.on("end", () => {
      const body = JSON.parse(raw) as Record<string, unknown>;
      received.push({ at: Date.now(), body });
      answer(body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const edge = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), `agent-edge-${backendId}-`));
  const b = await createBackend({ modelDir: await tinyModelDir(dir), kvMemoryBytes: 1 << 20, blockSize: 16, maxBatchTokens: 256, enablePrefixCache: true, threads: 1, executor: "cpu", backendId });
  const stop = startHeartbeat({ edgeUrl: edge, secret: "s", backendId, advertiseUrl: "http://127.0.0.1:1", engine: b.engine, intervalMs: 400 });
  return {
    received,
    close: async () => {
      stop.stop();
      server.closeAllConnections();
      server.close();
      await b.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const isKeepalive = (body: Record<string, unknown>) => body.kvEvents === undefined;
const answerOk = (res: ServerResponse) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ registered: false, kv: "ok" }));

describe("heartbeat whose beats do not get through", () => {
  it("the keepalive thread resends the load when no beat was answered for 1.25 intervals, even with the main thread running", async () => {
    // The main thread's beats hang (a stuck edge connection); the keepalive's are answered.
    const f = await heartbeatFixture("stuck-test", (body, res) => {
      if (isKeepalive(body)) answerOk(res);
    });
    try {
      // The main thread stays free (awaiting timers), yet none of its beats is answered.
      const keepalives = () => f.received.filter((r) => isKeepalive(r.body));
      for (let i = 0; i < 60 && keepalives().length < 2; i++) await new Promise((r) => setTimeout(r, 100));
      expect(keepalives().length).toBeGreaterThanOrEqual(2);
      // The first after the 1 s grace, then at most one per grace period.
      expect(keepalives()[1]!.at - keepalives()[0]!.at).toBeGreaterThanOrEqual(900);
      expect(f.received.some((r) => !isKeepalive(r.body))).toBe(true);
    } finally {
      await f.close();
    }
  });
});

describe("heartbeat while the main thread is blocked", () => {
  it("a keepalive thread resends the last load (no KV events) so the pool does not take a busy backend for a dead one", async () => {
    const f = await heartbeatFixture("ka-test", (_body, res) => answerOk(res));
    const { received } = f;
    try {
      // Let the main thread send its first beats.
      await new Promise((r) => setTimeout(r, 900));
      const before = received.length;
      expect(before).toBeGreaterThanOrEqual(2);
      expect(received.every((r) => r.body.kvEvents !== undefined)).toBe(true);
      expect(typeof received[0]!.body.loadAvg).toBe("number");
      // Block the main thread for 3.5 s, as a long synchronous onnxruntime step does.
      const blockedAt = Date.now();
      while (Date.now() - blockedAt < 3500) {
        /* busy */
      }
      // Let the server's event loop take what arrived meanwhile (it is this thread too).
      await new Promise((r) => setTimeout(r, 300));
      const keepalives = received.slice(before).filter((r) => r.body.kvEvents === undefined);
      expect(keepalives.length).toBeGreaterThanOrEqual(1);
      expect(keepalives[0]!.body).toMatchObject({ id: "ka-test", url: "http://127.0.0.1:1", running: 0, waiting: 0 });
    } finally {
      await f.close();
    }
  });
});
