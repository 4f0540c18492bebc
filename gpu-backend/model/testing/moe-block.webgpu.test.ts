import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { MOE_KERNELS, pickMoeKernel } from "../graph/moe-block";
import { MIN_ROUTING_MARGIN, runMoeCase } from "./moe-case";

/**
 * The Qwen3-MoE block on onnxruntime-node's WebGPU provider (Mesa lavapipe on CI) against the
 * float64 reference, every node on WebGPU (`disable_cpu_ep_fallback`). Everything is fp32;
 * measured on lavapipe: max |diff| <= 9.6e-7 (outputs ~1); the tolerance 1e-4 leaves room for a
 * GPU's own fp32 summation order and fast-math exp. Project "webgpu".
 */
const TOLERANCE = 1e-4;
const FP16_TOLERANCE = 1e-2;

const webgpuSession = (model: Uint8Array) =>
  ort.InferenceSession.create(model, {
    executionProviders: ["webgpu"],
    logSeverityLevel: 4,
    extra: { session: { disable_cpu_ep_fallback: "1" } },
  });

const WEBGPU_KERNELS = MOE_KERNELS.filter((k) => k !== "ort-moe");

describe("moeMlp on webgpu", () => {
  for (const kernel of WEBGPU_KERNELS) {
    for (const normTopkProb of [true, false]) {
      for (const numTokens of [1, 17]) {
        it(`${kernel}, norm_topk_prob=${normTopkProb}, T=${numTokens}: within ${TOLERANCE} of the reference`, async () => {
          const r = await runMoeCase(webgpuSession, ort.Tensor, { kernel, numTokens, normTopkProb, seed: 40 + numTokens });
          expect(r.minMargin).toBeGreaterThan(MIN_ROUTING_MARGIN);
          expect(r.maxAbs).toBeGreaterThan(0.05);
          expect(r.maxDiff).toBeLessThan(TOLERANCE);
        });
      }
    }
  }

  // The model's precision reaches the experts' products (graph/linear.ts): MatMulNBits for
  // int8/int4, float16 MatMuls for fp16, every node still on WebGPU. Measured on lavapipe against
  // the reference on the weights as held (outputs up to 1.39): int8 8.4e-7 and int4 7.6e-7 (the
  // WebGPU MatMulNBits multiplies in fp32), fp16 4.4e-3 (fp16 activations).
  for (const precision of [8, 4, "fp16"] as const) {
    const tolerance = precision === "fp16" ? FP16_TOLERANCE : TOLERANCE;
    it(`per-expert with ${precision === "fp16" ? "fp16" : `int${precision}`} experts: within ${tolerance} of the reference`, async () => {
      const r = await runMoeCase(webgpuSession, ort.Tensor, { kernel: pickMoeKernel("webgpu", precision !== "fp16"), numTokens: 17, normTopkProb: true, seed: 57, precision });
      expect(r.minMargin).toBeGreaterThan(MIN_ROUTING_MARGIN);
      expect(r.maxAbs).toBeGreaterThan(0.05);
      expect(r.maxDiff).toBeLessThan(tolerance);
    });
  }

  it("the picked webgpu kernel is one that runs there", () => {
    expect(WEBGPU_KERNELS).toContain(pickMoeKernel("webgpu", false));
    expect(WEBGPU_KERNELS).toContain(pickMoeKernel("webgpu", true));
  });

  it("com.microsoft.MoE has no WebGPU kernel in onnxruntime 1.30 (re-evaluate ort-moe when this fails)", async () => {
    await expect(runMoeCase(webgpuSession, ort.Tensor, { kernel: "ort-moe", numTokens: 1, normTopkProb: true, seed: 1 })).rejects.toThrow(
      /fallback to CPU EP has been explicitly disabled/,
    );
  });
});
