import { percentile, predictLeaseReturn } from "../durable-objects/trajectory/lease-policy";
import { LEASE_DEFAULTS, type LeaseSettings } from "../durable-objects/settings";
import { runLeaseBench, type LeaseVariant } from "./lease-bench";

/**
 * The lease design study behind docs/benchmarks.md (Leases): the benchmark's workload under
 * candidate lease settings. `npx tsx bench/lease-study.ts [--trajectories M] [--turns T] [--seed S]
 * [--gap MS] [--only name,name]` (defaults: the `--quick` workload, seed 11). Every variant names its
 * eviction settings, so rows stay comparable when the backend's defaults change ("c25" is the
 * backend's first default, "c75latest" the one before predicted returns, "rgeo" the current one:
 * the DO's `predictLeaseReturn`). Prints the bench's table; JSON last.
 *
 * The `r*` and `cap*` variants order breaking (and, `cap*`, the cap's drops: `capOrder`
 * "latest-return") by a predicted return time sent with the lease (`expectedReturnMs`), the TTL
 * staying the DO's; `*oracle` ones predict the real next pause. `rgeo` became the default
 * (docs/benchmarks.md, Leases, "Break order by predicted return"); the others are study options.
 */
const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : undefined;
};
const s = LEASE_DEFAULTS;

/**
 * Expected-return predictors for the break order (`predictReturn`; the TTL stays the DO's):
 * `pick` of the trajectory's pauses when it has at least `minOwn` (and one), else the median of
 * the tenant's pooled pauses (at least `settings.minSamples`), else `settings.defaultMs`.
 */
type ReturnArgs = { pauses: readonly number[]; fallbackPauses: readonly number[]; settings: LeaseSettings };
const fromSamples = (pick: (xs: readonly number[]) => number, minOwn: number) => (p: ReturnArgs) =>
  p.pauses.length >= minOwn && p.pauses.length > 0 ? pick(p.pauses) : p.fallbackPauses.length >= p.settings.minSamples ? percentile(p.fallbackPauses, 0.5) : p.settings.defaultMs;
const median = (xs: readonly number[]) => percentile(xs, 0.5);
/**
 * Lognormal shrinkage: the geometric mean of the trajectory's pauses, pulled toward the pooled
 * median as if that were `prior` more samples (pauses cluster per trajectory around a lognormal
 * scale; with 1-2 samples the pooled median still carries weight).
 */
