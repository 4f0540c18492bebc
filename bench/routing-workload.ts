import type { ChatMessage, ToolDefinition } from "../protocol/messages";
import { mulberry32 } from "../protocol/random";

/**
 * The routing benchmark's workload: M agent trajectories in a few groups, each group with its
 * own system prompt and tool definitions (one popular group, a few smaller ones), in the style of
 * `agent-workload.ts` (words drawn from a small vocabulary, texts sized in model tokens) but with
 * a configurable number of tools, so the shared prefix can be sized. Each trajectory starts after a small
 * delay, then runs its turns one after another, pausing before each later turn as an agent does
 * while its tool runs. Seeded: the same options give the same workload.
 */
export interface RoutingWorkloadOptions {
  trajectories: number;
  turns: number;
  /** Fractions of the trajectories per system-prompt group, e.g. [0.5, 0.2, 0.15, 0.15]. */
  groupShares: number[];
  /** Approximate tokens of the system prompt's text (per group; the tools come on top). */
  systemTokens: number;
  /** Tool definitions per group (each ~60 tokens rendered). */
  tools: number;
  observationTokens: [number, number];
  replyTokens: [number, number];
  /** Tool pause before each turn after the first, ms. */
  pauseMs: [number, number];
  /** Trajectory starts are spread uniformly over [0, startSpreadMs). */
  startSpreadMs: number;
  seed: number;
  countTokens: (text: string) => number;
}

export interface RoutingTurn {
  /** Messages the agent appends before this turn (turn 1: system + user task). */
  newMessages: ChatMessage[];
  maxTokens: number;
  /** How long the agent waits (its tool running) before sending this turn; 0 for turn 1. */
  pauseMs: number;
}

export interface RoutingTrajectory {
  id: string;
  /** Index of its system-prompt group. */
  group: number;
  tools: ToolDefinition[];
  startDelayMs: number;
  turns: RoutingTurn[];
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

const WORDS = (
  "the agent reads file path line error value result table query index cache block token model " +
  "server request response status config build test deploy branch commit patch diff review merge " +
  "function class method module package import export return async await promise stream buffer " +
  "memory disk network latency throughput queue worker thread process signal retry timeout limit"
).split(" ");

export function makeRoutingWorkload(o: RoutingWorkloadOptions): RoutingTrajectory[] {
  const rand = mulberry32(o.seed);
  const pick = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const words = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(" ");
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
  const groups = o.groupShares.map((_, g) => {
    const tools: ToolDefinition[] = Array.from({ length: o.tools }, (_, i) => ({
      type: "function",
      function: {
        name: `g${g}_tool_${i}_${WORDS[i % WORDS.length]}`,
        description: words(24),
        parameters: {
          type: "object",
          properties: Object.fromEntries(Array.from({ length: 3 }, (_, j) => [`arg_${j}_${WORDS[(i + j) % WORDS.length]}`, { type: "string", description: words(8) }])),
          required: [`arg_0_${WORDS[i % WORDS.length]}`],
        },
      },
    }));
    const system = `You are coding agent ${g}. ${textOfTokens(o.systemTokens)}`;
    return { tools, system };
  });

  const sizes = groupSizes(o.trajectories, o.groupShares);
  const out: RoutingTrajectory[] = [];
  sizes.forEach((size, g) => {
    for (let i = 0; i < size; i++) {
      const turns: RoutingTurn[] = [];
      for (let k = 0; k < o.turns; k++) {
        const newMessages: ChatMessage[] =
          k === 0
            ? [
                { role: "system", content: groups[g]!.system },
                { role: "user", content: `Task ${g}.${i}: ${textOfTokens(40)}` },
              ]
            : [{ role: "tool", content: textOfTokens(pick(o.observationTokens[0], o.observationTokens[1])), tool_call_id: `call_${g}_${i}_${k}` }];
        turns.push({ newMessages, maxTokens: pick(o.replyTokens[0], o.replyTokens[1]), pauseMs: k === 0 ? 0 : pick(o.pauseMs[0], o.pauseMs[1]) });
      }
      out.push({ id: `g${g}-t${i}`, group: g, tools: groups[g]!.tools, startDelayMs: 0, turns });
    }
  });
  // Interleave the groups (a seeded shuffle), then spread the starts.
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  for (const t of out) t.startDelayMs = Math.floor(rand() * o.startSpreadMs);
  return out;
}
