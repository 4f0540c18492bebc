import { describe, expect, it } from "vitest";
import type { ChatMessage, DoneFrame, ReplyDelta } from "../../protocol/messages";
import { canonicalizeTranscript } from "./canonicalize";
import { callsIn, ClientDeltas, replyForms } from "./reply-forms";

const args = '{ "path": "src/x.ts",\n  "lines": [1, 20] }';
const done = {
  type: "done",
  text: "",
  message: { role: "assistant", content: "Reading.", tool_calls: [{ id: "rnd_a", type: "function", function: { name: "read_file", arguments: args } }, { id: "rnd_b", type: "function", function: { name: "ls", arguments: "{}" } }] },
  finishReason: "stop",
  stateId: "s",
  usage: { promptTokens: 1, cachedTokens: 0, computedTokens: 1, completionTokens: 1 },
  timings: { queueMs: 0, prefillMs: 0, ttftMs: 0, decodeMs: 0, totalMs: 0 },
  backendId: "b",
} as DoneFrame;
const before: ChatMessage[] = [
  { role: "user", content: "go" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "ls", arguments: "{}" } }] },
  { role: "tool", tool_call_id: "call_0", content: "x" },
];

describe("replyForms", () => {
  it("the client's arguments are compacted in the model's key order, the stored ones sorted; both number calls after the transcript's", () => {
    const { client, stored } = replyForms(done, before);
    expect(client.tool_calls!.map((c) => c.id)).toEqual(["call_1", "call_2"]);
    expect(stored.tool_calls!.map((c) => c.id)).toEqual(["call_1", "call_2"]);
    expect(client.tool_calls![0]!.function.arguments).toBe('{"path":"src/x.ts","lines":[1,20]}');
    expect(stored.tool_calls![0]!.function.arguments).toBe('{"lines":[1,20],"path":"src/x.ts"}');
    expect(client.content).toBe("Reading.");
  });

  it("a client sending its reply back sends what is stored, with no repair counted", () => {
    const { client, stored } = replyForms(done, before);
    const back = canonicalizeTranscript([...before, client as ChatMessage]);
    expect(back.messages.at(-1)).toEqual(stored);
    expect(back.repaired).toEqual({ toolCallIds: 0, jsonArguments: 0 });
  });

  it("without canonicalization both are the backend's reply", () => {
    const { client, stored } = replyForms(done, undefined);
    expect(client).toBe(stored);
    expect(client.tool_calls![0]).toMatchObject({ id: "rnd_a", function: { arguments: args } });
  });
});

describe("ClientDeltas", () => {
  it("renames streamed ids as replyForms does and compacts argument pieces to the client reply's arguments", () => {
    const deltas = new ClientDeltas(callsIn(before));
    const frames: ReplyDelta[] = [
      { content: "Reading." },
      { toolCalls: [{ index: 0, id: "rnd_a", name: "read_file" }] },
      ...[...args].map((ch) => ({ toolCalls: [{ index: 0, arguments: ch }] })),
      { toolCalls: [{ index: 1, id: "rnd_b", name: "ls", arguments: "{" }] },
      { toolCalls: [{ index: 1, arguments: "}" }] },
    ];
    const out = frames.map((f) => deltas.map(f));
    const { client } = replyForms(done, before);
    expect(out[0]).toEqual({ content: "Reading." });
    expect(out[1]).toEqual({ toolCalls: [{ index: 0, id: "call_1", name: "read_file" }] });
    const pieces = (i: number) => out.flatMap((d) => d.toolCalls ?? []).filter((d) => d.index === i).map((d) => d.arguments ?? "").join("");
    expect(pieces(0)).toBe(client.tool_calls![0]!.function.arguments);
    expect(pieces(1)).toBe(client.tool_calls![1]!.function.arguments);
    // A whitespace-only piece compacts to nothing: the frame carries no call piece at all.
    expect(deltas.map({ toolCalls: [{ index: 1, arguments: " " }] })).toEqual({});
    expect(out.flatMap((d) => d.toolCalls ?? []).find((d) => d.id === "call_2")).toEqual({ index: 1, id: "call_2", name: "ls", arguments: "{" });
  });
});
