import { packMatMulNBits, quantizeRows, type QuantBits } from "./block-quant";

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
 * The quantized weights of one model at one bit width, by graph tensor name: given up front (a
 * cache file read by engine/weight-precision.ts) or quantized from the float32 source
 * (`block-quant.ts`) on first use and kept, so the owner can write what is `fresh` for the next
 * start. Executors build their graphs through it (`graph/linear.ts`).
 *
 * @example
 * const q = QuantizedWeights.open(4);
 * const w = q.get("layer0.qkv", 768, 512, () => rows);
 */
export class QuantizedWeights {
  private readonly cached = new Map<string, PackedWeight>();
  private fresh = 0;
  private quantizedValues = 0;
  private lastProgress = 0;

  private constructor(
    readonly bits: QuantBits,
    private readonly log: (line: string) => void,
  ) {}

  /** Weights at `bits`, starting from `known` (e.g. a cache file's). */
  static open(bits: QuantBits, known: Iterable<[string, PackedWeight]> = [], log: (line: string) => void = () => {}): QuantizedWeights {
    const q = new QuantizedWeights(bits, log);
    for (const [name, w] of known) q.cached.set(name, w);
    return q;
  }

  /** How many tensors were quantized here rather than given. */
  get freshCount(): number {
    return this.fresh;
  }

  /** Every weight held, by graph tensor name. */
  entries(): IterableIterator<[string, PackedWeight]> {
    return this.cached.entries();
  }


  /**
   * The packed weight `name` ([rows, cols], rows of the float32 `source` in Hugging Face [out, in]
   * layout), quantized now unless the cache holds it (then `source` is never called).
   */
  get(name: string, rows: number, cols: number, source: () => Float32Array): PackedWeight {
    const hit = this.cached.get(name);
    if (hit) {
      if (hit.rows !== rows || hit.cols !== cols || hit.bits !== this.bits)
        throw new Error(`quantized weights: ${name} is int${hit.bits} [${hit.rows}, ${hit.cols}], the model needs int${this.bits} [${rows}, ${cols}]`);
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
}
