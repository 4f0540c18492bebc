import { describe, expect, it } from "vitest";
import type { ReplyDelta, ToolCall } from "../../protocol/messages";
import type { AssistantReply } from "../../durable-objects/turn/turn-types";
import { ReplySteps, type ReplyStep } from "./reply-steps";

const call = (id: string, name: string, args: string): ToolCall => ({ id, type: "function", function: { name, arguments: args } });
const token = (text: string, reply?: ReplyDelta) => ({ text, ...(reply ? { reply } : {}) });

/** A hermes reply as the backend streams it: text, then two calls, the first in pieces. */
const STREAM = [
  token("Checking", { content: "Checking" }),
  token(".\n", { content: ".\n" }),
  token("<tool_call>\n", {}),
  token('{"name": "read_file", "arguments": ', { toolCalls: [{ index: 0, id: "call_0", name: "read_file" }] }),
  token('{"path":', { toolCalls: [{ index: 0, arguments: '{"path":' }] }),
  token(' "a.ts"}', { toolCalls: [{ index: 0, arguments: '"a.ts"}' }] }),
  token("}\n</tool_call>\n<tool_call>\n", {}),
  token('{"name": "ls", "arguments": {}}', { toolCalls: [{ index: 1, id: "call_1", name: "ls", arguments: "{}" }] }),
];
const FINAL: AssistantReply = { role: "assistant", content: "Checking.", tool_calls: [call("call_0", "read_file", '{"path":"a.ts"}'), call("call_1", "ls", "{}")] };

function run(events: { text: string; reply?: ReplyDelta }[], final: AssistantReply, hasTools = true): ReplyStep[][] {
  const steps = new ReplySteps(hasTools);
  return [...events.map((e) => steps.token(e)), steps.finish(final)];
}

describe("ReplySteps", () => {
  it("opens each call with its id and name as soon as they stream, then its argument pieces, and closes it when the next opens", () => {
    const out = run(STREAM, FINAL);
    expect(out[0]).toEqual([{ type: "text", text: "Checking" }]);
    // Trailing whitespace waits: the reply with calls has its content trimmed.
    expect(out[1]).toEqual([{ type: "text", text: "." }]);
    expect(out[2]).toEqual([]);
    expect(out[3]).toEqual([{ type: "open", index: 0, id: "call_0", name: "read_file" }]);
    expect(out[4]).toEqual([{ type: "arguments", index: 0, delta: '{"path":' }]);
    expect(out[7]).toEqual([
      { type: "close", index: 0, call: FINAL.tool_calls![0] },
      { type: "open", index: 1, id: "call_1", name: "ls" },
      { type: "arguments", index: 1, delta: "{}" },
    ]);
    expect(out.at(-1)).toEqual([{ type: "close", index: 1, call: FINAL.tool_calls![1] }]);
  });

  it("adds up to the done message: text equals its content, each call's pieces its arguments", () => {
    const flat = run(STREAM, FINAL).flat();
    expect(flat.flatMap((s) => (s.type === "text" ? [s.text] : [])).join("")).toBe(FINAL.content);
    for (const [i, c] of FINAL.tool_calls!.entries()) {
      expect(flat.flatMap((s) => (s.type === "arguments" && s.index === i ? [s.delta] : [])).join("")).toBe(c.function.arguments);
      expect(flat.filter((s) => s.type === "close" && s.index === i)).toHaveLength(1);
    }
  });

  it("at the end, the done message's arguments finish an open call, and its calls that never streamed go out whole", () => {
    const steps = new ReplySteps(true);
    steps.token(token("", { toolCalls: [{ index: 0, id: "call_0", name: "read_file", arguments: '{"pa' }] }));
    expect(steps.finish(FINAL)).toEqual([
      { type: "arguments", index: 0, delta: 'th":"a.ts"}' },
      { type: "close", index: 0, call: FINAL.tool_calls![0] },
      { type: "text", text: "Checking." },
      { type: "open", index: 1, id: "call_1", name: "ls", arguments: "{}" },
      { type: "close", index: 1, call: FINAL.tool_calls![1] },
    ]);
  });

  it("without reply deltas (a replay, no tools) it is the text splitter: call text held, trailing whitespace too, calls whole at the end", () => {
    const replay = run([token('Checking.\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>')], { role: "assistant", content: "Checking.", tool_calls: [call("call_1", "ls", "{}")] });
    expect(replay).toEqual([[{ type: "text", text: "Checking." }], [{ type: "open", index: 0, id: "call_1", name: "ls", arguments: "{}" }, { type: "close", index: 0, call: call("call_1", "ls", "{}") }]]);
    expect(run([token("a <tool_call> b")], { role: "assistant", content: "a <tool_call> b" }, false)).toEqual([[{ type: "text", text: "a <tool_call> b" }], []]);
  });

  it("a reply of text only streams all its text, whitespace at its end included", () => {
    const out = run([token("Hi ", { content: "Hi " }), token("there\n", { content: "there\n" })], { role: "assistant", content: "Hi there\n" });
    expect(out.flat().map((s) => (s.type === "text" ? s.text : "?")).join("")).toBe("Hi there\n");
  });

  it("without tools in the request every token's text goes out as it comes, reply or not", () => {
    const out = run([token("\n", { content: "\n" }), token("\n", { content: "\n" })], { role: "assistant", content: "\n\n" }, false);
    expect(out).toEqual([[{ type: "text", text: "\n" }], [{ type: "text", text: "\n" }], []]);
  });

  it("once events carry reply, the text of events without it adds nothing", () => {
    const out = run([token("Hi", { content: "Hi" }), token("<tool_call>")], { role: "assistant", content: "Hi" });
    expect(out.flat()).toEqual([{ type: "text", text: "Hi" }]);
  });
});
