import { LEASE_DEFAULTS } from "../durable-objects/lease-policy";
import { runLeaseBench, type LeaseVariant } from "./lease-bench";

/**
 * The lease design study behind docs/benchmarks.md (Leases): the benchmark's workload under
 * candidate lease settings. `npx tsx bench/lease-study.ts [--trajectories M] [--turns T] [--seed S]
 * [--gap MS] [--only name,name]` (defaults: the `--quick` workload, seed 11). Every variant names its
 * eviction settings, so rows stay comparable when the backend's defaults change ("c25" is the
 * backend's previous default, "c75latest" its current one). Prints the bench's table; JSON last.
 */
const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : undefined;
};
const s = LEASE_DEFAULTS;
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
  { name: "oracle100latest", label: "oracle TTL, cap 1, back, break latest", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "latest-deadline", oracle: true },
  { name: "oracle100", label: "oracle TTL, cap 1, back", lease: true, cap: 1, expiredTo: "back", droppedTo: "back", breakOrder: "oldest", oracle: true },
];
const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1]!.split(",") : undefined;
const variants = only ? all.filter((v) => v.name === "lru" || only.includes(v.name)) : all;
const { summary } = await runLeaseBench({ quick: true, model: "tiny", outDir: "bench/out/lease-study", variants, trajectories: arg("trajectories"), turns: arg("turns"), seed: arg("seed"), workload: { ...(arg("gap") !== undefined ? { arrivalGapMs: arg("gap") } : {}) } });
console.log(JSON.stringify(summary));
