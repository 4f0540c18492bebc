import { setTimeout as sleep } from "node:timers/promises";
import type { ChatMessage } from "../protocol/messages";
import { loadModel } from "../gpu-backend/engine/load-model";
import { BLOCK_SIZE } from "./kit/engine";
import { note } from "./kit/progress";
import { percentile, round, table } from "./kit/report";
import { startBenchStack } from "./kit/stack";
import { sendAgentTurn } from "./kit/turn-client";
import type { WorkloadTrajectory } from "./kit/workload";
import { routingWorkload, sharedFirstPrefix } from "./routing-bench";
import { idealCachedTokens } from "./routing-report";

/**
 * `npm run bench -- rolling-restart [--backends N] [--trajectories M] [--turns T] [--quick] [--json]`
 *
 * A rolling restart under load: N backends (4) and `wrangler dev`, M agent trajectories (32) in
 * flight at all times (closed loop: a client whose trajectory ends starts the next one), each of
 * T turns (6) through the OpenAI-compatible API (streaming, tool pauses). Once every client has
 * done 2 turns, each backend in turn gets SIGTERM (it drains: stops taking placements, finishes
 * its turns, pushes its trajectories' blocks to its peers, says it is leaving, exits) and is
 * started again on the same port, back in the pool before the next one goes. After the last one
 * is back the clients run 2 turns each more, then stop. Every turn is sorted by when it was sent:
 * before the first SIGTERM, during the restarts, after the last backend is back.
 *
 * Run twice, on fresh backends each time: `transfer` (the default, `--kv-pull auto`: drained
 * blocks are pushed, moved trajectories pull what they lack) and `recompute` (`--kv-pull never`:
 * nothing moves, a moved trajectory prefills its transcript again). Per phase: cached / ideal
 * prompt tokens (ideal: routing-report.ts `idealCachedTokens`), cached / prompt tokens, TTFT
 * p50/p99, turns. A turn that fails 3 times stops the run; resent turns are counted.
 */
export interface RollingRestartOptions {
  quick: boolean;
  backends?: number;
  trajectories?: number;
  turns?: number;
  model?: string;
  outDir: string;
}

export type RestartMode = "transfer" | "recompute";
export type Phase = "before" | "during" | "after";

interface TurnOutcome {
  trajectory: string;
  turn: number;
  sentAtMs: number;
  ttftMs: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
}

export interface PhaseFigures {
  turns: number;
  promptTokens: number;
  cachedTokens: number;
  idealCachedTokens: number;
  /** cached / ideal prompt tokens. */
  hitOverIdeal: number;
  /** cached / prompt tokens. */
  hitRate: number;
  p50TtftMs: number;
  p99TtftMs: number;
}

export interface RestartModeFigures {
  phases: Record<Phase, PhaseFigures>;
  /** Seconds from the first SIGTERM until the last backend was back in the pool. */
  restartS: number;
  /** Turns resent after an error (the client's retries; each stored once). */
  resent: number;
  /** What the drains pushed, from the backends' `drain push:` lines (`left`: not pushed, out of time). */
  pushed: { trajectories: number; blocks: number; failures: number; left: number };
  wallS: number;
}

export interface RollingRestartSummary {
  backends: number;
  trajectories: number;
  turns: number;
  modes: Record<RestartMode, RestartModeFigures>;
  /** transfer's hitOverIdeal during the restarts / recompute's. */
  duringHitTransferOverRecompute: number;
}

const PUSH_LINE = /drain push: (\d+) trajectories, (\d+) blocks .* (\d+) failed, (\d+) left/;

