import type { Context } from "hono";
import type { CachePoint, ChatMessage, ReplyConstraint, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { edgeSettings } from "../../durable-objects/settings";
import { prefixKey } from "../../durable-objects/turn/transcript-diff";
import type { TurnEvent, TurnInput } from "../../durable-objects/turn/turn-types";
import { noteTurns } from "../inspect/index-updates";
import type { AuthVariables } from "./auth";
import { idempotencyKey } from "./idempotency-key";
import { resolveModel } from "./model-names";
import { servedModels } from "./models";
import { answerTurn, type TurnAnswer } from "./respond";
import { sessionKey, type SessionHints, type SessionKey } from "./session-key";
import { SPECULATIVE_HEADER, speculativeOptOut } from "./speculative-header";
import { statelessTurn, trajectoryTurn } from "./turn-events";
import { WARNING_HEADER, warningHeader } from "./warnings";

type Ctx = Context<{ Bindings: Env; Variables: AuthVariables }>;

/** A turn as a route parsed it, in the edge's one transcript model, before anything is decided. */
export interface TurnRequest {
  /** The whole transcript (a Responses continuation: only the new input). */
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  sampling: SamplingParams;
  constraint: ReplyConstraint | undefined;
  /** The model name the client sent (absent: none). */
  model: string | undefined;
  /** The client's thinking switch (Messages `thinking`, chat `chat_template_kwargs.enable_thinking`). */
  thinking?: boolean | undefined;
  cachePoints?: CachePoint[];
  /** Client quirks the parser repaired (e.g. `billing-header`), recorded on the turn. */
  quirks?: string[];
  /** What the request asked for that the edge dropped (a hosted tool), said in `x-agent-edge-warning`. */
  warnings?: string[];
  /** Body fields that name a session (`prompt_cache_key`, `metadata.user_id`). */
  hints: SessionHints;
  /** A Responses API continuation: the trajectory `previous_response_id` names (outranks every header). */
  previousTrajectory?: string;
  /** When nothing names a trajectory: a new one's id (a stored Responses API turn), else stateless. */
  newTrajectory?: () => Promise<string>;
}

/** What the dispatch decided, for the route to shape its answer. */
export interface TurnDecision {
  /** The trajectory the turn runs in; undefined: stateless (nothing named one, or a side request). */
  trajectoryId: string | undefined;
  /** How the trajectory was named (absent: stateless or new). */
  key: SessionKey | undefined;
  /** True for a request under a client's session that is not a turn of its conversation (no tools: a title, a summary). */
  side: boolean;
  /** The model that serves the turn. */
  model: string;
  /** The model name to echo: the client's, else the served one. */
  echoModel: string;
}

/**
 * The one way a turn enters the edge, for every API (chat completions, Messages, Responses):
 * names the trajectory (`sessionKey`: one precedence over every header and body field), resolves
 * the model (`resolveModel`: aliases, one-model serving), chooses a trajectory turn or a stateless
 * one, runs it and answers in the route's shape (`shape` builds its `TurnAnswer` from the
 * decision; `extend` adds API-specific fields to a trajectory turn's input).
 *
 * Side requests: under a client's session (`kind: "session"`, e.g. Claude Code's or OpenCode's
 * session header), a request without tools is not a turn of the agent's conversation but a side
 * call (a title, a summary, a topic or quota check): it runs statelessly beside the trajectory,
 * so it never waits on, locks (409) or rewrites it. Under an explicit id (`x-trajectory-id`) every
 * request is a turn.
 *
 * @example return dispatchTurn(c, request, (d) => chatAnswer({ model: d.echoModel, ... }));
 */
export async function dispatchTurn(c: Ctx, request: TurnRequest, shape: (d: TurnDecision) => TurnAnswer, extend?: (d: TurnDecision) => Partial<TurnInput>): Promise<Response> {
  const tenant = c.get("tenant");
  const named: SessionKey | undefined = request.previousTrajectory !== undefined ? { id: request.previousTrajectory, kind: "explicit", source: "previous_response_id" } : sessionKey((h) => c.req.header(h), request.hints);
  const side = named?.kind === "session" && (request.tools?.length ?? 0) === 0;
  const served = await servedModels(c.env);
  const model = resolveModel({ requested: request.model, served, tenant, env: c.env });
  const key = side ? undefined : (named ?? (request.newTrajectory ? { id: await request.newTrajectory(), kind: "explicit" as const, source: "new" } : await derivedKey(c, request, model)));
  const trajectoryId = key?.id;
  const decision: TurnDecision = { trajectoryId, key, side, model, echoModel: request.model ?? model };
  const answer = shape(decision);
  const warning = warningHeader(request.warnings ?? []);
  answer.headers = { ...answer.headers, ...(warning !== undefined ? { [WARNING_HEADER]: warning } : {}), ...(side ? { "x-agent-edge-side": "true" } : {}) };
  const speculative = speculativeOptOut(c.req.header(SPECULATIVE_HEADER));
  const common = { tenant, cacheSalt: c.get("cacheSalt"), sampling: request.sampling, constraint: request.constraint, model, ...(request.thinking !== undefined ? { thinking: request.thinking } : {}), ...(speculative === false ? { speculative } : {}) };
  const stateless = () => statelessTurn(c.env, { ...common, messages: request.messages, tools: request.tools, ...(request.cachePoints ? { cachePoints: request.cachePoints } : {}) }, c.req.raw.signal);
  if (trajectoryId === undefined) return answerTurn(c, stateless(), answer);
  const input: TurnInput = {
    ...common,
    trajectoryId,
    kind: "chat",
    messages: request.messages,
    tools: request.tools ?? [],
    idempotencyKey: idempotencyKey(c.req.header("idempotency-key")),
    ...(request.cachePoints ? { cachePoints: request.cachePoints } : {}),
    ...(request.quirks && request.quirks.length > 0 ? { quirks: request.quirks } : {}),
    ...(named?.parent !== undefined ? { parent: named.parent } : {}),
    ...extend?.(decision),
  };
  let events = noteTurns(c, tenant, trajectoryId, trajectoryTurn(c.env, input, c.req.raw.signal));
  // A derived trajectory is only a cache handle: while it runs another turn, this one runs beside it.
  if (key?.kind === "derived") {
    events = statelessWhileBusy(events, stateless);
    // Named only once it runs there (its start event).
    const shaped = answer.onStart;
    answer.onStart = (start) => ({ ...(start.trajectoryId !== undefined ? { "x-trajectory-id": start.trajectoryId } : {}), ...shaped?.(start) });
  } else answer.headers["x-trajectory-id"] ??= trajectoryId;
  return answerTurn(c, events, answer);
}

/**
 * The trajectory a request with tools that names none runs in when DERIVED_SESSIONS is on: named
 * by its start (the first two messages, the tools and the model, salted per tenant:
 * `prefixKey`), so an agent that sends no session id (Qwen Code) still gets delta turns.
 */
async function derivedKey(c: Ctx, request: TurnRequest, model: string): Promise<SessionKey | undefined> {
  const on = edgeSettings(c.env).derivedSessions;
  if ((request.tools?.length ?? 0) === 0 || request.messages.length === 0 || (on !== "all" && !on.has(c.get("tenant")))) return undefined;
  const hash = await prefixKey({ cacheSalt: c.get("cacheSalt"), model, first: request.messages[0], second: request.messages[1], tools: request.tools });
  return { id: `conv_${hash}`, kind: "derived", source: "transcript" };
}

/** The trajectory turn's events; when it is refused as busy before anything else, a stateless turn's instead. */
async function* statelessWhileBusy(events: AsyncGenerator<TurnEvent>, stateless: () => AsyncGenerator<TurnEvent>): AsyncGenerator<TurnEvent> {
  const first = await events.next();
  if (first.done) return;
  if (first.value.type === "error" && first.value.code === "trajectory_busy") {
    await events.return(undefined);
    yield* stateless();
    return;
  }
  yield first.value;
  yield* events;
}
