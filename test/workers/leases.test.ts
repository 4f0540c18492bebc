import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { decodeReleaseLeaseResponse, encode } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type ChatMessage } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { LeaseStore } from "../../durable-objects/trajectory/lease-store";
import { predictLeaseTtl } from "../../durable-objects/trajectory/lease-policy";
import { leaseSettings } from "../../durable-objects/settings";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import { TENANTS } from "./tenants";
import { chat, completion, replyOf, SMALL, stored, stubOf, uid, uniqueSystem } from "./helpers";

// The workers project runs with LEASES=always (vitest.config.ts): the tiny random model never
// calls tools, so every turn leases, as a turn ending in tool calls does with LEASES=on.

const backendUrl = () => env.BACKEND_URLS.split(",")[0]!.trim();
const secret = () => env.AGENT_EDGE_SECRET ?? "dev-secret";

/** The backend's active leases (its debug listing). */
async function backendLeases(): Promise<{ stateId: string; blocks: number; expiresAt: number }[]> {
  const res = await fetch(`${backendUrl()}${ROUTES.backend.leases}`, { headers: { [SECRET_HEADER]: secret() } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { leases: { stateId: string; blocks: number; expiresAt: number }[] }).leases;
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const leaseOf = (stateId: string) => waitFor(`a lease on ${stateId}`, async () => (await backendLeases()).find((l) => l.stateId === stateId));

/** What the trajectory object holds about its tool wait, its pauses and its alarm. */
function leaseState(id: string) {
  return runInDurableObject(stubOf("a", id), async (_instance, state) => {
    const store = new LeaseStore(state.storage);
    return { wait: store.wait(), pauses: store.pauses(), alarm: await state.storage.getAlarm() };
  });
}

async function firstTurn(id: string): Promise<{ messages: ChatMessage[]; stateId: string }> {
  const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "List the files in src." }];
  const c = await completion(await chat({ ...SMALL, messages }, { headers: { "x-trajectory-id": id } }));
  const { meta } = await stored("a", id);
  return { messages: [...messages, replyOf(c)], stateId: meta!.stateId! };
}

describe("tool-pause leases", () => {
  it("a finished turn leads to an active lease on the backend and a DO alarm at its deadline", async () => {
    const id = uid("lease-grant");
    // No pauses of its own yet: the tenant's (if it has 3 or more) or the default.
    const expected = predictLeaseTtl({ pauses: [], fallbackPauses: await tenantIndexOf(env, TENANTS.a.name).pauseSample(), settings: leaseSettings(env) });
    const { stateId } = await firstTurn(id);
    const lease = await leaseOf(stateId);
    expect(lease.blocks).toBeGreaterThan(0);
    const s = await waitFor("the recorded lease", async () => {
      const st = await leaseState(id);
      return st.wait?.leaseUntil != null ? st : undefined;
    });
    expect(s.wait!.stateId).toBe(stateId);
    expect(s.alarm).toBe(s.wait!.leaseUntil);
    expect(s.wait!.leaseUntil! - s.wait!.since).toBeGreaterThanOrEqual(expected.ttlMs);
    expect(s.wait!.leaseUntil! - s.wait!.since).toBeLessThan(expected.ttlMs + 5000);
  });

  it("a trajectory without pauses of its own takes its TTL from the tenant's recent pauses, and adds its own there", async () => {
    const index = tenantIndexOf(env, TENANTS.a.name);
    for (const ms of [4000, 4200, 3900, 4100, 4050]) await index.notePause(ms);
    const sample = await index.pauseSample();
    expect(sample.slice(-5)).toEqual([4000, 4200, 3900, 4100, 4050]);
    const expected = predictLeaseTtl({ pauses: [], fallbackPauses: sample, settings: leaseSettings(env) });
    expect(expected.basis).toBe("fallback");
    const id = uid("lease-tenant");
    const { messages } = await firstTurn(id);
    const s = await waitFor("the recorded lease", async () => {
      const st = await leaseState(id);
      return st.wait?.leaseUntil != null ? st : undefined;
    });
    expect(s.wait!.leaseUntil! - s.wait!.since).toBeGreaterThanOrEqual(expected.ttlMs);
    expect(s.wait!.leaseUntil! - s.wait!.since).toBeLessThan(expected.ttlMs + 5000);
    // Its next turn records a pause, which the tenant's sample gains too.
    await new Promise((r) => setTimeout(r, 60));
    await completion(await chat({ ...SMALL, messages: [...messages, { role: "user", content: "Go on." }] }, { headers: { "x-trajectory-id": id } }));
    const own = (await leaseState(id)).pauses;
    expect(own).toHaveLength(1);
    await waitFor("the pause in the tenant's sample", async () => ((await index.pauseSample()).includes(Math.round(own[0]!)) ? true : undefined));
  });

  it("the alarm releases the lease at its deadline", async () => {
    const id = uid("lease-alarm");
    const { stateId } = await firstTurn(id);
    await leaseOf(stateId);
    await waitFor("the recorded lease", async () => ((await leaseState(id)).wait?.leaseUntil != null ? true : undefined));
    // Move the deadline into the past, then run the alarm now.
    await runInDurableObject(stubOf("a", id), (_i, state) => {
      state.storage.sql.exec(`UPDATE tool_wait SET lease_until = ?`, Date.now() - 1);
    });
    expect(await runDurableObjectAlarm(stubOf("a", id))).toBe(true);
    expect((await backendLeases()).some((l) => l.stateId === stateId)).toBe(false);
    const s = await leaseState(id);
    expect(s.wait).toMatchObject({ stateId, leaseUntil: null }); // still waiting: the pause will be recorded
    // The backend counted it as ended (not by a turn).
    const res = await fetch(`${backendUrl()}${ROUTES.backend.releaseLease}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: secret() },
      body: encode({ stateId }),
    });
    const r = decodeReleaseLeaseResponse(new Uint8Array(await res.arrayBuffer()));
    expect(r.ok && r.value).toEqual({ released: false, hit: false });
  });

  it("the next turn releases the lease (a hit on the backend), records the pause and leases the new state", async () => {
    const id = uid("lease-next");
    const { messages, stateId } = await firstTurn(id);
    await leaseOf(stateId);
    await waitFor("the recorded lease", async () => ((await leaseState(id)).wait?.leaseUntil != null ? true : undefined));
    await new Promise((r) => setTimeout(r, 120));
    const c2 = await completion(await chat({ ...SMALL, messages: [...messages, { role: "user", content: "Now open README.md." }] }, { headers: { "x-trajectory-id": id } }));
    expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const { meta, turns } = await stored("a", id);
    expect(turns.at(-1)!.mode).toBe("delta");
    expect((await backendLeases()).some((l) => l.stateId === stateId)).toBe(false);
    const res = await fetch(`${backendUrl()}${ROUTES.backend.releaseLease}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: secret() },
      body: encode({ stateId }),
    });
    const r = decodeReleaseLeaseResponse(new Uint8Array(await res.arrayBuffer()));
    expect(r.ok && r.value).toEqual({ released: false, hit: true });
    const s = await leaseState(id);
    expect(s.pauses).toHaveLength(1);
    expect(s.pauses[0]!).toBeGreaterThanOrEqual(100);
    await leaseOf(meta!.stateId!);
  });
});
