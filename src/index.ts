import { Hono } from "hono";
import { ProtocolError } from "../protocol";
import { ROUTES } from "../protocol/routes";
import { auth, type AuthVariables } from "./http/auth";
import { edgeError, errorResponse } from "./http/errors";
import { headerLimit } from "./http/header-limit";
import { modelListEntry, servedModelList } from "./http/models";
import { chatRoutes } from "./routes/chat";
import { responsesRoutes } from "./routes/responses";
import { responsesSocketRoutes } from "./routes/responses-socket";
import { inspectRoutes } from "./routes/inspect";
import { messagesRoutes } from "./routes/messages";
import { metricsRoutes } from "./routes/metrics";
import { poolRoutes } from "./routes/pool";
import { trajectoryRoutes } from "./routes/trajectories";

export { TrajectoryDO } from "./trajectory-do";
export { PoolDO } from "../durable-objects/pool/pool-do";
export { PoolDirectoryDO } from "../durable-objects/pool/directory-do";
export { TenantIndexDO } from "../durable-objects/tenant-index/tenant-index-do";

type App = { Bindings: Env; Variables: AuthVariables };
const E = ROUTES.edge;

/**
 * The OpenAI-compatible group under `/v1`. It shares `/v1` with the other groups, so its guard
 * names its routes instead of `/v1/*`.
 */
const openaiRoutes = new Hono<App>();
for (const path of [E.openai.models, E.openai.chatCompletions, E.openai.responses, E.openai.response, E.openai.responseInputItems]) openaiRoutes.use(path, auth());
openaiRoutes
  .get(E.openai.models, async (c) => {
    // Only what a live backend serves: a listed model can take a turn now.
    const models = await servedModelList(c.env);
    if (models.length === 0) throw new ProtocolError("backend_unavailable", "no backend is up, so no model is served right now; retry shortly");
    return c.json({ object: "list", data: models.map(modelListEntry) });
  })
  // The Responses API over a WebSocket (Codex CLI tries it first): terminated in the trajectory's object.
  .route("/", responsesSocketRoutes)
  .route("/", chatRoutes)
  .route("/", responsesRoutes);

/** Per-tenant trajectory URLs, the inspector and metrics under `/v1/tenants/:tenant`, all behind an API key (or the inspector's session). */
const tenantRoutes = new Hono<App>().use(auth()).route("/", trajectoryRoutes).route("/", inspectRoutes).route("/", metricsRoutes);

/**
 * The edge Worker: the HTTP surface clients talk to (OpenAI-compatible chat completions and
 * Responses, Anthropic's Messages API, per-tenant trajectory URLs), in front of one Durable Object per
 * trajectory. Route groups, each behind its own guard (the paths are `ROUTES.edge` in
 * protocol/routes.ts):
 *
 * | group    | base                  | guard                                   |
 * |----------|-----------------------|-----------------------------------------|
 * | pool     | /v1/pool              | shared backend secret (backends)        |
 * | openai   | /v1                   | API key                                 |
 * | messages | /v1 (/messages...)    | API key (Anthropic's Messages API)      |
 * | tenant   | /v1/tenants/:tenant   | API key, or the inspector's session     |
 *
 * plus the public `GET /healthz`. Anything else is a 404 `not_found`. Every request, first of
 * all, passes the cap on header bytes (`headerLimit`: 431 `headers_too_large`).
 */
const app = new Hono<App>();
app.use(headerLimit());
app.get(E.healthz, (c) => c.json({ ok: true }));
app.route(E.pool.base, poolRoutes);
app.route(E.tenant.base, tenantRoutes);
app.route(E.openai.base, openaiRoutes);
app.route(E.anthropic.base, messagesRoutes);

app.notFound((c) => errorResponse(c, new ProtocolError("not_found", `no route ${c.req.method} ${c.req.path}`)));

app.onError((e, c) => {
  const err = edgeError(e);
  if (err.code === "internal_error") console.error("unhandled error", e);
  return errorResponse(c, err);
});

export default app;
