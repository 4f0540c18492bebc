import * as ort from "onnxruntime-node";
import type { DecoderSpec } from "../graph/decoder-spec";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { POOL_IO, blockGatherGraph, blockScatterGraph, poolAllocGraph } from "../graph/pool-io-graphs";
import { DevicePoolBlocks } from "./device-pool-blocks";
import type { Executor, StepResult, StepSequence, TransferStats } from "./executor";
import { newestProfile } from "./ort-profile";
import { JobQueue, MAX_QUERY_PIECE, checkPagedBlockSize, pagedStepInputs, stepFeeds, stepFetches, stepInputBytes, fetchedStepResult, type PagedExecutorOptions } from "./paged-step";

export interface DevicePoolExecutorOptions extends PagedExecutorOptions {
  /** onnxruntime's profiler on the decoder session (`endProfiling()` writes the file); tests and benches. */
  profileFilePrefix?: string;
}

const SESSION_OPTIONS = {
  executionProviders: ["webgpu"],
  graphOptimizationLevel: "all",
  // Every node on the GPU or session creation fails (no silent CPU fallback).
  extra: { session: { disable_cpu_ep_fallback: "1" } },
} as const satisfies ort.InferenceSession.SessionOptions;

/**
 * The device-pool executor: the paged decoder graph (`paged-llama-graph.ts`) on onnxruntime-node's
 * bundled WebGPU provider (Dawn inside onnxruntime: Vulkan on Linux, so NVIDIA, AMD and Intel
 * GPUs, and Mesa lavapipe in CI), with the KV pool resident on the device.
 *
 * The pool is one fp16 device tensor per layer and kind, [numBlocks, blockSize, numKvHeads,
 * headDim], made once on the device (`poolAllocGraph`, zeros) and fed to every step as
 * PagedAttention's cache input; the graph omits the op's cache outputs, so the op scatters the
 * step's K and V into those tensors in place: no copy of the pool, no second pool. Per step the
 * host sends token ids, positions, the entries' lengths, block tables and logit rows, and
 * receives `next_token` (and logits rows only when a sequence asks for them): nothing that grows
 * with the context but the block tables (4 bytes per block of context). `transfer` counts the
 * bytes of the host arrays fed and fetched (the pool tensors cross nothing).
 *
 * Whole blocks move in and out through `blockIO` (`DevicePoolBlocks`: a gather session and a
 * scatter session, ordered with the steps), in the host-pool executor's byte format, so this
 * executor serves and pulls blocks to and from other backends and offloads to the host tier.
 *
 * @example
 * const exec = await DevicePoolExecutor.create({ spec, weights, numBlocks: 1024, blockSize: 16 });
 * const { argmax } = await exec.run([{ tokenIds: [1, 2, 3], startPos: 0, blockTable: [7], logits: "argmax" }]);
 */
export class DevicePoolExecutor implements Executor {
  readonly kind = "device-pool" as const;
  readonly provider = "node-webgpu" as const;
  readonly transfer: TransferStats = { hostToDeviceBytes: 0, deviceToHostBytes: 0, kvDeviceToHostBytes: 0, steps: 0 };
  readonly kvBytes: number;
  readonly blockIO: DevicePoolBlocks;
  private readonly jobs = new JobQueue();

  private constructor(
    private readonly session: ort.InferenceSession,
    private readonly ioSessions: ort.InferenceSession[],
    /** The pool tensors by graph input name (`kv_k_L`, `kv_v_L`). */
    private readonly pool: Record<string, ort.Tensor>,
    private readonly maxQueryPiece: number,
    readonly spec: DecoderSpec,
    readonly numBlocks: number,
    readonly blockSize: number,
    private readonly profileFilePrefix: string | undefined,
  ) {
    this.kvBytes = 2 * spec.numLayers * numBlocks * blockSize * spec.numKvHeads * spec.headDim * 2;
    const [gather, scatter] = ioSessions;
    this.blockIO = new DevicePoolBlocks({
      spec, numBlocks, blockSize, pool, gather: gather!, scatter: scatter!,
      enqueue: (job) => this.jobs.run(job),
      idle: () => this.jobs.idle(),
    });
  }

