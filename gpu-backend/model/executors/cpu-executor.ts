import * as ort from "onnxruntime-node";
import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import type { BlockIO, Executor, StepResult, StepSequence, TransferStats } from "./executor";
import { GRAPH_IO, buildLlamaGraph, slidingWindowOf } from "../graph/llama-graph";
import type { QuantizedWeights } from "../quant/quantized-weights";

/** Additive mask value for keys a query must not see (finite so padded rows stay NaN-free). */
const MASKED = -1e30;

export interface CpuExecutorOptions {
  spec: DecoderSpec;
  weights: WeightSource;
  numBlocks: number;
  blockSize: number;
  /** onnxruntime intra-op threads; default: all cores. */
  threads?: number | undefined;
  /** int8/int4 linear weights (MatMulNBits); float32 when absent. */
  quantized?: QuantizedWeights | null | undefined;
}

/**
 * The portable executor: the decoder graph of standard ONNX ops on onnxruntime's CPU provider.
 * The KV pool is one Float32Array per layer and kind, [numKvHeads, numBlocks * blockSize, headDim],
 * handed to onnxruntime as input tensors over the same memory (no copy) and updated in place
 * from the step's new keys and values.
 *
 * @example
 * const exec = await CpuExecutor.create({ spec, weights, numBlocks: 256, blockSize: 16 });
 * const { logits } = await exec.run([{ tokenIds: [1, 2, 3], startPos: 0, blockTable: [0], logits: "last" }]);
 */
export class CpuExecutor implements Executor {
  readonly kind = "cpu" as const;
  readonly provider = "node-cpu" as const;
  readonly transfer: TransferStats = { hostToDeviceBytes: 0, deviceToHostBytes: 0, kvDeviceToHostBytes: 0, steps: 0 };
  readonly kvBytes: number;
  private readonly kvDim: number;
  private readonly poolK: Float32Array[] = [];
  private readonly poolV: Float32Array[] = [];
  private readonly poolFeeds: Record<string, ort.Tensor> = {};
  private readonly fetchesArgmaxOnly: string[];
  private readonly fetchesWithLogits: string[];
  /** The sliding-window layers' window, or null. */
  private readonly window: number | null;

  private constructor(
    private readonly session: ort.InferenceSession,
    readonly spec: DecoderSpec,
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    this.window = slidingWindowOf(spec);
    this.kvDim = spec.numKvHeads * spec.headDim;
    const numSlots = numBlocks * blockSize;
    for (let l = 0; l < spec.numLayers; l++) {
      const k = new Float32Array(numSlots * this.kvDim);
      const v = new Float32Array(numSlots * this.kvDim);
      this.poolK.push(k);
      this.poolV.push(v);
      this.poolFeeds[GRAPH_IO.kvK(l)] = new ort.Tensor("float32", k, [spec.numKvHeads, numSlots, spec.headDim]);
      this.poolFeeds[GRAPH_IO.kvV(l)] = new ort.Tensor("float32", v, [spec.numKvHeads, numSlots, spec.headDim]);
    }
    this.kvBytes = 2 * spec.numLayers * numSlots * this.kvDim * 4;
    this.blockIO = {
      format: `f32/kv-layer-head-slot-dim/L${spec.numLayers}/H${spec.numKvHeads}/B${blockSize}/D${spec.headDim}`,
      bytesPerBlock: 2 * spec.numLayers * blockSize * this.kvDim * 4,
      read: (blockId, out) => this.copyBlock(blockId, new Float32Array(out.buffer, out.byteOffset, out.byteLength / 4), "read"),
      write: (blockId, bytes) => this.copyBlock(blockId, asFloat32(bytes), "write"),
      settled: () => Promise.resolve(),
    };
    const kv = Array.from({ length: spec.numLayers }, (_, l) => [GRAPH_IO.newK(l), GRAPH_IO.newV(l)]).flat();
    this.fetchesArgmaxOnly = [...kv, GRAPH_IO.nextToken];
    this.fetchesWithLogits = [...kv, GRAPH_IO.nextToken, GRAPH_IO.logits];
  }

