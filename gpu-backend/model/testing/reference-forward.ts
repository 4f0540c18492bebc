import {
  EMBED_WEIGHT,
  FINAL_NORM_WEIGHT,
  LM_HEAD_WEIGHT,
  layerWeightNames,
  normWeight,
  ropeTables,
  type DecoderSpec,
  type WeightSource,
} from "../graph/decoder-spec";
import { moeReference } from "./moe-reference";

/**
 * A plain-TypeScript decoder forward pass with no cache and no batching, written the way the
 * Hugging Face modelling code reads (float64 accumulation), for tiny configs in tests: Llama, with
 * the spec's q/k norms, partial rotary, sliding windows and their own rotary tables, Gemma's
 * norms, embedding scale and GeGLU. It is the oracle the ONNX graph is checked against (llama.cpp
 * is the independent one: test/oracle).
 *
 * @example
 * const logits = referenceForward(spec, weights, [1, 2, 3]); // [3 * vocabSize]
 */
export function referenceForward(spec: DecoderSpec, weights: WeightSource, tokenIds: number[]): Float32Array {
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd, vocabSize: V } = spec;
  const T = tokenIds.length;
  const groups = nh / nkv;
  const globalTables = ropeTables(spec);
  const localTables = spec.localInvFreq ? ropeTables(spec, spec.localInvFreq) : globalTables;
  const embed = weights.take(EMBED_WEIGHT);
  const norm = (row: Float64Array, name: string) => rmsNorm(row, normWeight(spec, weights.take(name)), spec.rmsNormEps);

  let x: Float64Array[] = tokenIds.map((t) => Float64Array.from(embed.subarray(t * hid, (t + 1) * hid), (v) => v * spec.embedScale));

  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    const window = spec.layerWindows[l] ?? Infinity;
    const { cos, sin } = spec.layerWindows[l] === null ? globalTables : localTables;
    const h = x.map((row) => norm(row, w.inputNorm));
    const q = h.map((row) => linear(row, weights.take(w.q), nh * hd, spec.attentionBias ? weights.take(w.qBias) : undefined));
    const k = h.map((row) => linear(row, weights.take(w.k), nkv * hd, spec.attentionBias ? weights.take(w.kBias) : undefined));
    const v = h.map((row) => linear(row, weights.take(w.v), nkv * hd, spec.attentionBias ? weights.take(w.vBias) : undefined));
    for (let t = 0; t < T; t++) {
      if (spec.qkNorm) {
        normHeads(q[t]!, nh, hd, normWeight(spec, weights.take(w.qNorm)), spec.rmsNormEps);
        normHeads(k[t]!, nkv, hd, normWeight(spec, weights.take(w.kNorm)), spec.rmsNormEps);
      }
      if (!spec.ropeLayers[l]) continue;
      applyRope(q[t]!, nh, hd, spec.rotaryDim, cos, sin, t);
      applyRope(k[t]!, nkv, hd, spec.rotaryDim, cos, sin, t);
    }
    const attn = Array.from({ length: T }, () => new Float64Array(nh * hd));
    for (let head = 0; head < nh; head++) {
      const kvh = Math.floor(head / groups);
      for (let t = 0; t < T; t++) {
        const first = Math.max(0, t - window + 1); // keys at t - s < window
        const scores = new Float64Array(t + 1);
        let max = -Infinity;
        for (let s = first; s <= t; s++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += q[t]![head * hd + d]! * k[s]![kvh * hd + d]!;
          scores[s] = dot * spec.attentionScale;
          max = Math.max(max, scores[s]!);
        }
        let sum = 0;
        for (let s = first; s <= t; s++) sum += scores[s] = Math.exp(scores[s]! - max);
        for (let s = first; s <= t; s++) {
          const p = scores[s]! / sum;
          for (let d = 0; d < hd; d++) attn[t]![head * hd + d]! += p * v[s]![kvh * hd + d]!;
        }
      }
    }
    x = x.map((row, t) => {
      const out = linear(attn[t]!, weights.take(w.o), hid);
      return add(row, spec.sandwichNorms ? norm(out, w.postNorm) : out);
    });
    const h2 = x.map((row) => norm(row, spec.sandwichNorms ? w.preFeedforwardNorm : w.postNorm));
    x = x.map((row, t) => {
      const out = spec.moe?.sparseLayers[l] ? moeRow(spec, weights, l, h2[t]!) : gatedMlp(h2[t]!, weights, w, spec.intermediateSize, spec.mlpActivation);
      return add(row, spec.sandwichNorms ? norm(out, w.postFeedforwardNorm) : out);
    });
  }

  const head = spec.tieWordEmbeddings ? embed : weights.take(LM_HEAD_WEIGHT);
  const out = new Float32Array(T * V);
  x.forEach((row, t) => {
    const n = norm(row, FINAL_NORM_WEIGHT);
    out.set(linear(n, head, V), t * V);
  });
  return out;
}

