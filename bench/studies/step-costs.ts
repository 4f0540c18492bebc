import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { StepRecord } from "../../gpu-backend/engine/step-trace";

/**
 * `npm run bench -- step-costs DIR [--json]`: where the engine steps' CPU time went, from the
 * step traces that backends write with `--step-trace DIR` (the routing benchmark passes it with
 * its own `--step-trace DIR`, and writes `DIR/windows.json`: each policy's run, start to end).
 *
 * One linear cost model is fitted (least squares) over every traced step of every backend:
 *
 *   cpuMs = perStep + perRow x rows + perLogitRow x logitRows + perDecodeKey x decodeContext
 *           + perScore x prefillScores + perExtraScore x extraScores
 *
 * then each window's steps are split by term: how many core-seconds went to each kind of work.
 * "perStep" is what every step costs whatever it computes (on the CPU executor: streaming the
 * weights, the LM head included, through the cache once), the rest scale with the step's work.
 */

export const COST_TERMS = ["perStep", "perRow", "perLogitRow", "perDecodeKey", "perScore", "perExtraScore"] as const;
export type CostTerm = (typeof COST_TERMS)[number];

/** The model's inputs of one step, in COST_TERMS order. */
export function costFeatures(r: StepRecord): number[] {
  return [1, r.decodeRows + r.prefillRows, r.logitRows, r.decodeContext, r.prefillScores, r.extraScores];
}

/**
 * Least squares: the x minimizing |A x - y|, by the normal equations with partial pivoting.
 * Columns that are all zero (a term no step exercised) get 0.
 *
 * @example leastSquares([[1, 0], [1, 1], [1, 2]], [1, 3, 5]) // [1, 2]
 */
export function leastSquares(a: readonly number[][], y: readonly number[]): number[] {
  const k = a[0]?.length ?? 0;
  // Scale columns to unit max, so the normal equations stay well conditioned (a reduce, not
  // Math.max(...): a long trace has more steps than a call takes arguments).
  const colMax = Array.from({ length: k }, (_, j) => a.reduce((m, row) => Math.max(m, Math.abs(row[j]!)), 0));
  const cols = colMax.flatMap((m, j) => (m > 0 ? [j] : []));
  const scale = cols.map((j) => colMax[j]!);
  const n = cols.length;
  const m = Array.from({ length: n }, () => new Array<number>(n + 1).fill(0));
  for (let i = 0; i < a.length; i++) {
    const row = cols.map((j, c) => a[i]![j]! / scale[c]!);
    for (let p = 0; p < n; p++) {
      for (let q = 0; q < n; q++) m[p]![q]! += row[p]! * row[q]!;
      m[p]![n]! += row[p]! * y[i]!;
    }
  }
  for (let p = 0; p < n; p++) {
    let best = p;
    for (let r = p + 1; r < n; r++) if (Math.abs(m[r]![p]!) > Math.abs(m[best]![p]!)) best = r;
    [m[p], m[best]] = [m[best]!, m[p]!];
    const pivot = m[p]![p]!;
    if (Math.abs(pivot) < 1e-12) continue;
    for (let r = 0; r < n; r++) {
      if (r === p) continue;
      const f = m[r]![p]! / pivot;
      for (let c = p; c <= n; c++) m[r]![c]! -= f * m[p]![c]!;
    }
  }
  const x = new Array<number>(k).fill(0);
  cols.forEach((j, c) => {
    const pivot = m[c]![c]!;
    x[j] = Math.abs(pivot) < 1e-12 ? 0 : m[c]![n]! / pivot / scale[c]!;
  });
  return x;
}

export interface CostFit {
  /** ms per unit of each term. */
  coefficients: Record<CostTerm, number>;
  /** Fraction of the steps' CPU-time variance the model explains. */
  r2: number;
  steps: number;
}

