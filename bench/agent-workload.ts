import type { ChatMessage, ToolDefinition } from "../protocol/messages";
import { mulberry32 } from "../protocol/random";

/**
 * A synthetic agent workload: one shared system prompt with tool definitions, then per
 * trajectory a task and a run of turns, each appending a tool observation and generating a short
 * reply. Seeded: the same options give the same workload.
 */
export interface AgentWorkloadOptions {
  trajectories: number;
  turns: number;
  /** Approximate tokens of system prompt + tool definitions. */
  systemTokens: number;
  observationTokens: [number, number];
  replyTokens: [number, number];
  seed: number;
  /** Token counter (the model's tokenizer), to size texts in tokens. */
  countTokens: (text: string) => number;
}

export interface AgentTurn {
  /** Messages appended before this turn (the first turn: system + user task). */
  newMessages: ChatMessage[];
  maxTokens: number;
}

export interface AgentTrajectory {
  id: string;
  tools: ToolDefinition[];
  turns: AgentTurn[];
}

const WORDS = (
  "the agent reads file path line error value result table query index cache block token model " +
  "server request response status config build test deploy branch commit patch diff review merge " +
  "function class method module package import export return async await promise stream buffer " +
  "memory disk network latency throughput queue worker thread process signal retry timeout limit " +
  "user account tenant session trajectory prefix suffix batch step decode prefill schedule policy"
).split(" ");

export function makeAgentWorkload(o: AgentWorkloadOptions): AgentTrajectory[] {
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

  const tools: ToolDefinition[] = Array.from({ length: 12 }, (_, i) => ({
    type: "function",
    function: {
      name: `tool_${i}_${WORDS[i]}`,
      description: words(40),
      parameters: {
        type: "object",
        properties: Object.fromEntries(
          Array.from({ length: 4 }, (_, j) => [`arg_${j}_${WORDS[(i + j) % WORDS.length]}`, { type: "string", description: words(12) }]),
        ),
        required: [`arg_0_${WORDS[i % WORDS.length]}`],
      },
    },
  }));
  const toolTokens = o.countTokens(JSON.stringify(tools));
  const system = `You are a coding agent. ${textOfTokens(Math.max(50, o.systemTokens - toolTokens))}`;

  return Array.from({ length: o.trajectories }, (_, t) => {
    const turns: AgentTurn[] = [];
    for (let k = 0; k < o.turns; k++) {
      const maxTokens = pick(o.replyTokens[0], o.replyTokens[1]);
      const newMessages: ChatMessage[] =
        k === 0
          ? [
              { role: "system", content: system },
              { role: "user", content: `Task ${t}: ${textOfTokens(60)}` },
            ]
          : [{ role: "tool", content: textOfTokens(pick(o.observationTokens[0], o.observationTokens[1])), tool_call_id: `call_${t}_${k}` }];
      turns.push({ newMessages, maxTokens });
    }
    return { id: `trajectory-${t}`, tools, turns };
  });
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
