import { CpuExecutor } from "./cpu-executor";
import { executorConformance } from "./executor-conformance";
import { familySpecs } from "../testing/family-specs";
import { dequantizedWeights } from "../testing/dequantized-weights";
import { QuantizedWeights } from "../quant/quantized-weights";
import { tinySpec } from "../testing/tiny-spec";

/**
 * The executor conformance suite on the cpu executor with int8 and int4 weights (MatMulNBits,
 * GatherBlockQuantized; QMoE for Qwen3-MoE's experts), against the float64 reference run on the
 * dequantized weights: what is left is MatMulNBits' int8 rounding of the activations (accuracy
 * level 4, per block of 32).
 * Cached vs uncached stays exact up to batch shape, as in float32.
 *
 * Prefill rows go through the integer GEMM (`integerProduct` in graph/linear.ts: the weights
 * rotated and re-rounded per output feature to int8, each row's activations rotated and rounded
 * to int8, 7 bits without VNNI), decode rows through MatMulNBits. A chunk's rows match the
 * reference within 0.15 (measured on an AVX2 EPYC: 0.077-0.106; 0.030-0.053 with MatMulNBits
 * alone), qwen3_moe's within 0.3 (0.24-0.26: a rounding that flips one of the router's top-2
 * experts moves a token's logits that far, docs/quantization.md; 0.11 at int4 unrotated), and a
 * token's logits as a decode row differ from the same token in a chunk by up to `rowPaths` 0.15
 * (measured 0.04-0.10: see the report lines).
 */
const specs = familySpecs();
for (const bits of [8, 4] as const) {
  for (const [family, spec] of [["llama", tinySpec()], ["qwen3", specs.qwen3], ["gemma3", specs.gemma3], ["qwen3_moe", specs.qwen3_moe]] as const) {
    executorConformance({
      name: `cpu int${bits} ${family}`,
      spec,
      tolerances: { reference: family === "qwen3_moe" ? 3e-1 : 1.5e-1, cached: 1e-5, rowPaths: 1.5e-1 },
      greedyTokens: 16,
      referenceWeights: (s, w) => dequantizedWeights(s, w, bits),
      create: (o) => CpuExecutor.create({ ...o, threads: 1, quantized: QuantizedWeights.open(bits) }),
    });
  }
}
