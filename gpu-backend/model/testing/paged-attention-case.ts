import { DataType, GraphBuilder } from "../graph/graph-builder";

/**
 * A self-checking test case for `com.microsoft.PagedAttention` (onnxruntime 1.30, WebGPU/CUDA,
 * float16): random fp16 q/k/v and a random fp16 block pool, sequences with tokens already in the
 * pool through non-trivial block tables, a float64 TypeScript reference (causal, GQA), and the
 * expected pool after the op has scattered the new keys and values. Used by `webgpu-probe.ts`.
 *
 * Layouts (as the op defines them):
 *   query          [T, numHeads * headSize]          packed tokens of all sequences
 *   key, value     [T, kvNumHeads * headSize]
 *   key_cache,
 *   value_cache    [numBlocks, blockSize, kvNumHeads, headSize]   (slot = block * blockSize + offset)
 *   cumulative_sequence_length  int32 [B + 1]   (0, n0, n0 + n1, ...)
 *   past_seqlens   int32 [B]          tokens already in the pool per sequence
 *   block_table    int32 [B, maxBlocksPerSeq]
 *   output         [T, numHeads * headSize]; key_cache_out / value_cache_out alias the caches.
 *
 * @example
 * const c = makePagedAttentionCase({ numBlocks: 8 });
 * const bytes = pagedAttentionGraph(c.dims);
 * // run with c.feeds(), then: checkPagedAttention(c, output, keyCacheOut, valueCacheOut)
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> IEEE half bits, round to nearest even (with subnormals, inf, NaN). */
export function toHalf(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** IEEE half bits -> number. */
export function fromHalf(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

export const toHalves = (values: ArrayLike<number>): Uint16Array => Uint16Array.from(values as number[], toHalf);

export interface PagedAttentionDims {
  numHeads: number;
  kvNumHeads: number;
  headSize: number;
  blockSize: number;
  numBlocks: number;
}

export interface PagedSequence {
  /** Tokens already in the pool. */
  past: number;
  /** New tokens in this run. */
  n: number;
  /** Physical blocks covering past + n tokens. */
  table: number[];
}

export interface PagedAttentionCase {
  dims: PagedAttentionDims;
  sequences: PagedSequence[];
  tokens: number;
  maxBlocksPerSeq: number;
  query: Uint16Array;
  key: Uint16Array;
  value: Uint16Array;
  keyCache: Uint16Array;
  valueCache: Uint16Array;
  cumulative: Int32Array;
  past: Int32Array;
  blockTable: Int32Array;
  /** Reference attention output, float64, [T, numHeads * headSize]. */
  expectedOutput: Float64Array;
  /** The pool after the op: the input pool with the new K/V at their slots. */
  expectedKeyCache: Uint16Array;
  expectedValueCache: Uint16Array;
}

/** Shapes of every graph input, for building ort tensors. */
export function feedShapes(c: PagedAttentionCase): Record<string, number[]> {
  const { numHeads: h, kvNumHeads: kvh, headSize: d, blockSize: bs, numBlocks: nb } = c.dims;
  const b = c.sequences.length;
  return {
    query: [c.tokens, h * d],
    key: [c.tokens, kvh * d],
    value: [c.tokens, kvh * d],
    key_cache: [nb, bs, kvh, d],
    value_cache: [nb, bs, kvh, d],
    cumulative_sequence_length: [b + 1],
    past_seqlens: [b],
    block_table: [b, c.maxBlocksPerSeq],
  };
}

/** Default: GQA 4 query heads over 2 KV heads, head 16, block 16; a chunked prefill whose first
 * blocks are cached, a fresh prompt, and a decode over three scattered blocks. */
export const DEFAULT_SEQUENCES: PagedSequence[] = [
  { past: 20, n: 3, table: [5, 2] },
  { past: 0, n: 5, table: [7] },
  { past: 33, n: 1, table: [0, 3, 6] },
];

export function makePagedAttentionCase(
  options: Partial<PagedAttentionDims> & { sequences?: PagedSequence[]; seed?: number } = {},
): PagedAttentionCase {
  const dims: PagedAttentionDims = {
    numHeads: options.numHeads ?? 4,
    kvNumHeads: options.kvNumHeads ?? 2,
    headSize: options.headSize ?? 16,
    blockSize: options.blockSize ?? 16,
    numBlocks: options.numBlocks ?? 8,
  };
  const sequences = options.sequences ?? DEFAULT_SEQUENCES;
  const { numHeads: H, kvNumHeads: KVH, headSize: D, blockSize: BS, numBlocks: NB } = dims;
  let seed = options.seed ?? 1;
  const rnd = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return (seed / 2 ** 31) * 2 - 1;
  };
  const halves = (n: number) => {
    const out = new Uint16Array(n);
    for (let i = 0; i < n; i++) out[i] = toHalf(rnd());
    return out;
  };
  const T = sequences.reduce((a, s) => a + s.n, 0);
  const maxBlocksPerSeq = Math.max(...sequences.map((s) => s.table.length));
  for (const s of sequences) {
    if (s.table.length * BS < s.past + s.n) throw new Error("block table too short");
    if (s.table.some((b) => b >= NB)) throw new Error("block id out of range");
  }
  const query = halves(T * H * D);
  const key = halves(T * KVH * D);
  const value = halves(T * KVH * D);
  // The whole pool is random: a kernel that reads a slot it should not read shows up in the output.
  const keyCache = halves(NB * BS * KVH * D);
  const valueCache = halves(NB * BS * KVH * D);
  const cumulative = new Int32Array(sequences.length + 1);
  sequences.forEach((s, i) => (cumulative[i + 1] = cumulative[i]! + s.n));
  const past = Int32Array.from(sequences.map((s) => s.past));
  const blockTable = new Int32Array(sequences.length * maxBlocksPerSeq); // padding: block 0, never read
  sequences.forEach((s, i) => s.table.forEach((b, j) => (blockTable[i * maxBlocksPerSeq + j] = b)));

  const slot = (s: PagedSequence, pos: number) => s.table[Math.floor(pos / BS)]! * BS + (pos % BS);
  const expectedKeyCache = keyCache.slice();
  const expectedValueCache = valueCache.slice();
  const expectedOutput = new Float64Array(T * H * D);
  const group = H / KVH;
  const scale = 1 / Math.sqrt(D);
  sequences.forEach((s, si) => {
    for (let i = 0; i < s.n; i++) {
      const t = cumulative[si]! + i;
      const sl = slot(s, s.past + i);
      expectedKeyCache.set(key.subarray(t * KVH * D, (t + 1) * KVH * D), sl * KVH * D);
      expectedValueCache.set(value.subarray(t * KVH * D, (t + 1) * KVH * D), sl * KVH * D);
    }
  });
  sequences.forEach((s, si) => {
    for (let i = 0; i < s.n; i++) {
      const t = cumulative[si]! + i;
      const visible = s.past + i + 1; // causal: the past, earlier new tokens and itself
      for (let h = 0; h < H; h++) {
        const kh = Math.floor(h / group);
        const scores = new Float64Array(visible);
        for (let p = 0; p < visible; p++) {
          const base = (slot(s, p) * KVH + kh) * D;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += fromHalf(query[(t * H + h) * D + d]!) * fromHalf(expectedKeyCache[base + d]!);
          scores[p] = dot * scale;
        }
        const max = Math.max(...scores);
        let z = 0;
        for (let p = 0; p < visible; p++) z += scores[p] = Math.exp(scores[p]! - max);
        for (let p = 0; p < visible; p++) {
          const base = (slot(s, p) * KVH + kh) * D;
          const w = scores[p]! / z;
          for (let d = 0; d < D; d++) expectedOutput[(t * H + h) * D + d]! += w * fromHalf(expectedValueCache[base + d]!);
        }
      }
    }
  });
  return {
    dims, sequences, tokens: T, maxBlocksPerSeq, query, key, value, keyCache, valueCache, cumulative, past, blockTable,
    expectedOutput, expectedKeyCache, expectedValueCache,
  };
}

/** A graph holding just one PagedAttention node; every input is a graph input. */
export function pagedAttentionGraph(dims: PagedAttentionDims): Uint8Array {
  const { numHeads: H, kvNumHeads: KVH, headSize: D, blockSize: BS } = dims;
  const g = new GraphBuilder("paged_attention_probe");
  const cache = ["num_blocks", BS, KVH, D];
  const inputs = [
    g.input("query", DataType.FLOAT16, ["T", H * D]),
    g.input("key", DataType.FLOAT16, ["T", KVH * D]),
    g.input("value", DataType.FLOAT16, ["T", KVH * D]),
    g.input("key_cache", DataType.FLOAT16, cache),
    g.input("value_cache", DataType.FLOAT16, cache),
    g.input("cumulative_sequence_length", DataType.INT32, ["batch_plus_1"]),
    g.input("past_seqlens", DataType.INT32, ["batch"]),
    g.input("block_table", DataType.INT32, ["batch", "max_blocks"]),
  ];
  const [out, kOut, vOut] = g.opN("PagedAttention", inputs, 3, {
    domain: "com.microsoft",
    attributes: { num_heads: H, kv_num_heads: KVH, scale: { float: 1 / Math.sqrt(D) } },
  });
  g.output(out!, DataType.FLOAT16, ["T", H * D], "output");
  g.output(kOut!, DataType.FLOAT16, cache, "key_cache_out");
  g.output(vOut!, DataType.FLOAT16, cache, "value_cache_out");
  return g.encode();
}

export interface PagedAttentionCheck {
  maxAbsError: number;
  keyCacheMismatches: number;
  valueCacheMismatches: number;
}

/** Compares an fp16 output and the returned pools against the reference. */
export function checkPagedAttention(
  c: PagedAttentionCase,
  output: Uint16Array,
  keyCacheOut?: Uint16Array,
  valueCacheOut?: Uint16Array,
): PagedAttentionCheck {
  let maxAbsError = 0;
  for (let i = 0; i < c.expectedOutput.length; i++) {
    const err = Math.abs(fromHalf(output[i]!) - c.expectedOutput[i]!);
    if (!(err <= maxAbsError)) maxAbsError = Number.isNaN(err) ? Infinity : err;
  }
  const mismatches = (got: Uint16Array | undefined, want: Uint16Array) => {
    if (!got) return -1;
    let n = 0;
    for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) n++;
    return n;
  };
  return {
    maxAbsError,
    keyCacheMismatches: mismatches(keyCacheOut, c.expectedKeyCache),
    valueCacheMismatches: mismatches(valueCacheOut, c.expectedValueCache),
  };
}
