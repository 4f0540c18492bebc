import type { Engine, TokenRequest, TokenResult } from "../gpu-backend/engine/engine";
import type { LoadedModel } from "../gpu-backend/engine/load-model";
import type { WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { benchEngine, benchExecutor, benchWeights, greedy } from "./kit/engine";
import { Progress } from "./kit/progress";
import type { RunRecord, Setting, TurnCheck } from "./speculative-report";
import type { SpeculationHook } from "./speculative-engine";
import { copiedFraction, type TokenTurn } from "./speculative-workload";
import { explainDivergences, type Divergence } from "./speculative-divergence";

/** KV blocks of the bench's pool: 8 requests of ~150 + 120 tokens need ~140; the rest is cache. */
const NUM_BLOCKS = 512;

export interface OurSpeculationOptions {
  model: LoadedModel;
  turns: readonly TokenTurn[];
  /** Batch sizes: at batch b, the first b variants of a kind at once. */
  batches: readonly number[];
  /** Off/on pairs per kind and batch (the order alternates: off first on even reps). */
  reps: number;
  /** The engine's speculation and the mode to run; null: off only (the on side pending). */
  speculation: { hook: SpeculationHook; mode: string } | null;
  /** onnxruntime intra-op threads (default every core). */
  threads?: number | undefined;
  /** Weight precision (default the cpu default: int8 for a Q4_1 GGUF). */
  weights?: WeightPrecision | undefined;
  log: (line: string) => void;
}

/**
 * Our half of the speculative bench: one engine on the cpu executor (`weights`, default the cpu default),
 * speculation on in the given mode, every "off" request opted out on that same engine; per kind
 * and batch, `reps` off/on pairs in alternating order, greedy, the reply ending at the model's end
 * of turn or at the kind's `maxTokens`.
 *
 * Every run uses a cache salt of its own (a tenant of its own), so no run drafts from an earlier
 * run's identical reply (the suffix source learns a tenant's replies); its prompts are prefilled
 * under that salt first (one token each), so the measured run finds them cached and decodes from
 * its first step: the decode window is from the first request's first token to the last's last.
 *
 * @example
 * const r = await runOurSpeculation({ model, turns, batches: [1, 8], reps: 3, speculation: null, log });
 */
export async function runOurSpeculation(o: OurSpeculationOptions): Promise<{ runs: RunRecord[]; checks: TurnCheck[]; divergences: Divergence[]; setup: string }> {
  const weights = benchWeights(o.model, o.weights, o.log);
  const executor = await benchExecutor(o.model, weights, NUM_BLOCKS, o.threads);
  try {
    const extra = o.speculation ? o.speculation.hook.engineOptions(o.speculation.mode) : {};
    const engine = benchEngine(o.model, executor, { numBlocks: NUM_BLOCKS, extra, backendId: "speculative-bench" });
    await engine.generateTokens({ tokenIds: o.turns[0]!.prompts[0]!.slice(0, 8), sampling: greedy(2), cacheSalt: "warm-up" });
    const settings: Setting[] = o.speculation ? ["off", "on"] : ["off"];
    const progress = new Progress("speculative ours", o.batches.length * o.turns.length * o.reps * settings.length);
    const runs: RunRecord[] = [];
    const checks: TurnCheck[] = [];
    for (const batch of o.batches) {
      for (const turn of o.turns) {
        for (let rep = 0; rep < o.reps; rep++) {
          for (const setting of rep % 2 === 0 ? settings : [...settings].reverse()) {
            const { record, results } = await runOnce(engine, o, turn, batch, setting, rep);
            runs.push(record);
            if (rep === 0 && setting === "off") checks.push(checkOf(turn, batch, results));
            progress.tick(`batch ${batch} ${turn.kind} ${setting} ${((record.decodeTokens / record.decodeMs) * 1000).toFixed(1)} tok/s`);
          }
        }
      }
    }
    const divergences = o.speculation ? await explainDivergences(engine, o.speculation.hook, o.turns, runs) : [];
    if (divergences.length) o.log(`outputs with speculation differ in ${divergences.length} replies; top-2 margins where they first differ (off run): ${divergences.map((d) => d.offMargin).join(", ")}`);
    const mode = o.speculation ? `speculation ${o.speculation.mode}, drafts of at most ${o.speculation.hook.maxDraftTokens} tokens (off requests opted out on the same engine)` : "speculation off only";
    return { runs, checks, divergences, setup: `Agent Edge engine in-process on the cpu executor, ${weights.precision} weights, ${o.threads ?? "all"} threads, 512-token steps, ${NUM_BLOCKS} KV blocks of 16, prefix cache on, ${mode}` };
  } finally {
    await executor.dispose();
  }
}

/** One run: the first `batch` variants of `turn` at once under a fresh cache salt, their prompts prefilled first. */
async function runOnce(engine: Engine, o: OurSpeculationOptions, turn: TokenTurn, batch: number, setting: Setting, rep: number) {
  const salt = `speculative-${batch}-${turn.kind}-${rep}-${setting}`;
  const prompts = turn.prompts.slice(0, batch);
  const optOut = setting === "off" && o.speculation ? o.speculation.hook.optOut : {};
  await Promise.all(prompts.map((tokenIds) => engine.generateTokens({ tokenIds, sampling: greedy(1), cacheSalt: salt, ...optOut })));
  const requests: TokenRequest[] = prompts.map((tokenIds) => ({ tokenIds, sampling: { ...greedy(turn.maxTokens), ignoreEos: false }, cacheSalt: salt, ...optOut }));
  const results = await Promise.all(requests.map((r) => engine.generateTokens(r)));
  // All submitted in one tick: each request's timings count from the same arrival.
  const first = Math.min(...results.map((r) => r.timings.ttftMs));
  const last = Math.max(...results.map((r) => r.timings.ttftMs + r.timings.decodeMs));
  const figures = results.map((r) => (setting === "on" && o.speculation ? o.speculation.hook.figures(r) : { drafted: 0, accepted: 0 }));
  const record: RunRecord = {
    side: "ours",
    kind: turn.kind,
    class: turn.class,
    batch,
    setting,
    rep,
    decodeTokens: results.reduce((a, r) => a + Math.max(0, r.tokenIds.length - 1), 0),
    decodeMs: last - first,
    drafted: figures.reduce((a, f) => a + f.drafted, 0),
    accepted: figures.reduce((a, f) => a + f.accepted, 0),
    outputs: results.map((r) => r.tokenIds),
  };
  return { record, results };
}

function checkOf(turn: TokenTurn, batch: number, results: readonly TokenResult[]): TurnCheck {
  return {
    side: "ours",
    kind: turn.kind,
    class: turn.class,
    batch,
    copied: results.map((r, i) => copiedFraction(turn.prompts[i]!, r.tokenIds)),
    tokens: results.map((r) => r.tokenIds.length),
  };
}
