import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { call, chat, completion, getState, replyOf, SMALL, stored, uid, uniqueSystem, type TenantName } from "./helpers";
import { TENANTS } from "./tenants";

/** The tenant's counter of turns with this prefix-break cause, from GET /v1/tenants/{tenant}/metrics. */
async function breakCount(tenant: TenantName, cause: string): Promise<number> {
  return tenantMetric(tenant, "agent_edge_prefix_breaks_total", `cause="${cause}"`);
}

/** One of the tenant's counters, e.g. tenantMetric("raw", "agent_edge_cache_miss_turns_total", 'reason="evicted"'). */
async function tenantMetric(tenant: TenantName, name: string, label: string): Promise<number> {
  const res = await call(`/v1/tenants/${TENANTS[tenant].name}/metrics`, { tenant });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  const m = text.match(new RegExp(`^${name}\\{tenant="${TENANTS[tenant].name}",${label}\\} (\\d+)$`, "m"));
  expect(m, text).not.toBeNull();
  return Number(m![1]);
}

/**
 * Issue 6: the prefix-break explainer and safe canonicalization, end to end (Worker -> DO ->
 * real backend). Tenant "a" has canonicalization on (the default); tenant "raw" is listed in
 * CANONICALIZE_OFF_TENANTS.
 */
const TOOLS: ToolDefinition[] = [
  { type: "function", function: { name: "grep", description: "Search files", parameters: { type: "object", properties: { pattern: { type: "string" }, path: { type: "string" } } } } },
];

let counter = 0;
/**
 * A client that invents a fresh random id for every tool call, every time it sends the history.
 * It starts with "r", so it differs from "call_first..." right after "call_" (offset 5; a random
 * hex digit "f" there made the offset 6 one run in 16).
 */
function randomId(): string {
  return `call_r${crypto.randomUUID().replace(/-/g, "").slice(0, 15)}${counter++}`;
}

/** The history an agent framework would resend: one earlier tool call and its result. */
function history(system: ChatMessage, id: string, args: string): ChatMessage[] {
  return [
    system,
    { role: "user", content: "Where is parseConfig defined?" },
    { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "grep", arguments: args } }] },
    { role: "tool", tool_call_id: id, content: "src/config.ts:12: export function parseConfig(" },
  ];
}

async function twoTurns(tenant: TenantName, second: (first: ChatMessage[]) => ChatMessage[]) {
  const id = uid(`breaks-${tenant}`);
  const headers = { "x-trajectory-id": id };
  const system = uniqueSystem(40);
  const first = history(system, "call_first0000000001", '{"pattern":"parseConfig","path":"src"}');
  const r1 = await chat({ messages: first, tools: TOOLS, ...SMALL }, { tenant, headers });
  expect(r1.headers.get("x-prefix-break")).toBe("none");
  const c1 = await completion(r1);
  const messages = [...second(first), replyOf(c1), { role: "user", content: "Open it." } as ChatMessage];
  const r2 = await chat({ messages, tools: TOOLS, ...SMALL }, { tenant, headers });
  const header = r2.headers.get("x-prefix-break");
  const mode = r2.headers.get("x-agent-edge-mode");
  const c2 = await completion(r2);
  return { id, c1, c2, header, mode, state: await getState(tenant, id) };
}

const reorder = (args: string) => JSON.stringify(Object.fromEntries(Object.entries(JSON.parse(args) as object).reverse()), null, 1);

