import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { MAX_PROMPT_BLOCK_HASHES } from "../../protocol/messages";

/** The Mooncake conversation trace (../shared/traces: Kimi chat traffic, 12,031 requests; its SOURCES.md). */
export const SHARED_TRACE = fileURLToPath(new URL("../../../shared/traces/mooncake_conversation_trace.jsonl", import.meta.url));
/** Its first 256 rows, in the repository (fixtures/README.md): for CI, where ../shared is absent. */
export const TRACE_EXCERPT = fileURLToPath(new URL("./fixtures/mooncake-conversation-head.jsonl", import.meta.url));
/** The whole trace where this machine has it, else the excerpt. */
export const DEFAULT_TRACE = existsSync(SHARED_TRACE) ? SHARED_TRACE : TRACE_EXCERPT;
/** Tokens per trace block (the trace's `hash_ids` name 512-token blocks). */
export const TRACE_BLOCK_TOKENS = 512;
/** Tokens per KV block on our backends (block size 16): each trace block is this many of ours. */
export const BLOCK_TOKENS = 16;

/** One placed turn of the workload: its prompt's short block hashes and its prefix key. */
export interface TraceTurn {
  /** 16-hex short hashes, leading blocks first, at most MAX_PROMPT_BLOCK_HASHES. */
  hashes: string[];
  /** The prefix key the edge would note it under: its first two trace blocks (system prompt and first message). */
  key: string;
}

/**
 * The first `count` requests of a Mooncake-format trace as placed turns, in timestamp order
 * (cycling from the start when the trace is shorter). Trace block id `i` becomes 32 of our
 * 16-token blocks, short hashes `i * 32 + j` in hex: equal prefixes in the trace stay equal
 * prefixes here, and a request carries as many hashes as our backends would report.
 *
 * @example loadTraceTurns(DEFAULT_TRACE, 100)[0] // { hashes: ["0000000000000000", ...], key: "conv-0-1" }
 */
export function loadTraceTurns(path: string, count: number): TraceTurn[] {
  const rows = readFileSync(path, "utf8").split("\n").filter((l) => l.trim().length > 0).map((l) => (JSON.parse(l) as { hash_ids: number[] }).hash_ids);
  if (rows.length === 0) throw new Error(`no requests in ${path}`);
  const per = TRACE_BLOCK_TOKENS / BLOCK_TOKENS;
  const turns: TraceTurn[] = [];
  for (let i = 0; i < count; i++) {
    const ids = rows[i % rows.length]!;
    const hashes: string[] = [];
    for (const id of ids) for (let j = 0; j < per && hashes.length < MAX_PROMPT_BLOCK_HASHES; j++) hashes.push((id * per + j).toString(16).padStart(16, "0"));
    turns.push({ hashes, key: `conv-${ids.slice(0, 2).join("-")}` });
  }
  return turns;
}
