import * as ort from "onnxruntime-node";
import type { DecoderSpec } from "../graph/decoder-spec";
import { CUDA_INSTALL_HINT, cudaProviderInstalled } from "./device";
import type { BlockIO, Executor, StepResult, StepSequence, TransferStats } from "./executor";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { JobQueue, MAX_QUERY_PIECE, checkPagedBlockSize, pagedStepInputs, stepFeeds, stepFetches, stepInputBytes, fetchedStepResult, type PagedExecutorOptions } from "./paged-step";

export interface HostPoolExecutorOptions extends PagedExecutorOptions {
  /**
   * The onnxruntime-node provider (default "node-cuda"). "node-webgpu" runs the same executor on
   * onnxruntime-node's bundled WebGPU provider: the tests use it to run this code path on
   * machines without CUDA (PagedAttention has no CPU kernel).
   */
  provider?: "node-cuda" | "node-webgpu";
  /** CUDA device ordinal (default 0). */
  deviceId?: number;
}

/**
 * The host-pool executor: the paged decoder graph (`paged-llama-graph.ts`, one PagedAttention per
 * layer over an fp16 pool) on onnxruntime-node's CUDA execution provider (`node-cuda`), or its
 * WebGPU provider (`node-webgpu`: how CI runs this code), with the pool in host memory.
 *
 * onnxruntime-node's JavaScript API has no CUDA device tensors (its IO binding takes WebGPU
 * buffers only), so the pool cannot stay on the device between runs: it lives on the host, one
 * Uint16Array (fp16 bits) per layer and kind, [numBlocks, blockSize, numKvHeads, headDim]. What
 * crosses the bus is kept to what a step needs:
 *   - up: the blocks the step's sequences read (their block tables, deduplicated and renumbered
 *     into a compact pool of W blocks), plus the small inputs;
 *   - down: the step's new key and value rows (`new_k_L` / `new_v_L`, written into the host pool
 *     at their slots), `next_token`, and logits rows only when a sequence asks for them. The op's
 *     own cache outputs are never fetched.
 * So a decode step moves O(context) bytes up instead of O(pool), and O(new tokens) down. The
 * device-pool executor keeps its pool resident instead; docs/webgpu.md compares the bytes per step.
 *
 * @example
 * const exec = await HostPoolExecutor.create({ spec, weights, numBlocks: 1024, blockSize: 16 });
 * const { argmax } = await exec.run([{ tokenIds: [1, 2, 3], startPos: 0, blockTable: [7], logits: "argmax" }]);
 */
export class HostPoolExecutor implements Executor {
  readonly kind = "host-pool" as const;
  readonly transfer: TransferStats = { hostToDeviceBytes: 0, deviceToHostBytes: 0, kvDeviceToHostBytes: 0, steps: 0 };
  readonly kvBytes: number;
  readonly blockIO: BlockIO;
  private readonly poolK: Uint16Array[] = [];
  private readonly poolV: Uint16Array[] = [];
  private readonly rowDim: number;
  private readonly blockElems: number;
  private readonly jobs = new JobQueue();

  private constructor(
    private readonly session: ort.InferenceSession,
    readonly provider: "node-cuda" | "node-webgpu",
    private readonly maxQueryPiece: number,
    readonly spec: DecoderSpec,
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    this.rowDim = spec.numKvHeads * spec.headDim;
    this.blockElems = blockSize * this.rowDim;
    for (let l = 0; l < spec.numLayers; l++) {
      this.poolK.push(new Uint16Array(numBlocks * this.blockElems));
      this.poolV.push(new Uint16Array(numBlocks * this.blockElems));
    }
    this.kvBytes = 2 * spec.numLayers * numBlocks * this.blockElems * 2;
    const E = this.blockElems;
    const each = (blockId: number, bytes: Uint8Array, copy: (pool: Uint16Array, part: Uint16Array) => void) => {
      const flat = new Uint16Array(bytes.byteOffset % 2 === 0 ? bytes.buffer : bytes.slice().buffer, bytes.byteOffset % 2 === 0 ? bytes.byteOffset : 0, bytes.byteLength / 2);
      for (let l = 0; l < spec.numLayers; l++) {
        copy(this.poolK[l]!.subarray(blockId * E, (blockId + 1) * E), flat.subarray(2 * l * E, (2 * l + 1) * E));
        copy(this.poolV[l]!.subarray(blockId * E, (blockId + 1) * E), flat.subarray((2 * l + 1) * E, (2 * l + 2) * E));
      }
    };
    // The host pool's block is [blockSize, numKvHeads, headDim] fp16 per layer and kind: contiguous.
    this.blockIO = {
      format: `f16/kv-layer-slot-head-dim/L${spec.numLayers}/H${spec.numKvHeads}/B${blockSize}/D${spec.headDim}`,
      bytesPerBlock: 2 * spec.numLayers * E * 2,
      read: (blockId, out) => each(blockId, out, (pool, part) => part.set(pool)),
      write: (blockId, bytes) => each(blockId, bytes, (pool, part) => pool.set(part)),
      settled: () => Promise.resolve(),
    };
  }