describe("safe canonicalization (on by default)", () => {
  it("a client that randomizes tool-call ids and JSON key order every turn keeps full reuse: no break, delta turn, repairs recorded", async () => {
    const t = await twoTurns("a", (first) => history(first[0]!, randomId(), reorder(first[2]!.tool_calls![0]!.function.arguments)));
    expect(t.header).toBe("none");
    expect(t.mode).toBe("delta");
    // Delta: the backend extends its state; all of turn 1's prompt is reused but its partial last
    // KV block (blocks of 16 are the unit of reuse).
    expect(t.c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(t.c1.usage.prompt_tokens - 16);
    const turn2 = t.state.turns[1]!;
    expect(turn2.prefix_break).toEqual({ cause: "none" });
    expect(turn2.repaired).toEqual({ tool_call_ids: 1, json_arguments: 1, quirks: [] });
    // Stored canonically: positional ids, sorted keys.
    const s = await stored("a", t.id);
    expect(s.messages[2]!.tool_calls![0]).toMatchObject({ id: "call_0", function: { arguments: '{"path":"src","pattern":"parseConfig"}' } });
    expect(s.messages[3]!.tool_call_id).toBe("call_0");
  });
});

describe("prefix-break explainer (canonicalization off for this tenant)", () => {
  it("reports random-id when tool-call ids change, with the field and offset, in the header and the turn record", async () => {
    const t = await twoTurns("raw", (first) => history(first[0]!, randomId(), first[2]!.tool_calls![0]!.function.arguments));
    expect(t.header).toMatch(/^random-id; message=2; field=tool_calls\[0\]\.id; offset=5; uncached_from_token=\d+$/);
    expect(t.mode).toBe("full");
    const turn2 = t.state.turns[1]!;
    expect(turn2.full_reason).toBe("diverged");
    expect(turn2.prefix_break).toMatchObject({ cause: "random-id", message: 2, field: "tool_calls[0].id", offset: 5, before: "call_first0000000001" });
    expect(turn2.prefix_break!.uncached_from_token).toBe(turn2.cached_tokens);
    expect(turn2.repaired).toBeNull();
  });

  it("reports json-serialization when the same arguments are serialized differently", async () => {
    const t = await twoTurns("raw", (first) => history(first[0]!, "call_first0000000001", reorder(first[2]!.tool_calls![0]!.function.arguments)));
    expect(t.header).toMatch(/^json-serialization; message=2; field=tool_calls\[0\]\.arguments; offset=1;/);
    expect(t.state.turns[1]!.prefix_break!.cause).toBe("json-serialization");
  });

  it("reports timestamp when the system prompt's time changes, and counts causes in the tenant's metrics, with the cache miss it caused", async () => {
    const stamp = (time: string): ChatMessage => ({ role: "system", content: `You are an agent. The time is 2026-12-02 ${time} UTC. ${"Be precise. ".repeat(20)}` });
    const before = await breakCount("raw", "timestamp");
    const missesBefore = await tenantMetric("raw", "agent_edge_cache_miss_turns_total", 'reason="prefix-break"');
    const missTokensBefore = await tenantMetric("raw", "agent_edge_cache_miss_tokens_total", 'reason="prefix-break"');
    const id = uid("breaks-ts");
    const headers = { "x-trajectory-id": id };
    const c1 = await completion(await chat({ messages: [stamp("10:31:07"), { role: "user", content: "Start." }], ...SMALL }, { tenant: "raw", headers }));
    const r2 = await chat({ messages: [stamp("10:35:44"), { role: "user", content: "Start." }, replyOf(c1), { role: "user", content: "Next." }], ...SMALL }, { tenant: "raw", headers });
    expect(r2.headers.get("x-prefix-break")).toMatch(/^timestamp; message=0; field=content; offset=\d+/);
    await completion(r2);
    const b = (await getState("raw", id)).turns[1]!.prefix_break!;
    expect(b.before).toContain("10:31:07");
    expect(b.after).toContain("10:35:44");
    // The miss: what turn 1 left (its prompt and reply) less what turn 2 reused, put on the break.
    const [t1, t2] = (await getState("raw", id)).turns;
    const possible = Math.min(t1!.prompt_tokens + t1!.completion_tokens - 1, t2!.prompt_tokens - 1); // the reply's last token has no KV
    expect(t2!.miss).toEqual({ reason: "prefix-break", tokens: possible - t2!.cached_tokens, possible_tokens: possible, detail: "timestamp" });
    expect(t2!.miss!.tokens).toBeGreaterThan(0);
    // The index is noted just after the answer (waitUntil): poll briefly.
    let after = before;
    for (let i = 0; i < 50 && after === before; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await breakCount("raw", "timestamp");
    }
    expect(after).toBe(before + 1);
    expect(await tenantMetric("raw", "agent_edge_cache_miss_turns_total", 'reason="prefix-break"')).toBe(missesBefore + 1);
    expect(await tenantMetric("raw", "agent_edge_cache_miss_tokens_total", 'reason="prefix-break"')).toBe(missTokensBefore + t2!.miss!.tokens);
    // Another tenant's metrics are not this key's to read.
    expect((await call(`/v1/tenants/${TENANTS.a.name}/metrics`, { tenant: "raw" })).status).toBe(404);
  });
});

describe("regenerate and assistant-edited (issue 17)", () => {
  it("a resend of the transcript without its last reply is a regenerate, also with fresh tool-call ids that canonicalization renames back; the whole prompt is cached", async () => {
    const id = uid("breaks-regen");
    const headers = { "x-trajectory-id": id };
    const first = history(uniqueSystem(40), randomId(), '{"pattern":"parseConfig","path":"src"}');
    const c1 = await completion(await chat({ messages: first, tools: TOOLS, ...SMALL }, { headers }));
    // The client retries the same turn, its framework inventing new ids for the old call.
    const again = history(first[0]!, randomId(), first[2]!.tool_calls![0]!.function.arguments);
    const r2 = await chat({ messages: again, tools: TOOLS, ...SMALL }, { headers });
    expect(r2.headers.get("x-prefix-break")).toMatch(/^regenerate; message=4; field=messages; offset=0; uncached_from_token=\d+$/);
    const c2 = await completion(r2);
    // The same prompt again: all of it is cached but its partial last KV block.
    expect(c2.usage.prompt_tokens).toBe(c1.usage.prompt_tokens);
    expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(c1.usage.prompt_tokens - 16);
    const turn2 = (await getState("a", id)).turns[1]!;
    expect(turn2).toMatchObject({ mode: "full", full_reason: "diverged" });
    expect(turn2.prefix_break).toMatchObject({ cause: "regenerate", message: 4, field: "messages", offset: 0, after: "" });
    expect(turn2.prefix_break!.uncached_from_token).toBe(turn2.cached_tokens);
    // The new reply replaced the old one.
    const s = await stored("a", id);
    expect(s.messages).toHaveLength(5);
    expect(s.messages[4]).toEqual(replyOf(c2));
  });

  it("a transcript two messages short is still removed-or-truncated", async () => {
    const id = uid("breaks-short");
    const headers = { "x-trajectory-id": id };
    const first = [uniqueSystem(), { role: "user", content: "One." } as ChatMessage];
    const c1 = await completion(await chat({ messages: first, ...SMALL }, { headers }));
    await completion(await chat({ messages: [...first, replyOf(c1), { role: "user", content: "Two." }], ...SMALL }, { headers }));
    const r3 = await chat({ messages: [...first, replyOf(c1)], ...SMALL }, { headers });
    expect(r3.headers.get("x-prefix-break")).toMatch(/^removed-or-truncated; message=3; field=messages; offset=0;/);
    await completion(r3);
  });

  it("an assistant reply rewritten by the client is assistant-edited, in the header and the turn record", async () => {
    const id = uid("breaks-edited");
    const headers = { "x-trajectory-id": id };
    const first = [uniqueSystem(40), { role: "user", content: "Say something." } as ChatMessage];
    const c1 = await completion(await chat({ messages: first, ...SMALL }, { headers }));
    const was = c1.choices[0]!.message.content ?? "";
    const now = "I rewrote this reply.";
    const r2 = await chat({ messages: [...first, { role: "assistant", content: now }, { role: "user", content: "Go on." }], ...SMALL }, { headers });
    let offset = 0;
    while (offset < Math.min(was.length, now.length) && was[offset] === now[offset]) offset++;
    expect(r2.headers.get("x-prefix-break")).toMatch(new RegExp(`^assistant-edited; message=2; field=content; offset=${offset}; uncached_from_token=\\d+$`));
    await completion(r2);
    const turn2 = (await getState("a", id)).turns[1]!;
    expect(turn2.full_reason).toBe("diverged");
    expect(turn2.prefix_break).toMatchObject({ cause: "assistant-edited", message: 2, field: "content", offset });
    expect(turn2.prefix_break!.after).toContain("rewrote");
    expect((await stored("a", id)).messages[2]).toEqual({ role: "assistant", content: now });
  });
});
