import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { commonPrefixLength } from "../protocol/common-prefix";
import type { ChatMessage } from "../protocol/messages";
import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { loadModel } from "../gpu-backend/engine/load-model";
import { freePort, startStack, type Stack } from "../scripts/stack";
import { answeringReply } from "./agent-workload";
import { makeRoutingWorkload, type RoutingTrajectory } from "./routing-workload";
import { Progress, note } from "./progress";
import { round } from "./routing-report";
import { waitForPool } from "./routing-stack-meters";

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

const API_KEY = "sk-local-dev";
const BLOCK_SIZE = 16; // the backends' default --block-size

export async function runSessionlessBench(o: SessionlessBenchOptions): Promise<SessionlessSummary> {
  const numBackends = o.backends ?? 4;
  const clients = o.trajectories ?? 32;
  const turns = o.turns ?? (o.quick ? 3 : 5);
  const model = await loadModel({ dir: o.model, log: () => {} });
  const countTokens = (t: string) => model.codec.encode(t).length;
  const workload = makeRoutingWorkload({
    trajectories: clients,
    turns,
    groupShares: [1],
    systemTokens: o.quick ? 300 : 600,
    tools: o.quick ? 6 : 10,
    observationTokens: o.quick ? [100, 200] : [150, 300],
    replyTokens: [6, 10],
    pauseMs: [50, 300],
    startSpreadMs: 2000,
    seed: 23,
    countTokens,
  });
  note("sessionless", `${model.spec.modelId}, ${numBackends} backends x ${clients} sessionless clients x ${turns} turns, one shared system prompt`);
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-sessionless-"));
  const edgePort = await freePort();
  const backendPorts: number[] = [];
  for (let i = 0; i < numBackends; i++) backendPorts.push(await freePort());
  note("sessionless", `starting ${numBackends} backends`);
  const backendStack = await startStack({ ...(o.model ? { modelDir: o.model } : {}), backendPorts, edgePort, kvMemory: "1GiB", threads: 1, startEdge: false, onLine: () => {} });
  try {
    const firstIds = workload.map((t) => model.codec.encode(model.codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true })));
    const sharedFirst = firstIds.slice(1).reduce((n, ids) => Math.min(n, commonPrefixLength(firstIds[0]!, ids)), firstIds[0]!.length);
    const run = async (policy: RoutingPolicyName) =>
      runPolicy({ policy, backendStack, edgePort, inspectorPort: await freePort(), persistTo: join(dir, policy), workload, modelId: model.spec.modelId, backends: numBackends, sharedFirst });
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
    await backendStack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function runPolicy(p: { policy: RoutingPolicyName; backendStack: Stack; edgePort: number; inspectorPort: number; persistTo: string; workload: RoutingTrajectory[]; modelId: string; backends: number; sharedFirst: number }): Promise<SessionlessPolicyFigures> {
  note("sessionless", `${p.policy}: starting wrangler dev`);
  const stack = await startStack({
    backendUrls: p.backendStack.backendUrls,
    secret: p.backendStack.secret,
    edgePort: p.edgePort,
    inspectorPort: p.inspectorPort,
    devtools: false,
    persistTo: p.persistTo,
    vars: { ROUTING_POLICY: p.policy, CACHE_SALT_SECRET: `sessionless-bench-${p.policy}-${Date.now()}` },
    onLine: () => {},
  });
  try {
    await waitForPool(stack, p.backends);
    const progress = new Progress("sessionless", p.workload.reduce((a, t) => a + t.turns.length, 0));
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
          await sleep(turn.pauseMs);
          transcript.push(...answeringReply(turn.newMessages, transcript.at(-1)));
          const body = { model: p.modelId, messages: transcript, tools: client.tools, max_tokens: turn.maxTokens, temperature: 0 };
          // A failed turn stores nothing, so a client may resend it (wrangler dev restarts when
          // watched files change); every resend is counted.
          let res: Response;
          let text: string;
          for (let attempt = 1; ; attempt++) {
            res = await fetch(`${stack.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" }, body: JSON.stringify(body) });
            text = await res.text();
            if (res.ok) break;
            if (attempt >= 3 || res.status < 500) throw new Error(`${p.policy}: ${client.id} answered ${res.status}: ${text.slice(0, 300)}`);
            retries++;
            await sleep(500);
          }
          const c = JSON.parse(text) as { choices: { message: ChatMessage }[]; usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
          transcript.push({ role: "assistant", content: c.choices[0]!.message.content, ...(c.choices[0]!.message.tool_calls ? { tool_calls: c.choices[0]!.message.tool_calls } : {}) });
          idealCached += blockFloor(previousPrompt === 0 ? p.sharedFirst : previousPrompt);
          previousPrompt = c.usage.prompt_tokens;
          figures.turns++;
          figures.promptTokens += c.usage.prompt_tokens;
          figures.cachedTokens += c.usage.prompt_tokens_details.cached_tokens;
          figures.computedTokens += c.usage.prompt_tokens - c.usage.prompt_tokens_details.cached_tokens;
          const backend = res.headers.get("x-agent-edge-backend") ?? "?";
          perBackend.set(backend, (perBackend.get(backend) ?? 0) + 1);
          const route = res.headers.get("x-agent-edge-route") ?? "?";
          routes[route] = (routes[route] ?? 0) + 1;
          progress.tick(p.policy);
        }
      }),
    );
    const counts = [...perBackend.values()];
    while (counts.length < p.backends) counts.push(0);
    const mean = counts.reduce((a, b) => a + b, 0) / counts.length;
    const result: SessionlessPolicyFigures = {
      policy: p.policy,
      ...figures,
      hitRate: round(figures.cachedTokens / figures.promptTokens, 3),
      idealHitRate: round(idealCached / figures.promptTokens, 3),
      maxOverMeanTurns: round(Math.max(...counts) / mean, 2),
      routes,
      retries,
      wallS: round((performance.now() - start) / 1000, 1),
    };
    note("sessionless", `${p.policy}: hit rate ${result.hitRate} (ideal ${result.idealHitRate}), computed ${result.computedTokens} tokens, turns per backend max/mean ${result.maxOverMeanTurns}, ${result.wallS} s`);
    return result;
  } finally {
    await stack.stop();
  }
}

function blockFloor(tokens: number): number {
  return Math.floor(tokens / BLOCK_SIZE) * BLOCK_SIZE;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
