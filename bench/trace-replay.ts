import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { Progress, note } from "./progress";
import { lineChart, type Series } from "./svg-plot";

/**
 * Replays a Mooncake-format request trace (one JSON object per line: `timestamp`, `input_length`,
 * `output_length`, `hash_ids`; see ../shared/traces/SOURCES.md) through the project's real
 * `BlockPool` and measures prefix-cache hit rates. No model runs: each `hash_ids[i]` is used as the
 * block hash of the i-th 512-token block of the request's input (equal ids = equal prefix, exactly
 * what a chained block hash means), so the pool's hash map, free queue and eviction are what is
 * measured.
 *
 * Replay of one request (all policies): the hit is the longest run of the request's ids, from the
 * first, that is resident; block i carries `min(512, input_length - 512 i)` tokens. Then the
 * request's blocks enter the cache and it completes at once (requests do not overlap: the trace
 * has no service times).
 *
 * Policies:
 *
 *   lru         SOURCES.md's reference LRU, on the pool. Resident ids are acquired, missing ones
 *               allocated (taking blocks from the FRONT of the free queue = evicting the least
 *               recently used) and cached under their id, including the partial last block; then
 *               the table [b0 .. bn] is released. `release` visits the table in reverse, pushing
 *               bn to the back first and b0 last: exactly "touched last block first, so a prefix is
 *               more recent than its suffix". Since the request's own blocks are in use while the
 *               new ones are allocated, the blocks evicted are the least recent of all the others,
 *               the same set the reference evicts after touching. Bit-exact with `lru-map`.
 *   tail-first  The pool as the engine drives it (KVCacheManager): the same release order, but
 *               only FULL blocks get a hash. A partial last block is allocated, stays uncached,
 *               and on release goes to the FRONT of the free queue (evicted before any cached
 *               block); it can never hit.
 *   head-first  The naive order, for contrast: the same pool, the table released first block
 *               last (`release([bn .. b0])`), so a request's suffix is more recent than its
 *               prefix and the head of a chain is evicted before its tail.
 *   lru-map     A plain Map-based LRU written straight from SOURCES.md (no pool), the oracle for
 *               `lru`.
 *   ideal       Infinite cache: a block hits if its id was seen before.
 *
 * A request longer than the capacity keeps only the `capacity` blocks that its order ranks most
 * recent (its first ones; its last ones under head-first), as evicting "down to N" would.
 *
 * @example
 * const rows = loadTrace("../shared/traces/mooncake_synthetic_trace.jsonl");
 * replayTrace({ rows, capacity: 10_000, policy: "lru" }).blockHitRate // 0.4239...
 */

/** One request of a Mooncake trace. */
export interface TraceRow {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export const TRACE_BLOCK_TOKENS = 512;
export const POLICIES = ["lru", "tail-first", "head-first", "lru-map", "ideal"] as const;
export type ReplayPolicy = (typeof POLICIES)[number];

export interface ReplayResult {
  policy: ReplayPolicy;
  /** Resident blocks; null for `ideal` (infinite). */
  capacity: number | null;
  requests: number;
  /** Input blocks replayed (sum of hash_ids lengths). */
  blocks: number;
  /** Input tokens replayed (sum of input_length). */
  tokens: number;
  hitBlocks: number;
  hitTokens: number;
  /** hitBlocks / blocks, in [0, 1]. */
  blockHitRate: number;
  /** hitTokens / tokens, in [0, 1]. */
  tokenHitRate: number;
  /**
   * Cached blocks dropped to make room (pool: its `evictions` counter). For a request longer than
   * the capacity, `lru-map` also counts its own overflow blocks (touched, then dropped), which the
   * pool never caches.
   */
  evictions: number;
  ms: number;
}

/**
 * Parses JSONL trace text, checking every row (`hash_ids.length == ceil(input_length / 512)`).
 * Rows are returned in timestamp order (stable: file order among equal timestamps).
 *
 * @example parseTrace('{"timestamp":0,"input_length":600,"output_length":1,"hash_ids":[0,1]}\n')
 */
export function parseTrace(text: string): TraceRow[] {
  const rows: TraceRow[] = [];
  const lines = text.split("\n");
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.trim();
    if (line === "") continue;
    const r = JSON.parse(line) as TraceRow;
    const ok =
      Number.isFinite(r.timestamp) &&
      Number.isInteger(r.input_length) &&
      r.input_length > 0 &&
      Array.isArray(r.hash_ids) &&
      r.hash_ids.length === Math.ceil(r.input_length / TRACE_BLOCK_TOKENS) &&
      r.hash_ids.every((id) => Number.isInteger(id) && id >= 0);
    if (!ok) throw new Error(`trace line ${n + 1}: expected {timestamp, input_length > 0, hash_ids: ceil(input_length / 512) ids}, got ${line.slice(0, 200)}`);
    rows.push(r);
  }
  return rows.map((r, i) => ({ r, i })).sort((a, b) => a.r.timestamp - b.r.timestamp || a.i - b.i).map((x) => x.r);
}

