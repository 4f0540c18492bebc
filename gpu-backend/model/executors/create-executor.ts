import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import { CpuExecutor } from "./cpu-executor";
import type { Executor, ExecutorChoice } from "./executor";
import type { QuantizedWeights } from "../quant/quantized-weights";

export interface CreateExecutorOptions extends ExecutorChoice {
  spec: DecoderSpec;
  weights: WeightSource;
  numBlocks: number;
  blockSize: number;
  threads?: number | undefined;
  /** int8/int4 linear weights (see engine/weight-precision.ts); float32 when absent. */
  quantized?: QuantizedWeights | null | undefined;
  /** Float weights in float16 (device-pool and host-pool only: see engine/weight-precision.ts). */
  float16?: boolean | undefined;
}

/**
 * The executor for a choice of executor and provider (see `resolveExecutor`).
 *
 * @example const executor = await createExecutor({ kind: "cpu", provider: "node-cpu", spec, weights, numBlocks, blockSize: 16 });
 */
export async function createExecutor(o: CreateExecutorOptions): Promise<Executor> {
  const common = { spec: o.spec, weights: o.weights, quantized: o.quantized, float16: o.float16, numBlocks: o.numBlocks, blockSize: o.blockSize };
  switch (o.kind) {
    case "cpu":
      if (o.float16) throw new Error("the cpu executor takes fp32, int8 or int4 weights, not fp16");
      return CpuExecutor.create({ ...common, threads: o.threads });
    case "device-pool": {
      if (o.provider === "web-webgpu") {
        const { WebDevicePoolExecutor } = await import("./web-device-pool-executor");
        return WebDevicePoolExecutor.create(common);
      }
      const { DevicePoolExecutor } = await import("./device-pool-executor");
      return DevicePoolExecutor.create(common);
    }
    case "host-pool": {
      const { HostPoolExecutor } = await import("./host-pool-executor");
      return HostPoolExecutor.create({ ...common, provider: o.provider === "node-webgpu" ? "node-webgpu" : "node-cuda" });
    }
  }
}
