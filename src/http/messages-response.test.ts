import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import type { TurnEvent, TurnRecord } from "../../durable-objects/turn/turn-types";
import { anthropicErrorBody, anthropicErrorType, isMessagesPath } from "./errors";
import { cacheCreation, messageId, messageJson, messagesSse, messagesSseError, messagesStop, messagesUsage, type MessagesDone, type MessagesMeta } from "./messages-response";

const usage = { promptTokens: 100, cachedTokens: 64, computedTokens: 36, completionTokens: 5 };
const record = { turn: 1, mode: "full" } as TurnRecord;
const meta: MessagesMeta = { id: "msg_1", model: "m", stopSequences: [], hasTools: true };
const call = (id: string, args: string) => ({ id, type: "function" as const, function: { name: "get_weather", arguments: args } });

function done(over: Partial<MessagesDone> = {}): MessagesDone {
  return { type: "done", message: { role: "assistant", content: "Hi" }, finishReason: "stop", usage, turn: record, replayed: false, ...over };
}

async function* from(events: TurnEvent[]): AsyncGenerator<TurnEvent> {
  yield* events;
}

/** The stream's events as [name, data]; checks the `event:` / `data:` framing. */
async function streamed(events: TurnEvent[], m: MessagesMeta = meta): Promise<[string, Record<string, any>][]> {
  const out: [string, Record<string, any>][] = [];
  for await (const chunk of messagesSse(m, from(events))) {
    const match = /^event: ([a-z_]+)\ndata: (.*)\n\n$/s.exec(chunk);
    expect(match, chunk).not.toBeNull();
    const data = JSON.parse(match![2]!) as Record<string, any>;
    expect(data.type).toBe(match![1]);
    out.push([match![1]!, data]);
  }
  return out;
}

describe("usage and stop reason", () => {
  it("input_tokens excludes the cached tokens; the three input figures add up to the prompt", () => {
    expect(messagesUsage(usage)).toEqual({
      input_tokens: 36,
      output_tokens: 5,
      cache_read_input_tokens: 64,
      cache_creation_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    });
    const u = messagesUsage(usage, { ephemeral5m: 16, ephemeral1h: 4 });
    expect(u).toEqual({ input_tokens: 16, output_tokens: 5, cache_read_input_tokens: 64, cache_creation_input_tokens: 20, cache_creation: { ephemeral_5m_input_tokens: 16, ephemeral_1h_input_tokens: 4 } });
    expect(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens).toBe(usage.promptTokens);
    expect(cacheCreation([{ ttlMs: 300_000, tokens: 16 }, { ttlMs: 3_600_000, tokens: 4 }])).toEqual({ ephemeral5m: 16, ephemeral1h: 4 });
    expect(cacheCreation(undefined)).toEqual({ ephemeral5m: 0, ephemeral1h: 0 });
  });

  it("tool_use, max_tokens, stop_sequence (named only when known), end_turn", () => {
    expect(messagesStop(done({ message: { role: "assistant", content: null, tool_calls: [call("c", "{}")] }, finishReason: "stop" }), [])).toEqual({ stop_reason: "tool_use", stop_sequence: null });
    expect(messagesStop(done({ finishReason: "length" }), [])).toEqual({ stop_reason: "max_tokens", stop_sequence: null });
    expect(messagesStop(done({ finishReason: "stop" }), ["x"])).toEqual({ stop_reason: "end_turn", stop_sequence: null });
    expect(messagesStop(done({ finishReason: "stop_sequence" }), ["END"])).toEqual({ stop_reason: "stop_sequence", stop_sequence: "END" });
    expect(messagesStop(done({ finishReason: "stop_sequence", stopSequence: "B" }), ["A", "B"])).toEqual({ stop_reason: "stop_sequence", stop_sequence: "B" });
    // Several stop sequences and no word from the backend: which one is unknown, so null.
    expect(messagesStop(done({ finishReason: "stop_sequence" }), ["A", "B"])).toEqual({ stop_reason: "stop_sequence", stop_sequence: null });
  });

  it("message ids are msg_ and random", () => {
    expect(messageId()).toMatch(/^msg_[0-9a-f]{24}$/);
    expect(messageId()).not.toBe(messageId());
  });
});

