import { appendFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { everyRow, type StepSequence } from "../model/executors/executor";
import { PrefillGroupCost } from "../scheduler/prefill-group-cost";

/**
 * One engine step as a cost model sees it: what the step computed (rows through the linear
 * layers, sampled rows through the LM head, attention work) and what it took (wall and process
 * CPU time). `npm run backend -- --step-trace DIR` writes one JSON line per step to
 * `DIR/<backend id>.jsonl`; `npm run bench -- step-costs DIR` fits where the time went.
 */
export interface StepRecord {
  /** Epoch ms when the step ended. */
  at: number;
  wallMs: number;
  /** Process CPU time during the step, all threads (onnxruntime's and the server's). */
  cpuMs: number;
  /** Sequences with one new token (decoding). */
  decodeRows: number;
  /** New tokens of the sequences with more than one (prefill chunks). */
  prefillRows: number;
  prefillSequences: number;
  /** Rows whose logits the step computes (sampled tokens: one per sequence that samples). */
  logitRows: number;
  /** Keys the decode rows attend to: the sum of their sequences' context lengths. */
  decodeContext: number;
  /** Score entries of the prefill chunks, each attending alone: sum of n x (context + n). */
  prefillScores: number;
  /**
   * Score entries the cpu executor's prefill layout computes on top (`prefillBundles`: masked
   * columns of the other chunks, or padding).
   */
  extraScores: number;
}

/**
 * The record of one step from the sequences it ran.
 *
 * @example
 * stepRecord([{ tokenIds: [7], startPos: 100, blockTable: [], logits: "argmax" },
 *             { tokenIds: [1, 2, 3], startPos: 10, blockTable: [], logits: "argmax" }], { at: 0, wallMs: 30, cpuMs: 29 })
 * // { ..., decodeRows: 1, prefillRows: 3, prefillSequences: 1, logitRows: 2, decodeContext: 100,
 * //   prefillScores: 39, extraScores: 0 }
 */
export function stepRecord(steps: readonly StepSequence[], timing: { at: number; wallMs: number; cpuMs: number }): StepRecord {
  let decodeRows = 0;
  let decodeContext = 0;
  let prefillRows = 0;
  let prefillSequences = 0;
  let logitRows = 0;
  const prefill = new PrefillGroupCost(Infinity); // the scheduler's count of the layout
  for (const s of steps) {
    const n = s.tokenIds.length;
    if (everyRow(s.logits)) logitRows += n;
    else if (s.logits !== "none") logitRows += 1;
    if (n === 1 || s.verify) {
      decodeRows += n; // a verify run's rows are attended like decode rows (executor.ts `verify`)
      decodeContext += n * s.startPos;
    } else {
      prefillRows += n;
      prefillSequences += 1;
      prefill.add(s.startPos, n);
    }
  }
  return { ...timing, decodeRows, prefillRows, prefillSequences, logitRows, decodeContext, prefillScores: prefill.scores, extraScores: prefill.extraScores };
}

/**
 * Appends step records to `dir/<name>.jsonl`, a buffer of lines at a time (one write per 64
 * steps and at `flush`), so tracing costs the step loop almost nothing.
 *
 * @example
 * const trace = new StepTraceFile(dir, "backend-8080");
 * engine = createEngine({ ..., onStep: (r) => trace.add(r) });
 * process.on("exit", () => trace.flush());
 */
export class StepTraceFile {
  readonly path: string;
  private lines: string[] = [];

  constructor(dir: string, name: string) {
    mkdirSync(dir, { recursive: true });
    this.path = join(dir, `${name}.jsonl`);
  }

  add(record: StepRecord): void {
    this.lines.push(JSON.stringify(record));
    if (this.lines.length >= 64) this.flush();
  }

  flush(): void {
    if (this.lines.length === 0) return;
    appendFileSync(this.path, `${this.lines.join("\n")}\n`);
    this.lines = [];
  }
}