function rmsNorm(x: Float64Array, w: Float32Array, eps: number): Float64Array {
  let ms = 0;
  for (const v of x) ms += v * v;
  const inv = 1 / Math.sqrt(ms / x.length + eps);
  return x.map((v, i) => v * inv * w[i]!);
}

/** y = W x (+ b), W in HF layout [out, in]. */
function linear(x: Float64Array, w: Float32Array, outDim: number, bias?: Float32Array): Float64Array {
  const inDim = x.length;
  const y = new Float64Array(outDim);
  for (let o = 0; o < outDim; o++) {
    let acc = bias ? bias[o]! : 0;
    const row = o * inDim;
    for (let i = 0; i < inDim; i++) acc += w[row + i]! * x[i]!;
    y[o] = acc;
  }
  return y;
}

function add(a: Float64Array, b: Float64Array): Float64Array {
  return a.map((v, i) => v + b[i]!);
}

/** down(act(gate x) * up x) with SwiGLU's silu or GeGLU's tanh GELU. */
function gatedMlp(x: Float64Array, weights: WeightSource, w: { gate: string; up: string; down: string }, inter: number, act: DecoderSpec["mlpActivation"]): Float64Array {
  const gate = linear(x, weights.take(w.gate), inter);
  const up = linear(x, weights.take(w.up), inter);
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i]!;
    const a = act === "silu" ? g / (1 + Math.exp(-g)) : 0.5 * g * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (g + 0.044715 * g * g * g)));
    gate[i] = a * up[i]!;
  }
  return linear(gate, weights.take(w.down), x.length);
}

/** Qwen3-MoE's sparse block on one row (testing/moe-reference.ts). */
function moeRow(spec: DecoderSpec, weights: WeightSource, l: number, x: Float64Array): Float64Array {
  const moe = spec.moe!;
  const shape = { hiddenSize: x.length, moeIntermediateSize: moe.intermediateSize, numExperts: moe.numExperts, topK: moe.topK, normTopkProb: moe.normTopkProb };
  return moeReference(x, 1, shape, weights, l).out;
}

/** RMSNorm of each head's slice in place (q/k norms). */
function normHeads(x: Float64Array, heads: number, hd: number, w: Float32Array, eps: number): void {
  for (let h = 0; h < heads; h++) x.set(rmsNorm(x.subarray(h * hd, (h + 1) * hd), w, eps), h * hd);
}

/** Rotary on the first `rotaryDim` dimensions of each head (tables [positions, rotaryDim]). */
function applyRope(x: Float64Array, heads: number, hd: number, rotaryDim: number, cos: Float32Array, sin: Float32Array, pos: number): void {
  const half = rotaryDim / 2;
  for (let h = 0; h < heads; h++) {
    const base = h * hd;
    for (let i = 0; i < half; i++) {
      const c = cos[pos * rotaryDim + i]!;
      const s = sin[pos * rotaryDim + i]!;
      const x1 = x[base + i]!;
      const x2 = x[base + i + half]!;
      x[base + i] = x1 * c - x2 * s;
      x[base + i + half] = x2 * c + x1 * s;
    }
  }
}
