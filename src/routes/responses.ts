import { Hono } from "hono";
import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { sha256Hex } from "../../protocol/hex";
import { ROUTES } from "../../protocol/routes";
import { trajectoryStub, type TrajectoryDO } from "../../durable-objects/trajectory/trajectory-do";
import type { AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { idempotencyKey } from "../http/idempotency-key";
import { DEFAULT_MODEL_ID } from "../http/models";
import { responsesAsked, responsesCompare } from "../http/cache-diagnostics";
import { parseResponseId, responseToken } from "../http/response-id";
import { messageItems } from "../http/responses-items";
import { parseResponsesBody } from "../http/responses-request";
import { idOf, responseJson, responsesAnswer, type ResponseMeta } from "../http/responses-response";
import { dispatchTurn, type TurnRequest } from "../http/turn-dispatch";
import { isStrictTenant } from "../http/model-names";
import { warningHeader } from "../http/warnings";
import { edgeSettings } from "../../durable-objects/settings";

const O = ROUTES.edge.openai;

/**
 * OpenAI's Responses API (docs/responses-api.md), on the same trajectories as chat completions:
 *
 * - `POST /v1/responses`: with `previous_response_id`, a turn continuing the trajectory that
 *   holds that response (the input is only what is new: a delta turn; a fork when that response
 *   is not the trajectory's latest); else the trajectory `x-trajectory-id`, `x-session-affinity`
 *   or `prompt_cache_key` names, with the whole input; else, when stored (the default), a new
 *   trajectory; `store: false` without a session is a stateless turn.
 * - `GET /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`, `DELETE /v1/responses/{id}`:
 *   a stored response, read from its trajectory object (the id names it; another tenant's key
 *   reaches another object, and a 404).
 */
export const responsesRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>()
  .post(O.responses, async (c) => {
    const body = await readJson(c);
    const parsed = parseResponsesBody(body, { strict: isStrictTenant(edgeSettings(c.env), c.get("tenant")) });
    // Prompt cache diagnostics (docs/cache-diagnostics.md): the response to compare with.
    const comparison = responsesAsked(body);
    const compare = comparison === undefined ? undefined : responsesCompare(comparison);
    const previous = parsed.previousResponseId === undefined ? undefined : parseResponseId(parsed.previousResponseId);
    const idempotency = idempotencyKey(c.req.header("idempotency-key"));
    // The instructions lead the transcript; a continuation puts them in place of the previous ones.
    const system = parsed.instructions === null ? [] : [{ role: "system" as const, content: parsed.instructions }];
    const request: TurnRequest = {
      messages: previous ? parsed.messages : [...system, ...parsed.messages],
      tools: parsed.tools,
      sampling: parsed.sampling,
      constraint: parsed.constraint,
      model: parsed.model,
      thinking: parsed.thinking,
      warnings: parsed.warnings,
      hints: { promptCacheKey: parsed.promptCacheKey },
      ...(previous ? { previousTrajectory: previous.trajectoryId } : {}),
      // Stored and named by nothing: a new trajectory, named by the Idempotency-Key when there is one, so a retry finds the first try's.
      ...(parsed.store ? { newTrajectory: async () => `resp_${idempotency === undefined ? responseToken() : (await sha256Hex(`idempotency:${idempotency}`)).slice(0, 32)}` } : {}),
    };
    const createdAt = Math.floor(Date.now() / 1000);
    let meta: ResponseMeta | undefined;
    return dispatchTurn(
      c,
      request,
      (d) => {
        meta = { token: responseToken(), trajectoryId: d.trajectoryId, stored: parsed.store && d.trajectoryId !== undefined, createdAt, model: d.echoModel, echo: withWarnings(parsed.echo, parsed.warnings), hasTools: parsed.tools.length > 0, shapes: parsed, ...(comparison !== undefined ? { diagnostics: { compare } } : {}) };
        return responsesAnswer(meta, parsed.stream, {});
      },
      () => ({
        ...(previous ? { previous: { token: previous.token, instructions: parsed.instructions } } : {}),
        ...(compare ? { compare } : {}),
        ...(meta!.stored ? { response: { token: meta!.token, createdAt, echo: { ...parsed.echo, model: meta!.model }, inputFrom: system.length, instructions: system.length > 0 } } : {}),
      }),
    );
  })
  .get(O.response, async (c) => {
    const { meta, stored } = await storedResponse(c.env, c.get("tenant"), c.req.param("id"));
    const reply = stored.messages.at(-1);
    if (!reply || reply.role !== "assistant") throw rewritten(c.req.param("id"));
    // The reply as the client got it (the transcript's has canonical arguments), else the transcript's.
    const message = stored.response.reply ?? { role: "assistant" as const, content: reply.content, ...(reply.tool_calls ? { tool_calls: reply.tool_calls } : {}) };
    return c.json(responseJson(meta, { message, finishReason: stored.response.finishReason, usage: stored.response.usage }));
  })
  .get(O.responseInputItems, async (c) => {
    const id = c.req.param("id");
    const { stored } = await storedResponse(c.env, c.get("tenant"), id);
    if (stored.messages.length === 0) throw rewritten(id);
    const q = listQuery.safeParse(c.req.query());
    if (!q.success) throw new ProtocolError("invalid_request", `${String(q.error.issues[0]!.path[0])}: ${q.error.issues[0]!.message}`);
    const { order, limit, after } = q.data;
    let items = stored.messages.slice(0, -1).flatMap((m, k) => messageItems(m, `${stored.response.token}_in${k}`));
    if (order === "desc") items = items.reverse();
    if (after !== undefined) {
      const at = items.findIndex((i) => i.id === after);
      if (at < 0) throw new ProtocolError("invalid_request", `after: no input item ${after} in this response`);
      items = items.slice(at + 1);
    }
    const page = items.slice(0, limit);
    return c.json({ object: "list", data: page, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null, has_more: items.length > page.length });
  })
  .delete(O.response, async (c) => {
    const id = c.req.param("id");
    const { token, trajectoryId } = parseResponseId(id);
    if (!(await trajectoryStub(c.env, c.get("tenant"), trajectoryId).deleteResponse(token))) throw noSuchResponse(id);
    return c.json({ id, object: "response", deleted: true });
  });

/** The response's `metadata` also says what the edge dropped (`agent_edge_warning`, as the header). */
function withWarnings(echo: Record<string, unknown>, warnings: string[]): Record<string, unknown> {
  const warning = warningHeader(warnings);
  if (warning === undefined) return echo;
  return { ...echo, metadata: { ...(echo.metadata as Record<string, string> | undefined), agent_edge_warning: warning.slice(0, 512) } };
}

const listQuery = z.object({
  order: z.enum(["asc", "desc"]).default("desc"),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().optional(),
});

/** A stored response of this tenant, with what a response object echoes; 404 when there is none. */
async function storedResponse(env: Env, tenant: string, id: string) {
  const { token, trajectoryId } = parseResponseId(id);
  // RPC's typing cannot express the echo's `unknown` values; the object answers exactly this.
  const stored = (await trajectoryStub(env, tenant, trajectoryId).response(token)) as Awaited<ReturnType<TrajectoryDO["response"]>>;
  if (!stored) throw noSuchResponse(id);
  const meta: ResponseMeta = { token, trajectoryId, stored: true, createdAt: stored.response.createdAt, model: String(stored.response.echo.model ?? DEFAULT_MODEL_ID), echo: stored.response.echo, hasTools: false };
  if (idOf(meta) !== id) throw noSuchResponse(id);
  return { meta, stored };
}

function noSuchResponse(id: string): ProtocolError {
  return new ProtocolError("not_found", `no response ${JSON.stringify(id.slice(0, 200))}`);
}

function rewritten(id: string): ProtocolError {
  return new ProtocolError("invalid_request", `response ${id}: a later turn rewrote the transcript it belongs to, so its messages are gone (its record remains)`);
}