export async function runRollingRestartBench(o: RollingRestartOptions): Promise<RollingRestartSummary> {
  const numBackends = o.backends ?? 4;
  const numTrajectories = o.trajectories ?? 32;
  const turns = o.turns ?? (o.quick ? 4 : 6);
  const model = await loadModel({ dir: o.model, log: () => {} });
  // Enough trajectories for the clients never to run out (each client runs them one after another).
  const workload = routingWorkload(model, { trajectories: numTrajectories * 40, turns, quick: true, pauseMs: [200, 800], seed: 23 });
  const { sharedPrefix } = sharedFirstPrefix(model, workload);
  note("rolling-restart", `${model.spec.modelId}, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns; logs: ${o.outDir}/rolling-restart-*-stack.log`);

  const modes = {} as Record<RestartMode, RestartModeFigures>;
  for (const mode of ["transfer", "recompute"] as const) {
    modes[mode] = await runMode({ mode, numBackends, clients: numTrajectories, workload, modelDir: o.model, modelId: model.spec.modelId, outDir: o.outDir, sharedPrefix });
    const m = modes[mode];
    const rows = Object.entries(m.phases).map(([name, f]) => [name, f.turns, f.hitOverIdeal, f.hitRate, f.p50TtftMs, f.p99TtftMs]);
    process.stderr.write(`\n${mode}: restarts took ${m.restartS} s; pushed ${JSON.stringify(m.pushed)}; resent ${m.resent}\n${table(["phase", "turns", "cached/ideal", "cached/prompt", "TTFT p50 ms", "TTFT p99 ms"], rows)}\n`);
  }
  const summary: RollingRestartSummary = {
    backends: numBackends,
    trajectories: numTrajectories,
    turns,
    modes,
    duringHitTransferOverRecompute: round(modes.transfer.phases.during.hitOverIdeal / Math.max(1e-9, modes.recompute.phases.during.hitOverIdeal), 2),
  };
  const rows = (["transfer", "recompute"] as const).map((mode) => [mode, ...(["before", "during", "after"] as const).map((ph) => modes[mode].phases[ph].hitOverIdeal)]);
  process.stderr.write(`\nRolling restart, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns (cached / ideal prompt tokens):\n${table(["mode", "before", "during", "after"], rows)}\n`);
  return summary;
}

