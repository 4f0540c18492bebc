/** `v` rounded to `digits` decimal places, for benchmark reports. */
export function round(v: number, digits: number): number {
  const p = 10 ** digits;
  return Math.round(v * p) / p;
}
