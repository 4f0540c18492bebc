import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";
import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { ProtocolError } from "../../protocol";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import { MAX_INDEXED_TRAJECTORIES } from "../../durable-objects/tenant-index/tenant-index-store";
import type { AuthVariables } from "../http/auth";
import { PAGE_HEADERS } from "../inspect/layout";
import { listedTrajectories, listPage } from "../inspect/list-page";
import { trajectoryPage } from "../inspect/trajectory-page";
import { inspectView, type InspectView } from "../inspect/view";
import { checkTrajectoryId } from "../http/session-key";
import { ownTenant } from "../http/own-tenant";

/** Paths relative to the tenant group's base, `/v1/tenants/:tenant` (src/index.ts mounts it). */
const T = ROUTES.edge.tenant;

type App = { Bindings: Env; Variables: AuthVariables };

/**
 * The trajectory inspector (docs/inspector.md): server-rendered HTML with inline SVG, no script,
 * and the same data as JSON.
 *
 * - `GET /v1/tenants/{tenant}/inspect[.json]`: the tenant's recent trajectories (`?limit=`, default 100).
 * - `GET /v1/tenants/{tenant}/trajectories/{id}/inspect[.json]`: one trajectory, turn by turn.
 *
 * Same auth as the API (a browser may use the session cookie, see `src/inspect/session.ts`);
 * another tenant's URL answers 404, like a missing trajectory.
 */
export const inspectRoutes = new Hono<App>()
  .get(T.inspect, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const rows = listedTrajectories(tenant, await tenantIndexOf(c.env, tenant).list({ limit: limitOf(c.req.query("limit")) }));
    return c.html(listPage(tenant, rows).text, 200, PAGE_HEADERS);
  })
  .get(T.inspectJson, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const rows = listedTrajectories(tenant, await tenantIndexOf(c.env, tenant).list({ limit: limitOf(c.req.query("limit")) }));
    return c.json({ object: "list", tenant, data: rows }, 200, { "cache-control": "no-store" });
  })
  .get(T.trajectoryInspect, async (c) => {
    const view = await viewOf(c.env, ownTenant(c.req.param("tenant"), c.get("tenant")), c.req.param("id"));
    return c.html(trajectoryPage(view).text, 200, PAGE_HEADERS);
  })
  .get(T.trajectoryInspectJson, async (c) => {
    const view = await viewOf(c.env, ownTenant(c.req.param("tenant"), c.get("tenant")), c.req.param("id"));
    return c.json({ object: "trajectory.inspection", ...view }, 200, { "cache-control": "no-store" });
  });

async function viewOf(env: Env, tenant: string, id: string): Promise<InspectView> {
  checkTrajectoryId(id);
  const stub = trajectoryStub(env, tenant, id);
  const [state, messages] = await Promise.all([stub.state(), stub.messages()]);
  if (!state) throw new ProtocolError("not_found", `trajectory ${id} does not exist`);
  return inspectView(state, messages);
}


function limitOf(query: string | undefined): number {
  const n = Number(query ?? "100");
  if (!Number.isInteger(n) || n < 1 || n > MAX_INDEXED_TRAJECTORIES) {
    throw new ProtocolError("invalid_request", `limit must be an integer from 1 to ${MAX_INDEXED_TRAJECTORIES}`);
  }
  return n;
}
