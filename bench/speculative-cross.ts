import type { Engine, TokenResult } from "../gpu-backend/engine/engine";
import type { LoadedModel } from "../gpu-backend/engine/load-model";
import type { WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { benchEngine, benchExecutor, benchWeights, greedy } from "./kit/engine";
import { Progress } from "./kit/progress";
import { CROSS_MODES, type CrossCheck, type CrossMode, type CrossRun } from "./speculative-cross-report";
import { crossCopiedFraction, type CrossTokenTurn } from "./speculative-cross-workload";
import { DEFAULT_MAX_DRAFT_TOKENS } from "../gpu-backend/engine/speculation";
import { crossSpeculation, type CrossSpeculation } from "./speculative-engine";
import { copiedFraction } from "./speculative-workload";

/** KV blocks: 4 earlier trajectories of ~60 + 110 tokens at once, then one request at a time; the rest is cache. */
const NUM_BLOCKS = 256;

export interface CrossTrajectoryOptions {
  model: LoadedModel;
  turns: readonly CrossTokenTurn[];
  /** Rounds of the four modes per kind (off, lookup, suffix, control; the order reversed on odd rounds). */
  reps: number;
  threads?: number | undefined;
  weights?: WeightPrecision | undefined;
  log: (line: string) => void;
}

/**
 * The speculative bench's cross-trajectory phase (speculative-cross-workload.ts): one engine on
 * the cpu executor whose draft source is switched per run (`crossSpeculation`: lookup, or the
 * suffix source with its tenant tree), batch 1, greedy.
 *
 * Per kind: the tenant (cache salt `cross-<kind>`) first runs its earlier trajectories with
 * speculation on, all at once; the engine learns their replies into the tenant's tree as it
 * learns any finished reply. Learning then stops (so no measured run drafts from an earlier run's
 * identical reply: every run sees the same tree), and `reps` rounds measure the next trajectory
 * off (opted out), with lookup, with suffix, and with suffix under another tenant
 * (`cross-<kind>-other`, the control: its tree is empty, so it must draft as lookup does), each
 * run's prompt prefilled first so that it decodes from its first step.
 *
 * @example
 * const { runs, checks } = await runCrossTrajectory({ model, turns: crossTokenTurns(model, crossTurns()), reps: 2, log });
 */
export async function runCrossTrajectory(o: CrossTrajectoryOptions): Promise<{ runs: CrossRun[]; checks: CrossCheck[]; setup: string }> {
  const weights = benchWeights(o.model, o.weights, o.log);
  const executor = await benchExecutor(o.model, weights, NUM_BLOCKS, o.threads);
  try {
    const spec = crossSpeculation();
    const engine = benchEngine(o.model, executor, { numBlocks: NUM_BLOCKS, extra: spec.engineOptions, backendId: "speculative-cross" });
    await engine.generateTokens({ tokenIds: o.turns[0]!.prompt.slice(0, 8), sampling: greedy(2), cacheSalt: "warm-up", speculative: false });
    const progress = new Progress("speculative cross-trajectory", o.turns.length * (1 + o.reps * CROSS_MODES.length));
    const runs: CrossRun[] = [];
    const checks: CrossCheck[] = [];
    for (const turn of o.turns) {
      const tenant = `cross-${turn.kind}`;
      spec.mode = "suffix";
      spec.learning = true;
      const earlier = await Promise.all(turn.earlier.map((tokenIds) => engine.generateTokens({ tokenIds, sampling: { ...greedy(turn.maxTokens), ignoreEos: false }, cacheSalt: tenant })));
      spec.learning = false;
      progress.tick(`${turn.kind}: ${earlier.length} earlier trajectories, ${earlier.reduce((a, r) => a + r.tokenIds.length, 0)} reply tokens learned`);
      for (let rep = 0; rep < o.reps; rep++) {
        for (const mode of rep % 2 === 0 ? CROSS_MODES : [...CROSS_MODES].reverse()) {
          const { run, result } = await runOnce(engine, spec, turn, mode, rep, mode === "control" ? `${tenant}-other` : tenant);
          runs.push(run);
          if (rep === 0 && mode === "off") {
            const replies = earlier.map((r) => r.tokenIds);
            checks.push({ kind: turn.kind, copiedPrompt: copiedFraction(turn.prompt, result.tokenIds), copiedEarlier: crossCopiedFraction(turn.prompt, replies, result.tokenIds), tokens: result.tokenIds.length, earlierReplies: replies.length, earlierTokens: replies.reduce((a, r) => a + r.length, 0) });
          }
          progress.tick(`${turn.kind} ${mode} ${((run.decodeTokens / run.decodeMs) * 1000).toFixed(1)} tok/s`);
        }
      }
    }
    return {
      runs,
      checks,
      setup: `Agent Edge engine in-process on the cpu executor, ${weights.precision} weights, ${o.threads ?? "all"} threads, ${NUM_BLOCKS} KV blocks of 16, prefix cache on, batch 1; one engine whose draft source is switched per run between lookup and suffix (drafts of at most ${DEFAULT_MAX_DRAFT_TOKENS} tokens, adaptive), off requests opted out`,
    };
  } finally {
    await executor.dispose();
  }
}

async function runOnce(engine: Engine, spec: CrossSpeculation, turn: CrossTokenTurn, mode: CrossMode, rep: number, salt: string): Promise<{ run: CrossRun; result: TokenResult }> {
  spec.mode = mode === "lookup" ? "lookup" : "suffix";
  const optOut = mode === "off" ? { speculative: false } : {};
  await engine.generateTokens({ tokenIds: turn.prompt, sampling: greedy(1), cacheSalt: salt, ...optOut });
  const before = spec.treeDrafts(salt);
  const result = await engine.generateTokens({ tokenIds: turn.prompt, sampling: { ...greedy(turn.maxTokens), ignoreEos: false }, cacheSalt: salt, ...optOut });
  const run: CrossRun = {
    kind: turn.kind,
    mode,
    rep,
    decodeTokens: Math.max(0, result.tokenIds.length - 1),
    decodeMs: result.timings.decodeMs,
    drafted: result.speculation?.drafted ?? 0,
    accepted: result.speculation?.accepted ?? 0,
    treeDrafts: spec.treeDrafts(salt) - before,
    outputs: [result.tokenIds],
  };
  return { run, result };
}
