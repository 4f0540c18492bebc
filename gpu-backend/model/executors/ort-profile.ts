import { readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/**
 * An onnxruntime session profile (`enableProfiling`, written by `endProfiling()`), read per run.
 * onnxruntime-node 1.30's WebGPU provider adds one "Api" event per GPU program it dispatches,
 * named `<node>&<op>&<program>` and timed by GPU timestamps; "Node" events are the kernels as the
 * executor sees them (op and provider); "Session" events `model_run` bound each run.
 *
 * @example const profile = readOrtProfile(newestProfile("/tmp/prof")); profile.runs.at(-1)!.dispatches.length
 */
export interface OrtProfile {
  runs: OrtRunProfile[];
}

export interface OrtRunProfile {
  /** Wall time of the run (µs). */
  durUs: number;
  /** The GPU programs dispatched, in order: op and program (`PagedAttention&ScatterKVToPagedCache`). */
  dispatches: { program: string; durUs: number }[];
  /** The kernels run: op type and provider. */
  nodes: { op: string; provider: string; durUs: number }[];
}

interface TraceEvent {
  cat: string;
  name: string;
  ts: number;
  dur: number;
  args?: { op_name?: string; provider?: string };
}

export function readOrtProfile(file: string): OrtProfile {
  const events = JSON.parse(readFileSync(file, "utf8")) as TraceEvent[];
  const runs = events.filter((e) => e.cat === "Session" && e.name === "model_run").sort((a, b) => a.ts - b.ts);
  const within = (e: TraceEvent, r: TraceEvent) => e.ts >= r.ts && e.ts <= r.ts + r.dur;
  return {
    runs: runs.map((r) => ({
      durUs: r.dur,
      dispatches: events.filter((e) => e.cat === "Api" && within(e, r)).map((e) => ({ program: e.name.split("&").slice(1).join("&"), durUs: e.dur })),
      nodes: events.filter((e) => e.cat === "Node" && within(e, r)).map((e) => ({ op: e.args?.op_name ?? "", provider: e.args?.provider ?? "", durUs: e.dur })),
    })),
  };
}

/** The newest profile file onnxruntime wrote for `prefix` (it appends a timestamp to it). */
export function newestProfile(prefix: string): string {
  const dir = dirname(prefix);
  const stem = basename(prefix);
  const files = readdirSync(dir).filter((f) => f.startsWith(`${stem}_`) && f.endsWith(".json")).sort();
  if (files.length === 0) throw new Error(`no onnxruntime profile for ${prefix}`);
  return join(dir, files.at(-1)!);
}

/** GPU time per program over `runs` (µs), largest first: where the steps' time goes. */
export function timeByProgram(runs: readonly OrtRunProfile[]): { program: string; count: number; totalUs: number }[] {
  const by = new Map<string, { count: number; totalUs: number }>();
  for (const r of runs) {
    for (const d of r.dispatches) {
      const t = by.get(d.program) ?? { count: 0, totalUs: 0 };
      t.count++;
      t.totalUs += d.durUs;
      by.set(d.program, t);
    }
  }
  return [...by].map(([program, t]) => ({ program, ...t })).sort((a, b) => b.totalUs - a.totalUs);
}
