import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "../../protocol/hex";
import { call, expectError } from "./helpers";
import { TENANTS } from "./tenants";

describe("routes", () => {
  it("GET /healthz answers without a key", async () => {
    const res = await call("/healthz", { tenant: null });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
  });

  it("GET /v1/models lists the model", async () => {
    const res = await call("/v1/models");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: { id: string; object: string }[] };
    expect(body.object).toBe("list");
    expect(body.data.length).toBeGreaterThan(0);
    expect(body.data[0]!.object).toBe("model");
    expect(typeof body.data[0]!.id).toBe("string");
  });

  it("GET /v1/models lists exactly what the live backend serves (its own /v1/models)", async () => {
    const own = await fetch(`${env.BACKEND_URLS}/v1/models`, { headers: { "x-agent-edge-secret": env.AGENT_EDGE_SECRET! } });
    expect(own.status).toBe(200);
    const served = ((await own.json()) as { data: { id: string }[] }).data.map((m) => m.id);
    expect(served.length).toBeGreaterThan(0);
    const res = await call("/v1/models");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { id: string; object: string; owned_by: string }[] };
    expect(body.data.map((m) => m.id)).toEqual(served);
    expect(body.data.every((m) => m.object === "model" && m.owned_by === "agent-edge")).toBe(true);
  });

  it("an unknown route answers 404 not_found in OpenAI's error shape", async () => {
    for (const [path, tenant] of [["/v1/no-such-route", "a"], ["/nothing-here", null]] as const) {
      const body = await expectError(await call(path, { tenant }), 404, "not_found");
      expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
      expect(body.error.type).toBe("not_found_error");
    }
  });

  it("a known path with the wrong method is a 404 too", async () => {
    await expectError(await call("/v1/chat/completions", { method: "GET" }), 404, "not_found");
  });
});

describe("auth", () => {
  it("no key: 401 unauthorized", async () => {
    const body = await expectError(await call("/v1/models", { tenant: null }), 401, "unauthorized");
    expect(body.error.type).toBe("authentication_error");
    await expectError(await call("/v1/chat/completions", { tenant: null, body: { messages: [{ role: "user", content: "hi" }] } }), 401, "unauthorized");
  });

  it("a wrong key or a malformed header: 401 unauthorized", async () => {
    for (const authorization of ["Bearer sk-not-a-key", `Basic ${btoa("user:pass")}`, "Bearer", `Bearer ${TENANTS.a.key}x`]) {
      await expectError(await call("/v1/models", { authorization }), 401, "unauthorized");
    }
  });

  it("both tenants' keys work", async () => {
    expect((await call("/v1/models", { tenant: "a" })).status).toBe(200);
    expect((await call("/v1/models", { tenant: "b" })).status).toBe(200);
    // The scheme is case-insensitive.
    expect((await call("/v1/models", { authorization: `bearer ${TENANTS.b.key}` })).status).toBe(200);
  });

  it("API_KEYS holds SHA-256 digests only, and a digest is not a key", async () => {
    const table = JSON.parse(env.API_KEYS!) as Record<string, string>;
    expect(env.API_KEYS).not.toContain(TENANTS.a.key);
    expect(env.API_KEYS).not.toContain(TENANTS.b.key);
    for (const digest of Object.keys(table)) expect(digest).toMatch(/^[0-9a-f]{64}$/);
    const digestA = await sha256Hex(TENANTS.a.key);
    expect(table[digestA]).toBe(TENANTS.a.name);
    expect(table[await sha256Hex(TENANTS.b.key)]).toBe(TENANTS.b.name);
    await expectError(await call("/v1/models", { authorization: `Bearer ${digestA}` }), 401, "unauthorized");
  });
});
