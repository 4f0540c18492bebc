import { EMBED_WEIGHT, FINAL_NORM_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames, type WeightSource } from "../graph/decoder-spec";
import { familyTraits } from "./model-family";
import { isSparseLayer, type ModelConfig } from "./model-config";
import { ModelLoadError } from "./model-load-error";

/**
 * Which tensors a config implies, as a Hugging Face text checkpoint names them, and the decoder's
 * view of them (`WeightSource` by `layerWeightNames`).
 */

/** Phi-3's fused tensors of layer `layer`. */
function fusedNames(layer: number) {
  const p = `model.layers.${layer}`;
  return { qkv: `${p}.self_attn.qkv_proj.weight`, gateUp: `${p}.mlp.gate_up_proj.weight` };
}

/**
 * Names and shapes of every tensor a config implies, as a text checkpoint stores them (Phi-3's
 * fused projections fused; no multimodal wrapper prefix, see `diskTensorNames`).
 *
 * @example
 * expectedTensorShapes(config).get("model.norm.weight"); // [hiddenSize]
 */
export function expectedTensorShapes(config: ModelConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: inter, numAttentionHeads: nh, numKeyValueHeads: nkv, headDim: hd, vocabSize: v } = config;
  const traits = familyTraits(config.modelType);
  const shapes = new Map<string, number[]>();
  shapes.set(EMBED_WEIGHT, [v, h]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const w = layerWeightNames(l);
    shapes.set(w.inputNorm, [h]);
    if (traits.fusedProjections) {
      shapes.set(fusedNames(l).qkv, [(nh + 2 * nkv) * hd, h]);
    } else {
      shapes.set(w.q, [nh * hd, h]);
      shapes.set(w.k, [nkv * hd, h]);
      shapes.set(w.v, [nkv * hd, h]);
    }
    if (config.attentionBias) {
      shapes.set(w.qBias, [nh * hd]);
      shapes.set(w.kBias, [nkv * hd]);
      shapes.set(w.vBias, [nkv * hd]);
    }
    if (traits.qkNorm) {
      shapes.set(w.qNorm, [hd]);
      shapes.set(w.kNorm, [hd]);
    }
    shapes.set(w.o, [h, nh * hd]);
    shapes.set(w.postNorm, [h]);
    if (traits.gemma) {
      shapes.set(w.preFeedforwardNorm, [h]);
      shapes.set(w.postFeedforwardNorm, [h]);
    }
    if (config.moe && isSparseLayer(config.moe, l)) {
      const { numExperts, moeIntermediateSize: mi } = config.moe;
      shapes.set(w.router, [numExperts, h]);
      for (let e = 0; e < numExperts; e++) {
        const x = w.expert(e);
        shapes.set(x.gate, [mi, h]);
        shapes.set(x.up, [mi, h]);
        shapes.set(x.down, [h, mi]);
      }
    } else if (traits.fusedProjections) {
      shapes.set(fusedNames(l).gateUp, [2 * inter, h]);
      shapes.set(w.down, [h, inter]);
    } else {
      shapes.set(w.gate, [inter, h]);
      shapes.set(w.up, [inter, h]);
      shapes.set(w.down, [h, inter]);
    }
  }
  shapes.set(FINAL_NORM_WEIGHT, [h]);
  if (!config.tieWordEmbeddings) shapes.set(LM_HEAD_WEIGHT, [v, h]);
  return shapes;
}

/**
 * Maps a text checkpoint's tensor name to the name in this folder: the same, except in a Gemma 3
 * multimodal folder, whose text model sits under `language_model.model.` (older transformers) or
 * `model.language_model.` (newer).
 *
 * @example diskTensorNames(config, names)("model.norm.weight"); // "language_model.model.norm.weight"
 */
export function diskTensorNames(config: ModelConfig, present: readonly string[]): (name: string) => string {
  if (config.wrapperModelType === null) return (name) => name;
  const names = new Set(present);
  if (names.has(`language_model.${EMBED_WEIGHT}`)) return (name) => `language_model.${name}`;
  if (names.has("model.language_model.embed_tokens.weight")) return (name) => (name.startsWith("model.") ? `model.language_model.${name.slice(6)}` : name);
  return (name) => name;
}

/**
 * The decoder's view of a checkpoint's tensors: by `layerWeightNames`, float32, fused tensors split
 * (the fused one is read once and its parts kept until taken).
 *
 * @example
 * const weights = checkpointWeights(config, diskName, getTensor);
 * weights.take("model.layers.0.self_attn.q_proj.weight"); // a row slice of qkv_proj for Phi-3
 */
export function checkpointWeights(
  config: ModelConfig,
  diskName: (name: string) => string,
  read: (name: string) => { data: Float32Array; shape: number[] },
): WeightSource {
  const traits = familyTraits(config.modelType);
  const parts = new Map<string, Float32Array>();
  const canonical = new Set<string>();
  for (const name of expectedTensorShapes(config).keys()) canonical.add(name);
  if (traits.fusedProjections) {
    for (let l = 0; l < config.numHiddenLayers; l++) {
      const w = layerWeightNames(l);
      for (const name of [w.q, w.k, w.v, w.gate, w.up]) canonical.add(name);
    }
  }
  const split = (fused: string, names: string[], rows: number[]) => {
    const { data, shape } = read(diskName(fused));
    const cols = shape[1]!;
    let row = 0;
    names.forEach((name, i) => {
      parts.set(name, data.slice(row * cols, (row + rows[i]!) * cols));
      row += rows[i]!;
    });
  };
  const fusedPart = (name: string): Float32Array | undefined => {
    const m = /^model\.layers\.(\d+)\.(self_attn\.[qkv]_proj|mlp\.(gate|up)_proj)\.weight$/.exec(name);
    if (!traits.fusedProjections || !m) return undefined;
    if (!parts.has(name)) {
      const l = Number(m[1]);
      const w = layerWeightNames(l);
      const f = fusedNames(l);
      const { numAttentionHeads: nh, numKeyValueHeads: nkv, headDim: hd, intermediateSize: inter } = config;
      if (m[2]!.startsWith("self_attn")) split(f.qkv, [w.q, w.k, w.v], [nh * hd, nkv * hd, nkv * hd]);
      else split(f.gateUp, [w.gate, w.up], [inter, inter]);
    }
    const data = parts.get(name)!;
    parts.delete(name);
    return data;
  };
  return {
    has: (name) => canonical.has(name),
    take(name) {
      if (!canonical.has(name)) throw new ModelLoadError(diskName(name), `is not a tensor of this ${config.modelType} checkpoint`);
      return fusedPart(name) ?? read(diskName(name)).data;
    },
  };
}