/** Reads and parses a trace file. @example loadTrace("../shared/traces/mooncake_conversation_trace.jsonl") */
export function loadTrace(path: string): TraceRow[] {
  return parseTrace(readFileSync(path, "utf8"));
}

/** Tokens of block i of a row: `min(512, input_length - 512 i)`. */
export function blockTokens(row: TraceRow, i: number): number {
  return Math.min(TRACE_BLOCK_TOKENS, row.input_length - TRACE_BLOCK_TOKENS * i);
}

/**
 * Replays `rows` (already in timestamp order, as `parseTrace` returns them) under one policy.
 * `onProgress(rowsDone)` is called every 1,024 rows.
 *
 * @example replayTrace({ rows, capacity: 1000, policy: "tail-first" })
 */
export function replayTrace(params: { rows: readonly TraceRow[]; capacity?: number | null; policy: ReplayPolicy; onProgress?: (rowsDone: number) => void }): ReplayResult {
  const { rows, policy, onProgress } = params;
  if (!POLICIES.includes(policy)) throw new Error(`replayTrace: unknown policy ${JSON.stringify(policy)}; one of ${POLICIES.join(", ")}`);
  const capacity = policy === "ideal" ? null : (params.capacity ?? NaN);
  if (capacity !== null && (!Number.isInteger(capacity) || capacity < 1)) {
    throw new Error(`replayTrace: policy ${policy} needs a positive integer capacity, got ${params.capacity}`);
  }
  const t0 = performance.now();
  const tally = { blocks: 0, tokens: 0, hitBlocks: 0, hitTokens: 0, evictions: 0 };
  const replayRow =
    policy === "ideal"
      ? idealReplayer(tally)
      : policy === "lru-map"
        ? mapLruReplayer(capacity!, tally)
        : poolReplayer(capacity!, policy === "head-first" ? "head-first" : "tail-first", policy !== "tail-first", tally);
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!;
    tally.blocks += row.hash_ids.length;
    tally.tokens += row.input_length;
    const hits = replayRow(row);
    tally.hitBlocks += hits;
    for (let i = 0; i < hits; i++) tally.hitTokens += blockTokens(row, i);
    if (onProgress && (r + 1) % 1024 === 0) onProgress(r + 1);
  }
  return {
    policy,
    capacity,
    requests: rows.length,
    blocks: tally.blocks,
    tokens: tally.tokens,
    hitBlocks: tally.hitBlocks,
    hitTokens: tally.hitTokens,
    blockHitRate: tally.blocks === 0 ? 0 : tally.hitBlocks / tally.blocks,
    tokenHitRate: tally.tokens === 0 ? 0 : tally.hitTokens / tally.tokens,
    evictions: tally.evictions,
    ms: performance.now() - t0,
  };
}

type Tally = { evictions: number };
/** Replays one row; returns its number of hit blocks (a prefix). */
type RowReplayer = (row: TraceRow) => number;

/** Hash id -> the string the pool keys its prefix map by (memoized: ids are dense small integers). */
const keys: string[] = [];
function keyOf(id: number): string {
  return (keys[id] ??= `mooncake:${id}`);
}

/**
 * The real BlockPool, one block per trace block. `order` is the release order (which end of a
 * request's chain is evicted first); `cachePartial` whether a partial last block gets a hash.
 */
