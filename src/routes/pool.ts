import { Hono, type MiddlewareHandler } from "hono";
import { ProtocolError } from "../../protocol";
import { validateHeartbeat } from "../../protocol/codec";
import { secretsEqual } from "../../protocol/hex";
import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { cachedCellMap, fleetView, heartbeatCell } from "../../durable-objects/pool/cell-route";
import { cellNames } from "../../durable-objects/pool/cells";
import { poolCell } from "../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../durable-objects/settings";
import { readJson } from "../http/body";

const R = ROUTES.edge.pool;

/**
 * The backends' route group, under `/v1/pool`, behind the shared backend secret
 * (`x-agent-edge-secret`), not tenant API keys:
 * - `POST /v1/pool/heartbeat`: register or refresh, with the backend's KV events (a `Heartbeat`,
 *   validated by protocol/schemas.ts), in the backend's pool cell (`heartbeatCell`); answers a
 *   `HeartbeatReply` `{ registered, kv? }`.
 * - `GET /v1/pool`: the pool as routing sees it: every cell's backends, the cells (the directory's
 *   map) and each cell's block index figures.
 */
export const poolRoutes = new Hono<{ Bindings: Env }>()
  .use(backendSecret())
  .post(R.heartbeat, async (c) => {
    const parsed = validateHeartbeat(await readJson(c));
    if (!parsed.ok) throw parsed.error;
    const h = parsed.value;
    const beat = { ...h, url: h.url.replace(/\/+$/, "") };
    const cell = await heartbeatCell(c.env, beat);
    return c.json(await poolCell(c.env, cell).heartbeat(beat, cell));
  })
  .get(R.view, async (c) => {
    const map = await cachedCellMap(c.env);
    const names = cellNames(map);
    const stats = await Promise.all(names.map((cell) => poolCell(c.env, cell).indexStats()));
    return c.json({
      object: "pool",
      backends: await fleetView(c.env, edgeSettings(c.env), true),
      // The first cell's figures (the whole pool's while it has one cell), then every cell's.
      index: stats[0],
      cells: names.map((name, i) => ({ name, model: map.cells[i]?.model ?? null, backends: map.cells[i]?.backends.length ?? 0, index: stats[i] })),
      directoryVersion: map.version,
    });
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
