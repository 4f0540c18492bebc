import { mulberry32 } from "../../../protocol/random";
import type { WeightSource } from "../graph/decoder-spec";
import { moeWeightNames } from "../graph/moe-block";

/** The shape of one Qwen3-MoE sparse MLP block. */
export interface MoeShape {
  hiddenSize: number;
  moeIntermediateSize: number;
  numExperts: number;
  topK: number;
  normTopkProb: boolean;
}

/** One token row's routing: the chosen experts (best first), their weights, and every probability. */
export interface MoeRouting {
  experts: number[];
  weights: number[];
  probs: number[];
}

/**
 * Float64 reference of transformers' `Qwen3MoeSparseMoeBlock` for one layer: softmax over the
 * router logits, top k, optional renormalisation, Σ w · down(silu(gate(x)) ⊙ up(x)).
 * `x` is [T, hidden] row-major; returns [T, hidden] and each row's routing.
 *
 * @example const { out } = moeReference(x, T, shape, weights, 0);
 */
export function moeReference(x: Float32Array | Float64Array, numTokens: number, s: MoeShape, weights: WeightSource, layer: number): { out: Float64Array; routing: MoeRouting[] } {
  const { hiddenSize: H, moeIntermediateSize: I, numExperts: E, topK: k } = s;
  const names = moeWeightNames(layer, E);
  const router = weights.take(names.router);
  const out = new Float64Array(numTokens * H);
  const routing: MoeRouting[] = [];
  for (let t = 0; t < numTokens; t++) {
    const row = x.subarray(t * H, (t + 1) * H);
    const logits = Array.from({ length: E }, (_, e) => dot(row, router, e * H, H));
    const max = Math.max(...logits);
    const exps = logits.map((l) => Math.exp(l - max));
    const sum = exps.reduce((p, q) => p + q, 0);
    const probs = exps.map((v) => v / sum);
    const experts = probs.map((_, e) => e).sort((p, q) => probs[q]! - probs[p]! || p - q).slice(0, k);
    let w = experts.map((e) => probs[e]!);
    if (s.normTopkProb) {
      const topSum = w.reduce((p, q) => p + q, 0);
      w = w.map((v) => v / topSum);
    }
    routing.push({ experts, weights: w, probs });
    experts.forEach((e, j) => {
      const n = names.experts[e]!;
      const gate = weights.take(n.gate);
      const up = weights.take(n.up);
      const down = weights.take(n.down);
      const act = new Float64Array(I);
      for (let i = 0; i < I; i++) {
        const gv = dot(row, gate, i * H, H);
        act[i] = (gv / (1 + Math.exp(-gv))) * dot(row, up, i * H, H);
      }
      for (let h = 0; h < H; h++) {
        let acc = 0;
        for (let i = 0; i < I; i++) acc += act[i]! * down[h * I + i]!;
        out[t * H + h]! += w[j]! * acc;
      }
    });
  }
  return { out, routing };
}

function dot(row: ArrayLike<number>, w: Float32Array, offset: number, n: number): number {
  let acc = 0;
  for (let i = 0; i < n; i++) acc += row[i]! * w[offset + i]!;
  return acc;
}

/**
 * Seeded random weights of one MoE layer (mulberry32): experts ~ U(-a, a) with std `std`; the
 * router with std `routerStd` (larger, so the top-k choice has clear margins).
 *
 * @example const weights = randomMoeWeights(shape, 0, 42);
 */
export function randomMoeWeights(s: MoeShape, layer: number, seed: number, std = 0.08, routerStd = 0.3): WeightSource & { tensors: Map<string, Float32Array> } {
  const rand = mulberry32(seed);
  const uniform = (n: number, sd: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * sd * Math.sqrt(3));
  const { hiddenSize: H, moeIntermediateSize: I, numExperts: E } = s;
  const names = moeWeightNames(layer, E);
  const tensors = new Map<string, Float32Array>();
  tensors.set(names.router, uniform(E * H, routerStd));
  for (const n of names.experts) {
    tensors.set(n.gate, uniform(I * H, std));
    tensors.set(n.up, uniform(I * H, std));
    tensors.set(n.down, uniform(H * I, std));
  }
  return {
    tensors,
    has: (name) => tensors.has(name),
    take: (name) => {
      const t = tensors.get(name);
      if (!t) throw new Error(`no tensor ${name}`);
      return t;
    },
  };
}

/** Seeded activations [T, hidden] ~ U(-1, 1). */
export function randomRows(numTokens: number, hiddenSize: number, seed: number): Float32Array {
  const rand = mulberry32(seed);
  return Float32Array.from({ length: numTokens * hiddenSize }, () => rand() * 2 - 1);
}
