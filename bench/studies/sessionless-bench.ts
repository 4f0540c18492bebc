import { setTimeout as sleep } from "node:timers/promises";
import { commonPrefixLength } from "../../protocol/common-prefix";
import type { ChatMessage } from "../../protocol/messages";
import type { RoutingPolicyName } from "../../durable-objects/routing/routing-policy";
import { loadModel } from "../../gpu-backend/engine/load-model";
import { BLOCK_SIZE } from "../kit/engine";
import { Progress, note } from "../kit/progress";
import { round, sum } from "../kit/report";
import { startBenchStack, type BenchStack } from "../kit/stack";
import { sendAgentTurn } from "../kit/turn-client";
import { makeWorkload, WORDS, type WorkloadTrajectory } from "../kit/workload";

/**
 * `npm run bench -- sessionless [--backends N] [--trajectories M] [--turns T] [--quick] [--json]`
 *
 * M agent clients that name no session (no `x-trajectory-id`, no `prompt_cache_key`: most
 * Anthropic clients and many OpenAI ones) share one system prompt and tools and resend their
 * growing transcript every turn, concurrently, over N backends. Once with the edge's cache-aware
 * placement of stateless turns (`affinity`: the pool places each request by its conversation key,
 * else its first message's key: src/http/turn-events.ts) and once with `round-robin`, each on
 * fresh caches (its own cache salt). Reports the prefix-cache hit rate (cached / prompt tokens),
 * the tokens computed, and how evenly the turns spread (max / mean turns per backend).
 */
export interface SessionlessBenchOptions {
  quick: boolean;
  backends?: number;
  trajectories?: number;
  turns?: number;
  model?: string;
}

export interface SessionlessPolicyFigures {
  policy: RoutingPolicyName;
  turns: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  hitRate: number;
  /**
   * The most a cache could reuse: per client, the shared prefix of the first prompts (block-rounded)
   * on its first turn (all but one client), then its previous prompt (block-rounded) on each later
   * turn. Over the prompt tokens.
   */
  idealHitRate: number;
  /** Turns per backend, max over mean (1 = perfectly even). */
  maxOverMeanTurns: number;
  routes: Record<string, number>;
  /** Turns resent after a 5xx (none expected). */
  retries: number;
  wallS: number;
}

export interface SessionlessSummary {
  backends: number;
  clients: number;
  turns: number;
  affinity: SessionlessPolicyFigures;
  roundRobin: SessionlessPolicyFigures;
  /** Affinity's hit rate over round-robin's. */
  hitRateRatio: number;
  /** Round-robin's computed prompt tokens over affinity's. */
  computedRatio: number;
}


export async function runSessionlessBench(o: SessionlessBenchOptions): Promise<SessionlessSummary> {
  const numBackends = o.backends ?? 4;
  const clients = o.trajectories ?? 32;
  const turns = o.turns ?? (o.quick ? 3 : 5);
  const model = await loadModel({ dir: o.model, log: () => {} });
  const workload = makeWorkload({
    trajectories: clients,
    turns,
    groupNames: true,
    systemTokens: o.quick ? 300 : 600,
    systemCountsTools: false,
    tools: { count: o.quick ? 6 : 10, descriptionWords: 24, args: 3, argWords: 8 },
    taskTokens: 40,
    observationTokens: o.quick ? [100, 200] : [150, 300],
    replyTokens: [6, 10],
    replyLengthFirst: false,
    pauseMs: [50, 300],
    startSpreadMs: 2000,
    vocabulary: WORDS.slice(0, 56),
    seed: 23,
    countTokens: (t) => model.codec.encode(t).length,
  });
  note("sessionless", `${model.spec.modelId}, ${numBackends} backends x ${clients} sessionless clients x ${turns} turns, one shared system prompt`);
  note("sessionless", `starting ${numBackends} backends`);
  const stack = await startBenchStack({ name: "sessionless", backends: numBackends, ...(o.model ? { model: o.model } : {}), backend: { kvMemory: "1GiB", threads: 1 }, edge: false });
  try {
    const firstIds = workload.map((t) => model.codec.encode(model.codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true })));
    const sharedFirst = firstIds.slice(1).reduce((n, ids) => Math.min(n, commonPrefixLength(firstIds[0]!, ids)), firstIds[0]!.length);
    const run = (policy: RoutingPolicyName) => runPolicy({ policy, stack, workload, modelId: model.spec.modelId, sharedFirst });
    const affinity = await run("affinity");
    const roundRobin = await run("round-robin");
    return {
      backends: numBackends,
      clients,
      turns,
      affinity,
      roundRobin,
      hitRateRatio: round(affinity.hitRate / Math.max(roundRobin.hitRate, 1e-9), 2),
      computedRatio: round(roundRobin.computedTokens / Math.max(affinity.computedTokens, 1), 2),
    };
  } finally {
    await stack.close();
  }
}

