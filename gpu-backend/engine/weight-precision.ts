import { createHash } from "node:crypto";
import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync, readSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Checkpoint } from "../model/checkpoint/checkpoint";
import { modelCacheDir } from "../model/checkpoint/demo-model";
import { openSafetensors, writeSafetensors, type SafetensorsTensorToWrite } from "../model/checkpoint/safetensors";
import type { ExecutorKind } from "../model/executors/executor";
import { BLOCK_SIZE, type QuantBits } from "../model/quant/block-quant";
import { QuantizedWeights, type PackedWeight } from "../model/quant/quantized-weights";

/**
 * How a backend holds its weights (`--weights`), the one place deciding what each executor takes
 * and its default:
 *
 *   fp32        float32 MatMul everywhere (every executor)
 *   fp16        float16 weights, their products in float16 (device-pool, host-pool; the x86 CPU MatMul has no
 *               fp16 kernel); norms, residual and softmax stay float32, attention reads the fp16 pool
 *   bf16        no executor here computes in bfloat16 (onnxruntime 1.30's CPU and WebGPU kernels lack it)
 *   int8, int4  blockwise weight-only quantization (`block-quant.ts`, ggml's Q8_0 / Q4_0) through
 *               MatMulNBits, LM head and embedding table included (cpu and paged graphs alike)
 *
 * Default, measured (docs/quantization.md, `npm run bench -- llamacpp`):
 *
 *   cpu         int4: against fp32 it decodes 2.9x faster, runs the 20-turn trajectory 1.4x faster
 *               and holds 2.8x less resident memory, at 0.8x its prefill speed; its cost is the
 *               quantization error (KL and greedy agreement in docs/quantization.md)
 *   cpu, GGUF of Q4_1/Q5_x/K-quant blocks  int8 (`defaultPrecision`: int4 would quantize 4-bit blocks twice)
 *   device-pool, host-pool  fp16: nobody serves fp32 on a GPU; the PagedAttention pool is fp16 already
 *
 * `--weights fp32` keeps the exact float32 model (the llama.cpp oracle tests use it).
 */
export type WeightPrecision = "fp32" | "fp16" | "bf16" | "int8" | "int4";

export const WEIGHT_PRECISIONS: readonly WeightPrecision[] = ["fp32", "fp16", "bf16", "int8", "int4"];

/**
 * The precision an executor runs a checkpoint at when `--weights` is not given: fp16 on the GPU
 * executors; on cpu int4, except for a GGUF file whose linear weights are mostly stored in a
 * quantized type other than Q4_0 (Q4_1, Q5_x, K-quants): int4 would re-quantize 4- or 5-bit blocks
 * at 4 bits and compound both errors (SmolLM2-135M's Q4_1 file at int4 rambles where int8 answers
 * as llama.cpp does), so it gets int8, whose rounding is far below the file's own.
 */
export function defaultPrecision(kind: ExecutorKind, checkpoint?: Pick<Checkpoint, "tensorNames" | "tensorInfo">): WeightPrecision {
  if (kind !== "cpu") return "fp16";
  return checkpoint && mostlyRequantizedAt4Bits(checkpoint) ? "int8" : "int4";
}

/** Whether most 2-D weights are stored in a quantized type int4 cannot take as stored (the checkpoint's own dtypes: ggml type names for a GGUF). */
function mostlyRequantizedAt4Bits(checkpoint: Pick<Checkpoint, "tensorNames" | "tensorInfo">): boolean {
  const matrices = checkpoint.tensorNames.map((n) => checkpoint.tensorInfo(n)).filter((t) => t.shape.length === 2);
  return matrices.filter((t) => !TAKEN_AT_INT4.has(t.dtype)).length * 2 > matrices.length;
}

/** Float dtypes, and Q4_0 (int4 as stored): what int4 does not quantize twice. */
const TAKEN_AT_INT4 = new Set(["F32", "F16", "BF16", "Q4_0"]);

/** The bit width of a quantized precision, or null for a float one. */
export function quantBits(precision: WeightPrecision): QuantBits | null {
  return precision === "int8" ? 8 : precision === "int4" ? 4 : null;
}

/** Why the `kind` executor cannot hold weights at `precision`, or null when it can. */
export function precisionRefusal(kind: ExecutorKind, precision: WeightPrecision): string | null {
  if (precision === "bf16") return "bf16 weights: no executor here computes in bfloat16 (onnxruntime 1.30 has no bf16 MatMul on cpu or webgpu); use fp32, int8 or int4";
  if (precision === "fp16" && kind === "cpu") return "fp16 weights are not served on cpu (onnxruntime's x86 CPU MatMul has no fp16 kernel: it would run slower than fp32); use fp32, int8 or int4, or fp16 on a GPU executor (device-pool, host-pool)";
  return null;
}

/** @throws Error for a value that is not a precision name */
export function parsePrecision(v: string): WeightPrecision {
  if ((WEIGHT_PRECISIONS as readonly string[]).includes(v)) return v as WeightPrecision;
  throw new Error(`--weights must be one of ${WEIGHT_PRECISIONS.join(", ")}, got ${JSON.stringify(v)}`);
}

