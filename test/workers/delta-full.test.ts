import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { chat, completion, getState, replyOf, SMALL, stored, uid, uniqueSystem } from "./helpers";

const TOOLS: ToolDefinition[] = [
  { type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } },
];

describe("delta and full turns", () => {
  it("a turn that extends the transcript is a delta with cached tokens; an edit is a full 'diverged' turn replacing the transcript", async () => {
    const id = uid("delta");
    const headers = { "x-trajectory-id": id };
    const base: ChatMessage[] = [uniqueSystem(30), { role: "user", content: "Find the failing test." }];
    const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    expect(c1.usage.prompt_tokens_details.cached_tokens).toBe(0);

    const extended = [...base, replyOf(c1), { role: "user", content: "Fix it." } as ChatMessage];
    const r2 = await chat({ messages: extended, ...SMALL }, { headers });
    expect(r2.headers.get("x-agent-edge-mode")).toBe("delta");
    const c2 = await completion(r2);
    expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(c2.usage.prompt_tokens).toBeGreaterThan(c1.usage.prompt_tokens);
    expect((await stored("a", id)).messages).toEqual([...extended, replyOf(c2)]);

    // The client edits its first user message (and drops what followed).
    const edited: ChatMessage[] = [base[0]!, { role: "user", content: "Find the flaky test instead." }];
    const r3 = await chat({ messages: edited, ...SMALL }, { headers });
    expect(r3.headers.get("x-agent-edge-mode")).toBe("full");
    const c3 = await completion(r3);
    // The shared system prompt is still in the backend's prefix cache.
    expect(c3.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const s = await stored("a", id);
    expect(s.messages).toEqual([...edited, replyOf(c3)]);
    expect(s.turns.map((t) => [t.mode, t.fullReason])).toEqual([
      ["full", "first-turn"],
      ["delta", null],
      ["full", "diverged"],
    ]);

    // A turn after the divergence extends the new transcript: a delta again.
    const after = [...edited, replyOf(c3), { role: "user", content: "Go on." } as ChatMessage];
    const c4 = await completion(await chat({ messages: after, ...SMALL }, { headers }));
    const state = await getState("a", id);
    expect(state.turns.at(-1)!.mode).toBe("delta");
    expect(state.message_count).toBe(after.length + 1);
    expect((await stored("a", id)).messages).toEqual([...after, replyOf(c4)]);
  });

  it("a shorter transcript (a dropped message) is 'diverged' too", async () => {
    const id = uid("delta-short");
    const headers = { "x-trajectory-id": id };
    const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "a" }];
    const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    await completion(await chat({ messages: [...base, replyOf(c1), { role: "user", content: "b" }], ...SMALL }, { headers }));
    const c3 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    const s = await stored("a", id);
    expect(s.turns.at(-1)!.fullReason).toBe("diverged");
    expect(s.messages).toEqual([...base, replyOf(c3)]);
  });

  it("changed tools make a full 'tools-changed' turn; the same tools again allow a delta", async () => {
    const id = uid("delta-tools");
    const headers = { "x-trajectory-id": id };
    const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Read the README." }];
    const c1 = await completion(await chat({ messages, ...SMALL }, { headers }));
    messages.push(replyOf(c1), { role: "user", content: "Use the tool." });
    const r2 = await chat({ messages, tools: TOOLS, ...SMALL }, { headers });
    expect(r2.headers.get("x-agent-edge-mode")).toBe("full");
    const c2 = await completion(r2);
    messages.push(replyOf(c2), { role: "user", content: "Again." });
    const c3 = await completion(await chat({ messages, tools: TOOLS, ...SMALL }, { headers }));
    messages.push(replyOf(c3), { role: "user", content: "Without tools now." });
    const c4 = await completion(await chat({ messages, tools: [], ...SMALL }, { headers }));
    messages.push(replyOf(c4));

    const s = await stored("a", id);
    expect(s.turns.map((t) => [t.mode, t.fullReason])).toEqual([
      ["full", "first-turn"],
      ["full", "tools-changed"],
      ["delta", null],
      ["full", "tools-changed"],
    ]);
    expect(s.meta!.toolsJson).toBe("[]");
    expect(s.messages).toEqual(messages);
  });
});
