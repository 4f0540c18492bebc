import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import type { ReplyDelta, ToolCall } from "../../protocol/messages";
import type { AssistantReply, TurnEvent, TurnRecord } from "../../durable-objects/turn/turn-types";
import { messageJson, messagesSse } from "./messages-response";
import { completionJson, sseChunks } from "./openai-response";
import { responseJson, responsesSse, type ResponseMeta } from "./responses-response";

/**
 * Streamed tool calls (issue 36) through each renderer, read back by the official SDKs' stream
 * helpers: the renderers' SSE is the body the SDK reads (its `fetch` option hands it over), so
 * the SDKs' own accumulation decides whether the stream adds up to the non-streamed answer.
 */

const call = (id: string, name: string, args: string): ToolCall => ({ id, type: "function", function: { name, arguments: args } });
const token = (text: string, reply?: ReplyDelta): TurnEvent => ({ type: "token", text, ...(reply ? { reply } : {}) });
const FINAL: AssistantReply = { role: "assistant", content: "Checking.", tool_calls: [call("call_0", "read_file", '{"path":"src/a.ts","lines":[1,20]}'), call("call_1", "ls", "{}")] };
const done: Extract<TurnEvent, { type: "done" }> = {
  type: "done",
  message: FINAL,
  finishReason: "stop",
  usage: { promptTokens: 40, cachedTokens: 0, computedTokens: 40, completionTokens: 30 },
  turn: { turn: 1, mode: "full" } as TurnRecord,
  replayed: false,
};
/** The backend's stream of that reply: text, then the first call in pieces, then the second. */
const STREAM: TurnEvent[] = [
  { type: "start", prefixBreak: { cause: "none" } },
  token("Checking", { content: "Checking" }),
  token(".\n", { content: ".\n" }),
  token("<tool_call>\n", {}),
  token('{"name": "read_file", "arguments": ', { toolCalls: [{ index: 0, id: "call_0", name: "read_file" }] }),
  ...['{"path":', '"src/a.ts",', '"lines":', "[1,", "20]}"].map((p) => token(p, { toolCalls: [{ index: 0, arguments: p }] })),
  token("}\n</tool_call>\n<tool_call>\n", {}),
  token('{"name": "ls", "arguments": {}}', { toolCalls: [{ index: 1, id: "call_1", name: "ls", arguments: "{}" }] }),
  done,
];
/** A replayed turn: the stored text in one token event, then the done event. */
const REPLAY: TurnEvent[] = [token('Checking.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "src/a.ts", "lines": [1, 20]}}\n</tool_call>\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'), { ...done, replayed: true }];

async function* from(events: TurnEvent[]): AsyncGenerator<TurnEvent> {
  yield* events;
}

/** A fetch that answers every request with the SSE lines a renderer wrote. */
function serving(lines: AsyncIterable<string>): typeof fetch {
  return async () => {
    const body: string[] = [];
    for await (const l of lines) body.push(l);
    return new Response(body.join(""), { status: 200, headers: { "content-type": "text/event-stream" } });
  };
}

