import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { StepRecord } from "../../gpu-backend/engine/step-trace";
import { COST_TERMS, fitStepCosts, leastSquares, readStepTraces, splitByTerm } from "./step-costs";
import { mulberry32 } from "../../protocol/random";

describe("leastSquares", () => {
  it("takes more rows than a function call takes arguments (a long trace)", () => {
    const a = Array.from({ length: 300_000 }, (_, i) => [1, i % 100]);
    const x = leastSquares(a, a.map(([, v]) => 2 + 3 * v!));
    expect(x[0]).toBeCloseTo(2, 6);
    expect(x[1]).toBeCloseTo(3, 6);
  });

  it("solves an exact system and gives 0 to a column no row uses", () => {
    expect(leastSquares([[1, 0, 0], [1, 1, 0], [1, 2, 0]], [1, 3, 5]).map((v) => Number(v.toFixed(9)))).toEqual([1, 2, 0]);
  });
});

describe("fitStepCosts", () => {
  // Synthetic steps whose CPU time follows known per-term costs (plus a little noise).
  const truth = { perStep: 28, perRow: 0.4, perLogitRow: 3, perDecodeKey: 0.0015, perScore: 0.00023, perExtraScore: 0.0005 };
  const rand = mulberry32(5);
  const records: StepRecord[] = Array.from({ length: 400 }, (_, i) => {
    const decodeRows = Math.floor(rand() * 8);
    const prefillSequences = rand() < 0.6 ? 1 + Math.floor(rand() * 2) : 0;
    const prefillRows = prefillSequences * (2 + Math.floor(rand() * 250));
    const logitRows = decodeRows + prefillSequences;
    const decodeContext = decodeRows * (200 + Math.floor(rand() * 2500));
    const prefillScores = prefillRows * (100 + Math.floor(rand() * 2500));
    const extraScores = prefillSequences > 1 ? Math.floor(rand() * 300_000) : 0;
    const r = { at: i, wallMs: 0, cpuMs: 0, decodeRows, prefillRows, prefillSequences, logitRows, decodeContext, prefillScores, extraScores };
    const cost =
      truth.perStep + truth.perRow * (decodeRows + prefillRows) + truth.perLogitRow * logitRows + truth.perDecodeKey * decodeContext + truth.perScore * prefillScores + truth.perExtraScore * extraScores;
    return { ...r, cpuMs: cost * (1 + (rand() - 0.5) * 0.02) };
  });

  it("recovers the per-term costs the steps were made with", () => {
    const fit = fitStepCosts(records);
    for (const t of COST_TERMS) {
      expect(fit.coefficients[t] / truth[t], t).toBeGreaterThan(0.9);
      expect(fit.coefficients[t] / truth[t], t).toBeLessThan(1.1);
    }
    expect(fit.r2).toBeGreaterThan(0.99);
    expect(fit.steps).toBe(400);
  });

  it("splits the steps' time by term, the terms adding up to the measured time", () => {
    const fit = fitStepCosts(records);
    const split = splitByTerm(records, fit);
    const sum = Object.values(split.byTermS).reduce((a, b) => a + b, 0);
    expect(Math.abs(sum - split.cpuS) / split.cpuS).toBeLessThan(0.01);
    expect(split.byTermS.perStep).toBeCloseTo((400 * fit.coefficients.perStep) / 1000, 6);
  });

  it("reads a trace folder: every backend's lines, and the windows file", () => {
    const dir = mkdtempSync(join(tmpdir(), "step-costs-"));
    try {
      writeFileSync(join(dir, "backend-1.jsonl"), `${records.slice(0, 3).map((r) => JSON.stringify(r)).join("\n")}\n`);
      writeFileSync(join(dir, "backend-2.jsonl"), `${JSON.stringify(records[3])}\n`);
      expect(readStepTraces(dir).windows).toEqual([{ name: "all", fromMs: -Infinity, toMs: Infinity }]);
      writeFileSync(join(dir, "windows.json"), JSON.stringify([{ name: "affinity", fromMs: 0, toMs: 1 }]));
      const { records: read, windows } = readStepTraces(dir);
      expect(read).toHaveLength(4);
      expect(windows).toEqual([{ name: "affinity", fromMs: 0, toMs: 1 }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
