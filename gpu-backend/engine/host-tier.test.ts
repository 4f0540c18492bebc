import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DoneFrame, Frame, GenerateRequest, SamplingParams } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import type { Engine } from "./engine";
import { createEngine } from "./create-engine";
import { loadModel, type LoadedModel } from "./load-model";
import { tinyModelDir } from "../model/testing/tiny-model";

/**
 * The host tier on the real engine (tiny model, cpu executor): a prompt's blocks evicted from a
 * small pool by other trajectories come back from the tier on its next turn, exactly (the reply
 * equals a cold engine's), and the done frame says how many tokens came from there.
 */
const B = 16;
const sampling: SamplingParams = { maxTokens: 5, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
let dir: string;
let model: LoadedModel;
const executors: CpuExecutor[] = [];

async function engineWith(numBlocks: number, hostTierBlocks: number): Promise<Engine> {
  const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks, blockSize: B, threads: 1 });
  executors.push(executor);
  return createEngine({
    executor,
    pool: new BlockPool({ numBlocks, blockSize: B }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 4, blockSize: B },
    enablePrefixCache: true,
    backendId: "tier",
    hostTierBytes: hostTierBlocks * executor.blockIO.bytesPerBlock,
  });
}

function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

const agent = (i: number): GenerateRequest => ({
  requestId: `r${i}`,
  mode: "full",
  messages: [
    { role: "system", content: `Agent ${i}. ${"Check each file, then report what changed and why. ".repeat(9)}` },
    { role: "user", content: `Task ${i}.` },
  ],
  sampling,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-tier-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
}, 120_000);

afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("host tier", () => {
  it("brings a trajectory's evicted blocks back from host memory, with the same reply as computing them", async () => {
    const engine = await engineWith(24, 64);
    expect(engine.kvEventBatch().kind).toBe("snapshot"); // from here on, deltas
    const first = await turn(engine, agent(0));
    const blocks = Math.floor((first.usage.promptTokens - 1) / B);
    expect(blocks).toBeGreaterThanOrEqual(6);
    expect(first.hostTierTokens).toBe(0);
    // Five other agents fill the 24-block pool: agent 0's blocks are evicted, into the tier.
    for (const i of [1, 2, 3, 4, 5]) await turn(engine, agent(i));
    expect(engine.hostTier!.stats.puts).toBeGreaterThan(0);
    // Their KV events say so: agent 0's evicted blocks are offloaded, not removed.
    const delta = engine.kvEventBatch();
    expect(delta.kind).toBe("delta");
    expect(delta.offloaded?.length).toBe(engine.hostTier!.numBlocks);
    const again = await turn(engine, agent(0));
    // Taken back into the pool: stored again, no longer offloaded.
    const back = engine.kvEventBatch();
    expect(back.stored.length).toBeGreaterThanOrEqual(again.hostTierTokens! / B);
    expect(again.hostTierTokens).toBeGreaterThan(0);
    expect(again.usage.cachedTokens).toBe(blocks * B);
    expect(again.hostTierTokens).toBeLessThanOrEqual(again.usage.cachedTokens);
    expect(again.text).toBe(first.text);
    engine.kv.checkInvariants();
    expect(engine.hostTier!.usedBytes).toBeLessThanOrEqual(engine.hostTier!.capacityBytes);
    // The pool's index is told what the tier holds: a snapshot lists the tier's blocks as offloaded,
    // none of them also cached in the pool.
    engine.kvEvents.requestResync();
    const snapshot = engine.kvEventBatch();
    expect(snapshot.kind).toBe("snapshot");
    expect(snapshot.offloaded?.length).toBe(engine.hostTier!.numBlocks);
    expect(snapshot.offloaded!.filter((x) => snapshot.stored.includes(x))).toEqual([]);

    // Without a tier, the same sequence recomputes them.
    const plain = await engineWith(24, 0);
    expect(plain.hostTier).toBeUndefined();
    await turn(plain, agent(0));
    for (const i of [1, 2, 3, 4, 5]) await turn(plain, agent(i));
    const recomputed = await turn(plain, agent(0));
    expect(recomputed.usage.cachedTokens).toBeLessThan(again.usage.cachedTokens);
    // It says why: the first block it lacked was evicted from the pool by LRU, moments ago.
    expect(recomputed.evicted).toMatchObject({ by: "lru", from: "pool" });
    expect(recomputed.evicted!.agoMs).toBeLessThan(60_000);
    // With the tier, nothing was missing: no eviction to report.
    expect(again.evicted).toBeUndefined();
    expect(recomputed.text).toBe(again.text);
    expect(recomputed.hostTierTokens).toBeUndefined();
  });
});