function poolReplayer(capacity: number, order: "tail-first" | "head-first", cachePartial: boolean, tally: Tally): RowReplayer {
  const pool = new BlockPool({ numBlocks: capacity, blockSize: TRACE_BLOCK_TOKENS });
  const table: number[] = [];
  const resident: number[] = [];
  const missing: number[] = [];
  return (row) => {
    const ids = row.hash_ids;
    const len = ids.length;
    const full = row.input_length % TRACE_BLOCK_TOKENS === 0 ? len : len - 1;
    let hits = 0;
    while (hits < len && pool.lookup(keyOf(ids[hits]!)) !== undefined) hits++;
    // The window of this request that stays resident: all of it unless it exceeds the pool.
    const n = Math.min(len, capacity);
    const from = order === "tail-first" ? 0 : len - n;
    table.length = n;
    resident.length = 0;
    missing.length = 0;
    for (let i = 0; i < n; i++) {
      const b = pool.lookup(keyOf(ids[from + i]!));
      if (b === undefined) missing.push(i);
      else {
        table[i] = b;
        resident.push(b);
      }
    }
    pool.acquire(resident);
    const fresh = pool.allocate(missing.length);
    if (fresh === null) throw new Error(`trace replay: pool of ${capacity} could not supply ${missing.length} blocks (bug)`);
    for (let j = 0; j < fresh.length; j++) {
      const i = missing[j]!;
      table[i] = fresh[j]!;
      if ((cachePartial || from + i < full) && !pool.cache(fresh[j]!, keyOf(ids[from + i]!))) {
        throw new Error(`trace replay: id ${ids[from + i]} was already cached (bug)`);
      }
    }
    if (order === "head-first") table.reverse();
    pool.release(table);
    tally.evictions = pool.stats.evictions;
    return hits;
  };
}

/** SOURCES.md's LRU written directly: a Map in recency order (first key = least recent). */
function mapLruReplayer(capacity: number, tally: Tally): RowReplayer {
  const lru = new Map<number, true>();
  return (row) => {
    const ids = row.hash_ids;
    let hits = 0;
    while (hits < ids.length && lru.has(ids[hits]!)) hits++;
    for (let i = ids.length - 1; i >= 0; i--) {
      lru.delete(ids[i]!);
      lru.set(ids[i]!, true);
    }
    if (lru.size > capacity) {
      const it = lru.keys();
      for (let k = lru.size - capacity; k > 0; k--) {
        lru.delete(it.next().value!);
        tally.evictions++;
      }
    }
    return hits;
  };
}

/** Infinite cache: a block hits if its id was seen before. */
function idealReplayer(_tally: Tally): RowReplayer {
  const seen = new Set<number>();
  return (row) => {
    let hits = 0;
    for (const id of row.hash_ids) {
      if (seen.has(id)) hits++;
      else seen.add(id);
    }
    return hits;
  };
}

// ---- Reference figures (../shared/traces/SOURCES.md), percent: [block, token]; token null when not given.

export interface TraceReference {
  ideal: [number, number];
  lru: Record<number, [number, number | null]>;
}

export const REFERENCE: Record<string, TraceReference> = {
  "mooncake_conversation_trace.jsonl": {
    ideal: [36.64, 37.36],
    lru: { 1000: [4.45, 4.54], 3000: [6.53, null], 10000: [21.16, 21.57], 30000: [32.57, null], 50000: [35.46, null], 100000: [36.37, 37.08] },
  },
  "mooncake_synthetic_trace.jsonl": {
    ideal: [63.96, 65.12],
    lru: { 1000: [8.41, 8.57], 3000: [19.06, null], 10000: [42.39, 43.18], 20000: [57.18, null], 30000: [62.42, null], 100000: [63.96, 65.12] },
  },
};

/** Where the shared traces live: ../shared/traces next to the repository (TRACE_DIR overrides). */
export function defaultTraceDir(): string {
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  return process.env.TRACE_DIR ?? resolve(repo, "../shared/traces");
}

export const SWEEP_CAPACITIES = [1000, 3000, 10000, 20000, 30000, 50000, 100000];
const SWEEP_POLICIES: ReplayPolicy[] = ["lru", "tail-first", "head-first", "lru-map"];

/**
 * `npm run bench -- trace FILE --capacity N [--policy lru|tail-first|head-first|lru-map|ideal] [--json]`
 * `npm run bench -- trace [FILE] --sweep [--json] [--out DIR]`
 *
 * One replay prints its block and token hit rates. `--sweep` replays every policy at 1k, 3k, 10k,
 * 20k, 30k, 50k and 100k blocks (the capacities of SOURCES.md's reference points among them) on
 * FILE, or on both shared traces, prints a markdown table next to the reference and writes
 * DIR/trace-hit-rate.svg (block hit rate against capacity, log x). Progress goes to stderr; with
 * `--json` the last stdout line is one JSON object.
 */
