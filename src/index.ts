import { Hono } from "hono";
import { ProtocolError } from "../protocol";
import type { EdgeEnv } from "../durable-objects/edge-env";
import { auth, type AuthVariables } from "./auth";
import { edgeError, errorResponse } from "./errors";
import { servedModels } from "./models";
import { chatRoutes } from "./routes/chat";
import { trajectoryRoutes } from "./routes/trajectories";
import { poolRoutes } from "./routes/pool";
import { inspectRoutes } from "./routes/inspect";
import { metricsRoutes } from "./routes/metrics";

export { TrajectoryDO } from "../durable-objects/trajectory/trajectory-do";
export { PoolDO } from "../durable-objects/pool/pool-do";
export { TenantIndexDO } from "../durable-objects/tenant-index/tenant-index-do";
export type { EdgeEnv as Env } from "../durable-objects/edge-env";

/**
 * The edge Worker: the HTTP surface clients talk to (OpenAI-compatible chat completions,
 * per-tenant session URLs), in front of one Durable Object per trajectory.
 */
const app = new Hono<{ Bindings: EdgeEnv; Variables: AuthVariables }>();

app.get("/healthz", (c) => c.json({ ok: true }));

// Backends heartbeat into the pool with the shared secret; everything else under /v1 needs a key.
app.route("/", poolRoutes);
app.use("/v1/*", async (c, next) => (c.req.path === "/v1/pool" || c.req.path.startsWith("/v1/pool/") ? next() : auth()(c, next)));

app.get("/v1/models", async (c) =>
  c.json({
    object: "list",
    data: (await servedModels(c.env)).map((id) => ({ id, object: "model", created: 0, owned_by: "agent-edge" })),
  }),
);

app.route("/", chatRoutes);
app.route("/", trajectoryRoutes);
app.route("/", inspectRoutes);
app.route("/", metricsRoutes);

app.notFound((c) => errorResponse(c, new ProtocolError("not_found", `no route ${c.req.method} ${c.req.path}`)));

app.onError((e, c) => {
  const err = edgeError(e);
  if (err.code === "internal_error") console.error("unhandled error", e);
  return errorResponse(c, err);
});

export default app;
