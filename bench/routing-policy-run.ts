import type { ChatMessage, ToolDefinition } from "../protocol/messages";
import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { startStack, type Stack } from "../scripts/stack";
import { answeringReply } from "./agent-workload";
import type { RoutingTrajectory, RoutingTurn } from "./routing-workload";
import { Progress, note } from "./progress";
import { round, type CpuBreakdown, type TurnResult } from "./routing-report";
import { cpuSnapshot, meters, samplePool, waitForPool } from "./routing-stack-meters";
import { sseJson } from "./sse";

const API_KEY = "sk-local-dev";

/**
 * One routing policy's run: starts `wrangler dev` with `ROUTING_POLICY` set against the running
 * backends, sends every trajectory's turns concurrently through the OpenAI-compatible API
 * (streaming, tool pauses between turns, up to 3 tries a turn), reads which backend served each
 * turn from the session URLs, and stops the edge.
 */
export async function runPolicy(params: {
  policy: RoutingPolicyName;
  backendStack: Stack;
  edgePort: number;
  inspectorPort: number;
  persistTo: string;
  workload: RoutingTrajectory[];
  modelId: string;
  onLine: (line: string) => void;
}): Promise<{
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
  const { policy, workload } = params;
  note("routing", `${policy}: starting wrangler dev`);
  let stack: Stack | undefined;
  try {
    stack = await startStack({
      backendUrls: params.backendStack.backendUrls,
      secret: params.backendStack.secret,
      edgePort: params.edgePort,
      inspectorPort: params.inspectorPort,
      // wrangler dev's devtools inspector reports every streamed chunk to its Node process (~40 ms
      // of CPU per turn here), a cost of the local tool that a deployed Worker does not have.
      devtools: false,
      persistTo: params.persistTo,
      // A salt of its own per policy: blocks cached under another policy never hit.
      vars: { ROUTING_POLICY: policy, CACHE_SALT_SECRET: `routing-bench-${policy}-${Date.now()}` },
      onLine: params.onLine,
    });
    const backends = params.backendStack.parts.filter((p) => p.kind === "backend").map((p) => p.name);
    await waitForPool(stack, backends.length);
    note("routing", `${policy}: stack ready in ${stack.readySeconds.toFixed(1)} s; running the workload`);

    const headers = { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" };
    const run = `${policy}-${Date.now().toString(36)}`;
    const progress = new Progress("routing", workload.reduce((a, t) => a + t.turns.length, 0));
    const client: Omit<TurnResult, "computedTokens" | "backend" | "mode" | "fullReason" | "route" | "doTtftMs">[] = [];
    const retries: string[] = [];
    const sampler = samplePool(stack);
    const before = await meters(params.backendStack);
    const cpuBefore = cpuSnapshot(params.backendStack, stack);
    const start = performance.now();
    const startedAt = Date.now();
    await Promise.all(
      workload.map(async (traj) => {
        await sleep(traj.startDelayMs);
        const transcript: ChatMessage[] = [];
        for (let k = 0; k < traj.turns.length; k++) {
          const turn = traj.turns[k]!;
          const { reply, sentAt: sent } = await sendAgentTurn({ edgeUrl: stack!.edgeUrl, headers, trajectoryId: `${run}-${traj.id}`, modelId: params.modelId, tools: traj.tools, turn, transcript }, (e) => {
            retries.push(`${traj.id} turn ${k + 1}: ${e.message.slice(0, 160)}`);
            params.onLine(`[routing] retrying ${traj.id} turn ${k + 1}: ${e.message}`);
          });
          client.push({
            trajectory: traj.id,
            group: traj.group,
            turn: k + 1,
            sentAtMs: sent - start,
            ttftMs: reply.ttftMs,
            totalMs: performance.now() - sent,
            promptTokens: reply.usage.prompt_tokens,
            cachedTokens: reply.usage.prompt_tokens_details?.cached_tokens ?? 0,
            completionTokens: reply.usage.completion_tokens,
          });
          progress.tick(policy);
        }
      }),
    );
    const wallMs = performance.now() - start;
    const after = await meters(params.backendStack);
    const cpuAfter = cpuSnapshot(params.backendStack, stack);
    const cpu = {
      machineBusyS: round(cpuAfter.machineBusyS - cpuBefore.machineBusyS, 1),
      machineTotalS: round(cpuAfter.machineTotalS - cpuBefore.machineTotalS, 1),
      backendsS: round(cpuAfter.backendsS - cpuBefore.backendsS, 1),
      edgeS: round(cpuAfter.edgeS - cpuBefore.edgeS, 1),
      clientS: round(cpuAfter.clientS - cpuBefore.clientS, 1),
    };
    const sampledLoad = await sampler.stop();
    const usage = Object.fromEntries(
      Object.keys(after).map((id) => [id, { cpuS: round(after[id]!.cpuS - (before[id]?.cpuS ?? 0), 1), executorS: round((after[id]!.stepMs - (before[id]?.stepMs ?? 0)) / 1000, 1) }]),
    );

    // Which backend served each turn, what it computed: the session URLs' turn records.
    const records = new Map<string, SessionTurn>();
    for (const traj of workload) {
      const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${run}-${traj.id}`, { headers });
      if (!res.ok) throw new Error(`session URL of ${traj.id} answered ${res.status}: ${await res.text()}`);
      const state = (await res.json()) as { turns: SessionTurn[] };
      for (const t of state.turns) records.set(`${traj.id}\u0000${t.turn}`, t);
    }
    const results: TurnResult[] = client.map((c) => {
      const r = records.get(`${c.trajectory}\u0000${c.turn}`);
      if (!r) throw new Error(`no turn record for ${c.trajectory} turn ${c.turn}`);
      return { ...c, computedTokens: r.computed_tokens, backend: r.backend, mode: r.mode, fullReason: r.full_reason, route: r.route ?? null, doTtftMs: r.ttft_ms, kvPull: r.kv_pull ?? null, miss: r.miss ?? null };
    });
    if (retries.length > 0) note("routing", `${policy}: ${retries.length} turn(s) resent after an error, first: ${retries[0]}`);
    return { results, startedAt, wallMs, backends, sampledLoad: sampledLoad.load, downSamples: sampledLoad.down, usage, retries: retries.length, cpu };
  } finally {
    await stack?.stop();
  }
}
interface SessionTurn {
  turn: number;
  mode: string;
  full_reason: string | null;
  route?: string | null;
  computed_tokens: number;
  ttft_ms: number;
  backend: string;
  kv_pull?: { outcome: string; blocks: number; ms: number } | null;
  miss?: { reason: string; tokens: number; detail: string | null } | null;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

/**
 * One agent turn as the benchmarks' clients send it: after the turn's tool pause, appends its new
 * messages to `transcript`, streams the whole transcript to the edge (up to 3 tries: a failed turn
 * stores nothing, so a client may resend it; `onResend` hears each), and appends the reply.
 * `sentAt`: when the try that succeeded was sent (performance.now()).
 */
export async function sendAgentTurn(
  p: { edgeUrl: string; headers: Record<string, string>; trajectoryId: string; modelId: string; tools: ToolDefinition[]; turn: RoutingTurn; transcript: ChatMessage[] },
  onResend: (e: Error) => void,
): Promise<{ reply: Awaited<ReturnType<typeof streamTurn>>; sentAt: number }> {
  await sleep(p.turn.pauseMs);
  p.transcript.push(...answeringReply(p.turn.newMessages, p.transcript.at(-1)));
  const body = { model: p.modelId, messages: p.transcript, tools: p.tools, max_tokens: p.turn.maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } };
  for (let attempt = 1; ; attempt++) {
    const sentAt = performance.now();
    try {
      const reply = await streamTurn(p.edgeUrl, p.headers, p.trajectoryId, body);
      p.transcript.push(reply.message);
      return { reply, sentAt };
    } catch (e) {
      if (attempt >= 3) throw new Error(`${p.trajectoryId}: the turn failed 3 times: ${(e as Error).message}`);
      onResend(e as Error);
      await sleep(500);
    }
  }
}

/** One streaming chat completion; TTFT is the first chunk with content or a tool call. */
export async function streamTurn(edgeUrl: string, headers: Record<string, string>, trajectoryId: string, body: object): Promise<{ message: ChatMessage; usage: Usage; ttftMs: number }> {
  const t0 = performance.now();
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, { method: "POST", headers: { ...headers, "x-trajectory-id": trajectoryId }, body: JSON.stringify(body) });
  if (!res.ok || !res.body) throw new Error(`edge answered ${res.status}: ${await res.text()}`);
  let ttft: number | undefined;
  let text = "";
  const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
  let usage: Usage | undefined;
  for await (const raw of sseJson(res.body)) {
    const chunk = raw as {
      error?: { message: string; code: string };
      choices?: { delta?: { content?: string; tool_calls?: { index: number; id: string; function: { name: string; arguments: string } }[] } }[];
      usage?: Usage;
    };
    if (chunk.error) throw new Error(`turn failed mid-stream (${trajectoryId}): ${chunk.error.code}: ${chunk.error.message}`);
    const delta = chunk.choices?.[0]?.delta;
    if (delta?.content || delta?.tool_calls?.length) ttft ??= performance.now() - t0;
    if (delta?.content) text += delta.content;
    for (const c of delta?.tool_calls ?? []) calls[c.index] = { id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } };
    if (chunk.usage) usage = chunk.usage;
  }
  if (!usage) throw new Error(`no usage chunk for ${trajectoryId}`);
  const message: ChatMessage = calls.length > 0 ? { role: "assistant", content: text || null, tool_calls: calls } : { role: "assistant", content: text };
  return { message, usage, ttftMs: ttft ?? performance.now() - t0 };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
