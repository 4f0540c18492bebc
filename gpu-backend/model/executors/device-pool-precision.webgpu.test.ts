import { DevicePoolExecutor } from "./device-pool-executor";
import { executorConformance } from "./executor-conformance";
import { familySpecs } from "../testing/family-specs";
import { dequantizedWeights } from "../testing/dequantized-weights";
import { QuantizedWeights } from "../quant/quantized-weights";
import { tinySpec } from "../testing/tiny-spec";

/**
 * The device-pool executor's conformance suite (onnxruntime-node's WebGPU provider) at each weight precision it serves besides fp32:
 *   fp16   weights and their products in float16 (graph/linear.ts), against the reference on
 *          fp16-rounded weights;
 *   int8, int4  MatMulNBits / GatherBlockQuantized, against the reference on dequantized weights.
 * Qwen3-MoE's experts take the same precision (the per-expert kernel's products).
 * Tolerances: the fp32 device-pool run's 1e-2 (fp16 attention and KV) plus what the float16 products
 * add; measured on lavapipe and reported by the suite (docs/quantization.md).
 */
const families = familySpecs();
for (const precision of ["fp16", "int8", "int4"] as const) {
  for (const [name, spec] of [["llama", tinySpec()], ["qwen3", families.qwen3], ["qwen3_moe", families.qwen3_moe]] as const) {
    const bits = precision === "int8" ? 8 : precision === "int4" ? 4 : null;
    executorConformance({
      name: `device-pool ${precision} ${name}`,
      spec,
      tolerances: { reference: 3e-2, cached: 2e-2 },
      greedyTokens: 16,
      referenceWeights: (s, w) => dequantizedWeights(s, w, bits ?? "fp16"),
      create: (o) => DevicePoolExecutor.create({ ...o, float16: precision === "fp16", quantized: bits ? QuantizedWeights.open(bits) : null }),
    });
  }
}
