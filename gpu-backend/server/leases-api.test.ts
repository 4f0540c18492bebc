import { describe, expect, it } from "vitest";
import { decodeFrame, decodeLeaseResponse, decodeReleaseLeaseResponse, encode, FrameDecoder } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type DoneFrame, type GenerateRequest, type SamplingParams } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { testApp, TEST_SECRET } from "./testing/test-app";
import { createBackendApp } from "./app";

const t = testApp("leases", (engine) => createBackendApp({ engine, secret: TEST_SECRET, backendId: "t" }));
const SECRET = TEST_SECRET;

const sampling: SamplingParams = { maxTokens: 4, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };

function post(path: string, body: unknown, secret = SECRET): Promise<Response> {
  return Promise.resolve(t.app.request(path, { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: secret }, body: encode(body) }));
}

async function generate(req: GenerateRequest): Promise<DoneFrame> {
  const res = await post(ROUTES.backend.generate, req);
  const frames = new FrameDecoder().push(new Uint8Array(await res.arrayBuffer()));
  const last = frames.at(-1)!;
  if (last.type !== "done") throw new Error(JSON.stringify(last));
  return last;
}

async function lease(stateId: string, ttlMs: number) {
  const res = await post(ROUTES.backend.leases, { stateId, ttlMs });
  expect(res.status).toBe(200);
  const r = decodeLeaseResponse(new Uint8Array(await res.arrayBuffer()));
  if (!r.ok) throw r.error;
  return r.value;
}

async function release(stateId: string, expired?: boolean) {
  const res = await post(ROUTES.backend.releaseLease, { stateId, ...(expired ? { expired } : {}) });
  expect(res.status).toBe(200);
  const r = decodeReleaseLeaseResponse(new Uint8Array(await res.arrayBuffer()));
  if (!r.ok) throw r.error;
  return r.value;
}

async function metric(name: string): Promise<number> {
  const text = await (await t.app.request(ROUTES.backend.metrics, { headers: { [SECRET_HEADER]: SECRET } })).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return Number(line?.split(" ")[1] ?? NaN);
}

const firstTurn = (trajectoryId: string): GenerateRequest => ({
  requestId: `${trajectoryId}-0`,
  trajectoryId,
  mode: "full",
  messages: [{ role: "system", content: `[${trajectoryId}] ${"Use the tools to read files. ".repeat(12)}` }, { role: "user", content: "List the files." }],
  sampling,
});

describe("POST /v1/leases", () => {
  it("leases a state's blocks; the next delta turn ends it as a hit; a late release says so", async () => {
    const done = await generate(firstTurn("lease-a"));
    const before = await metric("agent_edge_lease_hits_total");
    const r = await lease(done.stateId, 60_000);
    expect(r.leased).toBe(true);
    expect(r.blocks).toBe(Math.floor((done.usage.promptTokens + done.usage.completionTokens - 1) / 16));
    expect(r.expiresAt).toBeGreaterThan(Date.now() + 50_000);
    const listed = (await (await t.app.request(ROUTES.backend.leases, { headers: { [SECRET_HEADER]: SECRET } })).json()) as { leases: { stateId: string; blocks: number }[] };
    expect(listed.leases).toContainEqual(expect.objectContaining({ stateId: done.stateId, blocks: r.blocks }));
    expect(await metric("agent_edge_leases_active")).toBeGreaterThanOrEqual(1);
    expect(await metric("agent_edge_leased_blocks")).toBeGreaterThanOrEqual(r.blocks);

    const next = await generate({ requestId: "a-1", trajectoryId: "lease-a", mode: "delta", stateId: done.stateId, messages: [{ role: "tool", content: "a.txt b.txt", tool_call_id: "c1" }], sampling });
    // The leased full blocks, and the partial last block the state keeps (the exact tail).
    expect(next.usage.cachedTokens).toBe(done.usage.promptTokens + done.usage.completionTokens - 1);
    expect(next.usage.cachedTokens).toBeGreaterThan(r.blocks * 16);
    expect(t.engine.leases.table.get(done.stateId)).toBeUndefined();
    expect(await metric("agent_edge_lease_hits_total")).toBe(before + 1);
    expect(await release(done.stateId)).toEqual({ released: false, hit: true });
  });

  it("keeps the expected return a lease gives (the break order's key), else orders by its deadline", async () => {
    const a = await generate(firstTurn("lease-ret-a"));
    const b = await generate(firstTurn("lease-ret-b"));
    const t0 = Date.now();
    expect((await post(ROUTES.backend.leases, { stateId: a.stateId, ttlMs: 60_000, expectedReturnMs: 5000 })).status).toBe(200);
    await lease(b.stateId, 60_000);
    const la = t.engine.leases.table.get(a.stateId)!;
    const lb = t.engine.leases.table.get(b.stateId)!;
    expect(la.returnAt - t0).toBeGreaterThanOrEqual(5000);
    expect(la.returnAt - t0).toBeLessThan(15_000);
    expect(la.expiresAt - t0).toBeGreaterThanOrEqual(60_000);
    expect(lb.returnAt).toBe(lb.expiresAt);
    await release(a.stateId);
    await release(b.stateId);
  });

  it("releases on request; an expired release counts as expired unused", async () => {
    const a = await generate(firstTurn("lease-b"));
    const b = await generate(firstTurn("lease-c"));
    await lease(a.stateId, 60_000);
    await lease(b.stateId, 60_000);
    const expiredBefore = await metric("agent_edge_leases_expired_unused_total");
    expect(await release(a.stateId)).toEqual({ released: true });
    expect(await release(b.stateId, true)).toEqual({ released: true });
    expect(await metric("agent_edge_leases_expired_unused_total")).toBe(expiredBefore + 1);
    expect(await release(a.stateId)).toEqual({ released: false, hit: false });
  });

  it("answers leased: false for an unknown state, 400 for a bad body, 401 without the secret", async () => {
    expect(await lease("no-such-state", 1000)).toEqual({ leased: false, blocks: 0, expiresAt: 0 });
    const bad = await post(ROUTES.backend.leases, { stateId: "x", ttlMs: 0 });
    expect(bad.status).toBe(400);
    const frame = decodeFrame(new Uint8Array(await bad.arrayBuffer()));
    expect(frame.ok && frame.value.type === "error" && frame.value.code).toBe("invalid_request");
    expect(frame.ok && frame.value.type === "error" && frame.value.message).toMatch(/ttlMs/);
    const badReturn = await post(ROUTES.backend.leases, { stateId: "x", ttlMs: 1000, expectedReturnMs: -5 });
    expect(badReturn.status).toBe(400);
    const returnFrame = decodeFrame(new Uint8Array(await badReturn.arrayBuffer()));
    expect(returnFrame.ok && returnFrame.value.type === "error" && returnFrame.value.message).toMatch(/expectedReturnMs/);
    expect((await post(ROUTES.backend.releaseLease, { stateId: "x" }, "wrong")).status).toBe(401);
  });
});
