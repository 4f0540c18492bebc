import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type * as OrtWeb from "onnxruntime-web";
import type { DecoderSpec } from "../graph/decoder-spec";
import type { Executor, StepResult, StepSequence, TransferStats } from "./executor";
import { DAWN_FLAGS } from "./device";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { JobQueue, MAX_QUERY_PIECE, checkPagedBlockSize, pagedStepInputs, stepFeeds, stepFetches, stepInputBytes, fetchedStepResult, type PagedExecutorOptions } from "./paged-step";

export const NO_WEBGPU_ADAPTER =
  "no WebGPU adapter: run scripts/install-webgpu-deps.sh (Mesa lavapipe) or use a machine with a GPU";

export interface WebDevicePoolExecutorOptions extends PagedExecutorOptions {
  /** onnxruntime-web log level; default "error". */
  logLevel?: "verbose" | "info" | "warning" | "error" | "fatal";
}

type Ort = typeof OrtWeb;
// dawn.node's WebGPU objects (the `webgpu` npm package); typed loosely: no @webgpu/types here.
type GpuDevice = any; // eslint-disable-line @typescript-eslint/no-explicit-any
type GpuBuffer = any; // eslint-disable-line @typescript-eslint/no-explicit-any

interface WebGpuRuntime {
  ort: Ort;
  globals: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
}

let runtime: Promise<WebGpuRuntime> | undefined;

export { MAX_QUERY_PIECE } from "./paged-step";

/**
 * Once per process: dawn.node as `navigator.gpu` (Node has no navigator), the writeBuffer shim
 * for onnxruntime-web's SharedArrayBuffer views, an adapter check, then onnxruntime-web's WebGPU
 * build (the plain `onnxruntime-web` node export is wasm-only).
 */
export function webGpuRuntime(): Promise<WebGpuRuntime> {
  runtime ??= (async () => {
    process.env.XDG_RUNTIME_DIR ||= mkdtempSync(join(tmpdir(), "xdg-"));
    const dawn = await import("webgpu");
    const G = dawn.globals as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
    Object.assign(globalThis, G);
    // onnxruntime-web's threaded wasm build hands views of its SharedArrayBuffer memory to
    // GPUQueue.writeBuffer; dawn.node rejects them ("Invalid argument"): copy them first.
    const writeBuffer = G.GPUQueue.prototype.writeBuffer;
    if (!writeBuffer.__sharedCopy) {
      const patched = function (this: unknown, buffer: unknown, offset: number, data: any, dataOffset = 0, size?: number) {
        if (ArrayBuffer.isView(data) && data.buffer instanceof SharedArrayBuffer) {
          const el = (data as any).BYTES_PER_ELEMENT ?? 1;
          const n = size ?? (data as any).length - dataOffset;
          const copy = new Uint8Array(data.buffer, data.byteOffset + dataOffset * el, n * el).slice();
          return writeBuffer.call(this, buffer, offset, copy, 0, copy.length);
        }
        return writeBuffer.call(this, buffer, offset, data, dataOffset, size);
      };
      (patched as any).__sharedCopy = true;
      G.GPUQueue.prototype.writeBuffer = patched;
    }
    const gpu = dawn.create([...DAWN_FLAGS]);
    const nav = ((globalThis as any).navigator ??= {});
    Object.defineProperty(nav, "gpu", { value: gpu, configurable: true });
    const adapter = await gpu.requestAdapter();
    if (!adapter) throw new Error(NO_WEBGPU_ADAPTER);
    const ort = (await import("onnxruntime-web/webgpu")) as unknown as Ort;
    ort.env.wasm.numThreads = 1;
    return { ort, globals: G };
  })();
  // A failed start (no adapter) is retried by the next create(), not cached.
  runtime.catch(() => (runtime = undefined));
  return runtime;
}

/**
 * The device-pool executor on onnxruntime-web (provider `web-webgpu`): the paged decoder graph (`paged-llama-graph.ts`, PagedAttention per
 * layer) on onnxruntime-web's WebGPU execution provider, on Dawn (the `webgpu` npm package) in
 * Node. The fp16 KV pool is one GPUBuffer per layer and kind, [numBlocks, blockSize, numKvHeads,
 * headDim], created once and fed every step as the op's cache input; the graph omits the op's
 * cache outputs, so the op updates it in place and it never leaves the device. Per step the host
 * uploads only token ids, positions, the sequences' lengths and block tables and the logit rows,
 * and downloads only `next_token` (plus the logits rows when a sequence asks for them).
 *
 * Every node is placed on WebGPU (`session.disable_cpu_ep_fallback` is set: a node without a
 * WebGPU kernel fails session creation instead of running on the CPU).
 *
 * @example
 * const exec = await WebDevicePoolExecutor.create({ spec, weights, numBlocks: 256, blockSize: 16 });
 * const { argmax } = await exec.run([{ tokenIds: [1, 2, 3], startPos: 0, blockTable: [0], logits: "argmax" }]);
 */
