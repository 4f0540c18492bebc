import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "../../protocol/hex";
import { SECRET_HEADER } from "../../protocol/messages";
import { edgePath, ROUTES } from "../../protocol/routes";
import app from "../../src/index";
import { call, type CallOptions, completion, createTrajectory, expectError, SMALL, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";
import { TENANTS } from "./tenants";

/**
 * Security checks over every route the edge serves: the routes are the Hono app's own
 * (`app.routes`), checked against `ROUTES.edge`, so a new route is covered without a new test.
 */

/** Every full path of `ROUTES.edge`. */
function edgePaths(): string[] {
  const paths: string[] = [ROUTES.edge.healthz];
  for (const group of ["pool", "openai", "anthropic", "tenant"] as const) {
    for (const route of Object.keys(ROUTES.edge[group])) if (route !== "base") paths.push(edgePath(group, route as never));
  }
  return paths;
}

/** The app's routes (middleware left out), each method with its path. */
function appRoutes(): { method: string; path: string }[] {
  const seen = new Set<string>();
  return app.routes
    .filter((r) => r.method !== "ALL")
    .map((r) => ({ method: r.method, path: r.path }))
    .filter((r) => !seen.has(`${r.method} ${r.path}`) && seen.add(`${r.method} ${r.path}`));
}

/** A path with its placeholders filled: tenant a's URL, a made-up id. */
function filled(path: string): string {
  return path.replace(":tenant", TENANTS.a.name).replace(":id", "sec-placeholder");
}

const INSPECTOR_GETS = new Set(["trajectoryInspect", "trajectoryInspectJson", "inspect", "inspectJson"].map((r) => edgePath("tenant", r as never)));
const FORGED_COOKIE = `agent_edge_inspect=${TENANTS.a.name}.99999999999.${"0".repeat(64)}`;

/** A request that may reach the handler without doing anything: POSTs carry a body that is not JSON (a 400 once past the guard). */
function send(method: string, path: string, options: CallOptions): Promise<Response> {
  const post = method === "POST";
  return call(filled(path), { ...options, method, ...(post ? { body: "not json", headers: { "content-type": "application/json", ...options.headers } } : {}) });
}

describe("security: every route of every API needs its credential", () => {
  it("the app serves exactly the paths of ROUTES.edge", () => {
    expect([...new Set(appRoutes().map((r) => r.path))].sort()).toEqual([...new Set(edgePaths())].sort());
    expect(appRoutes().length).toBeGreaterThanOrEqual(edgePaths().length);
  });

  it("API-key routes: no key, a wrong bearer or x-api-key, a digest as the key, or a forged inspector cookie is 401 unauthorized; the right key gets past the guard", async () => {
    const keyed = appRoutes().filter((r) => r.path !== ROUTES.edge.healthz && !r.path.startsWith(ROUTES.edge.pool.base));
    expect(keyed.length).toBeGreaterThan(10);
    const digestA = await sha256Hex(TENANTS.a.key);
    for (const { method, path } of keyed) {
      const what = `${method} ${path}`;
      const refusals: CallOptions[] = [
        { tenant: null },
        { authorization: `Bearer ${digestA}` },
        { authorization: "Bearer sk-not-a-key" },
        { authorization: `Bearer ${TENANTS.a.key}x` },
        { tenant: null, headers: { "x-api-key": "sk-not-a-key" } },
        // The backend secret is no API key.
        { tenant: null, headers: { [SECRET_HEADER]: env.AGENT_EDGE_SECRET! } },
      ];
      if (INSPECTOR_GETS.has(path)) refusals.push({ tenant: null, headers: { cookie: FORGED_COOKIE } });
      else refusals.push({ tenant: null, headers: { cookie: FORGED_COOKIE.replace(/0{64}$/, "1".repeat(64)) } });
      for (const options of refusals) {
        const res = await send(method, path, options);
        expect(res.status, `${what} ${JSON.stringify(options)}`).toBe(401);
        await expectError(res, 401, "unauthorized");
      }
      const through = await send(method, path, { tenant: "a" });
      expect(through.status, what).not.toBe(401);
      await through.body?.cancel();
    }
  });

  it("pool routes take the backend secret, not an API key; /healthz is public", async () => {
    const secret = env.AGENT_EDGE_SECRET!;
    const pool = appRoutes().filter((r) => r.path.startsWith(ROUTES.edge.pool.base));
    expect(pool.map((r) => `${r.method} ${r.path}`).sort()).toEqual([`GET ${edgePath("pool", "view")}`, `POST ${edgePath("pool", "heartbeat")}`].sort());
    const sameLength = secret.replace(/.$/, (ch) => (ch === "x" ? "y" : "x"));
    expect(sameLength.length).toBe(secret.length);
    for (const { method, path } of pool) {
      for (const headers of <Record<string, string>[]>[{}, { [SECRET_HEADER]: sameLength }, { [SECRET_HEADER]: `${secret}x` }, { [SECRET_HEADER]: secret.slice(1) }, { [SECRET_HEADER]: "" }]) {
        await expectError(await send(method, path, { tenant: null, headers }), 401, "unauthorized");
      }
      // A tenant's API key does not open them.
      await expectError(await send(method, path, { tenant: "a" }), 401, "unauthorized");
      const through = await send(method, path, { tenant: null, headers: { [SECRET_HEADER]: secret } });
      expect(through.status, `${method} ${path}`).not.toBe(401);
      await through.body?.cancel();
    }
    const health = await call(ROUTES.edge.healthz, { tenant: null });
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ ok: true });
  });
});

