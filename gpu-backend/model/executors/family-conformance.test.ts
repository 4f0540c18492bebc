import { CpuExecutor } from "./cpu-executor";
import { executorConformance } from "./executor-conformance";
import { familySpecs } from "../testing/family-specs";

/**
 * The executor conformance suite on the cpu executor for each family's traits (the Llama run is in
 * web-device-pool-executor.webgpu.test.ts and cpu-executor.test.ts; device-pool-executor.webgpu.test.ts runs the paged families on the GPU path): Qwen3's q/k norms and free head_dim,
 * Gemma 3's sliding-window and global layers with their two rotary tables, (1 + w) and sandwich
 * norms, embedding scale, query_pre_attn_scalar and GeGLU, Phi-3's partial rotary, LongRoPE factor
 * and all-sliding layers, Qwen3-MoE's sparse layer (onnxruntime's MoE op, the cpu kernel), SmolLM3's
 * layer without rotary. Same tolerances as the Llama run: 1e-4 vs the float64 reference, 1e-5
 * cached vs uncached.
 */
const specs = familySpecs();
for (const family of ["qwen3", "gemma3", "phi3", "qwen3_moe", "smollm3"] as const) {
  executorConformance({
    name: `cpu ${family}`,
    spec: specs[family],
    tolerances: { reference: 1e-4, cached: 1e-5 },
    greedyTokens: 16,
    create: (o) => CpuExecutor.create({ ...o, threads: 1 }),
  });
}
