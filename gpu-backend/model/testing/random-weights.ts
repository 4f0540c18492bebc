import { mulberry32 } from "../../../protocol/random";
import { EMBED_WEIGHT, FINAL_NORM_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames, type DecoderSpec, type WeightSource } from "../graph/decoder-spec";

/**
 * Seeded random weights for a decoder spec, in memory (tests and micro-benchmarks that need no
 * checkpoint folder). Linear weights ~ U(-a, a) with std `std`; norm weights 1 + small noise.
 *
 * @example
 * const weights = randomWeights(tinySpec, 42);
 */
export function randomWeights(spec: DecoderSpec, seed: number, std = 0.08): WeightSource & { tensors: Map<string, Float32Array> } {
  const rand = mulberry32(seed);
  const a = std * Math.sqrt(3);
  const uniform = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * a);
  // Norm weights act as ~1 whatever the convention: Gemma's (1 + w) gets w ~ 0.
  const norm = (n: number) => Float32Array.from({ length: n }, () => 1 - spec.normOffset + (rand() * 2 - 1) * 0.1);
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd, intermediateSize: inter } = spec;
  const tensors = new Map<string, Float32Array>();
  tensors.set(EMBED_WEIGHT, uniform(spec.vocabSize * hid));
  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    tensors.set(w.inputNorm, norm(hid));
    tensors.set(w.q, uniform(nh * hd * hid));
    tensors.set(w.k, uniform(nkv * hd * hid));
    tensors.set(w.v, uniform(nkv * hd * hid));
    if (spec.attentionBias) {
      tensors.set(w.qBias, uniform(nh * hd));
      tensors.set(w.kBias, uniform(nkv * hd));
      tensors.set(w.vBias, uniform(nkv * hd));
    }
    if (spec.qkNorm) {
      tensors.set(w.qNorm, norm(hd));
      tensors.set(w.kNorm, norm(hd));
    }
    tensors.set(w.o, uniform(hid * nh * hd));
    tensors.set(w.postNorm, norm(hid));
    if (spec.sandwichNorms) {
      tensors.set(w.preFeedforwardNorm, norm(hid));
      tensors.set(w.postFeedforwardNorm, norm(hid));
    }
    if (spec.moe?.sparseLayers[l]) {
      const { numExperts, intermediateSize: mi } = spec.moe;
      // A wide router: clear top-k choices (flat router logits would make the choice a coin toss under rounding).
      tensors.set(w.router, Float32Array.from({ length: numExperts * hid }, () => (rand() * 2 - 1) * a * 4));
      for (let e = 0; e < numExperts; e++) {
        const x = w.expert(e);
        tensors.set(x.gate, uniform(mi * hid));
        tensors.set(x.up, uniform(mi * hid));
        tensors.set(x.down, uniform(hid * mi));
      }
    } else {
      tensors.set(w.gate, uniform(inter * hid));
      tensors.set(w.up, uniform(inter * hid));
      tensors.set(w.down, uniform(hid * inter));
    }
  }
  tensors.set(FINAL_NORM_WEIGHT, norm(hid));
  if (!spec.tieWordEmbeddings) tensors.set(LM_HEAD_WEIGHT, uniform(spec.vocabSize * hid));
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
