import { availableParallelism, cpus } from "node:os";
import { loadModel } from "../gpu-backend/engine/load-model";
import type { WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { startCpuMeter } from "./kit/machine";
import { barChart } from "./kit/plot";
import { note } from "./kit/progress";
import { writeOut } from "./kit/report";
import { PENDING, speculationHook } from "./speculative-engine";
import { runLlamaCppSpeculation } from "./speculative-llamacpp";
import { runOurSpeculation } from "./speculative-ours";
import { figuresTable, summarizeSide, summaryJson, type RunRecord, type SideFigures, type TurnCheck } from "./speculative-report";
import { speculativeTurns, tokenTurns } from "./speculative-workload";
import { runCrossTrajectory } from "./speculative-cross";
import { crossJson, crossTable, summarizeCross } from "./speculative-cross-report";
import { crossTokenTurns, crossTurns } from "./speculative-cross-workload";
import type { Divergence } from "./speculative-divergence";

export interface SpeculativeBenchOptions {
  quick: boolean;
  /** Model (default "smollm2", the trained test model: acceptance needs a model that answers). */
  model: string | undefined;
  outDir: string;
  /** The engine's mode for "on" (default: the engine's first, its default). */
  mode?: string | undefined;
  /** One side only: ours or llama.cpp. */
  only?: "ours" | "llamacpp" | undefined;
  /** Threads for both engines (default every core). */
  threads?: number | undefined;
  /** Our weight precision (default the cpu default). */
  weights?: WeightPrecision | undefined;
  /** "cross-trajectory": the cross-trajectory phase only (ours); default every phase. */
  turns?: "all" | "cross-trajectory" | undefined;
}

const BATCHES = [1, 8] as const;

/**
 * `npm run bench -- speculative [--quick] [--json] [--model smollm2] [--speculative MODE] [--weights P] [--only ours|llamacpp] [--threads N] [--turns cross-trajectory]`
 *
 * Speculative decoding (issue 37) on agent turns that copy from their prompt (a tool call repeating
 * an id and a path, a file re-emitted with one edit, a JSON answer restating a record) and turns
 * that do not (free text), at batch 1 and 8, greedy: decode tokens/s with speculation off vs on in
 * the same process (off/on pairs, alternating order), acceptance, tokens per step, and whether the
 * outputs stayed token-for-token identical; then the same turns on llama.cpp (the same GGUF)
 * without and with its prompt lookup (speculative-llamacpp.ts). Which turns copy, and how much,
 * is measured on the model's own off output (`copied`).
 *
 * Then (ours, unless `--only llamacpp`) the cross-trajectory phase (speculative-cross.ts): a tenant's
 * recurring job whose next trajectory repeats what the tenant's earlier trajectories replied,
 * text its prompt does not hold, at batch 1 with lookup, with suffix and with suffix for another
 * tenant, each paired with off on one engine: `suffixOverLookup` is suffix's speedup over
 * lookup's there. `--turns cross-trajectory` runs that phase alone.
 *
 * Figures are ratios within one engine (on / off) and ours / llama.cpp per setting; the headline
 * (`copyTurnsSpeedup`, `freeTurnsSpeedup`, `acceptanceRate`, `outputsIdentical`) is ours at batch
 * 1. While the engine has no speculative option the "on" side is reported as pending (null
 * figures, `pending` says why).
 *
 * @example
 * const { summary } = await runSpeculativeBench({ quick: true, model: "smollm2", outDir: "bench/out" });
 */
export async function runSpeculativeBench(o: SpeculativeBenchOptions): Promise<{ summary: Record<string, unknown>; details: Record<string, unknown> }> {
  const log = (line: string) => note("speculative", line);
  const model = await loadModel({ dir: o.model ?? "smollm2", log });
  const crossOnly = o.turns === "cross-trajectory";
  const turns = crossOnly ? [] : tokenTurns(model, speculativeTurns(Math.max(...BATCHES)));
  const reps = o.quick ? 2 : 5;
  const hook = speculationHook();
  const mode = hook ? (o.mode ?? hook.modes[0]!) : "off";
  if (hook && !hook.modes.includes(mode)) throw new Error(`--speculative must be one of ${hook.modes.join(", ")}, got ${JSON.stringify(mode)}`);
  if (!hook) log(PENDING);
  log(`${model.spec.modelId}: ${turns.length} turn kinds x batch ${BATCHES.join(", ")}, ${reps} off/on pairs each`);
  const meter = startCpuMeter();

  const runs: RunRecord[] = [];
  const checks: TurnCheck[] = [];
  const divergences: Divergence[] = [];
  const setups: Record<string, string> = {};
  if (o.only !== "llamacpp" && !crossOnly) {
    const ours = await runOurSpeculation({ model, turns, batches: BATCHES, reps, speculation: hook ? { hook, mode } : null, threads: o.threads, weights: o.weights, log });
    runs.push(...ours.runs);
    checks.push(...ours.checks);
    divergences.push(...ours.divergences);
    setups.ours = ours.setup;
  }
  const ggufPath = model.checkpoint.ggufPath;
  if (o.only !== "ours" && !crossOnly && ggufPath) {
    const theirs = await runLlamaCppSpeculation({ ggufPath, threads: o.threads, turns, batches: BATCHES, reps, log });
    runs.push(...theirs.runs);
    checks.push(...theirs.checks);
    setups.llamacpp = theirs.setup;
  } else if (o.only !== "ours" && !crossOnly) log("llama.cpp not run: the model is not a GGUF file (use --model smollm2)");
  let cross: ReturnType<typeof summarizeCross> | null = null;
  let crossDetails: Record<string, unknown> | null = null;
  if (o.only !== "llamacpp" && hook) {
    // At least 3 rounds (a true median: with 2, one slow run sets the figure); the phase is short.
    const rounds = Math.max(3, reps);
    const c = await runCrossTrajectory({ model, turns: crossTokenTurns(model, crossTurns()), reps: rounds, threads: o.threads, weights: o.weights, log });
    cross = summarizeCross(c.runs, c.checks);
    crossDetails = { ...crossJson(cross, c.checks), rounds };
    setups.crossTrajectory = c.setup;
    process.stderr.write(`\n${crossTable(cross)}\n\n`);
    log(`cross-trajectory: suffix over lookup ${cross.suffixOverLookup}x; control tenant's tree drafts ${cross.treeDrafts.control} (suffix runs' ${cross.treeDrafts.suffix}); outputs ${cross.outputsIdentical ? "identical" : `differ in ${cross.mismatches.length} runs`}`);
  }
  const cpu = meter();
  if (cpu && cpu.otherCores > 0.1) log(`WARNING: other processes kept ${cpu.otherCores} cores busy during the run: absolute figures are low (the on/off ratios are paired)`);

  const ours = summarizeSide(runs, checks, "ours");
  const llamacpp = setups.llamacpp ? summarizeSide(runs, checks, "llamacpp") : null;
  const sides = [...(setups.ours ? [{ name: "ours", figures: ours }] : []), ...(llamacpp ? [{ name: "llama.cpp", figures: llamacpp }] : [])];
  if (!crossOnly) process.stderr.write(`\n${figuresTable(sides)}\n\n`);
  const mismatches = [...ours.mismatches, ...(llamacpp?.mismatches ?? [])];
  if (mismatches.length) log(`outputs differ: ${mismatches.slice(0, 5).join("; ")}${mismatches.length > 5 ? ` (${mismatches.length} in all)` : ""}`);
  const plots = crossOnly ? [] : writePlots(o.outDir, ours, llamacpp, mode);
  if (plots.length) log(`plots: ${plots.join(", ")}`);
  const summary = summaryJson({
    ours,
    llamacpp,
    pending: hook ? null : PENDING,
    mode,
    cross: cross && crossDetails ? { suffixOverLookup: cross.suffixOverLookup, details: crossDetails } : null,
    extra: { divergences, model: model.spec.modelId, quick: o.quick, reps, cpu: cpus()[0]?.model ?? "unknown", cores: availableParallelism(), cpuDuringRun: cpu, setups, plots },
  });
  return { summary, details: { ours, llamacpp, checks, runs: runs.map(({ outputs: _outputs, ...r }) => r), crossTrajectory: cross } };
}

/** Decode tokens/s per turn kind, off and on, ours and llama.cpp: one chart per batch size. */
function writePlots(outDir: string, ours: SideFigures, llamacpp: SideFigures | null, mode: string): string[] {
  return BATCHES.map((batch) => {
    const kinds = ours.kinds.filter((k) => k.batch === batch);
    const other = (kind: string) => llamacpp?.kinds.find((k) => k.batch === batch && k.kind === kind) ?? null;
    const series = [
      { name: "Agent Edge, speculation off", color: "#9ecae1", values: kinds.map((k) => k.offTokensPerS) },
      { name: `Agent Edge, speculation ${mode}`, color: "#1f77b4", values: kinds.map((k) => k.onTokensPerS) },
      ...(llamacpp
        ? [
            { name: "llama.cpp, lookup off", color: "#fc9272", values: kinds.map((k) => other(k.kind)?.offTokensPerS ?? null) },
            { name: "llama.cpp, input lookup on", color: "#d62728", values: kinds.map((k) => other(k.kind)?.onTokensPerS ?? null) },
          ]
        : []),
    ];
    const categories = kinds.map((k) => `${k.kind}: ${Math.round(k.copied * 100)}% copied`);
    return writeOut(outDir, `speculative-batch${batch}.svg`, barChart({ title: `Decode tokens/s per turn kind, batch ${batch}, speculation off vs on`, yLabel: batch === 1 ? "tokens/s" : "tokens/s (all 8 requests)", categories, series, width: 900 }));
  });
}
