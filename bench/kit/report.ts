import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export { percentile } from "../../durable-objects/trajectory/lease-policy";

/**
 * The benchmarks' report helpers: rounding, means and medians, counts, a tab-separated table for
 * stderr, and an output file written under the run's `--out` folder.
 *
 * @example note("agent", table(["turn", "ttft ms"], rows.map((r) => [r.turn, round(r.ttftMs, 1)])));
 */

/** `v` rounded to `digits` decimal places. */
export function round(v: number, digits: number): number {
  const p = 10 ** digits;
  return Math.round(v * p) / p;
}

export function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

/** The mean (0 for no values). */
export function mean(xs: readonly number[]): number {
  return sum(xs) / Math.max(1, xs.length);
}

/** The upper median (the middle value, or the higher of the two middle ones). */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}

/** How often each value occurs. */
export function countBy(xs: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}

/** Rows as tab-separated lines under a header line. */
export function table(head: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  return [head, ...rows].map((r) => r.join("\t")).join("\n");
}

/** Writes `text` to `<outDir>/<name>` (the folder made first); answers the path. */
export function writeOut(outDir: string, name: string, text: string): string {
  mkdirSync(outDir, { recursive: true });
  const path = join(outDir, name);
  writeFileSync(path, text);
  return path;
}
