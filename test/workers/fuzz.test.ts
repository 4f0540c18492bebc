import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { edgeFuzzCase, fuzzEdge, type EdgeFuzzContext } from "../../bench/fuzz-edge";
import { call, chat, completion, getState, SMALL, trajectoryPath, uid } from "./helpers";
import { TENANTS } from "./tenants";

/**
 * Seeded fuzzing of the edge's JSON routes (issue 19; bench/fuzz-edge.ts) through the real
 * Worker, its Durable Objects and the real backend: mutated and random bodies, missing, wrong and
 * foreign keys. No 5xx, every refusal carries a stable code, nothing is answered to a request
 * without a valid key for it, and no refused request changes the probe trajectory.
 */
describe("edge fuzzing", () => {
  it("answers 400 seeded mutated and random requests cleanly, and no refusal changes a trajectory", async () => {
    const probe = uid("fuzz-probe");
    await completion(await chat({ messages: [{ role: "user", content: "Start." }], ...SMALL }, { headers: { "x-trajectory-id": probe } }));
    const ctx: EdgeFuzzContext = { tenant: TENANTS.a.name, key: TENANTS.a.key, otherTenant: TENANTS.b.name, otherKey: TENANTS.b.key, model: "tiny-llama-random", probeTrajectory: probe };
    const state = async () => {
      const s = await getState("a", probe);
      return `${s.message_count}/${s.turns.length}`;
    };
    const findings = await fuzzEdge({ fetch: (req) => exports.default.fetch(req), base: "http://edge.test", ctx, seed: 19, cases: 400, state });
    expect(findings.failures, JSON.stringify(findings.failures.slice(0, 5))).toEqual([]);
    expect(findings).toMatchObject({ cases: 400, crashes: 0, serverErrors: 0, unavailable: 0, uncoded: 0, unauthorized2xx: 0, trajectoriesChangedByRefusals: 0 });
    expect(findings.byStatus["400"]).toBeGreaterThan(100);
    expect(findings.byStatus["401"]).toBeGreaterThan(5);
    expect(findings.byStatus["200"]).toBeGreaterThan(5);
    // The edge serves on, and the probe trajectory still takes turns.
    expect((await call("/healthz", { tenant: null })).status).toBe(200);
    // Fuzzed turns without a budget may use all the context the tiny model has left (the backend
    // clamps to it), so the probe takes the next turn, or refuses it as full and keeps everything.
    const before = await state();
    const next = await call(trajectoryPath("a", probe, "/turns"), { body: { messages: [{ role: "user", content: "Go on." }], ...SMALL } });
    if (next.status >= 300) {
      expect(next.status, await next.clone().text()).toBe(400);
      expect(((await next.json()) as { error: { code: string } }).error.code).toBe("context_length_exceeded");
      expect(await state()).toBe(before);
    }
    // A fresh trajectory takes a turn.
    expect((await chat({ messages: [{ role: "user", content: "Start." }], ...SMALL }, { headers: { "x-trajectory-id": uid("fuzz-after") } })).status).toBe(200);
  }, 300_000);

  it("builds each case from the seed and its number alone", () => {
    const ctx: EdgeFuzzContext = { tenant: "t", key: "k", otherTenant: "o", otherKey: "ok", model: "m", probeTrajectory: "p" };
    expect(edgeFuzzCase(3, 77, ctx)).toEqual(edgeFuzzCase(3, 77, ctx));
    expect(edgeFuzzCase(4, 77, ctx)).not.toEqual(edgeFuzzCase(3, 77, ctx));
  });
});
