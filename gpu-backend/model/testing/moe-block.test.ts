import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { GraphBuilder } from "../graph/graph-builder";
import { MOE_KERNELS, moeMlp, moeWeightNames, pickMoeKernel } from "../graph/moe-block";
import { MIN_ROUTING_MARGIN, MOE_TEST_SHAPE, runMoeCase } from "./moe-case";
import { randomMoeWeights } from "./moe-reference";

/**
 * The Qwen3-MoE block on onnxruntime's CPU provider against the float64 reference, every kernel,
 * decode (T = 1) and prefill (T = 17), with and without norm_topk_prob (hidden 64, 16 experts,
 * k 4, moe_intermediate 32). Outputs reach ~1.4; measured max |diff| <= 7.5e-7 for every kernel
 * (fp32 accumulation), tolerance 1e-5. Smallest routing margin in these cases: 8.7e-4.
 */
const TOLERANCE = 1e-5;

const cpuSession = (model: Uint8Array) =>
  ort.InferenceSession.create(model, { executionProviders: ["cpu"], intraOpNumThreads: 1, logSeverityLevel: 3 });

describe("moeMlp on cpu", () => {
  for (const kernel of MOE_KERNELS) {
    for (const normTopkProb of [true, false]) {
      for (const numTokens of [1, 17]) {
        it(`${kernel}, norm_topk_prob=${normTopkProb}, T=${numTokens}: within ${TOLERANCE} of the reference`, async () => {
          const r = await runMoeCase(cpuSession, ort.Tensor, { kernel, numTokens, normTopkProb, seed: 40 + numTokens });
          expect(r.minMargin).toBeGreaterThan(MIN_ROUTING_MARGIN);
          expect(r.minMargin).toBeGreaterThan(10 * TOLERANCE);
          expect(r.maxAbs).toBeGreaterThan(0.05);
          expect(r.maxDiff).toBeLessThan(TOLERANCE);
        });
      }
    }
  }

  it("norm_topk_prob changes the output (the flag reaches every kernel)", async () => {
    for (const kernel of MOE_KERNELS) {
      const on = await runMoeCase(cpuSession, ort.Tensor, { kernel, numTokens: 3, normTopkProb: true, seed: 9 });
      const off = await runMoeCase(cpuSession, ort.Tensor, { kernel, numTokens: 3, normTopkProb: false, seed: 9 });
      expect(on.maxAbs).not.toBeCloseTo(off.maxAbs, 3);
    }
  });

  it("picks com.microsoft.MoE on cpu and a standard-op kernel on webgpu", () => {
    expect(pickMoeKernel("cpu")).toBe("ort-moe");
    expect(pickMoeKernel("webgpu")).not.toBe("ort-moe");
  });

  it("names the Hugging Face tensors and takes every one of them", () => {
    const names = moeWeightNames(5, 2);
    expect(names.router).toBe("model.layers.5.mlp.gate.weight");
    expect(names.experts[1]).toEqual({
      gate: "model.layers.5.mlp.experts.1.gate_proj.weight",
      up: "model.layers.5.mlp.experts.1.up_proj.weight",
      down: "model.layers.5.mlp.experts.1.down_proj.weight",
    });
    const shape = { ...MOE_TEST_SHAPE, normTopkProb: true };
    for (const kernel of MOE_KERNELS) {
      const weights = randomMoeWeights(shape, 0, 1);
      const taken = new Set<string>();
      const g = new GraphBuilder("t");
      moeMlp(g, "x", { ...shape, layer: 0, kernel, weights: { has: weights.has, take: (n) => (taken.add(n), weights.take(n)) } });
      expect(taken).toEqual(new Set(weights.tensors.keys()));
    }
  });

  it("rejects a top-k outside 1..num_experts and a weight of the wrong size", () => {
    const shape = { ...MOE_TEST_SHAPE, normTopkProb: true };
    const weights = randomMoeWeights(shape, 0, 1);
    expect(() => moeMlp(new GraphBuilder("t"), "x", { ...shape, topK: 17, layer: 0, weights })).toThrow(/top-k 17/);
    expect(() => moeMlp(new GraphBuilder("t"), "x", { ...shape, hiddenSize: 32, layer: 0, weights })).toThrow(/expected/);
  });
});
