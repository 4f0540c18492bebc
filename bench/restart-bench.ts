import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChatMessage } from "../protocol/messages";
import { commonPrefixLength } from "../protocol/common-prefix";
import { loadModel } from "../gpu-backend/engine/load-model";
import { freePort, startStack, type Stack } from "../scripts/stack";
import { note } from "./progress";
import { percentile } from "../durable-objects/trajectory/lease-policy";
import { idealCachedTokens, round } from "./routing-report";
import { workloadSizes } from "./routing-bench";
import { sendAgentTurn, sleep } from "./routing-policy-run";
import { waitForPool } from "./routing-stack-meters";
import { makeRoutingWorkload, type RoutingTrajectory } from "./routing-workload";

/**
 * `npm run bench -- restart [--backends N] [--trajectories M] [--turns T] [--quick] [--json]`
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
export interface RestartBenchOptions {
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

export interface RestartSummary {
  backends: number;
  trajectories: number;
  turns: number;
  modes: Record<RestartMode, RestartModeFigures>;
  /** transfer's hitOverIdeal during the restarts / recompute's. */
  duringHitTransferOverRecompute: number;
}

const BLOCK_SIZE = 16;
const PUSH_LINE = /drain push: (\d+) trajectories, (\d+) blocks .* (\d+) failed, (\d+) left/;

export async function runRestartBench(o: RestartBenchOptions): Promise<RestartSummary> {
  const numBackends = o.backends ?? 4;
  const numTrajectories = o.trajectories ?? 32;
  const sizes = workloadSizes(true);
  const turns = o.turns ?? (o.quick ? 4 : 6);
  const model = await loadModel({ dir: o.model, log: () => {} });
  const { codec } = model;
  // Enough trajectories for the clients never to run out (each client runs them one after another).
  const workload = makeRoutingWorkload({
    trajectories: numTrajectories * 40,
    turns,
    groupShares: [0.5, 0.2, 0.15, 0.15],
    systemTokens: sizes.systemTokens,
    tools: sizes.tools,
    observationTokens: sizes.observationTokens,
    replyTokens: sizes.replyTokens,
    pauseMs: [200, 800],
    startSpreadMs: 2000,
    seed: 23,
    countTokens: (t) => codec.encode(t).length,
  });
  const firstIds = new Map(workload.map((t) => [t.id, codec.encode(codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true }))]));
  const sharedPrefix = (a: string, b: string) => commonPrefixLength(firstIds.get(a)!, firstIds.get(b)!);
  mkdirSync(o.outDir, { recursive: true });
  const logPath = join(o.outDir, "restart-stack.log");
  writeFileSync(logPath, "");
  note("restart", `${model.spec.modelId}, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns; log: ${logPath}`);

  const modes = {} as Record<RestartMode, RestartModeFigures>;
  for (const mode of ["transfer", "recompute"] as const) {
    modes[mode] = await runMode({ mode, numBackends, clients: numTrajectories, workload, modelDir: o.model, modelId: model.spec.modelId, logPath, sharedPrefix });
    const m = modes[mode];
    process.stderr.write(`\n${mode}: restarts took ${m.restartS} s; pushed ${JSON.stringify(m.pushed)}; resent ${m.resent}\n${phaseTable(m.phases)}\n`);
  }
  const summary: RestartSummary = {
    backends: numBackends,
    trajectories: numTrajectories,
    turns,
    modes,
    duringHitTransferOverRecompute: round(modes.transfer.phases.during.hitOverIdeal / Math.max(1e-9, modes.recompute.phases.during.hitOverIdeal), 2),
  };
  process.stderr.write(`\nRolling restart, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns (cached / ideal prompt tokens):\n`);
  process.stderr.write(`${["mode", "before", "during", "after"].join("\t")}\n`);
  for (const mode of ["transfer", "recompute"] as const) {
    const p = modes[mode].phases;
    process.stderr.write(`${[mode, p.before.hitOverIdeal, p.during.hitOverIdeal, p.after.hitOverIdeal].join("\t")}\n`);
  }
  return summary;
}