/**
 * The quantized weights of a checkpoint at `bits`, with their cache file next to the model
 * (`<dir>/.agent-edge/`, or the model cache folder when that is not writable), keyed by the
 * sha256 of the weight files, the bit width and the block size: a second start reads it instead
 * of quantizing. Call `save()` once the executor is built.
 *
 * @example
 * const q = quantizedWeightsFor(checkpoint, 4, console.log);
 * const exec = await CpuExecutor.create({ spec, weights: checkpoint.weights, quantized: q.weights, ... });
 * q.save();
 */
export function quantizedWeightsFor(checkpoint: Checkpoint, bits: QuantBits, log: (line: string) => void = () => {}): { weights: QuantizedWeights; save(): void } {
  const t0 = performance.now();
  const hash = weightFilesHash(checkpoint);
  log(`weights sha256 ${hash.slice(0, 16)} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  const path = join(cacheFolder(checkpoint.dir), `${hash.slice(0, 16)}-int${bits}-b${BLOCK_SIZE}.safetensors`);
  // A GGUF checkpoint's Q4_0 / Q8_0 weights come packed as stored (checkpoint/gguf-packed.ts); the cache holds the rest.
  const stored = checkpoint.packedWeights?.(bits) ?? [];
  const weights = QuantizedWeights.open(bits, [...(existsSync(path) ? readCache(path, bits, log) : []), ...stored], log);
  return { weights, save: () => writeCache(path, weights, log) };
}

/** A checkpoint's weights at a precision on an executor: the quantized ones (null for a float precision) and their cache's save. */
export interface WeightsAt {
  precision: WeightPrecision;
  quantized: QuantizedWeights | null;
  /** Saves the quantized weights' cache file (call once the executor is built). */
  save(): void;
}

/**
 * The weights the `kind` executor runs at `precision` (default: that executor's): refused with
 * the reason where it cannot hold them, quantized (through the cache file) for int8/int4.
 *
 * @throws Error with `precisionRefusal`'s reason
 * @example const w = weightsAt(checkpoint, "cpu", undefined, log); // int4
 */
export function weightsAt(checkpoint: Checkpoint, kind: ExecutorKind, precision: WeightPrecision | undefined, log: (line: string) => void = () => {}): WeightsAt {
  const p = precision ?? defaultPrecision(kind, checkpoint);
  const refusal = precisionRefusal(kind, p);
  if (refusal) throw new Error(refusal);
  const bits = quantBits(p);
  const cache = bits ? quantizedWeightsFor(checkpoint, bits, log) : null;
  return { precision: p, quantized: cache?.weights ?? null, save: () => cache?.save() };
}

function readCache(path: string, bits: QuantBits, log: (line: string) => void): [string, PackedWeight][] {
  const file = openSafetensors(path);
  if (file.metadata.bits !== String(bits) || file.metadata.block_size !== String(BLOCK_SIZE)) {
    log(`ignoring ${path}: int${file.metadata.bits} block ${file.metadata.block_size}, want int${bits} block ${BLOCK_SIZE}`);
    return [];
  }
  const out: [string, PackedWeight][] = [];
  for (const tensorName of file.tensorNames) {
    if (!tensorName.endsWith(".packed")) continue;
    const name = tensorName.slice(0, -".packed".length);
    const [rows, blocks] = file.info(`${name}.scales`).shape as [number, number];
    out.push([name, { bits, rows, cols: blocks * BLOCK_SIZE, packed: file.readBytes(tensorName), scales: file.read(`${name}.scales`) }]);
  }
  log(`quantized int${bits} weights read from ${path} (${out.length} tensors)`);
  return out;
}

/** Writes the cache file when anything was quantized this start. */
function writeCache(path: string, weights: QuantizedWeights, log: (line: string) => void): void {
  if (weights.freshCount === 0) return;
  mkdirSync(dirname(path), { recursive: true });
  const tensors: Record<string, SafetensorsTensorToWrite> = {};
  for (const [name, w] of weights.entries()) {
    tensors[`${name}.packed`] = { dtype: "U8", shape: [w.rows, w.packed.length / w.rows], data: w.packed };
    tensors[`${name}.scales`] = { dtype: "F32", shape: [w.rows, w.cols / BLOCK_SIZE], data: w.scales };
  }
  writeSafetensors(path, tensors, { format: "agent-edge-quantized", bits: String(weights.bits), block_size: String(BLOCK_SIZE) });
  log(`quantized int${weights.bits} weights cached at ${path} (${weights.freshCount} tensors quantized this start)`);
}

function cacheFolder(modelDir: string): string {
  const beside = join(modelDir, ".agent-edge");
  try {
    mkdirSync(beside, { recursive: true });
    accessSync(beside, constants.W_OK);
    return beside;
  } catch {
    return join(modelCacheDir(), "quantized");
  }
}

/** sha256 over the checkpoint's weight files, in name order. */
function weightFilesHash(checkpoint: Checkpoint): string {
  const files = [...new Set(checkpoint.tensorNames.map((n) => checkpoint.tensorInfo(n).file))].sort();
  const hash = createHash("sha256");
  const buffer = Buffer.allocUnsafe(16 << 20);
  for (const file of files) {
    const fd = openSync(file, "r");
    try {
      for (let n; (n = readSync(fd, buffer, 0, buffer.length, null)) > 0; ) hash.update(buffer.subarray(0, n));
    } finally {
      closeSync(fd);
    }
  }
  return hash.digest("hex");
}
