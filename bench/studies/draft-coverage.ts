import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { trainedModelPath } from "../../gpu-backend/model/checkpoint/trained-models";
import { readGguf } from "../../gpu-backend/model/gguf/gguf-reader";
import { ggufTokenizer } from "../../gpu-backend/model/gguf/gguf-tokenizer";
import type { DraftSource } from "../../gpu-backend/speculative/draft-source";
import { DraftLength } from "../../gpu-backend/speculative/draft-length";
import { SequenceLookup } from "../../gpu-backend/speculative/sequence-lookup";
import { SuffixSource } from "../../gpu-backend/speculative/suffix-source";
import { SuffixTree } from "../../gpu-backend/speculative/suffix-tree";
import { Tokenizer } from "../../gpu-backend/tokenizer/tokenizer";
import { fixedLength, replayReply, sumCounts, type DraftLengthPolicy, type ReplayCounts } from "./draft-replay";
import { agentTrajectories, type TextTrajectory } from "./draft-transcripts";

/**
 * `npx tsx bench/studies/draft-coverage.ts [--json]`: the draft sources of speculative decoding
 * (gpu-backend/speculative/) measured offline, without a model:
 *
 * 1. Coverage: agent trajectories built from this repository's files (draft-transcripts.ts),
 *    tokenized with the trained SmolLM2 tokenizer (the GGUF's tokenizer.* metadata), replayed
 *    through each source (draft-replay.ts) with the reply's true tokens standing for the model's:
 *    the fraction of reply tokens a draft covered, the acceptance rate, and tokens per step, per
 *    kind of turn, for prompt lookup and the suffix source, at a fixed length 8 and adaptive, and
 *    the speedup that predicts when each drafted token adds a tenth of a plain step's cost
 *    (replyTokens / (steps + 0.1 x drafted); the engine's measured step costs replace 0.1).
 * 2. Cost: microseconds per propose() on a 30k-token context growing one token per call (2000
 *    calls after the first, the median of five rounds), the first call's milliseconds (indexing
 *    the 30k tokens), and observe()'s microseconds per reply token filling a tree to its bounds
 *    (the tokens and nodes it then holds).
 *
 * @example npx tsx bench/studies/draft-coverage.ts
 */

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../..");
/** The step-cost model of the adaptive rows: each drafted token adds a tenth of a plain step (one sequence decoding). */
const PER_DRAFT_TOKEN = 0.1;

interface Row {
  kind: string;
  source: "lookup" | "suffix";
  length: "8" | "adaptive";
  counts: ReplayCounts;
}

function loadTokenizer(): Tokenizer {
  const gguf = readGguf(trainedModelPath());
  const files = ggufTokenizer(gguf.metadata, "llama");
  return new Tokenizer({ tokenizerJson: files.tokenizerJson, tokenizerConfig: files.tokenizerConfig });
}

function coverage(tokenizer: Tokenizer, trajectories: readonly TextTrajectory[]): Row[] {
  const rows: Row[] = [];
  for (const sourceName of ["lookup", "suffix"] as const) {
    for (const lengthName of ["8", "adaptive"] as const) {
      // One backend: one tree for the whole run, learning each reply after its turn.
      const tree = new SuffixTree();
      for (const trajectory of trajectories) {
        const all: ReplayCounts[] = [];
        for (const turn of trajectory.turns) {
          const source: DraftSource = sourceName === "lookup" ? new SequenceLookup() : new SuffixSource(tree);
          const policy: DraftLengthPolicy = lengthName === "8" ? fixedLength(8) : new DraftLength({ perDraftToken: PER_DRAFT_TOKEN });
          const reply = tokenizer.encode(turn.reply);
          all.push(replayReply(source, "tenant", tokenizer.encode(turn.prompt), reply, policy));
          source.observe?.({ tenant: "tenant", tokenIds: reply });
        }
        rows.push({ kind: trajectory.kind, source: sourceName, length: lengthName, counts: sumCounts(all) });
      }
    }
  }
  return rows;
}

