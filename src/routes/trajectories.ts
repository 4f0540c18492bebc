import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { ProtocolError } from "../../protocol";
import type { PrefixBreak } from "../../durable-objects/turn/prefix-break";
import type { AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { parseChatBody } from "../http/chat-request";
import { idempotencyKey } from "../http/idempotency-key";
import { resolveModel } from "../http/model-names";
import { servedModels } from "../http/models";
import { answerTurn, chatAnswer } from "../http/respond";
import { checkTrajectoryId } from "../http/session-key";
import { trajectoryTurn } from "../http/turn-events";
import { noteCreated, noteDeleted, noteTurns } from "../inspect/index-updates";
import { ownTenant } from "../http/own-tenant";
import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";

/** Paths relative to the tenant group's base, `/v1/tenants/:tenant` (src/index.ts mounts it). */
const T = ROUTES.edge.tenant;

type App = { Bindings: Env; Variables: AuthVariables };

/**
 * Per-tenant trajectory URLs: `/v1/tenants/{tenant}/trajectories[/{id}[/turns]]`. A tenant reaches
 * only its own trajectories: another tenant's URL answers 404, like a missing one.
 */
export const trajectoryRoutes = new Hono<App>()
  .post(T.trajectories, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const hasBody = Number(c.req.header("content-length") ?? "0") > 0 || c.req.header("transfer-encoding") !== undefined;
    const body = hasBody ? ((await readJson(c)) as { id?: unknown } | null) ?? {} : {};
    const id = body.id === undefined ? `traj_${crypto.randomUUID().replace(/-/g, "")}` : String(body.id);
    checkTrajectoryId(id);
    const stub = stubOf(c.env, tenant, id);
    const { created, createdAt } = await stub.create({ tenant, trajectoryId: id });
    if (created) noteCreated(c, tenant, id, createdAt);
    const url = new URL(`/v1/tenants/${tenant}/trajectories/${id}`, c.req.url).toString();
    return c.json({ object: "trajectory", id, tenant, url, created_at: createdAt }, created ? 201 : 200, { location: url });
  })
  .get(T.trajectory, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const id = c.req.param("id");
    checkTrajectoryId(id);
    const state = await stubOf(c.env, tenant, id).state();
    if (!state) throw notFound(id);
    return c.json({
      object: "trajectory",
      id: state.id,
      tenant: state.tenant,
      created_at: state.createdAt,
      message_count: state.messageCount,
      idempotency_keys: state.idempotencyKeys,
      backend: state.backendUrl,
      turns: state.turns.map((t) => ({
        turn: t.turn,
        started_at: t.startedAt,
        mode: t.mode,
        full_reason: t.fullReason,
        prompt_tokens: t.promptTokens,
        cached_tokens: t.cachedTokens,
        computed_tokens: t.computedTokens,
        completion_tokens: t.completionTokens,
        ttft_ms: t.ttftMs,
        backend_ttft_ms: t.backendTtftMs,
        total_ms: t.totalMs,
        backend: t.backend,
        finish_reason: t.finishReason,
        request_bytes: t.requestBytes,
        prefix_break: t.prefixBreak ? prefixBreakJson(t.prefixBreak) : null,
        repaired: t.repaired ? { tool_call_ids: t.repaired.toolCallIds, json_arguments: t.repaired.jsonArguments, quirks: t.repaired.quirks ?? [] } : null,
        route: t.route ?? null,
        host_tier_tokens: t.hostTierTokens ?? null,
        speculation: t.speculation ? { drafted: t.speculation.drafted, accepted: t.speculation.accepted } : null,
        evicted: t.evicted ? { ago_ms: t.evicted.agoMs, by: t.evicted.by, from: t.evicted.from } : null,
        miss: t.miss ? { reason: t.miss.reason, tokens: t.miss.tokens, possible_tokens: t.miss.possibleTokens, detail: t.miss.detail ?? null } : null,
        kv_pull: t.kvPull ? { outcome: t.kvPull.outcome, from: t.kvPull.from, missing_blocks: t.kvPull.missingBlocks, blocks: t.kvPull.blocks, bytes: t.kvPull.bytes, ms: t.kvPull.ms } : null,
      })),
      forks: state.forks.map((f) => ({ id: f.trajectoryId, turn: f.turn, created_at: f.createdAt })),
      parent: state.parent ? { id: state.parent.trajectoryId, turn: state.parent.turn, relation: state.parent.relation } : null,
      children: state.children.map((ch) => ({
        id: ch.trajectoryId,
        created_at: ch.createdAt,
        first_turn: ch.firstTurn ? { prompt_tokens: ch.firstTurn.promptTokens, cached_tokens: ch.firstTurn.cachedTokens, backend: ch.firstTurn.backend, route: ch.firstTurn.route } : null,
      })),
    });
  })
  .post(T.turns, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const id = c.req.param("id");
    checkTrajectoryId(id);
    const parsed = parseChatBody(await readJson(c), "append");
    const model = resolveModel({ requested: parsed.model, served: await servedModels(c.env), tenant, env: c.env });
    const events = trajectoryTurn(
      c.env,
      {
        tenant,
        trajectoryId: id,
        cacheSalt: c.get("cacheSalt"),
        kind: "append",
        messages: parsed.messages,
        tools: parsed.tools,
        sampling: parsed.sampling,
        constraint: parsed.constraint,
        model,
        idempotencyKey: idempotencyKey(c.req.header("idempotency-key")),
      },
      c.req.raw.signal,
    );
    const answer = chatAnswer({ model: parsed.model ?? model, stream: parsed.stream, includeUsage: parsed.includeUsage, hasTools: (parsed.tools?.length ?? 0) > 0, logprobs: parsed.sampling.logprobs !== undefined });
    answer.headers["x-trajectory-id"] = id;
    return answerTurn(c, noteTurns(c, tenant, id, events), answer);
  })
  .delete(T.trajectory, async (c) => {
    const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
    const id = c.req.param("id");
    checkTrajectoryId(id);
    const { ended, busy } = await stubOf(c.env, tenant, id).end();
    if (busy) throw new ProtocolError("trajectory_busy", `trajectory ${id} has a turn in progress; retry when it has finished`);
    if (!ended) throw notFound(id);
    noteDeleted(c, tenant, id);
    return c.json({ object: "trajectory.deleted", id, deleted: true });
  });

const stubOf = trajectoryStub;


function notFound(id: string): ProtocolError {
  return new ProtocolError("not_found", `trajectory ${id} does not exist`);
}

/** A turn's prefix break as the state endpoint shows it (snake_case, absent fields left out). */
function prefixBreakJson(b: PrefixBreak): Record<string, unknown> {
  return {
    cause: b.cause,
    ...(b.message !== undefined ? { message: b.message } : {}),
    ...(b.field !== undefined ? { field: b.field } : {}),
    ...(b.offset !== undefined ? { offset: b.offset } : {}),
    ...(b.before !== undefined ? { before: b.before } : {}),
    ...(b.after !== undefined ? { after: b.after } : {}),
    ...(b.uncachedFromToken !== undefined ? { uncached_from_token: b.uncachedFromToken } : {}),
  };
}
