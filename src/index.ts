import { Hono } from "hono";
import { ProtocolError } from "../protocol";
import type { EdgeEnv } from "../durable-objects/edge-env";
import { auth, type AuthVariables } from "./auth";
import { edgeError, errorResponse } from "./errors";
import { servedModels } from "./models";
import { chatRoutes } from "./routes/chat";
import { trajectoryRoutes } from "./routes/trajectories";

export { TrajectoryDO } from "../durable-objects/trajectory-do";
export type { EdgeEnv as Env } from "../durable-objects/edge-env";

/**
 * The edge Worker: the HTTP surface clients talk to (OpenAI-compatible chat completions,
 * per-tenant session URLs), in front of one Durable Object per trajectory.
 */
const app = new Hono<{ Bindings: EdgeEnv; Variables: AuthVariables }>();

app.get("/healthz", (c) => c.json({ ok: true }));

app.use("/v1/*", auth());

app.get("/v1/models", async (c) =>
  c.json({
    object: "list",
    data: (await servedModels(c.env)).map((id) => ({ id, object: "model", created: 0, owned_by: "agent-edge" })),
  }),
);

app.route("/", chatRoutes);
app.route("/", trajectoryRoutes);

app.notFound((c) => errorResponse(c, new ProtocolError("not_found", `no route ${c.req.method} ${c.req.path}`)));

app.onError((e, c) => {
  const err = edgeError(e);
  if (err.code === "internal_error") console.error("unhandled error", e);
  return errorResponse(c, err);
});

export default app;