export async function runTraceBench(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      capacity: { type: "string" },
      policy: { type: "string", default: "lru" },
      sweep: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      out: { type: "string", default: "bench/out" },
    },
    strict: true,
  });
  const usage = "usage: npm run bench -- trace FILE --capacity N [--policy lru|tail-first|head-first|lru-map|ideal] [--json] | trace [FILE] --sweep [--json] [--out DIR]";
  if (positionals.length > 1) fail(usage);
  const policy = values.policy as ReplayPolicy;
  if (!POLICIES.includes(policy)) fail(`--policy must be one of ${POLICIES.join(", ")}, got ${JSON.stringify(values.policy)}`);

  if (values.sweep) {
    const files = positionals.length === 1 ? [positionals[0]!] : ["mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"].map((f) => join(defaultTraceDir(), f));
    const summary = sweep(files, values.out!);
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify({ ...summary, results: `${(summary.results as unknown[]).length} runs` }, null, 2));
    return;
  }

  if (positionals.length !== 1) fail(usage);
  let capacity: number | null = null;
  if (policy !== "ideal") {
    const c = Number(values.capacity);
    if (values.capacity === undefined || !Number.isInteger(c) || c < 1) fail(`--capacity must be a positive integer (blocks), got ${JSON.stringify(values.capacity ?? "")}`);
    capacity = c;
  }
  const file = positionals[0]!;
  const rows = loadTrace(file);
  const progress = new Progress("trace", rows.length);
  let last = 0;
  const r = replayTrace({ rows, capacity, policy, onProgress: (done) => (progress.tick(policy, done - last), (last = done)) });
  progress.tick(policy, rows.length - last);
  const ref = REFERENCE[basename(file)];
  const refFig = ref === undefined ? undefined : policy === "ideal" ? ref.ideal : policy === "lru" || policy === "lru-map" ? ref.lru[capacity!] : undefined;
  const summary = { trace: basename(file), ...r, ms: Math.round(r.ms), ...(refFig ? { reference: { blockHitRate: +(refFig[0] / 100).toFixed(4), tokenHitRate: refFig[1] === null ? null : +(refFig[1] / 100).toFixed(4) } } : {}) };
  if (!values.json) {
    console.log(`${basename(file)}: ${r.requests} requests, ${r.blocks} blocks, policy ${policy}, capacity ${capacity ?? "infinite"}`);
    console.log(`  block hit rate ${pct(r.blockHitRate)}  token hit rate ${pct(r.tokenHitRate)}  (${r.evictions} evictions, ${Math.round(r.ms)} ms)`);
    if (refFig) console.log(`  SOURCES.md reference: ${refFig[0].toFixed(2)}% / ${refFig[1] === null ? "-" : `${refFig[1].toFixed(2)}%`}`);
  }
  console.log(JSON.stringify(summary));
}