/** Fits the cost model to steps (their `cpuMs`). */
export function fitStepCosts(records: readonly StepRecord[]): CostFit {
  const a = records.map(costFeatures);
  const y = records.map((r) => r.cpuMs);
  const x = leastSquares(a, y);
  const mean = y.reduce((s, v) => s + v, 0) / Math.max(1, y.length);
  let ssRes = 0;
  let ssTot = 0;
  a.forEach((row, i) => {
    const pred = row.reduce((s, v, j) => s + v * x[j]!, 0);
    ssRes += (y[i]! - pred) ** 2;
    ssTot += (y[i]! - mean) ** 2;
  });
  return { coefficients: Object.fromEntries(COST_TERMS.map((t, j) => [t, x[j]!])) as Record<CostTerm, number>, r2: ssTot > 0 ? 1 - ssRes / ssTot : 1, steps: records.length };
}

/** Core-seconds of the steps by term under a fit, next to their measured CPU seconds. */
export function splitByTerm(records: readonly StepRecord[], fit: CostFit): { steps: number; cpuS: number; byTermS: Record<CostTerm, number> } {
  const byTermS = Object.fromEntries(COST_TERMS.map((t) => [t, 0])) as Record<CostTerm, number>;
  let cpuMs = 0;
  for (const r of records) {
    cpuMs += r.cpuMs;
    costFeatures(r).forEach((v, j) => (byTermS[COST_TERMS[j]!] += (v * fit.coefficients[COST_TERMS[j]!]) / 1000));
  }
  return { steps: records.length, cpuS: cpuMs / 1000, byTermS };
}

/** A named time span (epoch ms) whose steps are reported together. */
export interface TraceWindow {
  name: string;
  fromMs: number;
  toMs: number;
}

/** Reads every `*.jsonl` step trace in `dir` and its `windows.json` (absent: one window, "all"). */
export function readStepTraces(dir: string): { records: StepRecord[]; windows: TraceWindow[] } {
  const records: StepRecord[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort()) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) if (line.trim()) records.push(JSON.parse(line) as StepRecord);
  }
  const windowsPath = join(dir, "windows.json");
  const windows = existsSync(windowsPath) ? (JSON.parse(readFileSync(windowsPath, "utf8")) as TraceWindow[]) : [{ name: "all", fromMs: -Infinity, toMs: Infinity }];
  return { records, windows };
}

export function runStepCosts(args: string[]): Record<string, unknown> {
  const dir = args.find((a) => !a.startsWith("--"));
  if (!dir) throw new Error("usage: npm run bench -- step-costs DIR [--json]   (DIR: the --step-trace folder)");
  const { records, windows } = readStepTraces(dir);
  if (records.length < COST_TERMS.length) throw new Error(`${dir} holds ${records.length} step records: too few to fit ${COST_TERMS.length} terms`);
  const fit = fitStepCosts(records);
  const perWindow = Object.fromEntries(windows.map((w) => [w.name, splitByTerm(records.filter((r) => r.at >= w.fromMs && r.at <= w.toMs), fit)]));
  const units: Record<CostTerm, string> = { perStep: "ms", perRow: "ms", perLogitRow: "ms", perDecodeKey: "us", perScore: "us", perExtraScore: "us" };
  const shown = (t: CostTerm) => (units[t] === "us" ? fit.coefficients[t] * 1000 : fit.coefficients[t]);
  process.stderr.write(
    `step costs (${fit.steps} steps, R^2 ${fit.r2.toFixed(3)}): ${COST_TERMS.map((t) => `${t} ${shown(t).toPrecision(3)} ${units[t]}`).join(", ")}\n` +
      `| window | steps | step CPU s | ${COST_TERMS.join(" | ")} |\n|---|---:|---:|${COST_TERMS.map(() => "---:").join("|")}|\n` +
      Object.entries(perWindow)
        .map(([name, w]) => `| ${name} | ${w.steps} | ${w.cpuS.toFixed(1)} | ${COST_TERMS.map((t) => w.byTermS[t].toFixed(1)).join(" | ")} |`)
        .join("\n") +
      "\n",
  );
  return { fit, perWindow };
}