  static async create(options: HostPoolExecutorOptions): Promise<HostPoolExecutor> {
    const bs = options.blockSize;
    checkPagedBlockSize(bs);
    const provider = options.provider ?? "node-cuda";
    if (provider === "node-cuda" && !cudaProviderInstalled()) throw new Error(CUDA_INSTALL_HINT);
    ort.env.logLevel = "error"; // not the per-run "cache outputs are not aliased" warning: we never fetch them
    const { model } = buildPagedLlamaGraph(options.spec, options.weights, bs, { newKvOutputs: true, quantized: options.quantized ?? null, float16: options.float16 ?? false });
    const session = await ort.InferenceSession.create(model, {
      executionProviders: [provider === "node-cuda" ? { name: "cuda", deviceId: options.deviceId ?? 0 } : "webgpu"],
      graphOptimizationLevel: "all",
      // WebGPU: every node on the GPU or session creation fails. CUDA places shape arithmetic on
      // the CPU by design, so the fallback stays allowed there.
      ...(provider === "node-webgpu" ? { extra: { session: { disable_cpu_ep_fallback: "1" } } } : {}),
    });
    return new HostPoolExecutor(session, provider, options.maxQueryPiece ?? MAX_QUERY_PIECE, options.spec, options.numBlocks, bs);
  }

  run(sequences: readonly StepSequence[]): Promise<StepResult> {
    return this.jobs.run(() => this.runStep(sequences));
  }

  private async runStep(sequences: readonly StepSequence[]): Promise<StepResult> {
    const step = pagedStepInputs(sequences, this.spec, this.blockSize, this.numBlocks, this.maxQueryPiece);
    const { past, blockTable, maxBlocks, rowBlocks } = step;
    const B = past.length;

    // The working set: every block a sequence reads, once, renumbered 0..W-1 in the block table.
    const local = new Map<number, number>();
    const blocks: number[] = [];
    for (let i = 0; i < B; i++) {
      for (let j = 0; j < rowBlocks[i]!; j++) {
        const id = blockTable[i * maxBlocks + j]!;
        let w = local.get(id);
        if (w === undefined) {
          w = blocks.length;
          local.set(id, w);
          blocks.push(id);
        }
        blockTable[i * maxBlocks + j] = w;
      }
    }
    const W = blocks.length;
    const E = this.blockElems;
    const dims = [W, this.blockSize, this.spec.numKvHeads, this.spec.headDim];
    const compact = (pool: Uint16Array) => {
      const out = new Uint16Array(W * E);
      blocks.forEach((id, w) => out.set(pool.subarray(id * E, (id + 1) * E), w * E));
      return out;
    };

    const feeds: Record<string, ort.Tensor> = stepFeeds(step, (data, dims) => new ort.Tensor("int32", data, dims));
    const fetches = stepFetches(step);
    for (let l = 0; l < this.spec.numLayers; l++) {
      feeds[PAGED_IO.kvK(l)] = new ort.Tensor("float16", compact(this.poolK[l]!), dims);
      feeds[PAGED_IO.kvV(l)] = new ort.Tensor("float16", compact(this.poolV[l]!), dims);
      fetches.push(PAGED_IO.newK(l), PAGED_IO.newV(l));
    }
    const outputs = await this.session.run(feeds, fetches);
    this.transfer.steps++;
    this.transfer.hostToDeviceBytes += stepInputBytes(step) + 2 * this.spec.numLayers * W * E * 2;

    // The new rows into the host pool, at each token's slot.
    const D = this.rowDim;
    for (let l = 0; l < this.spec.numLayers; l++) {
      const newK = outputs[PAGED_IO.newK(l)]!.data as Uint16Array;
      const newV = outputs[PAGED_IO.newV(l)]!.data as Uint16Array;
      this.transfer.deviceToHostBytes += newK.byteLength + newV.byteLength;
      this.transfer.kvDeviceToHostBytes += newK.byteLength + newV.byteLength;
      let row = 0;
      for (const s of sequences) {
        for (let j = 0; j < s.tokenIds.length; j++, row++) {
          const pos = s.startPos + j;
          const slot = s.blockTable[Math.floor(pos / this.blockSize)]! * this.blockSize + (pos % this.blockSize);
          this.poolK[l]!.set(newK.subarray(row * D, (row + 1) * D), slot * D);
          this.poolV[l]!.set(newV.subarray(row * D, (row + 1) * D), slot * D);
        }
      }
    }

    return fetchedStepResult(sequences, step, outputs, this.spec.vocabSize, this.transfer);
  }

  /** Pool rows as fp16 bits, [slots.length, numKvHeads, headDim] of `layer` (for tests). */
  async readSlots(layer: number, kind: "k" | "v", slots: ArrayLike<number>): Promise<Uint16Array> {
    await this.jobs.idle();
    const pool = (kind === "k" ? this.poolK : this.poolV)[layer]!;
    const D = this.rowDim;
    const out = new Uint16Array(slots.length * D);
    for (let i = 0; i < slots.length; i++) out.set(pool.subarray(slots[i]! * D, (slots[i]! + 1) * D), i * D);
    return out;
  }

  async dispose(): Promise<void> {
    await this.jobs.idle();
    await this.session.release();
  }
}
