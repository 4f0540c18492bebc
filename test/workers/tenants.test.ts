import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { trajectoryName } from "../../durable-objects/trajectory-name";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, getState, replyOf, SMALL, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";
import { TENANTS } from "./tenants";

describe("tenant isolation", () => {
  it("tenant B gets 404 for tenant A's trajectory URL (GET, POST turns, DELETE) and changes nothing", async () => {
    const id = uid("iso-url");
    await createTrajectory("a", id);
    const messages: ChatMessage[] = [{ role: "user", content: "tenant A's secret plan" }];
    const c = await completion(await call(trajectoryPath("a", id, "/turns"), { tenant: "a", body: { messages, ...SMALL } }));
    const before = await stored("a", id);

    const aPath = `/v1/tenants/${TENANTS.a.name}/trajectories/${id}`;
    await expectError(await call(aPath, { tenant: "b" }), 404, "not_found");
    await expectError(await call(`${aPath}/turns`, { tenant: "b", body: { messages: [{ role: "user", content: "hijack" }], ...SMALL } }), 404, "not_found");
    await expectError(await call(aPath, { tenant: "b", method: "DELETE" }), 404, "not_found");
    await expectError(await call(`/v1/tenants/${TENANTS.a.name}/trajectories`, { tenant: "b", body: { id: uid("iso-create") } }), 404, "not_found");

    // Tenant A's trajectory is untouched.
    expect(await stored("a", id)).toEqual(before);
    expect(before.messages).toEqual([...messages, replyOf(c)]);
    expect((await getState("a", id)).turns).toHaveLength(1);
    // Tenant B's own URL with that id is a different (nonexistent) trajectory.
    await expectError(await call(trajectoryPath("b", id), { tenant: "b" }), 404, "not_found");
  });

  it("the same trajectory id under two tenants is two objects with their own transcripts", async () => {
    const id = uid("iso-same");
    expect(env.TRAJECTORY.idFromName(trajectoryName(TENANTS.a.name, id)).equals(env.TRAJECTORY.idFromName(trajectoryName(TENANTS.b.name, id)))).toBe(false);
    const ma: ChatMessage[] = [{ role: "user", content: "I am tenant A" }];
    const mb: ChatMessage[] = [{ role: "user", content: "I am tenant B" }];
    const ca = await completion(await chat({ messages: ma, ...SMALL }, { tenant: "a", headers: { "x-trajectory-id": id } }));
    const cb = await completion(await chat({ messages: mb, ...SMALL }, { tenant: "b", headers: { "x-trajectory-id": id } }));
    // Both are first turns of their own trajectory (not a divergence of a shared one).
    const sa = await stored("a", id);
    const sb = await stored("b", id);
    expect(sa.messages).toEqual([...ma, replyOf(ca)]);
    expect(sb.messages).toEqual([...mb, replyOf(cb)]);
    expect(sa.turns.map((t) => t.fullReason)).toEqual(["first-turn"]);
    expect(sb.turns.map((t) => t.fullReason)).toEqual(["first-turn"]);
    expect(sa.meta!.tenant).toBe("tenant-a");
    expect(sb.meta!.tenant).toBe("tenant-b");
    expect((await getState("b", id)).tenant).toBe("tenant-b");
  });

  it("the cache salt differs per tenant: A's repeat of a prompt hits the cache, B's identical prompt right after has no cached tokens", async () => {
    const messages: ChatMessage[] = [uniqueSystem(60), { role: "user", content: "Summarize the repository." }];
    const a1 = await completion(await chat({ messages, ...SMALL }, { tenant: "a", headers: { "x-trajectory-id": uid("salt-a1") } }));
    // Several KV blocks' worth of prompt, so a hit is whole blocks.
    expect(a1.usage.prompt_tokens).toBeGreaterThan(200);
    expect(a1.usage.prompt_tokens_details.cached_tokens).toBe(0);

    // The cache holds A's prompt: A's repeat (another trajectory) reuses most of it.
    const a2 = await completion(await chat({ messages, ...SMALL }, { tenant: "a", headers: { "x-trajectory-id": uid("salt-a2") } }));
    expect(a2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(a1.usage.prompt_tokens / 2);

    // B's identical prompt, with those blocks cached, reuses none of them.
    const b1 = await completion(await chat({ messages, ...SMALL }, { tenant: "b", headers: { "x-trajectory-id": uid("salt-b1") } }));
    expect(b1.usage.prompt_tokens).toBe(a1.usage.prompt_tokens);
    expect(b1.usage.prompt_tokens_details.cached_tokens).toBe(0);

    // B's own cache works too: the salt separates tenants, it does not disable caching.
    const b2 = await completion(await chat({ messages, ...SMALL }, { tenant: "b" }));
    expect(b2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(a1.usage.prompt_tokens / 2);
  });
});
