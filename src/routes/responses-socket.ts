import { Hono, type ExecutionContext } from "hono";
import { ProtocolError } from "../../protocol";
import { ROUTES } from "../../protocol/routes";
import { edgeSettings } from "../../durable-objects/settings";
import { socketUpgrade, type SocketResponder } from "../../durable-objects/trajectory/responses-socket";
import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";
import { tenantSalt, type AuthVariables } from "../http/auth";
import { edgeError, errorResponse, openAiErrorBody } from "../http/errors";
import { isStrictTenant } from "../http/model-names";
import { DEFAULT_MODEL_ID } from "../http/models";
import { responseToken } from "../http/response-id";
import { parseResponsesBody } from "../http/responses-request";
import { responseJson, responsesUsage, type ResponseMeta } from "../http/responses-response";
import { SESSION_HEADERS, sessionKey } from "../http/session-key";
import { responsesRoutes } from "./responses";

type App = { Bindings: Env; Variables: AuthVariables };
const O = ROUTES.edge.openai;

/**
 * `GET /v1/responses` with `Upgrade: websocket`: the Responses API's WebSocket transport
 * (docs/responses-api.md, "WebSocket"). Authenticated like a POST (the group's `auth`, before
 * any upgrade), named like a POST (`sessionKey` over the upgrade's headers; none: a new
 * trajectory `resp_<token>` for this connection), then forwarded to that trajectory's object,
 * which accepts the socket (`ResponsesSockets`). Without the upgrade header: 426
 * `upgrade_required`.
 *
 * @example openaiRoutes.route("/", responsesSocketRoutes); // before the other GET routes of /v1
 */
export const responsesSocketRoutes = new Hono<App>().get(O.responses, async (c) => {
  if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
    throw new ProtocolError("upgrade_required", "GET /v1/responses is the Responses API's WebSocket transport: send Upgrade: websocket (or POST /v1/responses over HTTP)");
  }
  const tenant = c.get("tenant");
  const named = sessionKey((h) => c.req.header(h), {});
  const trajectoryId = named?.id ?? `resp_${responseToken()}`;
  const headers: Record<string, string> = {};
  for (const h of SESSION_HEADERS) {
    const value = c.req.header(h);
    if (value !== undefined) headers[h] = value;
  }
  if (!named) headers["x-trajectory-id"] = trajectoryId;
  // They ride in the socket's attachment, which holds 2 KiB.
  if (JSON.stringify(headers).length > 1024) throw new ProtocolError("invalid_request", `the session headers (${SESSION_HEADERS.join(", ")}) of a WebSocket upgrade hold at most 1024 characters together`);
  return trajectoryStub(c.env, tenant, trajectoryId).fetch(socketUpgrade(c.req.raw, { tenant, trajectoryId, headers }));
});

/**
 * The Worker's Responses route as a trajectory object's sockets run it: each `response.create`
 * becomes the POST /v1/responses it stands for (streamed; the connection's naming headers and
 * Idempotency-Key), answered by the same route in this isolate, past the key check the upgrade
 * already passed (the tenant and its salt set as `auth` sets them).
 *
 * @example new ResponsesSockets(ctx, socketResponder(env, ctx));
 */
export function socketResponder(env: Env, ctx: DurableObjectState): SocketResponder {
  const context: ExecutionContext = { waitUntil: (p) => ctx.waitUntil(p), passThroughOnException: () => {}, props: {} };
  return {
    run: async (turn, signal) => {
      const cacheSalt = await tenantSalt(env, turn.tenant);
      const app = new Hono<App>()
        .use(async (c, next) => {
          c.set("tenant", turn.tenant);
          c.set("cacheSalt", cacheSalt);
          await next();
        })
        .route(O.base, responsesRoutes)
        .onError((e, c) => errorResponse(c, edgeError(e)));
      const request = new Request(`https://edge.internal${O.base}${O.responses}`, { method: "POST", headers: { ...turn.headers, "content-type": "application/json" }, body: JSON.stringify(turn.body), signal });
      return app.fetch(request, env, context);
    },
    warm: async (turn) => {
      // A warmup may carry no input yet (Codex's sends `input: []`): it is checked as if it held one message.
      const input = turn.body.input;
      const empty = input === undefined || (Array.isArray(input) && input.length === 0);
      const parsed = parseResponsesBody(empty ? { ...turn.body, input: "" } : turn.body, { strict: isStrictTenant(edgeSettings(env), turn.tenant) });
      const meta: ResponseMeta = { token: responseToken(), trajectoryId: undefined, stored: false, createdAt: Math.floor(Date.now() / 1000), model: parsed.model ?? DEFAULT_MODEL_ID, echo: parsed.echo, hasTools: parsed.tools.length > 0, shapes: parsed };
      const pending = responseJson(meta, null);
      const done = { ...pending, status: "completed", usage: responsesUsage({ promptTokens: 0, cachedTokens: 0, computedTokens: 0, completionTokens: 0 }) };
      return [
        { type: "response.created", sequence_number: 0, response: pending },
        { type: "response.in_progress", sequence_number: 1, response: pending },
        { type: "response.completed", sequence_number: 2, response: done },
      ];
    },
    errorBody: openAiErrorBody,
    maxMessageBytes: () => edgeSettings(env).maxBodyBytes,
  };
}