async function runMode(p: {
  mode: RestartMode;
  numBackends: number;
  /** Trajectories in flight at once. */
  clients: number;
  workload: RoutingTrajectory[];
  modelDir: string | undefined;
  modelId: string;
  logPath: string;
  sharedPrefix: (a: string, b: string) => number;
}): Promise<RestartModeFigures> {
  const t0 = performance.now();
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-restart-"));
  const edgePort = await freePort();
  const ports: number[] = [];
  for (let i = 0; i < p.numBackends; i++) ports.push(await freePort());
  const pushed = { trajectories: 0, blocks: 0, failures: 0, left: 0 };
  const onLine = (line: string) => {
    appendFileSync(p.logPath, `${new Date().toISOString()} [${p.mode}] ${line}\n`);
    const m = PUSH_LINE.exec(line);
    if (m) {
      pushed.trajectories += Number(m[1]);
      pushed.blocks += Number(m[2]);
      pushed.failures += Number(m[3]);
      pushed.left += Number(m[4]);
    }
  };
  const secret = `restart-bench-${Date.now()}`;
  const backendArgs = ["--kv-pull", p.mode === "transfer" ? "auto" : "never", "--drain-grace", "1000"];
  const startBackend = (port: number) =>
    startStack({ ...(p.modelDir ? { modelDir: p.modelDir } : {}), backendPorts: [port], edgePort, secret, kvMemory: "1GiB", threads: 1, startEdge: false, backendArgs, onLine });
  note("restart", `${p.mode}: starting ${p.numBackends} backends and wrangler dev`);
  const backends: Stack[] = await Promise.all(ports.map(startBackend));
  let edge: Stack | undefined;
  try {
    edge = await startStack({
      backendUrls: backends.map((b) => b.backendUrls[0]!),
      secret,
      edgePort,
      inspectorPort: await freePort(),
      devtools: false,
      persistTo: join(dir, "edge"),
      vars: { CACHE_SALT_SECRET: `restart-bench-${p.mode}-${Date.now()}` },
      onLine,
    });
    await waitForPool(edge, ports.length, 60_000);
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
      for (let i = 0; i < backends.length; i++) {
        const old = backends[i]!;
        const proc = old.parts[0]!.process;
        note("restart", `${p.mode}: SIGTERM to ${old.parts[0]!.name} (${outcomes.length} turns done)`);
        proc.signalGroup("SIGTERM");
        const exit = await Promise.race([proc.exited, sleep(180_000).then(() => undefined)]);
        if (!exit) throw new Error(`${old.parts[0]!.name} did not exit within 180 s of SIGTERM`);
        await old.stop();
        backends[i] = await startBackend(ports[i]!);
        await waitForPool(edge!, ports.length, 60_000);
        note("restart", `${p.mode}: ${old.parts[0]!.name} is back (${outcomes.length} turns done)`);
      }
      window.to = performance.now() - start;
      stopAfter = outcomes.length + p.clients * 2;
      note("restart", `${p.mode}: all ${backends.length} backends restarted in ${((window.to - window.from) / 1000).toFixed(1)} s`);
    })();
    const headers = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };
    const run = `${p.mode}-${Date.now().toString(36)}`;
    const queue = [...p.workload];
    const client = async (slot: number) => {
      await sleep(Math.floor((slot / p.clients) * 2000));
      while (outcomes.length < stopAfter) {
        const traj = queue.shift();
        if (!traj) throw new Error(`the workload ran out after ${outcomes.length} turns: give fewer --trajectories or more turns`);
        const transcript: ChatMessage[] = [];
        for (let k = 0; k < traj.turns.length && outcomes.length < stopAfter; k++) {
          const turn = traj.turns[k]!;
          const { reply, sentAt: sent } = await sendAgentTurn({ edgeUrl: edge!.edgeUrl, headers, trajectoryId: `${run}-${traj.id}`, modelId: p.modelId, tools: traj.tools, turn, transcript }, (e) => {
            resent++;
            onLine(`[restart] resending ${traj.id} turn ${k + 1}: ${e.message}`);
          });
          outcomes.push({
            trajectory: traj.id,
            turn: k + 1,
            sentAtMs: sent - start,
            ttftMs: reply.ttftMs,
            promptTokens: reply.usage.prompt_tokens,
            cachedTokens: reply.usage.prompt_tokens_details?.cached_tokens ?? 0,
            completionTokens: reply.usage.completion_tokens,
          });
          if (performance.now() - lastNote > 5000) {
            lastNote = performance.now();
            note("restart", `${p.mode}: ${outcomes.length} turns done (${window.from === Infinity ? "before" : window.to === Infinity ? "during" : "after"} the restarts), ${((performance.now() - start) / 1000).toFixed(0)} s`);
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
    await edge?.stop();
    await Promise.all(backends.map((b) => b.stop()));
    rmSync(dir, { recursive: true, force: true });
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

function phaseTable(phases: Record<Phase, PhaseFigures>): string {
  const rows = [["phase", "turns", "cached/ideal", "cached/prompt", "TTFT p50 ms", "TTFT p99 ms"].join("\t")];
  for (const [name, f] of Object.entries(phases)) rows.push([name, f.turns, f.hitOverIdeal, f.hitRate, f.p50TtftMs, f.p99TtftMs].join("\t"));
  return rows.join("\n");
}
