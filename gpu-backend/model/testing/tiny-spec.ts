import type { DecoderSpec } from "../graph/decoder-spec";

/**
 * A tiny decoder spec for tests: two layers, grouped-query attention (4 heads over 2 KV heads).
 *
 * @example
 * const spec = tinySpec({ attentionBias: true });
 */
export function tinySpec(overrides: Partial<DecoderSpec> = {}): DecoderSpec {
  const headDim = overrides.headDim ?? 16;
  return {
    modelId: "tiny-test",
    hiddenSize: 64,
    intermediateSize: 96,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    headDim,
    rmsNormEps: 1e-6,
    vocabSize: 97,
    tieWordEmbeddings: true,
    attentionBias: false,
    invFreq: Float32Array.from({ length: headDim / 2 }, (_, i) => 1 / Math.pow(10000, (2 * i) / headDim)),
    maxPositions: 512,
    rotaryDim: headDim,
    ropeScale: 1,
    localInvFreq: null,
    layerWindows: [null, null],
    ropeLayers: Array.from({ length: overrides.numLayers ?? 2 }, () => true),
    attentionScale: 1 / Math.sqrt(headDim),
    qkNorm: false,
    normOffset: 0,
    sandwichNorms: false,
    embedScale: 1,
    mlpActivation: "silu",
    moe: null,
    ...overrides,
  };
}
