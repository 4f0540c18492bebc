import { describe, expect, it } from "vitest";
import { HostPoolExecutor } from "./host-pool-executor";
import { cudaProviderInstalled } from "./device";
import { CONFORMANCE_BLOCK_SIZE, executorConformance, greedyMatchesCpu } from "./executor-conformance";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";

/**
 * The executor conformance suite for the host-pool executor (onnxruntime-node, host-resident
 * fp16 pool, per-step working set up and new K/V rows down). On a machine with onnxruntime-node's
 * CUDA provider it runs on CUDA; elsewhere (CI) it runs the same executor on onnxruntime-node's
 * bundled WebGPU provider (Mesa lavapipe here), which has the same PagedAttention contract, so
 * everything but the CUDA kernels themselves is exercised. Project "webgpu".
 *
 * Tolerances as for the device-pool executor: fp16 attention and pool, logits within 1e-2.
 */
const provider = cudaProviderInstalled() ? "node-cuda" : "node-webgpu";
const GREEDY_TOKENS = 16;

executorConformance({
  name: `host-pool executor on ${provider}`,
  tolerances: { reference: 1e-2, cached: 1e-2 },
  greedyTokens: GREEDY_TOKENS,
  create: (o) => HostPoolExecutor.create({ ...o, provider }),
});

describe(`host-pool executor on ${provider}`, () => {
  const spec = tinySpec();
  const weights = randomWeights(spec, 7);
  const o = { spec, weights, numBlocks: 8, blockSize: CONFORMANCE_BLOCK_SIZE };

  greedyMatchesCpu((o) => HostPoolExecutor.create({ ...o, provider }), GREEDY_TOKENS);

  it("uploads only the blocks a step reads and downloads only the new rows", async () => {
    const exec = await HostPoolExecutor.create({ ...o, provider });
    try {
      const prompt = Array.from({ length: 20 }, (_, i) => (i * 7 + 3) % 97);
      await exec.run([{ tokenIds: prompt, startPos: 0, blockTable: [6, 1], logits: "argmax" }]);
      const up0 = exec.transfer.hostToDeviceBytes;
      const down0 = exec.transfer.deviceToHostBytes;
      await exec.run([{ tokenIds: [5], startPos: 20, blockTable: [6, 1], logits: "argmax" }]);
      const rowBytes = spec.numKvHeads * spec.headDim * 2;
      const blockBytes = CONFORMANCE_BLOCK_SIZE * rowBytes;
      const small = 4 * (1 + 1 + 2 + 1 + 2 + 1 + 3); // ids, positions, cumulative, past, block table, logit index, attention metadata
      expect(exec.transfer.hostToDeviceBytes - up0).toBe(2 * spec.numLayers * 2 * blockBytes + small);
      expect(exec.transfer.deviceToHostBytes - down0).toBe(2 * spec.numLayers * rowBytes + 4);
      expect(exec.kvBytes).toBe(2 * spec.numLayers * 8 * blockBytes);
      // The new rows landed in the host pool at slot 20 (block 1, offset 4): not zeros.
      const k = await exec.readSlots(1, "k", [1 * CONFORMANCE_BLOCK_SIZE + 4]);
      expect(k.some((x) => x !== 0)).toBe(true);
      // A slot no step wrote stays zero.
      expect((await exec.readSlots(1, "k", [3 * CONFORMANCE_BLOCK_SIZE])).every((x) => x === 0)).toBe(true);
    } finally {
      await exec.dispose();
    }
  });

  it("shares a prefix block between sequences without uploading it twice", async () => {
    const exec = await HostPoolExecutor.create({ ...o, provider });
    try {
      const prefix = Array.from({ length: 16 }, (_, i) => (i * 5 + 1) % 97);
      const first = await exec.run([{ tokenIds: [...prefix, 4, 8], startPos: 0, blockTable: [3, 4], logits: "all" }]);
      // A second sequence reuses block 3 (the shared prefix) and has its own tail block 5.
      const up0 = exec.transfer.hostToDeviceBytes;
      const both = await exec.run([
        { tokenIds: [4, 8], startPos: 16, blockTable: [3, 5], logits: "all" },
        { tokenIds: [9], startPos: 18, blockTable: [3, 4], logits: "last" },
      ]);
      const blockBytes = CONFORMANCE_BLOCK_SIZE * spec.numKvHeads * spec.headDim * 2;
      const small = 4 * (3 + 3 + 3 + 2 + 4 + 3 + 3);
      expect(exec.transfer.hostToDeviceBytes - up0).toBe(2 * spec.numLayers * 3 * blockBytes + small); // blocks 3, 5, 4
      // Same tokens at the same positions over the same prefix: the same logits as the first run.
      const V = spec.vocabSize;
      const a = first.logits[0]!.subarray(16 * V);
      const b = both.logits[0]!;
      let diff = 0;
      for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
      expect(diff).toBeLessThanOrEqual(1e-2);
    } finally {
      await exec.dispose();
    }
  });
});
