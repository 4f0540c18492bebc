import { describe, expect, it } from "vitest";
import { DevicePoolExecutor } from "./device-pool-executor";
import { CONFORMANCE_BLOCK_SIZE, executorConformance, greedyMatchesCpu } from "./executor-conformance";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";
import { familySpecs } from "../testing/family-specs";
import type { DecoderSpec } from "../graph/decoder-spec";

/**
 * The executor conformance suite for the device-pool executor (onnxruntime-node's WebGPU
 * provider, pool resident on the device; Mesa lavapipe in CI), its greedy tokens against the cpu
 * executor, the in-place update of the pool read back through the gather session, block writes
 * through the scatter session, and the bytes of a decode step. Project "webgpu".
 */
const GREEDY_TOKENS = 16;

executorConformance({
  name: "device-pool executor on onnxruntime-node webgpu",
  tolerances: { reference: 1e-2, cached: 1e-2 },
  greedyTokens: GREEDY_TOKENS,
  create: (o) => DevicePoolExecutor.create(o),
});

describe("device-pool executor", () => {
  const spec = tinySpec();
  const weights = randomWeights(spec, 7);
  const o = { spec, weights, numBlocks: 8, blockSize: CONFORMANCE_BLOCK_SIZE };
  const B = CONFORMANCE_BLOCK_SIZE;

  greedyMatchesCpu((o) => DevicePoolExecutor.create(o), GREEDY_TOKENS);

  it("updates the pool in place: new rows at their slots, every other slot unchanged", async () => {
    const exec = await DevicePoolExecutor.create(o);
    try {
      const all = Array.from({ length: 8 * B }, (_, i) => i);
      const before = await Promise.all([0, 1].flatMap((l) => [exec.readSlots(l, "k", all), exec.readSlots(l, "v", all)]));
      expect(before.every((rows) => rows.every((x) => x === 0))).toBe(true); // a new pool is zeros
      const prompt = Array.from({ length: 20 }, (_, i) => (i * 7 + 3) % 97);
      await exec.run([{ tokenIds: prompt, startPos: 0, blockTable: [6, 1], logits: "argmax" }]);
      const written = new Set([...Array.from({ length: 16 }, (_, i) => 6 * B + i), ...Array.from({ length: 4 }, (_, i) => B + i)]);
      const row = spec.numKvHeads * spec.headDim;
      for (const l of [0, 1]) {
        for (const kind of ["k", "v"] as const) {
          const rows = await exec.readSlots(l, kind, all);
          for (const slot of all) {
            const r = rows.subarray(slot * row, (slot + 1) * row);
            expect(r.some((x) => x !== 0), `layer ${l} ${kind} slot ${slot}`).toBe(written.has(slot));
          }
        }
      }
    } finally {
      await exec.dispose();
    }
  });

  it("moves whole blocks through blockIO: a block written to another slot decodes like the original", async () => {
    const exec = await DevicePoolExecutor.create(o);
    try {
      const io = exec.blockIO;
      const prompt = Array.from({ length: 16 }, (_, i) => (i * 5 + 1) % 97);
      const first = await exec.run([{ tokenIds: [...prompt, 4], startPos: 0, blockTable: [3, 4], logits: "last" }]);
      const block = new Uint8Array(io.bytesPerBlock);
      io.read(3, block);
      io.write(7, block); // same batch: the write sees the read's bytes in order
      const copy = new Uint8Array(io.bytesPerBlock);
      io.read(7, copy);
      await io.settled();
      expect(block.some((x) => x !== 0)).toBe(true);
      expect(copy).toEqual(block);
      // Decode over block 7 instead of 3: the same logits.
      const again = await exec.run([{ tokenIds: [4], startPos: 16, blockTable: [7, 5], logits: "last" }]);
      let diff = 0;
      for (let i = 0; i < spec.vocabSize; i++) diff = Math.max(diff, Math.abs(first.logits[0]![i]! - again.logits[0]![i]!));
      expect(diff).toBeLessThanOrEqual(1e-2);
      expect(() => io.read(8, block)).toThrow(/outside the pool/);
      expect(exec.blockIO.stats.blocksWritten).toBe(1);
    } finally {
      await exec.dispose();
    }
  });

  it("a decode step's bytes do not grow with the context, but for 4 bytes per block of block table", async () => {
    const big = { spec: { ...spec, maxPositions: 2048 }, weights, numBlocks: 130, blockSize: B };
    const exec = await DevicePoolExecutor.create(big);
    try {
      const perStep = async (context: number) => {
        const table = Array.from({ length: Math.ceil((context + 1) / B) }, (_, i) => i);
        const prompt = Array.from({ length: context }, (_, i) => (i * 13 + 5) % 97);
        for (let at = 0; at < context; at += 256) {
          await exec.run([{ tokenIds: prompt.slice(at, at + 256), startPos: at, blockTable: table, logits: "none" }]);
        }
        const up = exec.transfer.hostToDeviceBytes;
        const down = exec.transfer.deviceToHostBytes;
        await exec.run([{ tokenIds: [7], startPos: context, blockTable: table, logits: "argmax" }]);
        return { up: exec.transfer.hostToDeviceBytes - up, down: exec.transfer.deviceToHostBytes - down, blocks: table.length };
      };
      const short = await perStep(20);
      const long = await perStep(2000);
      // ids, positions, cumulative (2), past, logit index, attention metadata (3): 9 int32; the block table: 4 B a block.
      expect(short.up).toBe(4 * 9 + 4 * short.blocks);
      expect(long.up).toBe(4 * 9 + 4 * long.blocks);
      expect(long.down).toBe(short.down);
      expect(short.down).toBe(4); // next_token: one int32
    } finally {
      await exec.dispose();
    }
  });
});

/**
 * The families whose attention PagedAttention can express: Qwen3 (q/k norms, free head_dim) and
 * Phi-3 without a window (Phi-4-mini's 262144-token window is no window), Qwen3-MoE. Gemma 3's and Phi-3-mini's
 * sliding windows are refused (see below).
 */
const families = familySpecs();
const pagedFamilies: [string, DecoderSpec][] = [
  ["qwen3", families.qwen3],
  ["phi3", { ...families.phi3, layerWindows: [null, null] }],
  // onnxruntime 1.30 has no WebGPU MoE kernel: the graph routes with standard ops (moe-block.ts "per-expert").
  ["qwen3_moe", families.qwen3_moe],
];
for (const [name, spec] of pagedFamilies) {
  executorConformance({
    name: `device-pool ${name}`,
    spec,
    tolerances: { reference: 1e-2, cached: 1e-2 },
    greedyTokens: GREEDY_TOKENS,
    create: (o) => DevicePoolExecutor.create(o),
  });
}

describe("device-pool executor and sliding windows", () => {
  it("refuses a model with sliding-window layers, naming the op and the way out", async () => {
    const spec = families.gemma3;
    await expect(DevicePoolExecutor.create({ spec, weights: randomWeights(spec, 1), numBlocks: 4, blockSize: CONFORMANCE_BLOCK_SIZE })).rejects.toThrow(
      "tiny-gemma3 has sliding-window layers, which PagedAttention in onnxruntime 1.30 cannot mask; serve it on the cpu executor",
    );
  });
});
