import { isSparseLayer, type ModelConfig } from "../config/model-config";
import { familyOf } from "../families/registry";
import { permuteHeadRows, type GgufFamily, type TensorRule } from "../gguf/gguf-family";
import type { GgufFile, GgufTensorInfo } from "../gguf/gguf-reader";
import { GGML_TYPES } from "../gguf/gguf-writer";
import { EMBED_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames } from "../graph/decoder-spec";
import { BLOCK_SIZE, packMatMulNBits, type QuantBits, type QuantizedRows } from "../quant/block-quant";
import type { PackedWeight } from "../quant/quantized-weights";

/** Where one decoder tensor (Hugging Face name) lives in a GGUF file. */
export interface TensorSource {
  gguf: GgufTensorInfo;
  rule: TensorRule;
  /** The expert index within a stacked tensor. */
  xid?: number;
}

/**
 * A GGUF checkpoint's linear weights that are stored in the ggml block type that IS `bits`'
 * MatMulNBits layout, packed without a round trip through float: ggml's Q4_0 and Q8_0 are
 * block-quant.ts' int4 and int8 exactly (32 values a block, an fp16 scale, codes centred on 8 or
 * 128, no zero point), so their codes and scales are taken as stored; q/k rows of a "norm" rope
 * arch are un-permuted as rows of codes and scales. Q4_1 / Q5_x / K-quants have a per-block min or
 * other block sizes that MatMulNBits' int4 with its default zero point cannot hold: those are
 * decoded to float32 and quantized again by the executor (`QuantizedWeights`), as any weight of
 * another type than the backend's.
 *
 * Keys are the graph's linear names (graph/decoder-blocks.ts, graph/linear.ts): `layer<l>.qkv`
 * (q, k, v rows), `layer<l>.o`, `layer<l>.gate_up` (gate, up rows), `layer<l>.down`, the embedding
 * table and an untied LM head by their tensor names. A weight is taken only when all of its parts
 * are stored in the type; the MoE experts' stacked weights are left to the executor.
 *
 * @example
 * ggufPackedWeights({ file, config, family, sources, bits: 4, log }); // [["layer0.qkv", { bits: 4, ... }], ...]
 */
export function ggufPackedWeights(a: {
  file: GgufFile;
  config: ModelConfig;
  family: GgufFamily;
  sources: Map<string, TensorSource>;
  bits: QuantBits;
  log: (line: string) => void;
}): [string, PackedWeight][] {
  const { file, config, family, sources, bits } = a;
  const type = bits === 4 ? GGML_TYPES.Q4_0 : GGML_TYPES.Q8_0;
  const typeName = bits === 4 ? "Q4_0" : "Q8_0";
  // Fused tensors as stored (Phi-3's qkv_proj, gate_up_proj): a part is a row range of its tensor.
  const fusedPart = new Map<string, { fused: string; row: number; rows: number }>();
  for (let l = 0; l < config.numHiddenLayers; l++) {
    for (const f of familyOf(config.modelType).traits.fusedTensors) {
      if (!sources.has(f.name(l))) continue;
      const rows = f.rows(config);
      let row = 0;
      f.parts(l).forEach((part, i) => {
        fusedPart.set(part, { fused: f.name(l), row, rows: rows[i]! });
        row += rows[i]!;
      });
    }
  }
  const direct = (hfName: string): QuantizedRows | null => {
    const src = sources.get(hfName);
    if (!src || src.xid !== undefined || src.rule.untransform || src.gguf.ggmlType !== type) return null;
    const q = file.readQuantized(src.gguf.name);
    if (family.rope !== "norm" || !src.rule.ropePermute) return q;
    const heads = src.rule.ropePermute === "q" ? config.numAttentionHeads : config.numKeyValueHeads;
    const unpermute = <T extends Float32Array | Uint8Array>(data: T, width: number) =>
      permuteHeadRows(data, heads, config.headDim, width, (h, i, j) => [(h * config.headDim + 2 * i + j) * width, (h * config.headDim + j * (config.headDim / 2) + i) * width]);
    return { ...q, codes: unpermute(q.codes, q.cols), scales: unpermute(q.scales, q.cols / BLOCK_SIZE) };
  };
  const rowsOf = (hfName: string): QuantizedRows | null => {
    const part = fusedPart.get(hfName);
    if (!part) return direct(hfName);
    const q = direct(part.fused);
    if (!q) return null;
    const blocks = q.cols / BLOCK_SIZE;
    return {
      ...q,
      rows: part.rows,
      codes: q.codes.slice(part.row * q.cols, (part.row + part.rows) * q.cols),
      scales: q.scales.slice(part.row * blocks, (part.row + part.rows) * blocks),
    };
  };
  const packed = (names: string[]): PackedWeight | null => {
    const parts: QuantizedRows[] = [];
    for (const name of names) {
      const q = rowsOf(name);
      if (!q) return null;
      parts.push(q);
    }
    const cols = parts[0]!.cols;
    if (parts.some((p) => p.cols !== cols)) return null;
    const rows = parts.reduce((n, p) => n + p.rows, 0);
    const codes = new Uint8Array(rows * cols);
    const scales = new Float32Array((rows * cols) / BLOCK_SIZE);
    let at = 0;
    for (const p of parts) {
      codes.set(p.codes, at * cols);
      scales.set(p.scales, (at * cols) / BLOCK_SIZE);
      at += p.rows;
    }
    const q: QuantizedRows = { bits, rows, cols, codes, scales };
    return { bits, rows, cols, packed: packMatMulNBits(q), scales };
  };

  const wanted: [string, string[]][] = [[EMBED_WEIGHT, [EMBED_WEIGHT]]];
  if (!config.tieWordEmbeddings) wanted.push([LM_HEAD_WEIGHT, [LM_HEAD_WEIGHT]]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const w = layerWeightNames(l);
    wanted.push([`layer${l}.qkv`, [w.q, w.k, w.v]], [`layer${l}.o`, [w.o]]);
    if (!isSparseLayer(config.moe, l)) wanted.push([`layer${l}.gate_up`, [w.gate, w.up]], [`layer${l}.down`, [w.down]]);
  }
  const out: [string, PackedWeight][] = [];
  for (const [name, parts] of wanted) {
    const w = packed(parts);
    if (w) out.push([name, w]);
  }
  a.log(`int${bits}: ${out.length} of ${wanted.length} linear weights taken as stored ${typeName} blocks; the others are quantized from float32`);
  return out;
}
