import { isSparseLayer, type ModelConfig } from "../config/model-config";
import { familyOf } from "../families/registry";
import type { FusedTensor } from "../families/family";
import { EMBED_WEIGHT, FINAL_NORM_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames, type WeightSource } from "../graph/decoder-spec";
import { ModelLoadError } from "./model-load-error";

/**
 * Which tensors a config implies, as a Hugging Face text checkpoint names them, and the decoder's
 * view of them (`WeightSource` by `layerWeightNames`).
 */

/**
 * Names and shapes of every tensor a config implies, as a text checkpoint stores them (the
 * family's fused tensors fused, in place of their first part; no multimodal wrapper prefix, see
 * `diskTensorNames`).
 *
 * @example
 * expectedTensorShapes(config).get("model.norm.weight"); // [hiddenSize]
 */
export function expectedTensorShapes(config: ModelConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: inter, numAttentionHeads: nh, numKeyValueHeads: nkv, headDim: hd, vocabSize: v } = config;
  const traits = familyOf(config.modelType).traits;
  const shapes = new Map<string, number[]>();
  shapes.set(EMBED_WEIGHT, [v, h]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const w = layerWeightNames(l);
    const layer = new Map<string, number[]>();
    layer.set(w.inputNorm, [h]);
    layer.set(w.q, [nh * hd, h]);
    layer.set(w.k, [nkv * hd, h]);
    layer.set(w.v, [nkv * hd, h]);
    if (config.attentionBias) {
      layer.set(w.qBias, [nh * hd]);
      layer.set(w.kBias, [nkv * hd]);
      layer.set(w.vBias, [nkv * hd]);
    }
    if (traits.qkNorm) {
      layer.set(w.qNorm, [hd]);
      layer.set(w.kNorm, [hd]);
    }
    layer.set(w.o, [h, nh * hd]);
    layer.set(w.postNorm, [h]);
    if (traits.sandwichNorms) {
      layer.set(w.preFeedforwardNorm, [h]);
      layer.set(w.postFeedforwardNorm, [h]);
    }
    if (config.moe && isSparseLayer(config.moe, l)) {
      const { numExperts, moeIntermediateSize: mi } = config.moe;
      layer.set(w.router, [numExperts, h]);
      for (let e = 0; e < numExperts; e++) {
        const x = w.expert(e);
        layer.set(x.gate, [mi, h]);
        layer.set(x.up, [mi, h]);
        layer.set(x.down, [h, mi]);
      }
    } else {
      layer.set(w.gate, [inter, h]);
      layer.set(w.up, [inter, h]);
      layer.set(w.down, [h, inter]);
    }
    for (const [name, shape] of fuse(layer, traits.fusedTensors, l)) shapes.set(name, shape);
  }
  shapes.set(FINAL_NORM_WEIGHT, [h]);
  if (!config.tieWordEmbeddings) shapes.set(LM_HEAD_WEIGHT, [v, h]);
  return shapes;
}

/** A layer's tensors with each fused tensor whose parts are all there in place of its parts (rows added up). */
function fuse(layer: Map<string, number[]>, fused: readonly FusedTensor[], l: number): Map<string, number[]> {
  const out = new Map<string, number[]>();
  const groups = fused.map((f) => ({ name: f.name(l), parts: f.parts(l) })).filter((f) => f.parts.every((p) => layer.has(p)));
  for (const [name, shape] of layer) {
    const group = groups.find((f) => f.parts.includes(name));
    if (!group) out.set(name, shape);
    else if (group.parts[0] === name) out.set(group.name, [group.parts.reduce((rows, p) => rows + layer.get(p)![0]!, 0), shape[1]!]);
  }
  return out;
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
 * The decoder's view of a checkpoint's tensors: by `layerWeightNames`, float32, the family's fused
 * tensors split (a fused one is read once and its parts kept until taken).
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
  const { fusedTensors } = familyOf(config.modelType).traits;
  const stored = expectedTensorShapes(config);
  const canonical = new Set(stored.keys());
  /** Decoder tensor name -> the fused tensor holding it. */
  const fusedOf = new Map<string, { name: string; parts: string[]; rows: number[] }>();
  for (let l = 0; l < config.numHiddenLayers; l++) {
    for (const f of fusedTensors) {
      const group = { name: f.name(l), parts: f.parts(l), rows: f.rows(config) };
      if (!stored.has(group.name)) continue;
      for (const part of group.parts) {
        canonical.add(part);
        fusedOf.set(part, group);
      }
    }
  }
  const parts = new Map<string, Float32Array>();
  const fusedPart = (name: string): Float32Array | undefined => {
    const group = fusedOf.get(name);
    if (!group) return undefined;
    if (!parts.has(name)) {
      const { data, shape } = read(diskName(group.name));
      const cols = shape[1]!;
      let row = 0;
      group.parts.forEach((part, i) => {
        parts.set(part, data.slice(row * cols, (row + group.rows[i]!) * cols));
        row += group.rows[i]!;
      });
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