  static async create(options: DevicePoolExecutorOptions): Promise<DevicePoolExecutor> {
    const { spec, blockSize: bs, numBlocks } = options;
    checkPagedBlockSize(bs);
    ort.env.logLevel = "error";
    const { model } = buildPagedLlamaGraph(spec, options.weights, bs, { quantized: options.quantized ?? null, float16: options.float16 ?? false });
    const profile = options.profileFilePrefix ? { enableProfiling: true, profileFilePrefix: options.profileFilePrefix } : {};
    const session = await ort.InferenceSession.create(model, { ...SESSION_OPTIONS, ...profile });
    const gather = await ort.InferenceSession.create(blockGatherGraph(spec, bs), SESSION_OPTIONS);
    const scatter = await ort.InferenceSession.create(blockScatterGraph(spec, bs), SESSION_OPTIONS);
    // Not optimized: constant folding would turn the Expand into a pool-sized initializer. The
    // shape input may sit on the CPU (no fallback flag); the outputs stay on the device.
    const alloc = await ort.InferenceSession.create(poolAllocGraph(spec, numBlocks, bs), {
      executionProviders: ["webgpu"],
      graphOptimizationLevel: "disabled",
      preferredOutputLocation: "gpu-buffer",
    });
    // The pool tensors belong to the alloc session's run results: it is released last (dispose),
    // after them (releasing it first and disposing them later crashes onnxruntime-node 1.30).
    const pool: Record<string, ort.Tensor> = {};
    for (let l = 0; l < spec.numLayers; l++) {
      for (const name of [PAGED_IO.kvK(l), PAGED_IO.kvV(l)]) {
        const out = (await alloc.run({}))[POOL_IO.pool]!;
        if (out.location !== "gpu-buffer") throw new Error(`pool tensor ${name} came back on the ${out.location}, not the device`);
        pool[name] = out;
      }
    }
    return new DevicePoolExecutor(session, [gather, scatter, alloc], pool, options.maxQueryPiece ?? MAX_QUERY_PIECE, spec, numBlocks, bs, options.profileFilePrefix);
  }

  run(sequences: readonly StepSequence[]): Promise<StepResult> {
    this.blockIO.closeBatch();
    return this.jobs.run(() => this.runStep(sequences));
  }

  private async runStep(sequences: readonly StepSequence[]): Promise<StepResult> {
    const step = pagedStepInputs(sequences, this.spec, this.blockSize, this.numBlocks, this.maxQueryPiece);
    const feeds = { ...stepFeeds(step, (data, dims) => new ort.Tensor("int32", data, dims)), ...this.pool };
    const outputs = await this.session.run(feeds, stepFetches(step));
    this.transfer.steps++;
    this.transfer.hostToDeviceBytes += stepInputBytes(step); // the pool tensors cross nothing
    return fetchedStepResult(sequences, step, outputs, this.spec.vocabSize, this.transfer);
  }

  /**
   * Pool rows as fp16 bits, [slots.length, numKvHeads, headDim] of `layer`, read back through the
   * gather session (whole blocks): for tests. Not counted in `transfer`.
   */
  async readSlots(layer: number, kind: "k" | "v", slots: ArrayLike<number>): Promise<Uint16Array> {
    const bs = this.blockSize;
    const rowElems = this.spec.numKvHeads * this.spec.headDim;
    const blockIds = [...new Set(Array.from(slots, (s) => Math.floor(s / bs)))];
    const blocks = new Map(blockIds.map((id) => [id, new Uint8Array(this.blockIO.bytesPerBlock)]));
    for (const [id, out] of blocks) this.blockIO.read(id, out);
    await this.blockIO.settled();
    const out = new Uint16Array(slots.length * rowElems);
    const part = (2 * layer + (kind === "k" ? 0 : 1)) * bs * rowElems;
    for (let i = 0; i < slots.length; i++) {
      const bytes = blocks.get(Math.floor(slots[i]! / bs))!;
      const words = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
      const at = part + (slots[i]! % bs) * rowElems;
      out.set(words.subarray(at, at + rowElems), i * rowElems);
    }
    return out;
  }

  /** Ends onnxruntime's profile of the decoder session (`profileFilePrefix`): the file's path (read it with `readOrtProfile`). */
  async endProfiling(): Promise<string> {
    await this.jobs.idle();
    if (!this.profileFilePrefix) throw new Error("endProfiling: the executor was created without profileFilePrefix");
    await this.session.endProfiling(); // onnxruntime-node returns no path: find the file it wrote
    return newestProfile(this.profileFilePrefix);
  }

  async dispose(): Promise<void> {
    await this.jobs.idle();
    for (const t of Object.values(this.pool)) t.dispose();
    await this.session.release();
    for (const s of this.ioSessions) await s.release(); // gather, scatter, then alloc (owns the pool)
  }
}
