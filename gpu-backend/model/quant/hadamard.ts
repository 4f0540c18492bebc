/**
 * Block Hadamard rotations for the integer GEMM's activations (QuaRot's idea, per block): the
 * orthonormal Sylvester matrix H_b (b a power of two) is symmetric and its own inverse, so for
 * any x and w, (x H) . (H w) = x . w, block by block along the input. A few large channels of x
 * (the outliers of trained models' activations) are spread over their block by x H, so a per-row
 * int8 step, set by the row's largest value, rounds the rest of the row more finely
 * (docs/quantization.md, "Rotated activations").
 */

/**
 * The rotation block of an integer product with `k` inputs: 64, or 32 where k is not a multiple of
 * 64 (a quantized linear's k is a multiple of 32). On SmolLM2's int8 prefill (mean KL against
 * float32, AVX2's 7-bit activations): none 1.05e-1, 32 1.39e-2, 64 1.13e-2, 128 1.10e-2; each
 * doubling costs more fp32 work (b / N of the product's): 64 costs 3-8% of the up and qkv products
 * at 300-512 rows and 15-18% of the down product (docs/quantization.md, "Rotated activations").
 */
export function rotationBlock(k: number): number {
  return Math.min(64, k & -k);
}

/** H_b row-major (b x b float32): entry (i, j) is (-1)^popcount(i & j) / sqrt(b), row i being H_b e_i (it is symmetric). */
export function hadamard(b: number): Float32Array {
  const h = new Float64Array(b * b);
  for (let i = 0; i < b; i++) h[i * b + i] = 1;
  rotateBlocks(h, b);
  return Float32Array.from(h);
}

/**
 * `v` with each run of `b` values replaced by H_b times it (the fast Walsh-Hadamard transform,
 * in float64), in place.
 *
 * @example const w = Float64Array.of(1, 0, 0, 0); rotateBlocks(w, 4); // [0.5, 0.5, 0.5, 0.5]
 */
export function rotateBlocks(v: Float64Array, b: number): void {
  assertPowerOfTwo(b);
  if (v.length % b !== 0) throw new Error(`rotateBlocks: length ${v.length} is not a multiple of ${b}`);
  const s = 1 / Math.sqrt(b);
  for (let at = 0; at < v.length; at += b) {
    for (let h = 1; h < b; h *= 2)
      for (let i = at; i < at + b; i += 2 * h)
        for (let j = i; j < i + h; j++) {
          const x = v[j]!;
          const y = v[j + h]!;
          v[j] = x + y;
          v[j + h] = x - y;
        }
    for (let j = at; j < at + b; j++) v[j]! *= s;
  }
}

function assertPowerOfTwo(b: number): void {
  if (!Number.isInteger(b) || b < 1 || (b & (b - 1)) !== 0) throw new Error(`a Hadamard block must be a power of two, got ${b}`);
}
