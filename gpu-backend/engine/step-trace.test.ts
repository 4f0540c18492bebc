import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { StepSequence } from "../model/executors/executor";
import { StepTraceFile, stepRecord } from "./step-trace";

const seq = (n: number, startPos: number, logits: StepSequence["logits"] = "argmax"): StepSequence => ({ tokenIds: new Array(n).fill(7), startPos, blockTable: [], logits });
const timing = { at: 1, wallMs: 2, cpuMs: 3 };

describe("stepRecord", () => {
  it.each([
    { name: "one decode row", steps: [seq(1, 100)], want: { decodeRows: 1, prefillRows: 0, prefillSequences: 0, logitRows: 1, decodeContext: 100, prefillScores: 0, extraScores: 0 } },
    { name: "a middle prefill chunk samples nothing", steps: [seq(16, 32, "none")], want: { decodeRows: 0, prefillRows: 16, prefillSequences: 1, logitRows: 0, decodeContext: 0, prefillScores: 16 * 48, extraScores: 0 } },
    {
      // Alone: 4 x 14 + 2 x 22 = 100; in one bundle (6 x (10 + 20 + 6) = 216) or apart, padded
      // (2 x 4 x (20 + 4) = 192): apart, 92 on top.
      name: "two prefill chunks and two decode rows",
      steps: [seq(4, 10), seq(1, 50), seq(2, 20, "all"), seq(1, 60, "last")],
      want: { decodeRows: 2, prefillRows: 6, prefillSequences: 2, logitRows: 1 + 1 + 2 + 1, decodeContext: 110, prefillScores: 100, extraScores: 92 },
    },
  ])("$name", ({ steps, want }) => {
    expect(stepRecord(steps, timing)).toEqual({ ...timing, ...want });
  });
});

describe("StepTraceFile", () => {
  it("writes one JSON line per record to DIR/<name>.jsonl, buffered until flush", () => {
    const dir = mkdtempSync(join(tmpdir(), "step-trace-"));
    try {
      const trace = new StepTraceFile(join(dir, "nested"), "backend-1");
      const r = stepRecord([seq(1, 5)], timing);
      for (let i = 0; i < 70; i++) trace.add({ ...r, at: i });
      // 64 lines went out at the 64th record; 6 wait for flush.
      expect(readFileSync(trace.path, "utf8").trim().split("\n")).toHaveLength(64);
      trace.flush();
      const lines = readFileSync(trace.path, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { at: number });
      expect(lines.map((l) => l.at)).toEqual(Array.from({ length: 70 }, (_, i) => i));
      expect(trace.path).toBe(join(dir, "nested", "backend-1.jsonl"));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