  static async create(options: CpuExecutorOptions): Promise<CpuExecutor> {
    const graph = buildLlamaGraph(options.spec, options.weights, options.quantized ?? null);
    const session = await ort.InferenceSession.create(graph, {
      executionProviders: ["cpu"],
      graphOptimizationLevel: "all",
      intraOpNumThreads: options.threads ?? 0,
      interOpNumThreads: 1,
      executionMode: "sequential",
      logSeverityLevel: 3,
    });
    return new CpuExecutor(session, options.spec, options.numBlocks, options.blockSize);
  }

  async run(sequences: readonly StepSequence[]): Promise<StepResult> {
    const feeds = this.buildFeeds(sequences);
    const wantLogits = sequences.some((s) => s.logits === "last" || s.logits === "all");
    const fetches = wantLogits ? this.fetchesWithLogits : this.fetchesArgmaxOnly;
    const outputs = await this.session.run({ ...feeds.inputs, ...this.poolFeeds }, fetches);
    this.transfer.steps++;
    this.transfer.hostToDeviceBytes += feeds.inputBytes;

    // Write this step's keys and values into the pool at the tokens' slots.
    // Pool layout per layer: [numKvHeads, numSlots, headDim]; new rows arrive as [T, numKvHeads, headDim].
    const slots = feeds.slots;
    const { numKvHeads: nkv, headDim: hd } = this.spec;
    const headStride = this.numBlocks * this.blockSize * hd;
    for (let l = 0; l < this.spec.numLayers; l++) {
      const newK = outputs[GRAPH_IO.newK(l)]!.data as Float32Array;
      const newV = outputs[GRAPH_IO.newV(l)]!.data as Float32Array;
      const pk = this.poolK[l]!;
      const pv = this.poolV[l]!;
      for (let t = 0; t < slots.length; t++) {
        if (slots[t]! < 0) continue;
        for (let h = 0; h < nkv; h++) {
          const src = (t * nkv + h) * hd;
          const dst = h * headStride + slots[t]! * hd;
          pk.set(newK.subarray(src, src + hd), dst);
          pv.set(newV.subarray(src, src + hd), dst);
        }
      }
      this.transfer.deviceToHostBytes += newK.byteLength + newV.byteLength;
      this.transfer.kvDeviceToHostBytes += newK.byteLength + newV.byteLength;
    }

    const next = outputs[GRAPH_IO.nextToken]!.data as BigInt64Array;
    this.transfer.deviceToHostBytes += next.byteLength;
    const argmax = feeds.logitRanges.map(([from, to]) => (to > from ? Number(next[to - 1]) : -1));
    const V = this.spec.vocabSize;
    const empty = new Float32Array(0);
    if (!wantLogits) return { logits: sequences.map(() => empty), argmax };
    const logitsAll = outputs[GRAPH_IO.logits]!.data as Float32Array;
    this.transfer.deviceToHostBytes += logitsAll.byteLength;
    // Views into this step's output buffer (fresh per run): no copy.
    const logits = feeds.logitRanges.map(([from, to], i) =>
      sequences[i]!.logits === "argmax" ? empty : logitsAll.subarray(from * V, to * V),
    );
    return { logits, argmax };
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }

  /** A block is, per layer, K then V, each [numKvHeads, blockSize, headDim] fp32: one contiguous run per head in this pool. */
  readonly blockIO: BlockIO;

  private copyBlock(blockId: number, flat: Float32Array, direction: "read" | "write"): void {
    const { numKvHeads: nkv, headDim: hd, numLayers } = this.spec;
    const run = this.blockSize * hd;
    const headStride = this.numBlocks * this.blockSize * hd;
    let at = 0;
    for (let l = 0; l < numLayers; l++) {
      for (const pool of [this.poolK[l]!, this.poolV[l]!]) {
        for (let h = 0; h < nkv; h++) {
          const src = h * headStride + blockId * run;
          if (direction === "read") flat.set(pool.subarray(src, src + run), at);
          else pool.set(flat.subarray(at, at + run), src);
          at += run;
        }
      }
    }
  }

