import { mean, round, sum, table } from "./kit/report";
import { compare, type Comparison, type RunRecord } from "./speculative-report";

/**
 * The figures of the speculative bench's cross-trajectory phase (pure: no model, no clock): per
 * kind and over all kinds, decode speed with `lookup`, with `suffix` and with `suffix` for
 * another tenant (the control), each against the off runs of the same kind; `suffixOverLookup`,
 * the ratio of suffix's speedup to lookup's; whether the control tenant got any draft from the
 * tree; whether outputs stayed identical.
 *
 * @example
 * const f = summarizeCross(runs, checks);
 * f.suffixOverLookup; // 1.4: suffix decodes 1.4x as fast as lookup on these turns
 */

/** off: opted out; lookup / suffix: the tenant whose earlier trajectories the tree holds; control: suffix, a tenant without any. */
export type CrossMode = "off" | "lookup" | "suffix" | "control";
export const CROSS_MODES: readonly CrossMode[] = ["off", "lookup", "suffix", "control"];

/** One measured cross-trajectory run (batch 1). */
export interface CrossRun {
  kind: string;
  mode: CrossMode;
  rep: number;
  /** Tokens generated after the first. */
  decodeTokens: number;
  /** From the first token to the last, ms. */
  decodeMs: number;
  drafted: number;
  accepted: number;
  /** Drafts the tenant tree proposed to this run (0 for lookup and off: the tree is not asked). */
  treeDrafts: number;
  /** The generated token ids (one request). */
  outputs: number[][];
}

/** What a kind's reference reply (off) copies: from its prompt, and from the tenant's earlier replies only. */
export interface CrossCheck {
  kind: string;
  /** copiedFraction against the prompt (what lookup can find there). */
  copiedPrompt: number;
  /** crossCopiedFraction: in the earlier replies, not in the prompt nor earlier in the reply. */
  copiedEarlier: number;
  tokens: number;
  /** Earlier replies the tenant's tree learned, and their tokens. */
  earlierReplies: number;
  earlierTokens: number;
}

export interface CrossKindFigures {
  kind: string;
  copiedPrompt: number;
  copiedEarlier: number;
  tokens: number;
  lookup: Comparison;
  suffix: Comparison;
  control: Comparison;
  suffixOverLookup: number | null;
}

export interface CrossFigures {
  kinds: CrossKindFigures[];
  lookup: Comparison;
  suffix: Comparison;
  control: Comparison;
  /** suffix's speedup / lookup's over all kinds (null: either missing). */
  suffixOverLookup: number | null;
  /** Tree drafts proposed: to the tenant's suffix runs, to the control tenant's (0: no cross-tenant drafts). */
  treeDrafts: { suffix: number; control: number };
  /** The control tenant got no draft from the tree (null: no control run). */
  controlIsolated: boolean | null;
  outputsIdentical: boolean;
  mismatches: string[];
}

/** A cross run as the main report's record (batch 1, "on" for every speculating mode), for `compare`. */
function asRun(r: CrossRun): RunRecord {
  return { side: "ours", kind: r.kind, class: "copy", batch: 1, setting: r.mode === "off" ? "off" : "on", rep: r.rep, decodeTokens: r.decodeTokens, decodeMs: r.decodeMs, drafted: r.drafted, accepted: r.accepted, outputs: r.outputs };
}

/** Speedup ratio a / b (null where either is missing). */
export function ratio(a: number | null, b: number | null): number | null {
  return a !== null && b !== null && b > 0 ? round(a / b, 3) : null;
}