/** A 404 body with the named ids replaced, so two refusals can be compared as bodies. */
async function notFoundBody(res: Response, ...ids: string[]): Promise<string> {
  const body = await expectError(res, 404, "not_found");
  let text = JSON.stringify(body);
  for (const id of ids) text = text.replaceAll(id, "<id>");
  return text;
}

describe("security: a tenant reaches nothing of another tenant's", () => {
  it("trajectories, inspector pages and metrics: tenant b gets the 404 a nonexistent one gets, and a's trajectory is unchanged", async () => {
    const id = uid("sec-traj");
    const missing = uid("sec-none");
    await createTrajectory("a", id);
    await completion(await call(trajectoryPath("a", id, "/turns"), { body: { messages: [uniqueSystem(), { role: "user", content: "tenant A's secret plan" }], ...SMALL } }));
    const before = await stored("a", id);
    expect(before.turns).toHaveLength(1);
    const turn = { messages: [{ role: "user", content: "hijack" }], ...SMALL };
    const requests: [string, (traj: string) => [string, CallOptions]][] = [
      ["GET trajectory", (t) => [trajectoryPath("a", t), {}]],
      ["POST turns", (t) => [trajectoryPath("a", t, "/turns"), { body: turn }]],
      ["POST turns (stream)", (t) => [trajectoryPath("a", t, "/turns"), { body: { ...turn, stream: true } }]],
      ["DELETE trajectory", (t) => [trajectoryPath("a", t), { method: "DELETE" }]],
      ["POST trajectories", (t) => [trajectoryPath("a"), { body: { id: t } }]],
      ["inspect", (t) => [trajectoryPath("a", t, "/inspect"), {}]],
      ["inspect.json", (t) => [trajectoryPath("a", t, "/inspect.json"), {}]],
      ["inspector list", () => [`/v1/tenants/${TENANTS.a.name}/inspect`, {}]],
      ["inspector list json", () => [`/v1/tenants/${TENANTS.a.name}/inspect.json`, {}]],
      ["metrics", () => [`/v1/tenants/${TENANTS.a.name}/metrics`, {}]],
    ];
    for (const [what, request] of requests) {
      const [path, options] = request(id);
      const [missingPath, missingOptions] = request(missing);
      const refused = await notFoundBody(await call(path, { ...options, tenant: "b" }), id);
      expect(await notFoundBody(await call(missingPath, { ...missingOptions, tenant: "b" }), missing), what).toBe(refused);
      expect(await stored("a", id), what).toEqual(before);
    }
    // Tenant a still has it all.
    for (const path of [trajectoryPath("a", id), trajectoryPath("a", id, "/inspect.json"), `/v1/tenants/${TENANTS.a.name}/metrics`]) {
      expect((await call(path, { tenant: "a" })).status, path).toBe(200);
    }
  });

  it("stored responses: GET, input_items, DELETE and previous_response_id answer b as for a response that never was, and change nothing", async () => {
    const res = await call("/v1/responses", { body: { instructions: uniqueSystem().content, input: "tenant A's secret plan", ...SMALL } });
    expect(res.status).toBe(200);
    const r1 = (await res.json()) as { id: string };
    const trajectory = res.headers.get("x-trajectory-id")!;
    const before = await stored("a", trajectory);
    const got = await (await call(`/v1/responses/${r1.id}`)).text();
    // A well-formed id of the same trajectory that was never issued.
    const never = r1.id.replace(/^resp_[0-9a-f]{32}/, `resp_${"0".repeat(32)}`);
    expect(never).not.toBe(r1.id);
    const requests: [string, (rid: string) => [string, CallOptions]][] = [
      ["GET", (rid) => [`/v1/responses/${rid}`, {}]],
      ["input_items", (rid) => [`/v1/responses/${rid}/input_items`, {}]],
      ["DELETE", (rid) => [`/v1/responses/${rid}`, { method: "DELETE" }]],
      ["previous_response_id", (rid) => ["/v1/responses", { body: { previous_response_id: rid, input: "hijack", ...SMALL } }]],
    ];
    for (const [what, request] of requests) {
      const [path, options] = request(r1.id);
      const [neverPath, neverOptions] = request(never);
      const refused = await notFoundBody(await call(path, { ...options, tenant: "b" }), r1.id);
      expect(await notFoundBody(await call(neverPath, { ...neverOptions, tenant: "b" }), never), what).toBe(refused);
      expect(await stored("a", trajectory), what).toEqual(before);
    }
    // Tenant a's response is still there, unchanged.
    expect(await (await call(`/v1/responses/${r1.id}`)).text()).toBe(got);
  });
});
