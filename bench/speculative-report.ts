import type { TurnClass } from "./speculative-workload";
import { mean, median, round, sum, table } from "./kit/report";

/**
 * The figures of `npm run bench -- speculative` from its measured runs (pure: no model, no clock):
 * decode tokens/s off vs on per turn kind, speedups per class of turn (copy, free) at batch 1 and
 * 8, acceptance, tokens per step, whether outputs stayed identical, and the table and summary the
 * bench prints.
 *
 * @example
 * const s = summarize(runs, checks);
 * s.ours.batch1.copy.speedup; // on / off decode tokens/s over the copying turns
 */

/** Who decoded: our engine, or llama.cpp (node-llama-cpp) on the same GGUF. */
export type Side = "ours" | "llamacpp";
/** Speculation off, or on (ours: the engine's `--speculative` mode; llama.cpp: its input-lookup predictor). */
export type Setting = "off" | "on";

/** One measured run: one turn kind at one batch size (every request at once), one setting. */
export interface RunRecord {
  side: Side;
  kind: string;
  class: TurnClass;
  batch: number;
  setting: Setting;
  rep: number;
  /** Tokens generated after each request's first, summed over the batch's requests. */
  decodeTokens: number;
  /** The decode window, ms: from the first request's first token to the last request's last. */
  decodeMs: number;
  /** Draft tokens verified and, of those, accepted, summed over the requests (0 off). */
  drafted: number;
  accepted: number;
  /** Each request's generated token ids, in variant order. */
  outputs: number[][];
}

/** What a turn kind's reference outputs (speculation off) copy from their prompts. */
export interface TurnCheck {
  side: Side;
  kind: string;
  class: TurnClass;
  batch: number;
  /** Per request: copiedFraction of its output (tokens in spans of >= 4 found in the prompt). */
  copied: number[];
  /** Per request: generated tokens. */
  tokens: number[];
}

/** Off vs on over a set of runs. */
export interface Comparison {
  offTokensPerS: number;
  onTokensPerS: number | null;
  /** on / off. */
  speedup: number | null;
  /** accepted / drafted. */
  acceptanceRate: number | null;
  /** Tokens a sequence gained per decode step (1 without speculation): decode tokens / (decode tokens - accepted). */
  tokensPerStep: number | null;
}

export interface KindFigures extends Comparison {
  kind: string;
  class: TurnClass;
  batch: number;
  /** Mean copied fraction of the reference outputs. */
  copied: number;
  /** Mean generated tokens per request. */
  tokens: number;
}

export interface SideFigures {
  kinds: KindFigures[];
  batch1: Record<TurnClass, Comparison>;
  batch8: Record<TurnClass, Comparison>;
  /** Every run's outputs equal the first off run's, for every kind and batch (null: nothing ran on). */
  outputsIdentical: boolean | null;
  /** Where they differed: kind, batch, setting, rep, request. */
  mismatches: string[];
  /**
   * Without speculation, request 0's reply at batch 8 equals its reply at batch 1, for every kind
   * (null: one batch size not run): whether the engine's greedy outputs depend on the batch at all.
   */
  offBatchInvariant: boolean | null;
}

/**
 * Per turn kind: decode tokens/s as the median over reps of each run's tokens/s; per class: the
 * class's decode tokens over the sum of its kinds' median decode ms, on / off.
 */
export function summarizeSide(runs: readonly RunRecord[], checks: readonly TurnCheck[], side: Side): SideFigures {
  const mine = runs.filter((r) => r.side === side);
  const kinds: KindFigures[] = [];
  for (const check of checks.filter((c) => c.side === side)) {
    const of = (setting: Setting) => mine.filter((r) => r.kind === check.kind && r.batch === check.batch && r.setting === setting);
    kinds.push({ kind: check.kind, class: check.class, batch: check.batch, copied: round(mean(check.copied), 2), tokens: round(mean(check.tokens), 1), ...compare(of("off"), of("on")) });
  }
  const byClass = (batch: number) => {
    const at = (cls: TurnClass) => {
      const sel = (setting: Setting) => mine.filter((r) => r.batch === batch && r.class === cls && r.setting === setting);
      return compare(sel("off"), sel("on"));
    };
    return { copy: at("copy"), free: at("free") };
  };
  const { identical, mismatches } = compareOutputs(mine);
  return { kinds, batch1: byClass(1), batch8: byClass(8), outputsIdentical: mine.some((r) => r.setting === "on") ? identical : null, mismatches, offBatchInvariant: batchInvariant(mine) };
}