function sweep(files: string[], outDir: string): Record<string, unknown> {
  const results: (ReplayResult & { trace: string })[] = [];
  const total = files.length * (SWEEP_CAPACITIES.length * SWEEP_POLICIES.length + 1);
  const progress = new Progress("trace", total, 1000);
  const t0 = performance.now();
  for (const file of files) {
    const trace = basename(file);
    const rows = loadTrace(file);
    note("trace", `${trace}: ${rows.length} requests`);
    const ideal = replayTrace({ rows, policy: "ideal" });
    results.push({ trace, ...ideal });
    progress.tick(`${trace} ideal`);
    for (const capacity of SWEEP_CAPACITIES) {
      for (const policy of SWEEP_POLICIES) {
        results.push({ trace, ...replayTrace({ rows, capacity, policy }) });
        progress.tick(`${trace} ${policy} ${capacity}`);
      }
    }
  }
  const find = (trace: string, policy: ReplayPolicy, capacity: number | null) => results.find((r) => r.trace === trace && r.policy === policy && r.capacity === capacity)!;

  // lru on the pool against the plain Map LRU, and against SOURCES.md.
  let poolEqualsMap = true;
  let maxDiffPoints = 0;
  for (const r of results) {
    if (r.policy === "lru") {
      const m = find(r.trace, "lru-map", r.capacity);
      if (m.hitBlocks !== r.hitBlocks || m.hitTokens !== r.hitTokens) poolEqualsMap = false;
    }
    const ref = REFERENCE[r.trace];
    const fig = ref === undefined ? undefined : r.policy === "ideal" ? ref.ideal : r.policy === "lru" ? ref.lru[r.capacity!] : undefined;
    if (fig) {
      maxDiffPoints = Math.max(maxDiffPoints, Math.abs(100 * r.blockHitRate - fig[0]));
      if (fig[1] !== null) maxDiffPoints = Math.max(maxDiffPoints, Math.abs(100 * r.tokenHitRate - fig[1]));
    }
  }

  // Markdown table, one row per trace x capacity: block / token hit rate per policy.
  const cell = (r: ReplayResult) => `${pct(r.blockHitRate)} / ${pct(r.tokenHitRate)}`;
  const lines = ["| trace | capacity | reference LRU | lru (pool) | tail-first (pool) | head-first (pool) |", "|---|---:|---|---|---|---|"];
  for (const file of files) {
    const trace = basename(file);
    const short = trace.replace(/^mooncake_/, "").replace(/_trace\.jsonl$/, "");
    const ref = REFERENCE[trace];
    for (const capacity of SWEEP_CAPACITIES) {
      const fig = ref?.lru[capacity];
      const refCell = fig ? `${fig[0].toFixed(2)}% / ${fig[1] === null ? "-" : `${fig[1].toFixed(2)}%`}` : "";
      lines.push(`| ${short} | ${capacity.toLocaleString("en-US")} | ${refCell} | ${cell(find(trace, "lru", capacity))} | ${cell(find(trace, "tail-first", capacity))} | ${cell(find(trace, "head-first", capacity))} |`);
    }
    const idealRef = ref ? `${ref.ideal[0].toFixed(2)}% / ${ref.ideal[1].toFixed(2)}%` : "";
    const idealCell = cell(find(trace, "ideal", null));
    lines.push(`| ${short} | ideal (infinite) | ${idealRef} | ${idealCell} | ${idealCell} | ${idealCell} |`);
  }
  process.stderr.write(`${lines.join("\n")}\n`);
  note("trace", `lru on the BlockPool equals the Map LRU at every point: ${poolEqualsMap}; largest gap to SOURCES.md: ${maxDiffPoints.toFixed(3)} points`);

  // Plot: block hit rate against capacity, log x, one panel per trace.
  const colors: Record<string, string> = { lru: "#1f77b4", "tail-first": "#2ca02c", "head-first": "#d62728", ideal: "#7f7f7f", reference: "#ff7f0e" };
  const panels = files.map((file) => {
    const trace = basename(file);
    const series: Series[] = (["lru", "tail-first", "head-first"] as const).map((policy) => ({
      name: policy === "lru" ? "lru (SOURCES.md order, pool)" : policy === "tail-first" ? "tail-first (engine: full blocks only)" : "head-first (naive order)",
      color: colors[policy]!,
      points: SWEEP_CAPACITIES.map((c) => ({ x: c, y: 100 * find(trace, policy, c).blockHitRate })),
    }));
    const ref = REFERENCE[trace];
    if (ref) {
      series.push({ name: "SOURCES.md LRU reference", color: colors.reference!, points: SWEEP_CAPACITIES.filter((c) => ref.lru[c]).map((c) => ({ x: c, y: ref.lru[c]![0] })) });
    }
    const idealY = 100 * find(trace, "ideal", null).blockHitRate;
    series.push({ name: `ideal (infinite): ${idealY.toFixed(2)}%`, color: colors.ideal!, points: [SWEEP_CAPACITIES[0]!, SWEEP_CAPACITIES.at(-1)!].map((x) => ({ x, y: idealY })) });
    return lineChart({ title: `${trace.replace(/\.jsonl$/, "")}: block hit rate`, xLabel: "capacity (blocks of 512 tokens, log scale)", yLabel: "block hit rate (%)", series, logX: true, width: 620, height: 420 });
  });
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${620 * panels.length}" height="420" viewBox="0 0 ${620 * panels.length} 420">`,
    ...panels.map((p, i) => p.replace(/^<svg /, `<svg x="${620 * i}" y="0" `)),
    "</svg>",
  ].join("\n");
  mkdirSync(outDir, { recursive: true });
  const plot = join(outDir, "trace-hit-rate.svg");
  writeFileSync(plot, svg);
  note("trace", `wrote ${plot}`);
  return {
    traces: files.map((f) => basename(f)),
    capacities: SWEEP_CAPACITIES,
    policies: ["ideal", ...SWEEP_POLICIES],
    poolLruEqualsMapLru: poolEqualsMap,
    maxGapToReferencePoints: +maxDiffPoints.toFixed(3),
    plot,
    seconds: +((performance.now() - t0) / 1000).toFixed(1),
    results: results.map((r) => ({ ...r, ms: Math.round(r.ms) })),
  };
}

function pct(v: number): string {
  return `${(100 * v).toFixed(2)}%`;
}

function fail(msg: string): never {
  console.error(msg);
  process.exit(2);
}