const TOOLS = [
  { type: "function" as const, function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" }, lines: { type: "array" } } } } },
  { type: "function" as const, function: { name: "ls", parameters: { type: "object", properties: {} } } },
];

describe.each([
  ["streamed", STREAM],
  ["replayed", REPLAY],
])("%s tool calls read by the SDK stream helpers equal the non-streamed answer", (kind, events) => {
  it("Chat Completions: chat.completions.stream + finalChatCompletion", async () => {
    const meta = { id: "chatcmpl-1", created: 1, model: "m" };
    const client = new OpenAI({ apiKey: "k", baseURL: "http://edge.test/v1", fetch: serving(sseChunks(meta, from(events), { includeUsage: true, hasTools: true, logprobs: false })) });
    const stream = client.chat.completions.stream({ model: "m", messages: [{ role: "user", content: "go" }], tools: TOOLS });
    const pieces: string[] = [];
    stream.on("tool_calls.function.arguments.delta", (e) => pieces.push(`${e.index}:${e.arguments_delta}`));
    const final = await stream.finalChatCompletion();
    const want = completionJson(meta, done);
    expect(final.choices[0]!.message.tool_calls).toEqual(want.choices[0]!.message.tool_calls);
    expect(final.choices[0]!.message.content).toBe(want.choices[0]!.message.content);
    expect(final.choices[0]!.finish_reason).toBe("tool_calls");
    if (kind === "streamed") expect(pieces.filter((p) => p.startsWith("0:") && p !== "0:").length).toBe(5);
  });

  it("Responses: responses.stream + finalResponse", async () => {
    const meta: ResponseMeta = { token: "tok1", trajectoryId: undefined, stored: false, createdAt: 1, model: "m", echo: {}, hasTools: true };
    const client = new OpenAI({ apiKey: "k", baseURL: "http://edge.test/v1", fetch: serving(responsesSse(meta, from(events))) });
    const stream = client.responses.stream({ model: "m", input: "go" });
    const seen: string[] = [];
    stream.on("event", (e) => seen.push(e.type === "response.function_call_arguments.delta" ? `delta:${e.output_index}` : e.type));
    const final = await stream.finalResponse();
    expect(final.output).toMatchObject(responseJson(meta, { message: FINAL, finishReason: "stop", usage: done.usage }).output);
    // One item after another: each item's added ... done before the next one's added.
    const order = seen.filter((t) => t === "response.output_item.added" || t === "response.output_item.done");
    expect(order).toEqual(Array(3).fill(["response.output_item.added", "response.output_item.done"]).flat());
    if (kind === "streamed") {
      const first = seen.indexOf("response.function_call_arguments.done");
      expect(seen.slice(0, first).filter((t) => t === "delta:1").length).toBe(5);
    }
  });

  it("Messages: messages.stream + finalMessage", async () => {
    const meta = { id: "msg_1", model: "m", stopSequences: [], hasTools: true };
    const client = new Anthropic({ apiKey: "k", baseURL: "http://edge.test", fetch: serving(messagesSse(meta, from(events))) });
    const stream = client.messages.stream({ model: "m", max_tokens: 64, messages: [{ role: "user", content: "go" }] });
    const pieces: string[] = [];
    stream.on("streamEvent", (e) => {
      if (e.type === "content_block_delta" && e.delta.type === "input_json_delta") pieces.push(`${e.index}:${e.delta.partial_json}`);
    });
    const final = await stream.finalMessage();
    const want = messageJson(meta, done);
    expect(final.content).toEqual(want.content);
    expect(final.stop_reason).toBe("tool_use");
    if (kind === "streamed") expect(pieces.filter((p) => p.startsWith("1:")).length).toBe(5);
  });
});

describe("Responses: a custom tool's call", () => {
  it("goes out whole when it ends (added, then done), never as function_call argument deltas", async () => {
    const patch = call("call_0", "apply_patch", '{"input":"*** Begin Patch"}');
    const final: AssistantReply = { role: "assistant", content: null, tool_calls: [patch] };
    const events: TurnEvent[] = [
      token("", { toolCalls: [{ index: 0, id: "call_0", name: "apply_patch" }] }),
      ...['{"input":', '"*** Begin', ' Patch"}'].map((p) => token(p, { toolCalls: [{ index: 0, arguments: p }] })),
      { ...done, message: final },
    ];
    const meta: ResponseMeta = { token: "tok2", trajectoryId: undefined, stored: false, createdAt: 1, model: "m", echo: {}, hasTools: true, shapes: { customTools: ["apply_patch"] } };
    const client = new OpenAI({ apiKey: "k", baseURL: "http://edge.test/v1", fetch: serving(responsesSse(meta, from(events))) });
    const stream = client.responses.stream({ model: "m", input: "go" });
    const seen: string[] = [];
    stream.on("event", (e) => seen.push(e.type));
    const response = await stream.finalResponse();
    expect(response.output).toMatchObject([{ type: "custom_tool_call", call_id: "call_0", name: "apply_patch", input: "*** Begin Patch" }]);
    expect(seen.filter((t) => t.startsWith("response.output_item") || t.startsWith("response.function_call"))).toEqual(["response.output_item.added", "response.output_item.done"]);
  });
});
