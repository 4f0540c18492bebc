import type { DecoderSpec } from "../graph/decoder-spec";
import { globalRope, isSparseLayer, type ModelConfig } from "../config/model-config";
import { ropeAttentionFactor, ropeInvFreq } from "../config/rope-config";
import { familyOf } from "../families/registry";

/**
 * The graph's view of a config: the family's traits spelled out as features, rotary tables sized
 * by the longest context served.
 *
 * @example
 * const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, 32768);
 */
export function decoderSpecOf(modelId: string, c: ModelConfig, maxContext: number): DecoderSpec {
  const { traits } = familyOf(c.modelType);
  const maxPositions = Math.min(c.maxPositionEmbeddings, maxContext);
  const rope = globalRope(c);
  const localInvFreq = c.ropeLocalTheta === null ? null : ropeInvFreq({ ...rope, ropeTheta: c.ropeLocalTheta, ropeScaling: null }, maxPositions);
  return {
    modelId,
    hiddenSize: c.hiddenSize,
    intermediateSize: c.intermediateSize,
    numLayers: c.numHiddenLayers,
    numHeads: c.numAttentionHeads,
    numKvHeads: c.numKeyValueHeads,
    headDim: c.headDim,
    rmsNormEps: c.rmsNormEps,
    vocabSize: c.vocabSize,
    tieWordEmbeddings: c.tieWordEmbeddings,
    attentionBias: c.attentionBias,
    invFreq: ropeInvFreq(rope, maxPositions),
    maxPositions,
    rotaryDim: rope.rotaryDim,
    ropeScale: ropeAttentionFactor(rope),
    localInvFreq,
    // A window at least as long as the served context never excludes a key.
    layerWindows: c.layerTypes.map((t) => (t === "sliding_attention" && c.slidingWindow !== null && c.slidingWindow < maxPositions ? c.slidingWindow : null)),
    attentionScale: 1 / Math.sqrt(c.queryPreAttnScalar ?? c.headDim),
    qkNorm: traits.qkNorm,
    ropeLayers: c.ropeLayers,
    normOffset: traits.normOffset,
    sandwichNorms: traits.sandwichNorms,
    embedScale: traits.scaledEmbeddings ? Math.fround(Math.sqrt(c.hiddenSize)) : 1,
    mlpActivation: c.hiddenAct === "gelu_pytorch_tanh" ? "gelu_tanh" : "silu",
    moe: c.moe && {
      numExperts: c.moe.numExperts,
      topK: c.moe.numExpertsPerTok,
      intermediateSize: c.moe.moeIntermediateSize,
      normTopkProb: c.moe.normTopkProb,
      sparseLayers: Array.from({ length: c.numHiddenLayers }, (_, l) => isSparseLayer(c.moe, l)),
    },
  };
}