describe("messageJson", () => {
  it("a text block, then one tool_use block per call with the parsed input", () => {
    const m = messageJson(meta, done({ message: { role: "assistant", content: "Let me look.", tool_calls: [call("call_0", '{"city":"Paris"}'), call("call_1", "{}")] } }));
    expect(m).toEqual({
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: "m",
      content: [
        { type: "text", text: "Let me look." },
        { type: "tool_use", id: "call_0", name: "get_weather", input: { city: "Paris" } },
        { type: "tool_use", id: "call_1", name: "get_weather", input: {} },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: messagesUsage(usage),
    });
  });

  it("no text block for a reply of only calls, or an empty reply", () => {
    expect(messageJson(meta, done({ message: { role: "assistant", content: null, tool_calls: [call("c", "{}")] } })).content.map((b) => b.type)).toEqual(["tool_use"]);
    expect(messageJson(meta, done({ message: { role: "assistant", content: "" } })).content).toEqual([]);
  });
});

describe("messagesSse", () => {
  it("message_start, ping, the text block as tokens arrive, tool_use blocks, message_delta with the whole usage, message_stop", async () => {
    const events: TurnEvent[] = [
      { type: "token", text: "Let " },
      { type: "token", text: "me look. <tool" },
      { type: "token", text: '_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' },
      done({ message: { role: "assistant", content: "Let me look.", tool_calls: [call("call_0", '{"city":"Paris"}')] } }),
    ];
    const out = await streamed(events);
    expect(out.map(([name, d]) => (name.startsWith("content_block") ? `${name}:${d.index}` : name))).toEqual([
      "message_start",
      "ping",
      "content_block_start:0",
      "content_block_delta:0",
      "content_block_delta:0",
      "content_block_stop:0",
      "content_block_start:1",
      "content_block_delta:1",
      "content_block_stop:1",
      "message_delta",
      "message_stop",
    ]);
    expect(out[0]![1].message).toEqual({ id: "msg_1", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, stop_sequence: null, usage: messagesUsage({ promptTokens: 0, cachedTokens: 0, computedTokens: 0, completionTokens: 0 }) });
    expect(out[2]![1].content_block).toEqual({ type: "text", text: "" });
    // The tool call's text never goes out as text, nor the whitespace before it (the reply's content is trimmed).
    expect(out.filter(([, d]) => d.delta?.type === "text_delta").map(([, d]) => d.delta.text).join("")).toBe("Let me look.");
    expect(out[6]![1].content_block).toEqual({ type: "tool_use", id: "call_0", name: "get_weather", input: {} });
    expect(out[7]![1].delta).toEqual({ type: "input_json_delta", partial_json: '{"city":"Paris"}' });
    expect(out[9]![1]).toEqual({ type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: messagesUsage(usage) });
  });

  it("without tools every token goes out; a reply of only calls has no text block", async () => {
    const plain = await streamed([{ type: "token", text: "<tool" }, { type: "token", text: "" }, done({ finishReason: "length" })], { ...meta, hasTools: false });
    expect(plain.filter(([, d]) => d.delta?.type === "text_delta").map(([, d]) => d.delta.text)).toEqual(["<tool"]);
    expect(plain.at(-2)![1].delta).toEqual({ stop_reason: "max_tokens", stop_sequence: null });
    const calls = await streamed([{ type: "token", text: "<tool_call>{}" }, done({ message: { role: "assistant", content: null, tool_calls: [call("c", "{}")] } })]);
    expect(calls.map(([n]) => n)).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    expect(calls[2]![1].content_block.type).toBe("tool_use");
  });

  it("a failure after the start is an error event in Anthropic's shape, and the end", async () => {
    const out = await streamed([{ type: "token", text: "a" }, { type: "error", code: "backend_unavailable", message: "the backend died", retryable: true }]);
    expect(out.at(-1)).toEqual(["error", { type: "error", error: { type: "overloaded_error", message: "the backend died", code: "backend_unavailable" }, request_id: null }]);
    expect(messagesSseError(new ProtocolError("internal_error", "secret detail"))).toBe(
      `event: error\ndata: ${JSON.stringify({ type: "error", error: { type: "api_error", message: "internal server error", code: "internal_error" }, request_id: null })}\n\n`,
    );
  });
});

describe("Anthropic errors", () => {
  it("maps every code to Anthropic's type and keeps the code", () => {
    expect(anthropicErrorType("invalid_request")).toBe("invalid_request_error");
    expect(anthropicErrorType("context_length_exceeded")).toBe("invalid_request_error");
    expect(anthropicErrorType("unauthorized")).toBe("authentication_error");
    expect(anthropicErrorType("unknown_model")).toBe("not_found_error");
    expect(anthropicErrorType("payload_too_large")).toBe("request_too_large");
    expect(anthropicErrorType("trajectory_busy")).toBe("conflict_error");
    expect(anthropicErrorType("overloaded")).toBe("rate_limit_error");
    expect(anthropicErrorType("backend_unavailable")).toBe("overloaded_error");
    expect(anthropicErrorType("internal_error")).toBe("api_error");
    expect(anthropicErrorBody(new ProtocolError("unknown_tool", "no such tool"))).toEqual({ type: "error", error: { type: "invalid_request_error", message: "no such tool", code: "unknown_tool" }, request_id: null });
  });

  it("only the Messages API's paths are Anthropic-shaped", () => {
    expect(isMessagesPath("/v1/messages")).toBe(true);
    expect(isMessagesPath("/v1/messages/count_tokens")).toBe(true);
    expect(isMessagesPath("/v1/messages/nope")).toBe(true);
    expect(isMessagesPath("/v1/messagesx")).toBe(false);
    expect(isMessagesPath("/v1/chat/completions")).toBe(false);
  });
});
