import type { ToolDefinition } from "../protocol/messages";
import { Progress, note } from "./kit/progress";
import { median, round, table } from "./kit/report";
import { sseJson } from "./kit/sse";
import { startBenchStack } from "./kit/stack";
import { AUTH } from "./kit/turn-client";

export interface ToolStreamBenchOptions {
  quick: boolean;
  /** Requests (default 12; --quick 6). */
  turns?: number;
  model?: string;
}

/** When one streamed tool call's parts reached the client, in ms from the request. */
interface CallTiming {
  /** The call's name (its first chunk). */
  nameMs: number;
  /** The first argument piece after the name's chunk (undefined: the arguments came with the name, whole). */
  firstArgumentsMs: number | undefined;
  /** The call's last argument piece: where its arguments were complete. */
  lastArgumentsMs: number;
  /** The finish chunk: where the whole call arrived before streamed arguments (the old behaviour). */
  finishMs: number;
  /** Argument chunks of the call. */
  argumentChunks: number;
  argumentsBytes: number;
}

const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "read_file",
      description: "Read a range of lines of a file in the repository.",
      parameters: { type: "object", properties: { path: { type: "string" }, start_line: { type: "integer" }, end_line: { type: "integer" } }, required: ["path", "start_line", "end_line"] },
    },
  },
  {
    type: "function",
    function: {
      name: "search_code",
      description: "Search the repository for a text.",
      parameters: { type: "object", properties: { query: { type: "string" }, directory: { type: "string" } }, required: ["query", "directory"] },
    },
  },
];

const ASKS = [
  "Read lines 10 to 80 of src/http/openai-response.ts.",
  "Search for parseChatBody in the src/http directory.",
  "Open durable-objects/turn/turn-runner.ts and show lines 1 to 60.",
  "Find where relayTurn is called under durable-objects.",
  "Read gpu-backend/tokenizer/tool-call-parser.ts from line 100 to line 180.",
  "Search the test directory for tool_choice.",
];

/**
 * `npm run bench -- tool-stream [--quick] [--json] [--model DIR|smollm2]`
 *
 * Streamed tool-call arguments (issue 36) through the real edge: one backend and `wrangler dev`,
 * Chat Completions with `stream: true`, a trajectory per request (canonical ids and compacted
 * arguments), `tool_choice: "required"`, temperature 0. Per request, when the first call's name,
 * its first argument piece, its last argument piece and the finish chunk reached the client.
 * Before issue 36 a call's arguments arrived whole at the finish, so `finish - first argument
 * piece` is how much earlier a client sees the arguments start.
 */
export async function runToolStreamBench(o: ToolStreamBenchOptions): Promise<{ summary: Record<string, unknown>; details: Record<string, unknown> }> {
  const turns = o.turns ?? (o.quick ? 6 : 12);
  note("tool-stream", "starting a backend and wrangler dev");
  const stack = await startBenchStack({ name: "tool-stream", backends: 1, ...(o.model ? { model: o.model } : {}), backend: { kvMemory: "1GiB" }, edge: { devtools: false } });
  try {
    const calls: CallTiming[] = [];
    const progress = new Progress("tool-stream", turns);
    for (let k = 0; k < turns; k++) {
      calls.push(await timedCall(stack.edgeUrl, `tool-stream-${Date.now()}-${k}`, ASKS[k % ASKS.length]!));
      progress.tick();
    }
    const rows = calls.map((c, i) => [i + 1, c.nameMs.toFixed(0), c.firstArgumentsMs?.toFixed(0) ?? "-", c.lastArgumentsMs.toFixed(0), c.finishMs.toFixed(0), c.argumentChunks, c.argumentsBytes]);
    process.stderr.write(`\n${table(["request", "name ms", "first args ms", "last args ms", "finish ms", "arg chunks", "arg bytes"], rows)}\n\n`);
    const streamed = calls.filter((c) => c.firstArgumentsMs !== undefined);
    const summary = {
      requests: turns,
      streamedCalls: streamed.length,
      medianNameMs: round(median(calls.map((c) => c.nameMs)), 1),
      medianFirstArgumentsMs: streamed.length > 0 ? round(median(streamed.map((c) => c.firstArgumentsMs!)), 1) : null,
      medianLastArgumentsMs: round(median(calls.map((c) => c.lastArgumentsMs)), 1),
      medianFinishMs: round(median(calls.map((c) => c.finishMs)), 1),
      /** How much earlier than the finish (where they all arrived before) the arguments start. */
      medianArgumentsLeadMs: streamed.length > 0 ? round(median(streamed.map((c) => c.finishMs - c.firstArgumentsMs!)), 1) : 0,
      medianArgumentChunks: median(calls.map((c) => c.argumentChunks)),
    };
    return { summary, details: { calls } };
  } finally {
    await stack.close();
  }
}

/** One streamed request; the first call's timing. */
async function timedCall(edgeUrl: string, trajectoryId: string, ask: string): Promise<CallTiming> {
  const t0 = performance.now();
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { ...AUTH, "x-trajectory-id": trajectoryId },
    body: JSON.stringify({
      messages: [
        { role: "system", content: "You are a coding agent. Use the tools to answer." },
        { role: "user", content: ask },
      ],
      tools: TOOLS,
      tool_choice: "required",
      parallel_tool_calls: false,
      temperature: 0,
      max_tokens: 96,
      stream: true,
    }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let nameMs: number | undefined;
  let firstArgumentsMs: number | undefined;
  let lastArgumentsMs: number | undefined;
  let finishMs: number | undefined;
  let argumentChunks = 0;
  let argumentsBytes = 0;
  type Chunk = { choices: { delta: { tool_calls?: { index: number; function?: { name?: string; arguments?: string } }[] }; finish_reason: string | null }[] };
  for await (const raw of sseJson(res.body as ReadableStream<Uint8Array<ArrayBuffer>>)) {
    const now = performance.now() - t0;
    const choice = (raw as Chunk).choices[0];
    if (!choice) continue;
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.index !== 0) continue;
      if (d.function?.name !== undefined) nameMs ??= now;
      const args = d.function?.arguments ?? "";
      if (!args) continue;
      argumentChunks++;
      argumentsBytes += args.length;
      if (d.function?.name === undefined) firstArgumentsMs ??= now;
      lastArgumentsMs = now;
    }
    if (choice.finish_reason !== null) finishMs = now;
  }
  if (nameMs === undefined || finishMs === undefined) throw new Error(`no tool call in the reply to ${JSON.stringify(ask)}`);
  return { nameMs, firstArgumentsMs, lastArgumentsMs: lastArgumentsMs ?? nameMs, finishMs, argumentChunks, argumentsBytes };
}