/** Whether each kind's first off run gives request 0 the same reply at batch 1 and at batch 8 (null: either missing). */
export function batchInvariant(runs: readonly RunRecord[]): boolean | null {
  const first = (kind: string, batch: number) => runs.find((r) => r.kind === kind && r.batch === batch && r.setting === "off")?.outputs[0];
  const kinds = [...new Set(runs.map((r) => r.kind))];
  const pairs = kinds.map((k) => [first(k, 1), first(k, 8)] as const);
  if (pairs.length === 0 || pairs.some(([a, b]) => !a || !b)) return null;
  return pairs.every(([a, b]) => a!.length === b!.length && a!.every((t, i) => t === b![i]));
}

/** Off vs on over runs of one or more kinds: throughput from each kind's median decode ms. */
export function compare(off: readonly RunRecord[], on: readonly RunRecord[]): Comparison {
  const throughput = (rs: readonly RunRecord[]) => {
    const kinds = groupBy(rs, (r) => `${r.kind}/${r.batch}`);
    const tokens = sum([...kinds.values()].map((g) => median(g.map((r) => r.decodeTokens))));
    const ms = sum([...kinds.values()].map((g) => median(g.map((r) => r.decodeMs))));
    return ms > 0 ? (tokens / ms) * 1000 : 0;
  };
  const offTps = throughput(off);
  if (on.length === 0) return { offTokensPerS: round(offTps, 1), onTokensPerS: null, speedup: null, acceptanceRate: null, tokensPerStep: null };
  const onTps = throughput(on);
  const drafted = sum(on.map((r) => r.drafted));
  const accepted = sum(on.map((r) => r.accepted));
  const decoded = sum(on.map((r) => r.decodeTokens));
  return {
    offTokensPerS: round(offTps, 1),
    onTokensPerS: round(onTps, 1),
    speedup: offTps > 0 ? round(onTps / offTps, 3) : null,
    acceptanceRate: drafted > 0 ? round(accepted / drafted, 3) : 0,
    tokensPerStep: decoded > accepted ? round(decoded / (decoded - accepted), 3) : null,
  };
}

/** Every run's outputs against the first off run of its kind and batch. */
export function compareOutputs(runs: readonly RunRecord[]): { identical: boolean; mismatches: string[] } {
  const mismatches: string[] = [];
  for (const group of groupBy(runs, (r) => `${r.kind}/${r.batch}`).values()) {
    const ref = group.find((r) => r.setting === "off");
    if (!ref) continue;
    for (const r of group) {
      r.outputs.forEach((ids, i) => {
        const want = ref.outputs[i];
        if (!want || want.length !== ids.length || want.some((t, j) => t !== ids[j])) mismatches.push(`${r.kind} batch ${r.batch} ${r.setting} rep ${r.rep} request ${i}: first difference at token ${firstDifference(want ?? [], ids)}`);
      });
    }
  }
  return { identical: mismatches.length === 0, mismatches };
}

