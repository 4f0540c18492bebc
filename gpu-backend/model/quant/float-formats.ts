/** float16 and bfloat16 conversions (IEEE half, bfloat16) used by the weight files, the quantizer and the graphs. */

/**
 * IEEE half-precision words to float32, exactly (subnormals, ±0, ±inf, NaN payloads kept).
 *
 * @example
 * f16ToF32(new Uint16Array([0x3c00, 0x0001]), new Float32Array(2)); // [1, 2^-24]
 */
export function f16ToF32(words: Uint16Array, out: Float32Array = new Float32Array(words.length)): Float32Array {
  const table = halfToF32Table();
  for (let i = 0; i < words.length; i++) out[i] = table[words[i]!]!;
  return out;
}

/**
 * bfloat16 words to float32 (the word is the float32's high half).
 *
 * @example
 * bf16ToF32(new Uint16Array([0x3f80])); // [1]
 */
export function bf16ToF32(words: Uint16Array, out: Float32Array = new Float32Array(words.length)): Float32Array {
  const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
  for (let i = 0; i < words.length; i++) bits[i] = words[i]! << 16;
  return out;
}

/**
 * float32 values to IEEE half words, rounded to nearest, ties to even (overflow → ±inf,
 * underflow → subnormals or ±0, NaN stays a quiet NaN).
 *
 * @example
 * f32ToF16(new Float32Array([1, 65520])); // [0x3c00, 0x7c00]
 */
export function f32ToF16(values: Float32Array, out: Uint16Array = new Uint16Array(values.length)): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32BitsToF16(bits[i]!);
  return out;
}

/**
 * float32 values to bfloat16 words, rounded to nearest, ties to even (NaN stays a quiet NaN).
 *
 * @example
 * f32ToBf16(new Float32Array([1])); // [0x3f80]
 */
export function f32ToBf16(values: Float32Array, out: Uint16Array = new Uint16Array(values.length)): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32BitsToBf16(bits[i]!);
  return out;
}

/**
 * One float32, given as its bit pattern, to a bfloat16 word, round to nearest even.
 *
 * @example
 * f32BitsToBf16(0x3f808000); // 0x3f80 (a tie, rounded to even)
 */
export function f32BitsToBf16(x: number): number {
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x007fffff) !== 0) return ((x >>> 16) | 0x0040) & 0xffff;
  return ((x >>> 0) + 0x7fff + ((x >>> 16) & 1)) >>> 16 & 0xffff;
}

function f32BitsToF16(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x0200 | (mant >>> 13) : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - e;
    let half = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

let halfToFloat: Float32Array | undefined;
/** The float32 value of every half word (built once). */
export function halfToF32Table(): Float32Array {
  if (halfToFloat) return halfToFloat;
  const table = new Float32Array(65536);
  const bits = new Uint32Array(table.buffer);
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) << 16;
    const exp = (h >>> 10) & 0x1f;
    const mant = h & 0x3ff;
    if (exp === 0x1f) {
      bits[h] = sign | 0x7f800000 | (mant << 13);
    } else if (exp !== 0) {
      bits[h] = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    } else if (mant === 0) {
      bits[h] = sign;
    } else {
      let e = -14;
      let m = mant;
      while ((m & 0x400) === 0) {
        m <<= 1;
        e--;
      }
      bits[h] = sign | ((e + 127) << 23) | ((m & 0x3ff) << 13);
    }
  }
  halfToFloat = table;
  return table;
}