export class WebDevicePoolExecutor implements Executor {
  readonly kind = "device-pool" as const;
  readonly provider = "web-webgpu" as const;
  readonly transfer: TransferStats = { hostToDeviceBytes: 0, deviceToHostBytes: 0, kvDeviceToHostBytes: 0, steps: 0 };
  readonly kvBytes: number;
  private readonly poolBuffers: GpuBuffer[] = [];
  private readonly poolFeeds: Record<string, OrtWeb.Tensor> = {};
  private readonly layerBytes: number;
  private readonly jobs = new JobQueue();

  private constructor(
    private readonly rt: WebGpuRuntime,
    private readonly session: OrtWeb.InferenceSession,
    private readonly gpuDevice: GpuDevice,
    private readonly maxQueryPiece: number,
    readonly spec: DecoderSpec,
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    const { ort, globals: G } = rt;
    const U = G.GPUBufferUsage;
    const dims = [numBlocks, blockSize, spec.numKvHeads, spec.headDim];
    this.layerBytes = numBlocks * blockSize * spec.numKvHeads * spec.headDim * 2;
    for (let l = 0; l < spec.numLayers; l++) {
      for (const input of [PAGED_IO.kvK(l), PAGED_IO.kvV(l)]) {
        // WebGPU zero-initialises new buffers; nothing is uploaded.
        const buffer = gpuDevice.createBuffer({
          size: Math.ceil(this.layerBytes / 16) * 16,
          usage: U.STORAGE | U.COPY_SRC | U.COPY_DST,
        });
        this.poolBuffers.push(buffer);
        this.poolFeeds[input] = ort.Tensor.fromGpuBuffer(buffer, { dataType: "float16", dims });
      }
    }
    this.kvBytes = 2 * spec.numLayers * this.layerBytes;
  }

  static async create(options: WebDevicePoolExecutorOptions): Promise<WebDevicePoolExecutor> {
    const bs = options.blockSize;
    checkPagedBlockSize(bs);
    const rt = await webGpuRuntime();
    const { ort } = rt;
    ort.env.logLevel = options.logLevel ?? "error";
    const { model } = buildPagedLlamaGraph(options.spec, options.weights, options.blockSize, { quantized: options.quantized ?? null, float16: options.float16 ?? false });
    const session = await ort.InferenceSession.create(model, {
      executionProviders: ["webgpu"],
      graphOptimizationLevel: "all",
      extra: { session: { disable_cpu_ep_fallback: "1" } },
    });
    const device = await ort.env.webgpu.device;
    return new WebDevicePoolExecutor(rt, session, device, options.maxQueryPiece ?? MAX_QUERY_PIECE, options.spec, options.numBlocks, options.blockSize);
  }

  run(sequences: readonly StepSequence[]): Promise<StepResult> {
    return this.jobs.run(() => this.runStep(sequences));
  }

  private async runStep(sequences: readonly StepSequence[]): Promise<StepResult> {
    const { ort } = this.rt;
    const step = pagedStepInputs(sequences, this.spec, this.blockSize, this.numBlocks, this.maxQueryPiece);
    const feeds = { ...stepFeeds(step, (data, dims) => new ort.Tensor("int32", data, dims)), ...this.poolFeeds };
    const outputs = await this.session.run(feeds, stepFetches(step));
    this.transfer.steps++;
    this.transfer.hostToDeviceBytes += stepInputBytes(step);
    return fetchedStepResult(sequences, step, outputs, this.spec.vocabSize, this.transfer);
  }

  /**
   * Pool rows, for tests and debugging (a device readback: not counted in `transfer`):
   * [slots.length, numKvHeads, headDim] of layer `layer` as float16 bits.
   */
  async readSlots(layer: number, kind: "k" | "v", slots: ArrayLike<number>): Promise<Uint16Array> {
    await this.jobs.idle();
    const G = this.rt.globals;
    const src = this.poolBuffers[2 * layer + (kind === "k" ? 0 : 1)];
    const staging = this.gpuDevice.createBuffer({ size: src.size, usage: G.GPUBufferUsage.MAP_READ | G.GPUBufferUsage.COPY_DST });
    const enc = this.gpuDevice.createCommandEncoder();
    enc.copyBufferToBuffer(src, 0, staging, 0, src.size);
    this.gpuDevice.queue.submit([enc.finish()]);
    await staging.mapAsync(G.GPUMapMode.READ);
    const all = new Uint16Array(staging.getMappedRange().slice(0, this.layerBytes));
    staging.unmap();
    staging.destroy();
    const row = this.spec.numKvHeads * this.spec.headDim;
    const out = new Uint16Array(slots.length * row);
    for (let i = 0; i < slots.length; i++) out.set(all.subarray(slots[i]! * row, (slots[i]! + 1) * row), i * row);
    return out;
  }

  async dispose(): Promise<void> {
    await this.jobs.idle();
    await this.session.release();
    for (const b of this.poolBuffers) b.destroy();
  }
}
