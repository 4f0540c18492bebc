import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { countPromptTokens } from "../../durable-objects/backend/tokenize-client";
import { placementCell } from "../../durable-objects/pool/cell-route";
import { routedBackends, statelessTarget } from "../../durable-objects/routing/placement";
import { edgeSettings } from "../../durable-objects/settings";
import { checkLimits } from "../../durable-objects/turn/limits";
import { auth, type AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { messagesAsked } from "../http/cache-diagnostics";
import { cachePointsOf, parseMessagesBody } from "../http/messages-request";
import { messageId, messagesAnswer } from "../http/messages-response";
import { isStrictTenant, resolveModel } from "../http/model-names";
import { servedModels } from "../http/models";
import { dispatchTurn, type TurnRequest } from "../http/turn-dispatch";

const A = ROUTES.edge.anthropic;

/**
 * Anthropic's Messages API (docs/messages-api.md), each route behind the API key (`x-api-key` or
 * bearer). Mounted at `A.base` (`/v1`), shared with the other groups, so the guard names its
 * routes.
 *
 * - `POST /v1/messages`: the request converted to the chat transcript (`parseMessagesBody`) and
 *   run by the one turn dispatch (`dispatchTurn`: the trajectory a header or `metadata.user_id`
 *   names, else stateless); answered as Anthropic's `message`, or its SSE stream. With a
 *   `diagnostics` object, the answer's id is kept with the turn and the turn is compared with the
 *   answer `previous_message_id` names (cache-diagnostics.ts).
 * - `POST /v1/messages/count_tokens`: `{ input_tokens }`, the prompt tokens a turn with these
 *   messages and tools would have, counted by a live backend (`POST /v1/tokenize`); the same
 *   caps as a turn apply (`checkLimits`).
 */
export const messagesRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>()
  .use(A.messages, auth())
  .use(A.countTokens, auth())
  .post(A.messages, async (c) => {
    const body = await readJson(c);
    const parsed = parseMessagesBody(body, "create", { strict: isStrictTenant(edgeSettings(c.env), c.get("tenant")) });
    // Cache diagnostics (docs/cache-diagnostics.md): asked by the `diagnostics` object itself, with or without the beta header.
    const asked = messagesAsked(body);
    const id = messageId();
    const request: TurnRequest = {
      messages: parsed.messages,
      tools: parsed.tools,
      sampling: parsed.sampling,
      constraint: parsed.constraint,
      model: parsed.model,
      cachePoints: cachePointsOf(parsed.cacheBreakpoints),
      thinking: parsed.thinking,
      quirks: parsed.repairs,
      warnings: parsed.warnings,
      hints: { metadataUserId: parsed.metadataUserId },
    };
    return dispatchTurn(
      c,
      request,
      (d) => messagesAnswer({ id, model: d.echoModel, stopSequences: parsed.sampling.stop, hasTools: (parsed.tools?.length ?? 0) > 0, ...(asked ? { diagnostics: { previous: asked.previous } } : {}) }, parsed.stream, {}),
      () => (asked ? { compare: { api: "messages", id, previous: asked.previous } } : {}),
    );
  })
  .post(A.countTokens, async (c) => {
    const parsed = parseMessagesBody(await readJson(c), "count");
    const settings = edgeSettings(c.env);
    checkLimits(parsed, settings.limits);
    const target = statelessTarget(routedBackends((await placementCell(c.env, settings, { key: async () => crypto.randomUUID() })).view, settings.backendSecret));
    const model = resolveModel({ requested: parsed.model, served: await servedModels(c.env), tenant: c.get("tenant"), env: c.env });
    const inputTokens = await countPromptTokens(target, { model, messages: parsed.messages, ...(parsed.tools && parsed.tools.length > 0 ? { tools: parsed.tools } : {}) }, settings.backendTimeoutMs);
    return c.json({ input_tokens: inputTokens });
  });