async function runPolicy(p: { policy: RoutingPolicyName; stack: BenchStack; workload: WorkloadTrajectory[]; modelId: string; sharedFirst: number }): Promise<SessionlessPolicyFigures> {
  note("sessionless", `${p.policy}: starting wrangler dev`);
  await p.stack.startEdge({ vars: { ROUTING_POLICY: p.policy, CACHE_SALT_SECRET: `sessionless-bench-${p.policy}-${Date.now()}` }, state: p.policy });
  try {
    const progress = new Progress("sessionless", sum(p.workload.map((t) => t.turns.length)));
    const figures = { turns: 0, promptTokens: 0, cachedTokens: 0, computedTokens: 0 };
    const perBackend = new Map<string, number>();
    const routes: Record<string, number> = {};
    let idealCached = -blockFloor(p.sharedFirst); // the very first request finds nothing
    let retries = 0;
    const start = performance.now();
    await Promise.all(
      p.workload.map(async (client) => {
        await sleep(client.startDelayMs);
        const transcript: ChatMessage[] = [];
        let previousPrompt = 0;
        for (const turn of client.turns) {
          // No trajectory id, not streamed; a failed turn stores nothing, so it is resent (counted).
          const { reply } = await sendAgentTurn({ edgeUrl: p.stack.edgeUrl, modelId: p.modelId, tools: client.tools, turn, transcript, stream: false }, () => void retries++);
          idealCached += blockFloor(previousPrompt === 0 ? p.sharedFirst : previousPrompt);
          previousPrompt = reply.promptTokens;
          figures.turns++;
          figures.promptTokens += reply.promptTokens;
          figures.cachedTokens += reply.cachedTokens;
          figures.computedTokens += reply.promptTokens - reply.cachedTokens;
          perBackend.set(reply.backend ?? "?", (perBackend.get(reply.backend ?? "?") ?? 0) + 1);
          routes[reply.route ?? "?"] = (routes[reply.route ?? "?"] ?? 0) + 1;
          progress.tick(p.policy);
        }
      }),
    );
    const counts = [...perBackend.values()];
    while (counts.length < p.stack.backendUrls.length) counts.push(0);
    const result: SessionlessPolicyFigures = {
      policy: p.policy,
      ...figures,
      hitRate: round(figures.cachedTokens / figures.promptTokens, 3),
      idealHitRate: round(idealCached / figures.promptTokens, 3),
      maxOverMeanTurns: round(Math.max(...counts) / (sum(counts) / counts.length), 2),
      routes,
      retries,
      wallS: round((performance.now() - start) / 1000, 1),
    };
    note("sessionless", `${p.policy}: hit rate ${result.hitRate} (ideal ${result.idealHitRate}), computed ${result.computedTokens} tokens, turns per backend max/mean ${result.maxOverMeanTurns}, ${result.wallS} s`);
    return result;
  } finally {
    await p.stack.stopEdge();
  }
}

function blockFloor(tokens: number): number {
  return Math.floor(tokens / BLOCK_SIZE) * BLOCK_SIZE;
}
