/**
 * This machine's memory copy bandwidth from one thread, for the physical-limit rows of the
 * benchmarks: bytes read + written per second copying a 256 MiB buffer (far beyond any cache),
 * best of 5 after one warm-up copy. Reading alone streams at about this rate here (the fp32 demo
 * model decodes at ~0.8 of it), so a decode step that reads W weight bytes takes at least about
 * W / this seconds.
 *
 * @example
 * const bytesPerS = memoryBandwidth((line) => console.error(line));
 */
export function memoryBandwidth(log: (line: string) => void = () => {}): number {
  const bytes = 256 * 2 ** 20;
  const src = new Float64Array(bytes / 8).fill(1);
  const dst = new Float64Array(bytes / 8);
  dst.set(src);
  let best = Infinity;
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    dst.set(src);
    best = Math.min(best, performance.now() - t0);
  }
  const bytesPerS = ((2 * bytes) / best) * 1000;
  log(`memory copy bandwidth ${(bytesPerS / 1e9).toFixed(1)} GB/s (read + written, one thread)`);
  return bytesPerS;
}
