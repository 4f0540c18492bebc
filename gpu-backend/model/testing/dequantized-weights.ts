import { EMBED_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames, type DecoderSpec, type WeightSource } from "../graph/decoder-spec";
import { dequantizeRows, quantizable, quantizeRows, type QuantBits } from "../quant/block-quant";
import { f16ToF32, f32ToF16 } from "../quant/float-formats";

/**
 * The weights a quantized (or float16) graph computes with, as float32: every tensor
 * `graph/linear.ts` and `graph/moe-block.ts` quantize (the dense linears, the MoE experts, the
 * embedding table, the LM head; rows of whole blocks only; not the MoE router) replaced by its
 * dequantized values (for "fp16": rounded to float16), the rest as given. The reference forward
 * pass over these is what a quantized executor should match, up to its activation rounding.
 *
 * @example referenceForward(spec, dequantizedWeights(spec, weights, 4), tokens);
 */
export function dequantizedWeights(spec: DecoderSpec, source: WeightSource, bits: QuantBits | "fp16"): WeightSource {
  const { hiddenSize: h, numHeads: nh, headDim: hd, intermediateSize: inter } = spec;
  const inFeatures = new Map<string, number>([[EMBED_WEIGHT, h], [LM_HEAD_WEIGHT, h]]);
  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    for (const n of [w.q, w.k, w.v]) inFeatures.set(n, h);
    inFeatures.set(w.o, nh * hd);
    if (!spec.moe?.sparseLayers[l]) {
      inFeatures.set(w.gate, h);
      inFeatures.set(w.up, h);
      inFeatures.set(w.down, inter);
    } else {
      for (let e = 0; e < spec.moe.numExperts; e++) {
        const x = w.expert(e);
        inFeatures.set(x.gate, h);
        inFeatures.set(x.up, h);
        inFeatures.set(x.down, spec.moe.intermediateSize);
      }
    }
  }
  return heldWeights(source, inFeatures, bits);
}

/**
 * `source` with each tensor of `inFeatures` (name -> its input features) as a graph at `bits` holds
 * it: dequantized (rows of whole blocks only) or rounded to float16.
 */
export function heldWeights(source: WeightSource, inFeatures: ReadonlyMap<string, number>, bits: QuantBits | "fp16"): WeightSource {
  const memo = new Map<string, Float32Array>();
  return {
    has: (name) => source.has(name),
    take(name) {
      const cols = inFeatures.get(name);
      if (cols === undefined || (bits !== "fp16" && !quantizable(cols))) return source.take(name);
      let out = memo.get(name);
      if (!out) {
        const w = source.take(name);
        out = bits === "fp16" ? f16ToF32(f32ToF16(w)) : dequantizeRows(quantizeRows(w, w.length / cols, cols, bits));
        memo.set(name, out);
      }
      return out;
    },
  };
}
