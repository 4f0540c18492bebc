import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { mulberry32 } from "../../protocol/random";

/**
 * The benchmarks' one synthetic agent workload: per group of trajectories a system prompt with
 * tool definitions (the prefix the group shares), then per trajectory a task and a run of turns,
 * each appending a tool observation and asking for a short reply. Texts are words drawn from a
 * small vocabulary, sized in the model's tokens. Seeded: the same options give the same workload.
 *
 * The defaults are the agent benchmark's (one group, 12 tools, the system budget counting the
 * tools); the routing benchmark asks for groups, pauses and spread starts.
 */
export interface WorkloadOptions {
  trajectories: number;
  turns: number;
  /** Fractions of the trajectories per system-prompt group, e.g. [0.5, 0.2, 0.15, 0.15] (default [1]). */
  groupShares?: number[];
  /** Names (ids, tools, tasks, the system prompt) carry the group number (default: with more than one group). */
  groupNames?: boolean;
  /** Approximate tokens of the system prompt's text (with `systemCountsTools`, of text and tools together). */
  systemTokens: number;
  /** Default: with one group. The tools' tokens come out of `systemTokens` (at least 50 left for text). */
  systemCountsTools?: boolean;
  /** Tool definitions per group and their size in words (default 12 tools, 40-word descriptions, 4 arguments of 12 words). */
  tools?: { count: number; descriptionWords: number; args: number; argWords: number };
  /** Tokens of each trajectory's task (default 60). */
  taskTokens?: number;
  observationTokens: [number, number];
  replyTokens: [number, number];
  /** Draw each turn's reply length before its messages (default: with one group, the agent benchmark's order). */
  replyLengthFirst?: boolean;
  /** Tool pause before each turn after the first, ms (default none). */
  pauseMs?: [number, number];
  /** Trajectories interleaved (a seeded shuffle) and their starts spread uniformly over [0, startSpreadMs) (default: neither). */
  startSpreadMs?: number;
  /** The words texts are drawn from (default `WORDS`). */
  vocabulary?: readonly string[];
  seed: number;
  /** Token counter (the model's tokenizer), to size texts in tokens. */
  countTokens: (text: string) => number;
}

export interface WorkloadTurn {
  /** Messages the agent appends before this turn (the first turn: system + user task). */
  newMessages: ChatMessage[];
  maxTokens: number;
  /** How long the agent waits (its tool running) before sending this turn; 0 for the first. */
  pauseMs: number;
}

export interface WorkloadTrajectory {
  id: string;
  /** Index of its system-prompt group. */
  group: number;
  tools: ToolDefinition[];
  startDelayMs: number;
  turns: WorkloadTurn[];
}

export const WORDS = (
  "the agent reads file path line error value result table query index cache block token model " +
  "server request response status config build test deploy branch commit patch diff review merge " +
  "function class method module package import export return async await promise stream buffer " +
  "memory disk network latency throughput queue worker thread process signal retry timeout limit " +
  "user account tenant session trajectory prefix suffix batch step decode prefill schedule policy"
).split(" ");

/**
 * @example const [t] = makeWorkload({ trajectories: 1, turns: 8, systemTokens: 1200, observationTokens: [150, 300], replyTokens: [16, 16], seed: 11, countTokens });
 */
