import { expect } from "vitest";
import type * as ort from "onnxruntime-node";
import type { WeightSource } from "../graph/decoder-spec";
import { heldWeights } from "./dequantized-weights";
import { moeBlockModel, moeWeightNames, type MoeKernel } from "../graph/moe-block";
import { moeReference, randomMoeWeights, randomRows, type MoeShape } from "./moe-reference";
import { QuantizedWeights } from "../quant/quantized-weights";
import type { QuantBits } from "../quant/block-quant";

/**
 * One MoE block check shared by the cpu and webgpu tests: build the block alone (x -> y) with
 * `kernel`, run it on `numTokens` seeded rows, compare with the float64 reference.
 * The router has larger weights than the experts (std 0.6 vs 0.2), so the top-k choice is clear:
 * rows whose k-th vs (k+1)-th probability margin is under 2x MIN_ROUTING_MARGIN are redrawn, and
 * the caller asserts the margin it gets back.
 */
/** 16 experts: more than one chunk of WebGPU Concat inputs, so empty experts hit the Concat workaround. */
export const MOE_TEST_SHAPE: Omit<MoeShape, "normTopkProb"> = { hiddenSize: 64, moeIntermediateSize: 32, numExperts: 16, topK: 4 };

/**
 * Smallest k-th minus (k+1)-th router probability a case may have: 10x the cpu output tolerance
 * and ~1000x the fp32 rounding of a probability (~1e-7), so no kernel can pick another expert.
 */
export const MIN_ROUTING_MARGIN = 1e-4;

export interface MoeCaseResult {
  maxDiff: number;
  /** Largest |reference output|, to judge the tolerance against. */
  maxAbs: number;
  /** Smallest k-th vs (k+1)-th probability margin over the rows. */
  minMargin: number;
}

export async function runMoeCase(
  createSession: (model: Uint8Array) => Promise<ort.InferenceSession>,
  Tensor: typeof ort.Tensor,
  opts: { kernel: MoeKernel; numTokens: number; normTopkProb: boolean; seed: number; precision?: QuantBits | "fp16" },
): Promise<MoeCaseResult> {
  const shape: MoeShape = { ...MOE_TEST_SHAPE, normTopkProb: opts.normTopkProb };
  const weights = randomMoeWeights(shape, 3, opts.seed, 0.2, 0.6);
  // The reference computes with the weights the graph holds: the experts quantized (or rounded to float16).
  const held = opts.precision ? heldWeights(weights, expertInFeatures(shape, 3), opts.precision) : weights;
  const x = clearRows(opts.numTokens, shape, held, opts.seed + 1);
  const ref = moeReference(x, opts.numTokens, shape, held, 3);
  const minMargin = Math.min(...ref.routing.map((r) => routingMargin(r.probs, shape.topK)));
  const precision = opts.precision === "fp16" ? { float16: true } : opts.precision ? { quantized: QuantizedWeights.open(opts.precision) } : {};
  const session = await createSession(moeBlockModel({ ...shape, layer: 3, weights, kernel: opts.kernel, ...precision }));
  try {
    const out = await session.run({ x: new Tensor("float32", x, [opts.numTokens, shape.hiddenSize]) });
    const y = out.y!.data as Float32Array;
    expect(y.length).toBe(ref.out.length);
    let maxDiff = 0;
    let maxAbs = 0;
    for (let i = 0; i < y.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(y[i]! - ref.out[i]!));
      maxAbs = Math.max(maxAbs, Math.abs(ref.out[i]!));
    }
    return { maxDiff, maxAbs, minMargin };
  } finally {
    await session.release();
  }
}

/** Each expert weight's input features (the router stays float32 in every precision). */
function expertInFeatures(s: MoeShape, layer: number): Map<string, number> {
  const m = new Map<string, number>();
  for (const n of moeWeightNames(layer, s.numExperts).experts) {
    m.set(n.gate, s.hiddenSize);
    m.set(n.up, s.hiddenSize);
    m.set(n.down, s.moeIntermediateSize);
  }
  return m;
}

function routingMargin(probs: number[], k: number): number {
  const sorted = [...probs].sort((a, b) => b - a);
  return sorted[k - 1]! - sorted[k]!;
}

/** Seeded rows whose top-k choice is clear: a row with a margin under 2x the minimum is redrawn. */
function clearRows(numTokens: number, shape: MoeShape, weights: WeightSource, seed: number): Float32Array {
  const H = shape.hiddenSize;
  const x = new Float32Array(numTokens * H);
  let draw = seed;
  for (let t = 0; t < numTokens; ) {
    const row = randomRows(1, H, draw++);
    if (routingMargin(moeReference(row, 1, shape, weights, 3).routing[0]!.probs, shape.topK) < 2 * MIN_ROUTING_MARGIN) continue;
    x.set(row, t++ * H);
  }
  return x;
}
