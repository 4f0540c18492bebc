import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { loadModel, type LoadedModel } from "./load-model";
import type { Engine } from "./engine";
import { createEngine } from "./create-engine";
import { tinyModelDir } from "../model/testing/tiny-model";

/** Client-named cache prefixes (`cachePoints`) on a real engine over the tiny model. */
const BLOCK = 16;
const FIVE_MIN = 300_000;
const ONE_HOUR = 3_600_000;
let dir: string;
let model: LoadedModel;
const executors: CpuExecutor[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-prefix-leases-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
});

afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function makeEngine(numBlocks: number): Promise<Engine> {
  const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks, blockSize: BLOCK, threads: 1 });
  executors.push(executor);
  const pool = new BlockPool({ numBlocks, blockSize: BLOCK });
  return createEngine({ executor, pool, codec: model.codec, modelId: model.spec.modelId, scheduler: { maxBatchTokens: 256, maxRunningSequences: 8, blockSize: BLOCK }, enablePrefixCache: true, backendId: "test" });
}

function done(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) =>
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(f.message));
    }),
  );
}

const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `w${(i * 7919 + seed) % 997}`).join(" ");
const SYSTEM: ChatMessage = { role: "system", content: `You are an agent. ${words(150, 1)}` };
const request = (messages: ChatMessage[], cachePoints?: GenerateRequest["cachePoints"], id = "r"): GenerateRequest => ({
  requestId: id,
  cacheSalt: "tenant",
  mode: "full",
  messages,
  sampling: { maxTokens: 2, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
  ...(cachePoints ? { cachePoints } : {}),
});

describe("cache points as leases", () => {
  it("report what the turn computed under each point, per TTL, and nothing once it is cached", async () => {
    const engine = await makeEngine(256);
    const messages: ChatMessage[] = [SYSTEM, { role: "user", content: words(60, 2) }];
    const first = await done(engine, request(messages, [{ messages: 1, ttlMs: FIVE_MIN }, { messages: 2, ttlMs: ONE_HOUR }]));
    expect(first.usage.cachedTokens).toBe(0);
    const writes = new Map(first.cacheWrites!.map((w) => [w.ttlMs, w.tokens]));
    const systemTokens = writes.get(FIVE_MIN)!;
    // The system prompt's full blocks under the 5-minute point, the rest of the user message's under the hour.
    expect(systemTokens % BLOCK).toBe(0);
    expect(systemTokens).toBeGreaterThan(100);
    expect(writes.get(ONE_HOUR)! % BLOCK).toBe(0);
    expect(writes.get(ONE_HOUR)!).toBeGreaterThan(16);
    expect(systemTokens + writes.get(ONE_HOUR)!).toBeLessThanOrEqual(first.usage.promptTokens);
    expect(systemTokens + writes.get(ONE_HOUR)!).toBeGreaterThan(first.usage.promptTokens - 2 * BLOCK);
    const keys = engine.leases.table.list().filter((l) => l.key.startsWith("prefix:"));
    expect(keys).toHaveLength(2);

    // The same prefix again: read, not written; the same two leases, refreshed.
    const again = await done(engine, request(messages, [{ messages: 1, ttlMs: FIVE_MIN }, { messages: 2, ttlMs: ONE_HOUR }], "r2"));
    expect(again.usage.cachedTokens).toBeGreaterThanOrEqual(systemTokens + writes.get(ONE_HOUR)!);
    expect(again.cacheWrites!.reduce((s, w) => s + w.tokens, 0)).toBe(0);
    expect(engine.leases.table.list().filter((l) => l.key.startsWith("prefix:")).map((l) => l.key).sort()).toEqual(keys.map((l) => l.key).sort());
    // Without points: no writes reported.
    expect((await done(engine, request(messages, undefined, "r3"))).cacheWrites).toBeUndefined();
  });

  it("keeps the leased prefix cached through pressure that evicts an unleased one", async () => {
    const engine = await makeEngine(128);
    const leased: ChatMessage[] = [SYSTEM, { role: "user", content: "hi" }];
    const other: ChatMessage[] = [{ role: "system", content: `Another prompt. ${words(150, 5)}` }, { role: "user", content: "hi" }];
    const leasedSystem = (await done(engine, request(leased, [{ messages: 1, ttlMs: FIVE_MIN }]))).cacheWrites![0]!.tokens;
    await done(engine, request(other, undefined, "o1"));
    // Fill the pool with fresh prompts: the unleased "other" prefix is evicted, the leased one is not.
    for (let i = 0; i < 6; i++) await done(engine, request([{ role: "user", content: words(180, 100 + i) }], undefined, `f${i}`));
    expect((await done(engine, request(leased, undefined, "l2"))).usage.cachedTokens).toBeGreaterThanOrEqual(leasedSystem);
    expect((await done(engine, request(other, undefined, "o2"))).usage.cachedTokens).toBe(0);
  });
});