  /** Copies of pool rows, for tests: [slots.length, numKvHeads, headDim] of layer `layer`. */
  readSlots(layer: number, kind: "k" | "v", slots: ArrayLike<number>): Float32Array {
    const pool = kind === "k" ? this.poolK[layer]! : this.poolV[layer]!;
    const { numKvHeads: nkv, headDim: hd } = this.spec;
    const headStride = this.numBlocks * this.blockSize * hd;
    const out = new Float32Array(slots.length * this.kvDim);
    for (let i = 0; i < slots.length; i++)
      for (let h = 0; h < nkv; h++) {
        const src = h * headStride + slots[i]! * hd;
        out.set(pool.subarray(src, src + hd), (i * nkv + h) * hd);
      }
    return out;
  }

  private slotOf(seq: StepSequence, pos: number): number {
    const block = seq.blockTable[Math.floor(pos / this.blockSize)];
    if (block === undefined) throw new Error(`block table too short for position ${pos}`);
    return block * this.blockSize + (pos % this.blockSize);
  }

  private buildFeeds(sequences: readonly StepSequence[]) {
    const order: number[] = [];
    const decode: number[] = [];
    const prefill: number[] = [];
    sequences.forEach((s, i) => {
      if (s.tokenIds.length === 0) throw new Error("a step sequence needs at least one token");
      (s.tokenIds.length === 1 ? decode : prefill).push(i);
    });
    order.push(...decode, ...prefill);

    // An empty prefill group traps onnxruntime's CPU kernels (SIGFPE on zero-sized shapes), so a
    // decode-only step carries one dummy prefill row: token 0 at position 0, attending only to
    // itself, its KV discarded (slot -1) and no logits read from it.
    const dummy = prefill.length === 0 ? 1 : 0;
    const T = sequences.reduce((a, s) => a + s.tokenIds.length, 0) + dummy;
    const inputIds = new BigInt64Array(T);
    const positions = new BigInt64Array(T);
    const ids32 = new Int32Array(inputIds.buffer);
    const pos32 = new Int32Array(positions.buffer);
    const slots = new Int32Array(T);
    const rowOf = new Int32Array(sequences.length); // first flat row of each sequence
    let row = 0;
    for (const i of order) {
      const s = sequences[i]!;
      rowOf[i] = row;
      for (let j = 0; j < s.tokenIds.length; j++, row++) {
        ids32[2 * row] = s.tokenIds[j]!;
        pos32[2 * row] = s.startPos + j;
        slots[row] = this.slotOf(s, s.startPos + j);
      }
    }

    if (dummy) slots[row] = -1;

    const Bd = decode.length;
    const Tp = T - Bd;
    const full = this.attentionContext(sequences, decode, prefill, Tp, dummy, null);
    const local = this.window === null ? null : this.attentionContext(sequences, decode, prefill, Tp, dummy, this.window);

    // Logit rows, per sequence in the caller's order.
    const logitRows: number[] = [];
    const logitRanges: [number, number][] = [];
    sequences.forEach((s, i) => {
      const from = logitRows.length;
      const n = s.tokenIds.length;
      if (s.logits === "all") for (let j = 0; j < n; j++) logitRows.push(rowOf[i]! + j);
      else if (s.logits !== "none") logitRows.push(rowOf[i]! + n - 1);
      logitRanges.push([from, logitRows.length]);
    });
    const logitIndex = BigInt64Array.from(logitRows, (r) => BigInt(r));

    const inputs: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor("int64", inputIds, [T]),
      position_ids: new ort.Tensor("int64", positions, [T]),
      group_sizes: new ort.Tensor("int64", BigInt64Array.of(BigInt(Bd), BigInt(Tp)), [2]),
      dec_ctx_slots: full.decSlots,
      dec_mask: full.decMask,
      pre_ctx_slots: full.preSlots,
      pre_mask: full.preMask,
      logit_index: new ort.Tensor("int64", logitIndex, [logitRows.length]),
    };
    if (local) {
      inputs[GRAPH_IO.local.decSlots] = local.decSlots;
      inputs[GRAPH_IO.local.decMask] = local.decMask;
      inputs[GRAPH_IO.local.preSlots] = local.preSlots;
      inputs[GRAPH_IO.local.preMask] = local.preMask;
    }
    const inputBytes = inputIds.byteLength * 2 + full.bytes + (local?.bytes ?? 0) + logitIndex.byteLength;
    return { inputs, slots, logitRanges, inputBytes };
  }

  /**
   * The context slots and masks of the decode and prefill groups for layers attending within
   * `window` (null: to every earlier position). A query at position q sees keys at p <= q with
   * q - p < window; only the context positions some query can see are gathered.
   */
  private attentionContext(sequences: readonly StepSequence[], decode: number[], prefill: number[], Tp: number, dummy: number, window: number | null) {
    const firstVisible = (pos: number) => (window === null ? 0 : Math.max(0, pos - window + 1));
    // Decode group: [Bd, Sd] context slots, padded; mask [1, Bd, 1, Sd + 1].
    const Bd = decode.length;
    // A non-empty decode group gets at least one (masked) context column: onnxruntime's CPU Gather
    // traps (SIGFPE) on indices of shape [Bd, 0]. Other empty groups are fine as zero-sized tensors.
    const Sd = Bd === 0 ? 0 : Math.max(1, decode.reduce((a, i) => Math.max(a, sequences[i]!.startPos - firstVisible(sequences[i]!.startPos)), 0));
    const decSlots = new BigInt64Array(Bd * Sd);
    const decSlots32 = new Int32Array(decSlots.buffer);
    const decMask = new Float32Array(Bd * (Sd + 1));
    decode.forEach((i, b) => {
      const s = sequences[i]!;
      const lo = firstVisible(s.startPos);
      for (let p = lo; p < s.startPos; p++) decSlots32[2 * (b * Sd + p - lo)] = this.slotOf(s, p);
      decMask.fill(MASKED, b * (Sd + 1) + s.startPos - lo, b * (Sd + 1) + Sd);
    });

    // Prefill group: the visible context slots of each sequence, then all new tokens; mask [1, 1, Tp, Sp + Tp].
    const Sp = prefill.reduce((a, i) => a + sequences[i]!.startPos - firstVisible(sequences[i]!.startPos), 0);
    const preSlots = new BigInt64Array(Sp);
    const preSlots32 = new Int32Array(preSlots.buffer);
    const width = Sp + Tp;
    const preMask = new Float32Array(Tp * width).fill(dummy ? 0 : MASKED);
    let ctxOff = 0;
    let newOff = 0;
    for (const i of prefill) {
      const s = sequences[i]!;
      const lo = firstVisible(s.startPos);
      for (let p = lo; p < s.startPos; p++) preSlots32[2 * (ctxOff + p - lo)] = this.slotOf(s, p);
      for (let j = 0; j < s.tokenIds.length; j++) {
        const r = (newOff + j) * width;
        const from = firstVisible(s.startPos + j); // first position this query sees
        if (from < s.startPos) preMask.fill(0, r + ctxOff + from - lo, r + ctxOff + s.startPos - lo);
        preMask.fill(0, r + Sp + newOff + Math.max(0, from - s.startPos), r + Sp + newOff + j + 1);
      }
      ctxOff += s.startPos - lo;
      newOff += s.tokenIds.length;
    }
    return {
      decSlots: new ort.Tensor("int64", decSlots, [Bd, Sd]),
      decMask: new ort.Tensor("float32", decMask, [1, Bd, 1, Sd + 1]),
      preSlots: new ort.Tensor("int64", preSlots, [Sp]),
      preMask: new ort.Tensor("float32", preMask, [1, 1, Tp, width]),
      bytes: decSlots.byteLength + decMask.byteLength + preSlots.byteLength + preMask.byteLength,
    };
  }
}

/** A float32 view of received bytes (copied first when they are not 4-byte aligned). */
function asFloat32(bytes: Uint8Array): Float32Array {
  if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  return new Float32Array(bytes.slice().buffer);
}
