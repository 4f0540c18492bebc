import * as ort from "onnxruntime-node";
import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import { returnsLogits, stepResult, type BlockIO, type Executor, type StepResult, type StepSequence, type TransferStats } from "./executor";
import { GRAPH_IO, buildLlamaGraph, slidingWindowOf } from "../graph/llama-graph";
import type { QuantizedWeights } from "../quant/quantized-weights";
import { stepFeeds } from "./cpu-step-feeds";
import { cpuFlags, hasVnni } from "../quant/cpu-features";
import type { IntegerKernel } from "../graph/linear";

export interface CpuExecutorOptions {
  spec: DecoderSpec;
  weights: WeightSource;
  numBlocks: number;
  blockSize: number;
  /** onnxruntime intra-op threads; default: all cores. */
  threads?: number | undefined;
  /** int8/int4 linear weights (MatMulNBits); float32 when absent. */
  quantized?: QuantizedWeights | null | undefined;
  /**
   * Steps with prefill rows run a second graph whose linears multiply those rows by the integer
   * GEMM (`integerProduct` in graph/linear.ts, activations rotated). Default: with quantized
   * weights. On the trained SmolLM2 on an AVX2 CPU (mean KL to fp32, MatMulNBits prefill ->
   * integer): int8 4.5e-3 -> 1.1e-2 (1.1e-1 before the rotation: outlier channels rounded per
   * row), int4 0.427 -> 0.428 (docs/quantization.md). False: every row on MatMulNBits, one graph.
   */
  integerPrefill?: boolean | undefined;
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
    /** The graph for steps without prefill rows, and the one for steps with (`integerPrefill`), the same session when weights are float. */
    private readonly sessions: { decode: ort.InferenceSession; prefill: ort.InferenceSession },
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
    const quantized = options.quantized ?? null;
    const kernel = integerPrefillKernel(quantized, options.integerPrefill);
    const twoGraphs = kernel !== undefined;
    // Thread pools spin while a run lasts (between its nodes) and stop when it returns
    // (`session.force_spinning_stop`): a pool left spinning after its run takes a core from the
    // other session's next run (two sessions: the int4 trajectory measured 0.78x) and from the
    // engine's own work between steps; a pool that never spins pays a wake-up per parallel node
    // (int8 decode steps 17% and int4 8% slower in alternating runs, docs/quantization.md).
    const spin = { extra: { session: { intra_op: { allow_spinning: "1" }, force_spinning_stop: "1" } } };
    const padOneRow = oneRowDiffers(quantized);
    const open = (integerPrefill: IntegerKernel | undefined) =>
      ort.InferenceSession.create(buildLlamaGraph(options.spec, options.weights, quantized, { integerPrefill, padOneRow }), {
        executionProviders: ["cpu"],
        graphOptimizationLevel: "all",
        intraOpNumThreads: options.threads ?? 0,
        interOpNumThreads: 1,
        executionMode: "sequential",
        logSeverityLevel: 3,
        ...spin,
      });
    const decode = await open(undefined);
    const prefill = twoGraphs ? await open(kernel) : decode;
    return new CpuExecutor({ decode, prefill }, options.spec, options.numBlocks, options.blockSize);
  }

  async run(sequences: readonly StepSequence[]): Promise<StepResult> {
    const feeds = stepFeeds(sequences, { blockSize: this.blockSize, numKvHeads: this.spec.numKvHeads, window: this.window });
    const wantLogits = sequences.some((s) => returnsLogits(s.logits));
    const fetches = wantLogits ? this.fetchesWithLogits : this.fetchesArgmaxOnly;
    const session = feeds.prefillRows > 0 ? this.sessions.prefill : this.sessions.decode;
    const outputs = await session.run({ ...feeds.inputs, ...this.poolFeeds }, fetches);
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
    // Logits are views into this step's output buffer (fresh per run).
    const logitsAll = wantLogits ? (outputs[GRAPH_IO.logits]!.data as Float32Array) : undefined;
    this.transfer.deviceToHostBytes += logitsAll?.byteLength ?? 0;
    return stepResult(sequences, feeds.logitRanges, next, logitsAll, this.spec.vocabSize);
  }

  async dispose(): Promise<void> {
    await this.sessions.decode.release();
    if (this.sessions.prefill !== this.sessions.decode) await this.sessions.prefill.release();
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
}

/**
 * The integer GEMM kernel of the graph that steps with prefill rows take, or undefined when every
 * row stays on MatMulNBits (`CpuExecutorOptions.integerPrefill` false; the default takes it with
 * int8 and int4 weights): u8 x s8 where the CPU has VNNI, else u8 x s8 with 7-bit activations
 * (`IntegerKernel`: plain u8 x s8 saturates there; on an AVX2 EPYC the 7-bit one runs 1.45-1.55x
 * fp32 MatMul at 300-512 rows unrotated, `bench/probes/int-gemm-probe.ts`).
 */
export function integerPrefillKernel(quantized: QuantizedWeights | null, option?: boolean, flags = cpuFlags()): IntegerKernel | undefined {
  if (quantized === null || option === false) return undefined;
  return hasVnni(flags) ? "u8s8" : "u8s8-7bit";
}

/**
 * Whether MatMulNBits at one row sums in another order than at several (`GraphWeights.padOneRow`):
 * int4 weights on a CPU without VNNI (an AVX2 EPYC: row bits differ between M = 1 and M >= 2, the
 * same for every M >= 2; int8 the same at every M; an AVX-512 VNNI CPU passed the bit-for-bit
 * verify-row test without it). Padding costs the LM head a row: 1.77 -> 2.45 ms a decode step there.
 */
export function oneRowDiffers(quantized: QuantizedWeights | null, flags = cpuFlags()): boolean {
  return quantized?.bits === 4 && !hasVnni(flags);
}

/** A float32 view of received bytes (copied first when they are not 4-byte aligned). */
function asFloat32(bytes: Uint8Array): Float32Array {
  if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  return new Float32Array(bytes.slice().buffer);
}
