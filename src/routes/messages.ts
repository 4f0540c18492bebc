import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { countPromptTokens } from "../../durable-objects/backend/tokenize-client";
import { poolOf } from "../../durable-objects/pool/pool-do";
import { routedBackends, statelessTarget } from "../../durable-objects/routing/placement";
import { edgeSettings } from "../../durable-objects/settings";
import { checkLimits } from "../../durable-objects/turn/limits";
import { auth, type AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { cachePointsOf, parseMessagesBody } from "../http/messages-request";
import { messageId, messagesAnswer, type MessagesMeta } from "../http/messages-response";
import { answerTurn } from "../http/respond";
import { checkTrajectoryId } from "../http/trajectory-id";
import { statelessTurn, trajectoryTurn } from "../http/turn-events";
import { noteTurns } from "../inspect/index-updates";
import { idempotencyKey } from "./chat";

const A = ROUTES.edge.anthropic;

/**
 * Anthropic's Messages API (docs/messages-api.md), each route behind the API key (`x-api-key` or
 * bearer). Mounted at `A.base` (`/v1`), shared with the other groups, so the guard names its
 * routes.
 *
 * - `POST /v1/messages`: the request converted to the chat transcript (`parseMessagesBody`) and
 *   run by the same turn machinery as chat completions: a trajectory turn with the whole
 *   transcript when `x-trajectory-id` (else `x-session-affinity`) names one, else a stateless
 *   turn; answered as Anthropic's `message`, or its SSE stream with `stream: true`.
 * - `POST /v1/messages/count_tokens`: `{ input_tokens }`, the prompt tokens a turn with these
 *   messages and tools would have, counted by a live backend (`POST /v1/tokenize`); the same
 *   caps as a turn apply (`checkLimits`).
 */
export const messagesRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>()
  .use(A.messages, auth())
  .use(A.countTokens, auth())
  .post(A.messages, async (c) => {
    const parsed = parseMessagesBody(await readJson(c), "create");
    const trajectoryId = c.req.header("x-trajectory-id") ?? c.req.header("x-session-affinity");
    const tenant = c.get("tenant");
    const meta: MessagesMeta = { id: messageId(), model: parsed.model, stopSequences: parsed.sampling.stop, hasTools: (parsed.tools?.length ?? 0) > 0 };
    const turn = { tenant, cacheSalt: c.get("cacheSalt"), messages: parsed.messages, sampling: parsed.sampling, constraint: parsed.constraint, model: parsed.model, cachePoints: cachePointsOf(parsed.cacheBreakpoints) };
    if (trajectoryId === undefined) {
      return answerTurn(c, statelessTurn(c.env, { ...turn, tools: parsed.tools }, c.req.raw.signal), messagesAnswer(meta, parsed.stream, {}));
    }
    checkTrajectoryId(trajectoryId);
    const events = trajectoryTurn(c.env, { ...turn, trajectoryId, kind: "chat", tools: parsed.tools ?? [], idempotencyKey: idempotencyKey(c.req.header("idempotency-key")) }, c.req.raw.signal);
    return answerTurn(c, noteTurns(c, tenant, trajectoryId, events), messagesAnswer(meta, parsed.stream, { "x-trajectory-id": trajectoryId }));
  })
  .post(A.countTokens, async (c) => {
    const parsed = parseMessagesBody(await readJson(c), "count");
    const settings = edgeSettings(c.env);
    checkLimits(parsed, settings.limits);
    const target = statelessTarget(routedBackends(await poolOf(c.env).view(), settings.backendSecret));
    const inputTokens = await countPromptTokens(target, { model: parsed.model, messages: parsed.messages, ...(parsed.tools && parsed.tools.length > 0 ? { tools: parsed.tools } : {}) }, settings.backendTimeoutMs);
    return c.json({ input_tokens: inputTokens });
  });