function firstDifference(a: readonly number[], b: readonly number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

function groupBy<T>(xs: readonly T[], key: (x: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const x of xs) {
    const k = key(x);
    const g = out.get(k);
    if (g) g.push(x);
    else out.set(k, [x]);
  }
  return out;
}

/** The targets at batch 1: >= 1.8x on the copying turns, >= 0.97x on free text. */
export const TARGETS = { copyTurnsSpeedup: 1.8, freeTurnsSpeedup: 0.97 } as const;

/** Whether a speedup meets its target (null while it was not measured). */
export function meets(speedup: number | null, target: number): boolean | null {
  return speedup === null ? null : speedup >= target;
}

/** The cross-trajectory phase in the summary (speculative-cross-report.ts): suffix's speedup over lookup's, and its figures. */
export interface CrossSummary {
  suffixOverLookup: number | null;
  details: Record<string, unknown>;
}

/**
 * The summary `--json` prints as its last line: the headline figures (ours, batch 1), the same at
 * batch 8, llama.cpp's, ours against llama.cpp with and without speculation, the targets; with
 * the cross-trajectory phase, `suffixOverLookup` (null without it) and `crossTrajectory`.
 */
export function summaryJson(o: { ours: SideFigures; llamacpp: SideFigures | null; pending: string | null; mode: string; cross?: CrossSummary | null; extra: Record<string, unknown> }): Record<string, unknown> {
  const { ours, llamacpp } = o;
  const side = (s: SideFigures) => ({
    copyTurnsSpeedup: s.batch1.copy.speedup,
    freeTurnsSpeedup: s.batch1.free.speedup,
    acceptanceRate: s.batch1.copy.acceptanceRate,
    tokensPerStep: s.batch1.copy.tokensPerStep,
    outputsIdentical: s.outputsIdentical,
    outputMismatches: s.mismatches.length,
    offBatchInvariant: s.offBatchInvariant,
    batch1: s.batch1,
    batch8: s.batch8,
  });
  const vs = (cls: TurnClass, batch: 1 | 8, setting: "offTokensPerS" | "onTokensPerS") => {
    const a = ours[batch === 1 ? "batch1" : "batch8"][cls][setting];
    const b = llamacpp?.[batch === 1 ? "batch1" : "batch8"][cls][setting];
    return a && b ? round(a / b, 2) : null;
  };
  return {
    ...side(ours),
    speculativeMode: o.mode,
    suffixOverLookup: o.cross?.suffixOverLookup ?? null,
    pending: o.pending,
    targets: {
      copyTurnsSpeedup: { target: TARGETS.copyTurnsSpeedup, met: meets(ours.batch1.copy.speedup, TARGETS.copyTurnsSpeedup) },
      freeTurnsSpeedup: { target: TARGETS.freeTurnsSpeedup, met: meets(ours.batch1.free.speedup, TARGETS.freeTurnsSpeedup) },
    },
    llamaCpp: llamacpp ? side(llamacpp) : null,
    oursOverLlamaCpp: llamacpp
      ? Object.fromEntries(
          (["copy", "free"] as const).flatMap((cls) => [1, 8].map((b) => [`${cls}Batch${b}`, { off: vs(cls, b as 1 | 8, "offTokensPerS"), on: vs(cls, b as 1 | 8, "onTokensPerS") }])),
        )
      : null,
    turns: ours.kinds.map((k) => ({ kind: k.kind, class: k.class, batch: k.batch, copied: k.copied, tokens: k.tokens, speedup: k.speedup, acceptanceRate: k.acceptanceRate })),
    crossTrajectory: o.cross?.details ?? null,
    ...o.extra,
  };
}

/** The human table: one row per side, batch and turn kind. */
export function figuresTable(sides: { name: string; figures: SideFigures }[]): string {
  const cell = (x: number | null) => (x === null ? "-" : String(x));
  const rows = sides.flatMap(({ name, figures }) =>
    figures.kinds.map((k) => [name, k.batch, k.kind, k.class, k.copied, k.tokens, k.offTokensPerS, cell(k.onTokensPerS), cell(k.speedup), cell(k.acceptanceRate), cell(k.tokensPerStep)]),
  );
  return table(["engine", "batch", "turn", "class", "copied", "tokens", "off tok/s", "on tok/s", "on/off", "accepted", "tok/step"], rows);
}
