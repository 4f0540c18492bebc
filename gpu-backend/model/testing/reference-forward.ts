import {
  EMBED_WEIGHT,
  FINAL_NORM_WEIGHT,
  LM_HEAD_WEIGHT,
  layerWeightNames,
  ropeTables,
  type DecoderSpec,
  type WeightSource,
} from "../graph/decoder-spec";

/**
 * A plain-TypeScript Llama forward pass with no cache and no batching, written the way the
 * Hugging Face modelling code reads (float64 accumulation), for tiny configs in tests. It is the
 * oracle the ONNX graph is checked against.
 *
 * @example
 * const logits = referenceForward(spec, weights, [1, 2, 3]); // [3 * vocabSize]
 */
export function referenceForward(spec: DecoderSpec, weights: WeightSource, tokenIds: number[]): Float32Array {
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd, vocabSize: V } = spec;
  const T = tokenIds.length;
  const groups = nh / nkv;
  const { cos, sin } = ropeTables(spec);
  const embed = weights.take(EMBED_WEIGHT);

  let x: Float64Array[] = tokenIds.map((t) => Float64Array.from(embed.subarray(t * hid, (t + 1) * hid)));

  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    const h = x.map((row) => rmsNorm(row, weights.take(w.inputNorm), spec.rmsNormEps));
    const q = h.map((row) => linear(row, weights.take(w.q), nh * hd, spec.attentionBias ? weights.take(w.qBias) : undefined));
    const k = h.map((row) => linear(row, weights.take(w.k), nkv * hd, spec.attentionBias ? weights.take(w.kBias) : undefined));
    const v = h.map((row) => linear(row, weights.take(w.v), nkv * hd, spec.attentionBias ? weights.take(w.vBias) : undefined));
    for (let t = 0; t < T; t++) {
      applyRope(q[t]!, nh, hd, cos, sin, t);
      applyRope(k[t]!, nkv, hd, cos, sin, t);
    }
    const attn = Array.from({ length: T }, () => new Float64Array(nh * hd));
    for (let head = 0; head < nh; head++) {
      const kvh = Math.floor(head / groups);
      for (let t = 0; t < T; t++) {
        const scores = new Float64Array(t + 1);
        let max = -Infinity;
        for (let s = 0; s <= t; s++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += q[t]![head * hd + d]! * k[s]![kvh * hd + d]!;
          scores[s] = dot / Math.sqrt(hd);
          max = Math.max(max, scores[s]!);
        }
        let sum = 0;
        for (let s = 0; s <= t; s++) sum += scores[s] = Math.exp(scores[s]! - max);
        for (let s = 0; s <= t; s++) {
          const p = scores[s]! / sum;
          for (let d = 0; d < hd; d++) attn[t]![head * hd + d]! += p * v[s]![kvh * hd + d]!;
        }
      }
    }
    x = x.map((row, t) => add(row, linear(attn[t]!, weights.take(w.o), hid)));
    const h2 = x.map((row) => rmsNorm(row, weights.take(w.postNorm), spec.rmsNormEps));
    x = x.map((row, t) => {
      const gate = linear(h2[t]!, weights.take(w.gate), spec.intermediateSize);
      const up = linear(h2[t]!, weights.take(w.up), spec.intermediateSize);
      for (let i = 0; i < gate.length; i++) gate[i] = (gate[i]! / (1 + Math.exp(-gate[i]!))) * up[i]!;
      return add(row, linear(gate, weights.take(w.down), hid));
    });
  }

  const head = spec.tieWordEmbeddings ? embed : weights.take(LM_HEAD_WEIGHT);
  const out = new Float32Array(T * V);
  x.forEach((row, t) => {
    const n = rmsNorm(row, weights.take(FINAL_NORM_WEIGHT), spec.rmsNormEps);
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

function applyRope(x: Float64Array, heads: number, hd: number, cos: Float32Array, sin: Float32Array, pos: number): void {
  const half = hd / 2;
  for (let h = 0; h < heads; h++) {
    const base = h * hd;
    for (let i = 0; i < half; i++) {
      const c = cos[pos * hd + i]!;
      const s = sin[pos * hd + i]!;
      const x1 = x[base + i]!;
      const x2 = x[base + i + half]!;
      x[base + i] = x1 * c - x2 * s;
      x[base + i + half] = x2 * c + x1 * s;
    }
  }
}
