import { existsSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { openSafetensors, writeSafetensors, type SafetensorsTensorToWrite } from "../checkpoint/safetensors";
import { BLOCK_SIZE, packMatMulNBits, quantizeRows, type QuantBits } from "./block-quant";

/** One quantized weight as the graph takes it: MatMulNBits' B and scales. */
export interface PackedWeight {
  bits: QuantBits;
  /** Output features (N). */
  rows: number;
  /** Input features (K). */
  cols: number;
  /** uint8 [rows, cols / BLOCK_SIZE, BLOCK_SIZE * bits / 8]. */
  packed: Uint8Array;
  /** float32 [rows, cols / BLOCK_SIZE] (fp16 values). */
  scales: Float32Array;
}

/**
 * The quantized weights of one model at one bit width, by graph tensor name: taken from a cache
 * file when it holds them, else quantized from the float32 source (`block-quant.ts`) and kept, so
 * `save()` writes a file the next start reads instead of quantizing again. Executors build their
 * graphs through it (`graph/linear.ts`); without a path it only lives in memory (tests).
 *
 * @example
 * const q = QuantizedWeights.open(4, "/models/demo/.quantized/ab12-int4.safetensors", log);
 * const w = q.get("layer0.qkv", 768, 512, () => rows);
 * q.save();
 */
export class QuantizedWeights {
  private readonly cached = new Map<string, PackedWeight>();
  private fresh = 0;
  private quantizedValues = 0;
  private lastProgress = 0;

  private constructor(
    readonly bits: QuantBits,
    /** The cache file, or null for memory only. */
    readonly path: string | null,
    private readonly log: (line: string) => void,
  ) {}

  /** Weights at `bits`, read from `path` when the file exists. */
  static open(bits: QuantBits, path: string | null = null, log: (line: string) => void = () => {}): QuantizedWeights {
    const q = new QuantizedWeights(bits, path, log);
    if (path && existsSync(path)) q.load(path);
    return q;
  }

  /** How many tensors came from the cache file. */
  get fromCache(): number {
    return this.cached.size - this.fresh;
  }

  /**
   * The packed weight `name` ([rows, cols], rows of the float32 `source` in Hugging Face [out, in]
   * layout), quantized now unless the cache holds it (then `source` is never called).
   */
  get(name: string, rows: number, cols: number, source: () => Float32Array): PackedWeight {
    const hit = this.cached.get(name);
    if (hit) {
      if (hit.rows !== rows || hit.cols !== cols || hit.bits !== this.bits)
        throw new Error(`quantized cache ${this.path}: ${name} is int${hit.bits} [${hit.rows}, ${hit.cols}], the model needs int${this.bits} [${rows}, ${cols}]`);
      return hit;
    }
    const q = quantizeRows(source(), rows, cols, this.bits);
    const w: PackedWeight = { bits: this.bits, rows, cols, packed: packMatMulNBits(q), scales: q.scales };
    this.cached.set(name, w);
    this.fresh++;
    this.quantizedValues += rows * cols;
    const now = performance.now();
    if (now - this.lastProgress > 2000) {
      this.lastProgress = now;
      this.log(`quantizing to int${this.bits}: ${(this.quantizedValues / 1e6).toFixed(1)}M weights so far (${name})`);
    }
    return w;
  }

  /** Writes the cache file when anything was quantized since it was read (no-op without a path). */
  save(): void {
    if (!this.path || this.fresh === 0) return;
    mkdirSync(dirname(this.path), { recursive: true });
    const tensors: Record<string, SafetensorsTensorToWrite> = {};
    for (const [name, w] of this.cached) {
      tensors[`${name}.packed`] = { dtype: "U8", shape: [w.rows, w.packed.length / w.rows], data: w.packed };
      tensors[`${name}.scales`] = { dtype: "F32", shape: [w.rows, w.cols / BLOCK_SIZE], data: w.scales };
    }
    writeSafetensors(this.path, tensors, { format: "agent-edge-quantized", bits: String(this.bits), block_size: String(BLOCK_SIZE) });
    this.log(`quantized int${this.bits} weights cached at ${this.path} (${(this.quantizedValues / 1e6).toFixed(1)}M weights quantized this start)`);
    this.fresh = 0;
  }

  private load(path: string): void {
    const file = openSafetensors(path);
    if (file.metadata.bits !== String(this.bits) || file.metadata.block_size !== String(BLOCK_SIZE)) {
      this.log(`ignoring ${path}: int${file.metadata.bits} block ${file.metadata.block_size}, want int${this.bits} block ${BLOCK_SIZE}`);
      return;
    }
    for (const tensorName of file.tensorNames) {
      if (!tensorName.endsWith(".packed")) continue;
      const name = tensorName.slice(0, -".packed".length);
      const scalesInfo = file.info(`${name}.scales`);
      const [rows, blocks] = scalesInfo.shape as [number, number];
      this.cached.set(name, { bits: this.bits, rows, cols: blocks * BLOCK_SIZE, packed: file.readBytes(tensorName), scales: file.read(`${name}.scales`) });
    }
    this.log(`quantized int${this.bits} weights read from ${path} (${this.cached.size} tensors)`);
  }
}