export function makeWorkload(o: WorkloadOptions): WorkloadTrajectory[] {
  const shares = o.groupShares ?? [1];
  const grouped = o.groupNames ?? shares.length > 1;
  const vocabulary = o.vocabulary ?? WORDS;
  const shape = o.tools ?? { count: 12, descriptionWords: 40, args: 4, argWords: 12 };
  const rand = mulberry32(o.seed);
  const pick = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const words = (n: number) => Array.from({ length: n }, () => vocabulary[Math.floor(rand() * vocabulary.length)]).join(" ");
  const textOfTokens = (target: number) => {
    let n = Math.max(1, Math.round(target * 0.8));
    let text = words(n);
    for (let i = 0; i < 4; i++) {
      const count = o.countTokens(text);
      if (Math.abs(count - target) <= Math.max(2, target * 0.02)) break;
      n = Math.max(1, Math.round((n * target) / count));
      text = words(n);
    }
    return text;
  };

  // Per group: its own tools and system prompt (the prefix its trajectories share).
  const groups = shares.map((_, g) => {
    const tools: ToolDefinition[] = Array.from({ length: shape.count }, (_, i) => ({
      type: "function",
      function: {
        name: `${grouped ? `g${g}_` : ""}tool_${i}_${vocabulary[i % vocabulary.length]}`,
        description: words(shape.descriptionWords),
        parameters: {
          type: "object",
          properties: Object.fromEntries(Array.from({ length: shape.args }, (_, j) => [`arg_${j}_${vocabulary[(i + j) % vocabulary.length]}`, { type: "string", description: words(shape.argWords) }])),
          required: [`arg_0_${vocabulary[i % vocabulary.length]}`],
        },
      },
    }));
    const systemText = (o.systemCountsTools ?? shares.length === 1) ? Math.max(50, o.systemTokens - o.countTokens(JSON.stringify(tools))) : o.systemTokens;
    return { tools, system: `${grouped ? `You are coding agent ${g}.` : "You are a coding agent."} ${textOfTokens(systemText)}` };
  });

  const replyFirst = o.replyLengthFirst ?? shares.length === 1;
  const out: WorkloadTrajectory[] = [];
  let t = 0;
  groupSizes(o.trajectories, shares).forEach((size, g) => {
    for (let i = 0; i < size; i++, t++) {
      const tag = grouped ? `${g}_${i}` : `${t}`;
      const turns: WorkloadTurn[] = [];
      for (let k = 0; k < o.turns; k++) {
        const first = replyFirst ? pick(o.replyTokens[0], o.replyTokens[1]) : undefined;
        const newMessages: ChatMessage[] =
          k === 0
            ? [
                { role: "system", content: groups[g]!.system },
                { role: "user", content: `Task ${tag.replace("_", ".")}: ${textOfTokens(o.taskTokens ?? 60)}` },
              ]
            : [{ role: "tool", content: textOfTokens(pick(o.observationTokens[0], o.observationTokens[1])), tool_call_id: `call_${tag}_${k}` }];
        const maxTokens = first ?? pick(o.replyTokens[0], o.replyTokens[1]);
        turns.push({ newMessages, maxTokens, pauseMs: k > 0 && o.pauseMs ? pick(o.pauseMs[0], o.pauseMs[1]) : 0 });
      }
      out.push({ id: grouped ? `g${g}-t${i}` : `trajectory-${t}`, group: g, tools: groups[g]!.tools, startDelayMs: 0, turns });
    }
  });
  if (o.startSpreadMs !== undefined) {
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    for (const x of out) x.startDelayMs = Math.floor(rand() * o.startSpreadMs);
  }
  return out;
}

/** Splits `n` items by `shares` (largest remainder; every group with a share gets >= 1 when n allows). */
export function groupSizes(n: number, shares: number[]): number[] {
  const total = shares.reduce((a, b) => a + b, 0);
  const exact = shares.map((s) => (n * s) / total);
  const sizes = exact.map(Math.floor);
  const order = exact.map((e, i) => ({ i, r: e - Math.floor(e) })).sort((a, b) => b.r - a.r || a.i - b.i);
  for (let k = 0; sizes.reduce((a, b) => a + b, 0) < n; k++) sizes[order[k % order.length]!.i]! += 1;
  return sizes;
}

/**
 * A turn's new messages as a client sends them after the model's `reply`: a tool message answers
 * the reply's first tool call or, when the reply called no tool (the untrained demo model's usual),
 * goes as a user message with the same content, since the edge refuses a tool message that answers
 * no call (400 invalid_request).
 *
 * @example answeringReply(turn.newMessages, { role: "assistant", content: "ok" }) // [{ role: "user", content: "..." }]
 */
export function answeringReply(newMessages: readonly ChatMessage[], reply: ChatMessage | undefined): ChatMessage[] {
  const call = reply?.role === "assistant" ? reply.tool_calls?.[0] : undefined;
  return newMessages.map((m): ChatMessage => (m.role !== "tool" ? m : call ? { ...m, tool_call_id: call.id } : { role: "user", content: m.content }));
}
