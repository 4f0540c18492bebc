import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { planTurn } from "./turn-plan";
import type { TrajectoryMeta, TurnInput } from "./turn-types";

const sys: ChatMessage = { role: "system", content: "You are terse." };
const user = (content: string): ChatMessage => ({ role: "user", content });
const assistant = (content: string): ChatMessage => ({ role: "assistant", content });
const tool: ToolDefinition = { type: "function", function: { name: "ls", description: "list", parameters: { type: "object", properties: { path: { type: "string" } } } } };

const stored: ChatMessage[] = [sys, user("hi"), assistant("hello")];
const meta = (over: Partial<TrajectoryMeta> = {}): TrajectoryMeta => ({ tenant: "t", trajectoryId: "tr", createdAt: "2026-12-03T00:00:00Z", backendUrl: "http://b0", stateId: "s1", toolsJson: "[]", ...over });
const input = (over: Partial<TurnInput> = {}): TurnInput => ({
  tenant: "t",
  trajectoryId: "tr",
  cacheSalt: "salt",
  kind: "chat",
  messages: [...stored, user("next")],
  tools: [],
  sampling: { maxTokens: 8, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [] },
  constraint: undefined,
  model: undefined,
  idempotencyKey: undefined,
  ...over,
});

describe("planTurn", () => {
  it("sends only the new messages when the transcript grew on the same backend with a state", () => {
    const plan = planTurn({ meta: meta(), stored, input: input(), backendUrl: "http://b0", canonical: true });
    expect(plan).toMatchObject({ mode: "delta", fullReason: null, keep: 3, prefixBreak: { cause: "none" } });
    expect(plan.newMessages).toEqual([user("next")]);
    expect(plan.fullTranscript).toHaveLength(4);
  });

  it("goes full, naming why: first turn, no state, another backend, changed tools, divergence", () => {
    expect(planTurn({ meta: meta({ stateId: null }), stored: [], input: input({ messages: [sys, user("hi")] }), backendUrl: "http://b0", canonical: true }).fullReason).toBe("first-turn");
    expect(planTurn({ meta: meta({ stateId: null }), stored, input: input(), backendUrl: "http://b0", canonical: true }).fullReason).toBe("first-turn");
    expect(planTurn({ meta: meta(), stored, input: input(), backendUrl: "http://b1", canonical: true }).fullReason).toBe("backend-changed");
    expect(planTurn({ meta: meta(), stored, input: input({ tools: [tool] }), backendUrl: "http://b0", canonical: true }).fullReason).toBe("tools-changed");
    const diverged = planTurn({ meta: meta(), stored, input: input({ messages: [sys, user("edited"), assistant("x"), user("next")] }), backendUrl: "http://b0", canonical: true });
    expect(diverged).toMatchObject({ mode: "full", fullReason: "diverged", keep: 1 });
    expect(diverged.prefixBreak.cause).not.toBe("none");
  });

  it("appends the new messages of an append turn to the stored transcript, keeping the stored tools", () => {
    const plan = planTurn({ meta: meta({ toolsJson: JSON.stringify([tool]) }), stored, input: input({ kind: "append", messages: [user("more")], tools: undefined }), backendUrl: "http://b0", canonical: false });
    expect(plan.mode).toBe("delta");
    expect(plan.fullTranscript).toEqual([...stored, user("more")]);
    expect(plan.tools).toEqual([tool]);
  });

  it("canonicalizes tool-call ids and JSON arguments, and says what it repaired", () => {
    const call = { id: "call_ZX81", type: "function" as const, function: { name: "ls", arguments: '{ "path" : "/" }' } };
    const messages: ChatMessage[] = [sys, user("hi"), { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", content: "a b", tool_call_id: "call_ZX81" }];
    const plan = planTurn({ meta: meta({ stateId: null }), stored: [], input: input({ messages }), backendUrl: "http://b0", canonical: true });
    expect(plan.fullTranscript[2]!.tool_calls![0]).toMatchObject({ id: "call_0", function: { arguments: '{"path":"/"}' } });
    expect(plan.fullTranscript[3]!.tool_call_id).toBe("call_0");
    expect(plan.repaired).toEqual({ toolCallIds: 1, jsonArguments: 1 });
    const raw = planTurn({ meta: meta({ stateId: null }), stored: [], input: input({ messages }), backendUrl: "http://b0", canonical: false });
    expect(raw.fullTranscript[2]!.tool_calls![0]!.id).toBe("call_ZX81");
    expect(raw.repaired).toBeUndefined();
  });

  it("records the client quirks the edge repaired (canonical or not), each once", () => {
    const quirky = { ...input(), quirks: ["billing-header", "billing-header"] };
    expect(planTurn({ meta: meta(), stored, input: quirky, backendUrl: "http://b0", canonical: true }).repaired).toEqual({ toolCallIds: 0, jsonArguments: 0, quirks: ["billing-header"] });
    expect(planTurn({ meta: meta(), stored, input: quirky, backendUrl: "http://b0", canonical: false }).repaired).toEqual({ toolCallIds: 0, jsonArguments: 0, quirks: ["billing-header"] });
    expect(planTurn({ meta: meta(), stored, input: { ...input(), quirks: [] }, backendUrl: "http://b0", canonical: true }).repaired).toBeUndefined();
  });

  it("refuses a tool message that answers no call, in the client's ids and with the index it sent", () => {
    const call = (id: string): ChatMessage => ({ role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "ls", arguments: "{}" } }] });
    const answer = (id: string): ChatMessage => ({ role: "tool", content: "a b", tool_call_id: id });
    const plan = (messages: ChatMessage[], kind: TurnInput["kind"] = "chat", storedMessages = stored) =>
      planTurn({ meta: meta(), stored: storedMessages, input: input({ kind, messages }), backendUrl: "http://b0", canonical: true });
    expect(() => plan([...stored, answer("x")])).toThrow(/^messages\[3\]: tool message answers tool_call_id "x", which no earlier assistant message's tool_calls names$/);
    // Valid in the client's ids, whatever canonicalization renames them to.
    expect(plan([...stored, user("go"), call("call_1"), answer("call_1"), call("call_1"), answer("call_1")]).fullTranscript).toHaveLength(8);
    // An append turn: a tool message answers the stored call; its index is the one the client sent.
    const withCall = [...stored, user("go"), call("call_0")];
    expect(plan([answer("call_0"), user("next")], "append", withCall).newMessages).toHaveLength(2);
    expect(() => plan([answer("call_0"), answer("call_7")], "append", withCall)).toThrow(/^messages\[1\]: tool message answers tool_call_id "call_7"/);
    expect(() => plan([answer("call_0")], "append")).toThrow(/^messages\[0\]: tool message answers tool_call_id "call_0", which no earlier/);
  });

  it("refuses an empty transcript and an append turn without messages", () => {
    expect(() => planTurn({ meta: meta(), stored: [], input: input({ messages: [] }), backendUrl: "http://b0", canonical: true })).toThrow(/must not be empty/);
    expect(() => planTurn({ meta: meta(), stored, input: input({ kind: "append", messages: [] }), backendUrl: "http://b0", canonical: true })).toThrow(/at least one new message/);
  });
});
