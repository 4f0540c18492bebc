import { describe, expect, it } from "vitest";
import { CpuExecutor } from "./cpu-executor";
import { DevicePoolExecutor } from "./device-pool-executor";
import { HostPoolExecutor } from "./host-pool-executor";
import { CONFORMANCE_BLOCK_SIZE, executorConformance, executorGreedy } from "./executor-conformance";
import type { DecoderSpec } from "../graph/decoder-spec";
import { dequantizedWeights } from "../testing/dequantized-weights";
import { familySpecs } from "../testing/family-specs";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";
import { QuantizedWeights } from "../quant/quantized-weights";

/**
 * The fused paged graph's paths the executor suites do not reach otherwise (project "webgpu"):
 *   - PagedAttention's own rotary over a partial rotary dimension (Phi-4-mini's 3/4 of the head,
 *     here 16 of 32, with LongRoPE's cos/sin factor folded into the caches), packed QKV;
 *   - a layer without rotary (SmolLM3's NoPE layer: do_rotary 0, packed);
 *   - q/k/v bias and an untied LM head (fp16 Add and Gemm, int4 MatMulNBits head);
 *   - the host-pool executor (new_k/new_v outputs: explicit rotary, unpacked) with fp16 activations.
 * The suites run on the device pool (onnxruntime-node's WebGPU provider).
 * Tolerances as the other webgpu suites: 1e-2 with fp32 weights, 3e-2 / 2e-2 with fp16 / int4 weights
 * (fp16 activations end to end; measured errors are printed by the suite).
 */
const families = familySpecs();
const invFreq = (dim: number, base: number) => Float32Array.from({ length: dim / 2 }, (_, i) => 1 / Math.pow(base, (2 * i) / dim));
const phi4Shaped: DecoderSpec = { ...families.phi3, modelId: "tiny-phi4-shaped", layerWindows: [null, null], headDim: 32, rotaryDim: 16, invFreq: invFreq(16, 1e4), attentionScale: 1 / Math.sqrt(32) };
const cases: [string, DecoderSpec][] = [
  ["phi4-shaped (op rotary 16 of 32)", phi4Shaped],
  ["smollm3 (a layer without rotary)", families.smollm3],
  ["qkv bias, untied LM head (Qwen2-style)", tinySpec({ modelId: "tiny-bias-untied", attentionBias: true, tieWordEmbeddings: false })],
];

for (const [name, spec] of cases) {
  executorConformance({ name: `device-pool fused ${name}`, spec, tolerances: { reference: 1e-2, cached: 1e-2 }, greedyTokens: 16, create: (o) => DevicePoolExecutor.create(o) });
  for (const precision of ["fp16", "int4"] as const) {
    executorConformance({
      name: `device-pool fused ${precision} ${name}`,
      spec,
      tolerances: { reference: 3e-2, cached: 2e-2 },
      greedyTokens: 16,
      referenceWeights: (s, w) => dequantizedWeights(s, w, precision === "int4" ? 4 : "fp16"),
      create: (o) => DevicePoolExecutor.create({ ...o, float16: precision === "fp16", quantized: precision === "int4" ? QuantizedWeights.open(4) : null }),
    });
  }
}

describe("host-pool executor (node-webgpu) with fp16 and int4 weights: fused graph with new_k/new_v outputs", () => {
  for (const precision of ["fp16", "int4"] as const) {
    it(`${precision}: greedy tokens equal to the device pool's (op rotary, no new_k outputs) and cpu's for two prompts`, async () => {
      const spec = phi4Shaped;
      const weights = randomWeights(spec, 5);
      const o = { spec, weights, numBlocks: 8, blockSize: CONFORMANCE_BLOCK_SIZE, float16: precision === "fp16" };
      const host = await HostPoolExecutor.create({ ...o, quantized: precision === "int4" ? QuantizedWeights.open(4) : null, provider: "node-webgpu" });
      const gpu = await DevicePoolExecutor.create({ ...o, quantized: precision === "int4" ? QuantizedWeights.open(4) : null });
      const cpu = await CpuExecutor.create({ spec, weights: dequantizedWeights(spec, weights, precision === "int4" ? 4 : "fp16"), numBlocks: 8, blockSize: CONFORMANCE_BLOCK_SIZE, threads: 1 });
      try {
        for (const [k, prompt] of [[1, 5, 9], [42, 17, 3, 88, 60, 2, 71, 19, 33, 50, 11]].entries()) {
          const table = [2 * k, 2 * k + 1];
          const want = await executorGreedy(cpu, prompt, 12, table);
          expect(await executorGreedy(host, prompt, 12, table)).toEqual(want);
          expect(await executorGreedy(gpu, prompt, 12, table)).toEqual(want);
        }
      } finally {
        await Promise.all([host.dispose(), gpu.dispose(), cpu.dispose()]);
      }
    });
  }
});