/** Microseconds per call of `propose` on a context of `contextTokens` that grows by one token per call. */
function proposeMicros(source: DraftSource, context: readonly number[], calls: number): { firstMs: number; perCallUs: number } {
  const tokenIds = context.slice(0, context.length - calls);
  const t0 = performance.now();
  source.propose({ tenant: "tenant", tokenIds, numPromptTokens: tokenIds.length }, 8);
  const firstMs = performance.now() - t0;
  const t1 = performance.now();
  for (let i = context.length - calls; i < context.length; i++) {
    tokenIds.push(context[i]!);
    source.propose({ tenant: "tenant", tokenIds, numPromptTokens: tokenIds.length }, 8);
  }
  return { firstMs, perCallUs: ((performance.now() - t1) * 1000) / calls };
}

function costs(tokenizer: Tokenizer, files: readonly string[]): Record<string, { firstMs: number; perCallUs: number } | number> {
  let text = "";
  for (const path of files) {
    text += execFileSync("git", ["show", `HEAD:${path}`], { cwd: ROOT, encoding: "utf8", maxBuffer: 1 << 26 });
    if (text.length > 150_000) break;
  }
  const all = tokenizer.encode(text);
  const context = all.slice(0, 30_000 + 2000);
  // A full tree: 32k tokens of 500-token replies (the default token bound; the node bound may
  // evict first), filled twice (the first fill warms the JIT up), the second fill timed.
  const fill = () => {
    const tree = new SuffixTree();
    const t0 = performance.now();
    let observed = 0;
    for (let at = 0; at + 500 <= all.length && observed < 32768; at += 500, observed += 500) tree.observe({ tenant: "tenant", tokenIds: all.slice(at, at + 500) });
    return { tree, usPerToken: ((performance.now() - t0) * 1000) / observed };
  };
  fill();
  const { tree, usPerToken: observeUsPerToken } = fill();
  // Five rounds each (fresh per-sequence state, the same tree), the median round.
  const median = (make: () => DraftSource) => {
    const rounds = Array.from({ length: 5 }, () => proposeMicros(make(), context, 2000)).sort((a, b) => a.perCallUs - b.perCallUs);
    return rounds[2]!;
  };
  return {
    contextTokens: context.length - 2000,
    lookup: median(() => new SequenceLookup()),
    tree: median(() => tree),
    suffix: median(() => new SuffixSource(tree)),
    observeUsPerToken,
    treeTokens: tree.stats().tokens,
    treeNodes: tree.stats().nodes,
  };
}

function main(): void {
  const json = process.argv.includes("--json");
  const tokenizer = loadTokenizer();
  const files = execFileSync("git", ["ls-files", "gpu-backend"], { cwd: ROOT, encoding: "utf8" })
    .split("\n")
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"));
  const rows = coverage(tokenizer, agentTrajectories(ROOT, files));
  const cost = costs(tokenizer, files);
  if (json) {
    console.log(JSON.stringify({ rows, cost }));
    return;
  }
  console.log(`${"kind".padEnd(25)} source  length    reply tokens  drafted  accepted  covered  acceptance  tokens/step  speedup at 0.1/drafted token`);
  for (const { kind, source, length, counts: c } of rows) {
    const pct = (x: number) => `${(100 * x).toFixed(1)}%`.padStart(7);
    console.log(
      `${kind.padEnd(25)} ${source.padEnd(7)} ${length.padEnd(8)} ${String(c.replyTokens).padStart(13)} ${String(c.drafted).padStart(8)} ${String(c.accepted).padStart(9)} ${pct(c.accepted / c.replyTokens)}  ${pct(c.drafted ? c.accepted / c.drafted : 0).padStart(10)}  ${(c.replyTokens / c.steps).toFixed(2).padStart(11)}  ${(c.replyTokens / (c.steps + 0.1 * c.drafted)).toFixed(2).padStart(7)}x`,
    );
  }
  console.log(JSON.stringify(cost, (_, v: unknown) => (typeof v === "number" ? Number(v.toFixed(3)) : v)));
}

main();