/** Per kind and over all kinds: each speculating mode against the off runs (medians over reps, as `compare`). */
export function summarizeCross(runs: readonly CrossRun[], checks: readonly CrossCheck[]): CrossFigures {
  const of = (mode: CrossMode, kind?: string) => runs.filter((r) => r.mode === mode && (kind === undefined || r.kind === kind)).map(asRun);
  const vs = (mode: Exclude<CrossMode, "off">, kind?: string) => compare(of("off", kind), of(mode, kind));
  const kinds = checks.map((c): CrossKindFigures => {
    const lookup = vs("lookup", c.kind);
    const suffix = vs("suffix", c.kind);
    return { kind: c.kind, copiedPrompt: round(c.copiedPrompt, 2), copiedEarlier: round(c.copiedEarlier, 2), tokens: c.tokens, lookup, suffix, control: vs("control", c.kind), suffixOverLookup: ratio(suffix.speedup, lookup.speedup) };
  });
  const lookup = vs("lookup");
  const suffix = vs("suffix");
  const treeDrafts = { suffix: sum(runs.filter((r) => r.mode === "suffix").map((r) => r.treeDrafts)), control: sum(runs.filter((r) => r.mode === "control").map((r) => r.treeDrafts)) };
  const mismatches: string[] = [];
  for (const r of runs) {
    const ref = runs.find((x) => x.kind === r.kind && x.mode === "off");
    r.outputs.forEach((ids, i) => {
      const want = ref?.outputs[i];
      if (want && (want.length !== ids.length || want.some((t, j) => t !== ids[j]))) mismatches.push(`${r.kind} ${r.mode} rep ${r.rep}`);
    });
  }
  return {
    kinds,
    lookup,
    suffix,
    control: vs("control"),
    suffixOverLookup: ratio(suffix.speedup, lookup.speedup),
    treeDrafts,
    controlIsolated: runs.some((r) => r.mode === "control") ? treeDrafts.control === 0 : null,
    outputsIdentical: mismatches.length === 0,
    mismatches,
  };
}

/** The `--json` summary's `crossTrajectory` object (the per-kind figures flattened). */
export function crossJson(f: CrossFigures, checks: readonly CrossCheck[]): Record<string, unknown> {
  const brief = (c: Comparison) => ({ speedup: c.speedup, acceptanceRate: c.acceptanceRate, tokensPerStep: c.tokensPerStep, offTokensPerS: c.offTokensPerS, onTokensPerS: c.onTokensPerS });
  return {
    suffixOverLookup: f.suffixOverLookup,
    lookup: brief(f.lookup),
    suffix: brief(f.suffix),
    control: brief(f.control),
    treeDrafts: f.treeDrafts,
    controlIsolated: f.controlIsolated,
    outputsIdentical: f.outputsIdentical,
    outputMismatches: f.mismatches.length,
    copiedEarlier: round(mean(checks.map((c) => c.copiedEarlier)), 2),
    copiedPrompt: round(mean(checks.map((c) => c.copiedPrompt)), 2),
    turns: f.kinds.map((k) => ({ kind: k.kind, copiedPrompt: k.copiedPrompt, copiedEarlier: k.copiedEarlier, tokens: k.tokens, lookup: brief(k.lookup), suffix: brief(k.suffix), control: brief(k.control), suffixOverLookup: k.suffixOverLookup })),
    earlier: checks.map((c) => ({ kind: c.kind, replies: c.earlierReplies, tokens: c.earlierTokens })),
  };
}

/** The human table: one row per kind and speculating mode, then the totals. */
export function crossTable(f: CrossFigures): string {
  const cell = (x: number | null) => (x === null ? "-" : String(x));
  const row = (kind: string, copied: string, mode: string, c: Comparison) => [kind, copied, mode, c.offTokensPerS, cell(c.onTokensPerS), cell(c.speedup), cell(c.acceptanceRate), cell(c.tokensPerStep)];
  const rows = [
    ...f.kinds.flatMap((k) => (["lookup", "suffix", "control"] as const).map((m) => row(k.kind, `${k.copiedPrompt}/${k.copiedEarlier}`, m, k[m]))),
    ...(["lookup", "suffix", "control"] as const).map((m) => row("all", "", m, f[m])),
  ];
  return table(["turn", "copied prompt/earlier", "mode", "off tok/s", "on tok/s", "on/off", "accepted", "tok/step"], rows);
}
