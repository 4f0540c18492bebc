import type { ChatMessage } from "../protocol/messages";
import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { backendMeters } from "./kit/backend-metrics";
import { cpuSeconds, type CpuBreakdown } from "./kit/machine";
import { samplePool } from "./kit/pool";
import { Progress, note } from "./kit/progress";
import { round, sum } from "./kit/report";
import type { BenchStack } from "./kit/stack";
import { trajectoryState, type TurnRecordView } from "./kit/trajectory-view";
import { sendAgentTurn } from "./kit/turn-client";
import type { WorkloadTrajectory } from "./kit/workload";
import type { TurnResult } from "./routing-report";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * One routing policy's run: starts `wrangler dev` with `ROUTING_POLICY` set against the running
 * backends, sends every trajectory's turns concurrently through the OpenAI-compatible API
 * (streaming, tool pauses between turns, up to 3 tries a turn), reads which backend served each
 * turn from the trajectory URLs, and stops the edge.
 */
export async function runPolicy(params: { policy: RoutingPolicyName; stack: BenchStack; workload: WorkloadTrajectory[]; modelId: string }): Promise<{
  results: TurnResult[];
  /** Epoch ms when the workload started. */
  startedAt: number;
  wallMs: number;
  backends: string[];
  sampledLoad: Record<string, number>;
  downSamples: Record<string, number>;
  usage: Record<string, { cpuS: number; executorS: number }>;
  retries: number;
  cpu: CpuBreakdown;
}> {
  const { policy, stack, workload } = params;
  note("routing", `${policy}: starting wrangler dev`);
  try {
    // A salt of its own per policy: blocks cached under another policy never hit.
    const edge = await stack.startEdge({ vars: { ROUTING_POLICY: policy, CACHE_SALT_SECRET: `routing-bench-${policy}-${Date.now()}` }, state: policy });
    const backends = stack.backends.map((b) => b.parts[0]!.name);
    note("routing", `${policy}: stack ready in ${edge.readySeconds.toFixed(1)} s; running the workload`);

    const run = `${policy}-${Date.now().toString(36)}`;
    const progress = new Progress("routing", sum(workload.map((t) => t.turns.length)));
    const client: Omit<TurnResult, "computedTokens" | "backend" | "mode" | "fullReason" | "route" | "doTtftMs">[] = [];
    const retries: string[] = [];
    const sampler = samplePool(stack);
    const before = await backendMeters(stack);
    const pids = () => ({ backends: stack.backendPids(), edge: edge.pids() });
    const cpuBefore = cpuSeconds(pids());
    const start = performance.now();
    const startedAt = Date.now();
    await Promise.all(
      workload.map(async (traj) => {
        await sleep(traj.startDelayMs);
        const transcript: ChatMessage[] = [];
        for (let k = 0; k < traj.turns.length; k++) {
          const { reply, sentAt } = await sendAgentTurn({ edgeUrl: stack.edgeUrl, trajectoryId: `${run}-${traj.id}`, modelId: params.modelId, tools: traj.tools, turn: traj.turns[k]!, transcript }, (e) => {
            retries.push(`${traj.id} turn ${k + 1}: ${e.message.slice(0, 160)}`);
            stack.onLine(`[routing] retrying ${traj.id} turn ${k + 1}: ${e.message}`);
          });
          const { ttftMs, promptTokens, cachedTokens, completionTokens } = reply;
          client.push({ trajectory: traj.id, group: traj.group, turn: k + 1, sentAtMs: sentAt - start, ttftMs, totalMs: performance.now() - sentAt, promptTokens, cachedTokens, completionTokens });
          progress.tick(policy);
        }
      }),
    );
    const wallMs = performance.now() - start;
    const after = await backendMeters(stack);
    const cpuAfter = cpuSeconds(pids());
    const cpu = Object.fromEntries((Object.keys(cpuAfter) as (keyof CpuBreakdown)[]).map((k) => [k, round(cpuAfter[k] - cpuBefore[k], 1)])) as unknown as CpuBreakdown;
    const sampledLoad = await sampler.stop();
    const usage = Object.fromEntries(
      Object.keys(after).map((id) => [id, { cpuS: round(after[id]!.cpuS - (before[id]?.cpuS ?? 0), 1), executorS: round((after[id]!.stepMs - (before[id]?.stepMs ?? 0)) / 1000, 1) }]),
    );

    // Which backend served each turn, what it computed: the trajectory URLs' turn records.
    const records = new Map<string, TurnRecordView>();
    for (const traj of workload) for (const t of (await trajectoryState(stack.edgeUrl, `${run}-${traj.id}`)).turns) records.set(`${traj.id}\u0000${t.turn}`, t);
    const results: TurnResult[] = client.map((c) => {
      const r = records.get(`${c.trajectory}\u0000${c.turn}`);
      if (!r) throw new Error(`no turn record for ${c.trajectory} turn ${c.turn}`);
      return { ...c, computedTokens: r.computed_tokens, backend: r.backend, mode: r.mode, fullReason: r.full_reason, route: r.route ?? null, doTtftMs: r.ttft_ms, kvPull: r.kv_pull ?? null, miss: r.miss ?? null };
    });
    if (retries.length > 0) note("routing", `${policy}: ${retries.length} turn(s) resent after an error, first: ${retries[0]}`);
    return { results, startedAt, wallMs, backends, sampledLoad: sampledLoad.load, downSamples: sampledLoad.down, usage, retries: retries.length, cpu };
  } finally {
    await stack.stopEdge();
  }
}
