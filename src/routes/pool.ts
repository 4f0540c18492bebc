import { Hono, type MiddlewareHandler } from "hono";
import { ProtocolError } from "../../protocol";
import { validateHeartbeat } from "../../protocol/codec";
import { secretsEqual } from "../../protocol/hex";
import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { poolOf } from "../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../durable-objects/settings";
import { readJson } from "../http/body";

const R = ROUTES.edge.pool;

/**
 * The backends' route group, under `/v1/pool`, behind the shared backend secret
 * (`x-agent-edge-secret`), not tenant API keys:
 * - `POST /v1/pool/heartbeat`: register or refresh, with the backend's KV events (a `Heartbeat`,
 *   validated by protocol/schemas.ts); answers a `HeartbeatReply` `{ registered, kv? }`.
 * - `GET /v1/pool`: the pool as routing sees it.
 */
export const poolRoutes = new Hono<{ Bindings: Env }>()
  .use(backendSecret())
  .post(R.heartbeat, async (c) => {
    const parsed = validateHeartbeat(await readJson(c));
    if (!parsed.ok) throw parsed.error;
    const h = parsed.value;
    return c.json(await poolOf(c.env).heartbeat({ ...h, url: h.url.replace(/\/+$/, "") }));
  })
  .get(R.view, async (c) => {
    const pool = poolOf(c.env);
    return c.json({ object: "pool", backends: await pool.view(), index: await pool.indexStats() });
  });

/** Refuses a request without the shared backend secret (constant-time comparison). */
function backendSecret(): MiddlewareHandler<{ Bindings: Env }> {
  return async (c, next) => {
    const given = c.req.header(SECRET_HEADER);
    if (given === undefined || !(await secretsEqual(given, edgeSettings(c.env).backendSecret))) {
      throw new ProtocolError("unauthorized", `missing or wrong ${SECRET_HEADER} header`);
    }
    await next();
  };
}