const shrunk = (prior: number) => (p: ReturnArgs) => {
  const pooled = p.fallbackPauses.length >= p.settings.minSamples ? percentile(p.fallbackPauses, 0.5) : p.settings.defaultMs;
  const logs = p.pauses.reduce((a, x) => a + Math.log(Math.max(1, x)), 0);
  return p.pauses.length === 0 ? pooled : Math.exp((logs + prior * Math.log(pooled)) / (p.pauses.length + prior));
};
const c75 = { lease: true, cap: 0.75, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline" } as const;
const all: LeaseVariant[] = [
  { name: "lru", label: "lru", lease: false },
  { name: "c25", label: "cap 0.25, expired+dropped to front", lease: true, cap: 0.25, expiredTo: "front", droppedTo: "front", breakOrder: "oldest" },
  { name: "c25back", label: "cap 0.25, expired+dropped to back", lease: true, cap: 0.25, expiredTo: "back", droppedTo: "back", breakOrder: "oldest" },
  { name: "c50back", label: "cap 0.5, expired+dropped to back", lease: true, cap: 0.5, expiredTo: "back", droppedTo: "back", breakOrder: "oldest" },
  { name: "c50fb", label: "cap 0.5, expired to front, dropped to back", lease: true, cap: 0.5, expiredTo: "front", droppedTo: "back", breakOrder: "oldest" },
  { name: "c75back", label: "cap 0.75, expired+dropped to back", lease: true, cap: 0.75, expiredTo: "back", droppedTo: "back", breakOrder: "oldest" },
  { name: "c100fb", label: "cap 1, expired to front, dropped to back", lease: true, cap: 1, expiredTo: "front", droppedTo: "back", breakOrder: "oldest" },
  { name: "c100back", label: "cap 1, expired+dropped to back", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "oldest" },
  { name: "c50backskip", label: "cap 0.5, back, no lease over max", lease: true, cap: 0.5, expiredTo: "back", droppedTo: "back", breakOrder: "oldest", overMax: "skip" },
  { name: "c50backf1", label: "cap 0.5, back, safety 1", lease: true, cap: 0.5, expiredTo: "back", droppedTo: "back", breakOrder: "oldest", settings: { ...s, safetyFactor: 1 } },
  { name: "c50backf3", label: "cap 0.5, back, safety 3", lease: true, cap: 0.5, expiredTo: "back", droppedTo: "back", breakOrder: "oldest", settings: { ...s, safetyFactor: 3 } },
  { name: "c50latest", label: "cap 0.5, back, break latest deadline", lease: true, cap: 0.5, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline" },
  { name: "c75latest", label: "cap 0.75, back, break latest deadline", lease: true, cap: 0.75, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline" },
  { name: "c100latest", label: "cap 1, back, break latest deadline", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline" },
  { name: "r50", label: "cap 0.75, break latest return: p50 x1 (3+ own pauses, else pooled p50)", ...c75, predictReturn: fromSamples(median, s.minSamples) },
  { name: "r50own1", label: "cap 0.75, break latest return: p50 x1 of own pauses (1+), else pooled p50", ...c75, predictReturn: fromSamples(median, 1) },
  { name: "rlast", label: "cap 0.75, break latest return: last pause, else pooled p50", ...c75, predictReturn: fromSamples((xs) => xs.at(-1)!, 1) },
  { name: "rp90own1", label: "cap 0.75, break latest return: p90 x1.5 of own pauses (1+), else pooled p50", ...c75, predictReturn: fromSamples((xs) => 1.5 * percentile(xs, 0.9), 1) },
  { name: "rshrink", label: "cap 0.75, break latest return: geometric mean of own pauses shrunk to pooled p50 (prior 1)", ...c75, predictReturn: shrunk(1) },
  { name: "rgeo", label: "cap 0.75, break latest return: geometric mean of own pauses (1+), else pooled p50 (the DO's predictLeaseReturn)", ...c75, predictReturn: predictLeaseReturn },
  { name: "roracle", label: "cap 0.75, break latest return: oracle (the real next pause; TTL as is)", ...c75, predictReturn: (p) => p.nextPauseMs },
  { name: "c100rshrink", label: "cap 1, break latest return: shrunk geometric mean (prior 1)", ...c75, cap: 1, predictReturn: shrunk(1) },
  { name: "c100roracle", label: "cap 1, break latest return: oracle (TTL as is)", ...c75, cap: 1, predictReturn: (p) => p.nextPauseMs },
  { name: "capret", label: "cap 0.75, cap and break by latest deadline", ...c75, capOrder: "latest-return" },
  { name: "caprshrink", label: "cap 0.75, cap and break by latest return: shrunk geometric mean (prior 1)", ...c75, capOrder: "latest-return", predictReturn: shrunk(1) },
  { name: "caprgeo", label: "cap 0.75, cap and break by latest return: geometric mean of own pauses (1+), else pooled p50", ...c75, capOrder: "latest-return", predictReturn: predictLeaseReturn },
  { name: "caproracle", label: "cap 0.75, cap and break by latest return: oracle (TTL as is)", ...c75, capOrder: "latest-return", predictReturn: (p) => p.nextPauseMs },
  { name: "oracle100latest", label: "oracle TTL, cap 1, back, break latest", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline", oracle: true },
  { name: "oracle100", label: "oracle TTL, cap 1, back", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "oldest", oracle: true },
];
const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1]!.split(",") : undefined;
const variants = only ? all.filter((v) => v.name === "lru" || only.includes(v.name)) : all;
const { summary } = await runLeaseBench({ quick: true, model: "tiny", outDir: "bench/out/lease-study", variants, trajectories: arg("trajectories"), turns: arg("turns"), seed: arg("seed"), workload: { ...(arg("gap") !== undefined ? { arrivalGapMs: arg("gap") } : {}) } });
console.log(JSON.stringify(summary));
