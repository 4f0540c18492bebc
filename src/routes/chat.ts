import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { ProtocolError } from "../../protocol";
import type { AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { parseChatBody } from "../http/chat-request";
import { DEFAULT_MODEL_ID, servedModels } from "../http/models";
import { respondWithTurn } from "../http/respond";
import { statelessTurn, trajectoryTurn } from "../http/turn-events";
import { checkTrajectoryId } from "../http/trajectory-id";
import { noteTurns } from "../inspect/index-updates";

/**
 * `POST /v1/chat/completions`, OpenAI-compatible. The trajectory comes from `x-trajectory-id`,
 * else `x-session-affinity`, else the body's `prompt_cache_key`; without one the turn is served
 * statelessly (full transcript to a backend, still using its prefix cache).
 */
export const chatRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>().post(ROUTES.edge.openai.chatCompletions, async (c) => {
  const parsed = parseChatBody(await readJson(c), "chat");
  const trajectoryId = c.req.header("x-trajectory-id") ?? c.req.header("x-session-affinity") ?? parsed.promptCacheKey;
  const tenant = c.get("tenant");
  const common = { model: parsed.model ?? (await servedModels(c.env))[0] ?? DEFAULT_MODEL_ID, stream: parsed.stream, includeUsage: parsed.includeUsage, hasTools: (parsed.tools?.length ?? 0) > 0, logprobs: parsed.sampling.logprobs !== undefined };
  if (trajectoryId === undefined) {
    const events = statelessTurn(c.env, { tenant, cacheSalt: c.get("cacheSalt"), messages: parsed.messages, tools: parsed.tools, sampling: parsed.sampling, constraint: parsed.constraint, model: parsed.model }, c.req.raw.signal);
    return respondWithTurn(c, events, { ...common, headers: {} });
  }
  checkTrajectoryId(trajectoryId);
  const events = trajectoryTurn(
    c.env,
    {
      tenant,
      trajectoryId,
      cacheSalt: c.get("cacheSalt"),
      kind: "chat",
      messages: parsed.messages,
      tools: parsed.tools ?? [],
      sampling: parsed.sampling,
      constraint: parsed.constraint,
      model: parsed.model,
      idempotencyKey: idempotencyKey(c.req.header("idempotency-key")),
    },
    c.req.raw.signal,
  );
  return respondWithTurn(c, noteTurns(c, tenant, trajectoryId, events), { ...common, headers: { "x-trajectory-id": trajectoryId } });
});

export function idempotencyKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (header.length === 0 || header.length > 256) throw new ProtocolError("invalid_request", "Idempotency-Key must be 1-256 characters");
  return header;
}