async function runMode(p: {
  mode: RestartMode;
  numBackends: number;
  /** Trajectories in flight at once. */
  clients: number;
  workload: WorkloadTrajectory[];
  modelDir: string | undefined;
  modelId: string;
  outDir: string;
  sharedPrefix: (a: string, b: string) => number;
}): Promise<RestartModeFigures> {
  const t0 = performance.now();
  const pushed = { trajectories: 0, blocks: 0, failures: 0, left: 0 };
  note("rolling-restart", `${p.mode}: starting ${p.numBackends} backends and wrangler dev`);
  const stack = await startBenchStack({
    name: `rolling-restart-${p.mode}`,
    backends: p.numBackends,
    outDir: p.outDir,
    ...(p.modelDir ? { model: p.modelDir } : {}),
    backend: { kvMemory: "1GiB", threads: 1, backendArgs: ["--kv-pull", p.mode === "transfer" ? "auto" : "never", "--drain-grace", "1000"] },
    edge: { vars: { CACHE_SALT_SECRET: `rolling-restart-${p.mode}-${Date.now()}` } },
    onLine: (line) => {
      const m = PUSH_LINE.exec(line);
      if (!m) return;
      pushed.trajectories += Number(m[1]);
      pushed.blocks += Number(m[2]);
      pushed.failures += Number(m[3]);
      pushed.left += Number(m[4]);
    },
  });
  try {
    const outcomes: TurnOutcome[] = [];
    let resent = 0;
    const start = performance.now();
    const window = { from: Infinity, to: Infinity };
    let stopAfter = Infinity; // the clients stop once this many turns are done
    let lastNote = performance.now();
    // The rolling restart, once every client has done 2 turns.
    const restarts = (async () => {
      while (outcomes.length < p.clients * 2) await sleep(100);
      window.from = performance.now() - start;
      for (let i = 0; i < p.numBackends; i++) {
        const name = stack.backends[i]!.parts[0]!.name;
        note("rolling-restart", `${p.mode}: SIGTERM to ${name} (${outcomes.length} turns done)`);
        await stack.stopBackend(i, "SIGTERM");
        await stack.startBackend(i);
        note("rolling-restart", `${p.mode}: ${name} is back (${outcomes.length} turns done)`);
      }
      window.to = performance.now() - start;
      stopAfter = outcomes.length + p.clients * 2;
      note("rolling-restart", `${p.mode}: all ${p.numBackends} backends restarted in ${((window.to - window.from) / 1000).toFixed(1)} s`);
    })();
    const run = `${p.mode}-${Date.now().toString(36)}`;
    const queue = [...p.workload];
    const client = async (slot: number) => {
      await sleep(Math.floor((slot / p.clients) * 2000));
      while (outcomes.length < stopAfter) {
        const traj = queue.shift();
        if (!traj) throw new Error(`the workload ran out after ${outcomes.length} turns: give fewer --trajectories or more turns`);
        const transcript: ChatMessage[] = [];
        for (let k = 0; k < traj.turns.length && outcomes.length < stopAfter; k++) {
          const { reply, sentAt } = await sendAgentTurn({ edgeUrl: stack.edgeUrl, trajectoryId: `${run}-${traj.id}`, modelId: p.modelId, tools: traj.tools, turn: traj.turns[k]!, transcript }, (e) => {
            resent++;
            stack.onLine(`[rolling-restart] resending ${traj.id} turn ${k + 1}: ${e.message}`);
          });
          const { ttftMs, promptTokens, cachedTokens, completionTokens } = reply;
          outcomes.push({ trajectory: traj.id, turn: k + 1, sentAtMs: sentAt - start, ttftMs, promptTokens, cachedTokens, completionTokens });
          if (performance.now() - lastNote > 5000) {
            lastNote = performance.now();
            note("rolling-restart", `${p.mode}: ${outcomes.length} turns done (${window.from === Infinity ? "before" : window.to === Infinity ? "during" : "after"} the restarts), ${((performance.now() - start) / 1000).toFixed(0)} s`);
          }
        }
      }
    };
    await Promise.all([restarts, ...Array.from({ length: p.clients }, (_, i) => client(i))]);
    const ideal = idealCachedTokens(outcomes, p.sharedPrefix, BLOCK_SIZE);
    const phaseOf = (t: TurnOutcome): Phase => (t.sentAtMs < window.from ? "before" : t.sentAtMs < window.to ? "during" : "after");
    const phases = Object.fromEntries(
      (["before", "during", "after"] as const).map((ph) => [ph, phaseFigures(outcomes.map((t, i) => ({ t, ideal: ideal[i]! })).filter(({ t }) => phaseOf(t) === ph))]),
    ) as Record<Phase, PhaseFigures>;
    return { phases, restartS: round((window.to - window.from) / 1000, 1), resent, pushed, wallS: round((performance.now() - t0) / 1000, 1) };
  } finally {
    await stack.close();
  }
}

/** Per-phase figures; `ideal` is each turn's ideal cached tokens. */
export function phaseFigures(turns: readonly { t: TurnOutcome; ideal: number }[]): PhaseFigures {
  const sum = (f: (x: { t: TurnOutcome; ideal: number }) => number) => turns.reduce((a, x) => a + f(x), 0);
  const cached = sum((x) => Math.min(x.t.cachedTokens, x.ideal));
  const ideal = sum((x) => x.ideal);
  const prompt = sum((x) => x.t.promptTokens);
  const ttfts = turns.map((x) => x.t.ttftMs).sort((a, b) => a - b);
  return {
    turns: turns.length,
    promptTokens: prompt,
    cachedTokens: sum((x) => x.t.cachedTokens),
    idealCachedTokens: ideal,
    hitOverIdeal: ideal > 0 ? round(cached / ideal, 3) : Number.NaN,
    hitRate: prompt > 0 ? round(sum((x) => x.t.cachedTokens) / prompt, 3) : Number.NaN,
    p50TtftMs: ttfts.length > 0 ? round(percentile(ttfts, 0.5), 1) : Number.NaN,
    p99TtftMs: ttfts.length > 0 ? round(percentile(ttfts, 0.99), 1) : Number.NaN,
  };
}
