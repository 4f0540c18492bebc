import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import { CpuExecutor } from "./cpu-executor";
import type { Device } from "./device";
import type { Executor } from "./executor";
import type { QuantizedWeights } from "../quant/quantized-weights";

export interface CreateExecutorOptions {
  device: Device;
  spec: DecoderSpec;
  weights: WeightSource;
  numBlocks: number;
  blockSize: number;
  threads?: number | undefined;
  /** int8/int4 linear weights (see engine/weight-precision.ts); float32 when absent. */
  quantized?: QuantizedWeights | null | undefined;
  /** Float weights in float16 (webgpu, cuda only: see engine/weight-precision.ts). */
  float16?: boolean | undefined;
  /** The cuda executor's onnxruntime-node provider (default "cuda"; "webgpu": its bundled WebGPU provider, see CudaExecutorOptions). */
  cudaExecutionProvider?: "cuda" | "webgpu" | undefined;
}

/**
 * The executor for a resolved device (see `resolveDevice`).
 *
 * @example const executor = await createExecutor({ device: "cpu", spec, weights, numBlocks, blockSize: 16 });
 */
export async function createExecutor(o: CreateExecutorOptions): Promise<Executor> {
  switch (o.device) {
    case "cpu":
      if (o.float16) throw new Error("the cpu executor takes fp32, int8 or int4 weights, not fp16");
      return CpuExecutor.create({ spec: o.spec, weights: o.weights, quantized: o.quantized, numBlocks: o.numBlocks, blockSize: o.blockSize, threads: o.threads });
    case "webgpu": {
      const { WebGpuExecutor } = await import("./webgpu-executor");
      return WebGpuExecutor.create({ spec: o.spec, weights: o.weights, quantized: o.quantized, float16: o.float16, numBlocks: o.numBlocks, blockSize: o.blockSize });
    }
    case "cuda": {
      const { CudaExecutor } = await import("./cuda-executor");
      return CudaExecutor.create({ spec: o.spec, weights: o.weights, quantized: o.quantized, float16: o.float16, numBlocks: o.numBlocks, blockSize: o.blockSize, executionProvider: o.cudaExecutionProvider });
    }
  }
}
