import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { GraphBuilder } from "../graph/graph-builder";
import { MOE_KERNELS, moeMlp, moeWeightNames, pickMoeKernel } from "../graph/moe-block";
import { QuantizedWeights } from "../quant/quantized-weights";
import { MIN_ROUTING_MARGIN, MOE_TEST_SHAPE, runMoeCase } from "./moe-case";
import { randomMoeWeights } from "./moe-reference";

/**
 * The Qwen3-MoE block on onnxruntime's CPU provider against the float64 reference, every kernel,
 * decode (T = 1) and prefill (T = 17), with and without norm_topk_prob (hidden 64, 16 experts,
 * k 4, moe_intermediate 32). Outputs reach ~1.4; measured max |diff| <= 7.5e-7 for every kernel
 * (fp32 accumulation), tolerance 1e-5. Smallest routing margin in these cases: 8.7e-4.
 */
const TOLERANCE = 1e-5;
const QUANT_ACTIVATION_TOLERANCE = 4e-2;

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

  // Quantized experts: ort-moe becomes one QMoE node, which dequantizes the very codes of
  // quant/block-quant.ts and multiplies in fp32 (measured max |diff| ~1e-6); per-expert runs
  // MatMulNBits at accuracy level 4 (int8 activations per block of 32, as ggml does), measured
  // max |diff| 0.022 on outputs up to 1.39 (int8 and int4 alike: the activations' rounding dominates).
  for (const bits of [8, 4] as const) {
    for (const numTokens of [1, 17]) {
      it(`ort-moe (QMoE) with int${bits} experts, T=${numTokens}: within ${TOLERANCE} of the reference on the dequantized experts`, async () => {
        const r = await runMoeCase(cpuSession, ort.Tensor, { kernel: "ort-moe", numTokens, normTopkProb: true, seed: 40 + numTokens, precision: bits });
        expect(r.minMargin).toBeGreaterThan(MIN_ROUTING_MARGIN);
        expect(r.maxAbs).toBeGreaterThan(0.05);
        expect(r.maxDiff).toBeLessThan(TOLERANCE);
      });
      it(`per-expert with int${bits} experts (MatMulNBits), T=${numTokens}: within ${QUANT_ACTIVATION_TOLERANCE} of the reference`, async () => {
        const r = await runMoeCase(cpuSession, ort.Tensor, { kernel: "per-expert", numTokens, normTopkProb: true, seed: 40 + numTokens, precision: bits });
        expect(r.minMargin).toBeGreaterThan(MIN_ROUTING_MARGIN);
        expect(r.maxAbs).toBeGreaterThan(0.05);
        expect(r.maxDiff).toBeLessThan(QUANT_ACTIVATION_TOLERANCE);
      });
    }
  }

  it("quantized experts change the output (the precision reaches the block)", async () => {
    const fp32 = await runMoeCase(cpuSession, ort.Tensor, { kernel: "ort-moe", numTokens: 3, normTopkProb: true, seed: 9 });
    const int4 = await runMoeCase(cpuSession, ort.Tensor, { kernel: "ort-moe", numTokens: 3, normTopkProb: true, seed: 9, precision: 4 });
    expect(int4.maxAbs).not.toBe(fp32.maxAbs);
  });

  it("picks com.microsoft.MoE on cpu for float experts, per-expert MatMulNBits for quantized ones, a standard-op kernel on webgpu", () => {
    expect(pickMoeKernel("cpu", false)).toBe("ort-moe");
    expect(pickMoeKernel("cpu", true)).toBe("per-expert");
    expect(pickMoeKernel("webgpu", false)).not.toBe("ort-moe");
    expect(pickMoeKernel("webgpu", true)).not.toBe("ort-moe");
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
    expect(() => moeMlp(new GraphBuilder("t"), "x", { ...shape, layer: 0, weights, kernel: "gather", quantized: QuantizedWeights.open(4) })).toThrow(/gather kernel has no int4/);
    expect(() => moeMlp(new GraphBuilder("t"), "x", { ...shape, layer: 0, weights, kernel: "ort-moe", float16: true })).toThrow(/ort-moe kernel has no float16/);
  });
});
