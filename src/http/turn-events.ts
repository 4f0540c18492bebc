import { toProtocolError } from "../../protocol";
import type { CachePoint, ChatMessage, ReplyConstraint, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { placementCell } from "../../durable-objects/pool/cell-route";
import { poolCell } from "../../durable-objects/pool/pool-do";
import { chooseBackend, routedBackends } from "../../durable-objects/routing/placement";
import { edgeSettings, routingPolicyOf } from "../../durable-objects/settings";
import { checkLimits } from "../../durable-objects/turn/limits";
import { relayTurn, turnRecord } from "../../durable-objects/turn/relay";
import { checkToolAnswers } from "../../durable-objects/turn/tool-answers";
import { normalizeMessage, prefixKey } from "../../durable-objects/turn/transcript-diff";
import type { AssistantReply, TurnEvent, TurnInput } from "../../durable-objects/turn/turn-types";
import { turnEvents } from "../../durable-objects/turn/turn-stream";
import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";

/**
 * Runs a turn in the trajectory's Durable Object (`<tenant>/<id>`, its `turn` RPC) and yields its
 * events as they arrive.
 *
 * @example for await (const event of trajectoryTurn(env, input)) ...
 */
export async function* trajectoryTurn(env: Env, input: TurnInput, signal?: AbortSignal): AsyncGenerator<TurnEvent> {
  const stream = await trajectoryStub(env, input.tenant, input.trajectoryId).turn(input);
  const events = turnEvents(stream);
  // The client went away: stop reading, which cancels the stream and so the turn.
  const stop = () => void events.return(undefined);
  signal?.addEventListener("abort", stop);
  try {
    yield* events;
  } finally {
    signal?.removeEventListener("abort", stop);
  }
}

/**
 * A turn without a trajectory: the full transcript to the least loaded backend (still salted, so
 * it uses the backend's prefix cache for this tenant), nothing stored. The same relay as a
 * trajectory's turn (`relayTurn`: BACKEND_TIMEOUT_MS, failover before the first token); its
 * record is numbered 0. A transcript past the configured caps (`checkLimits`) or a tool message
 * that answers no call (`invalid_request`, `checkToolAnswers`) is refused first, before any
 * backend is asked.
 */
export async function* statelessTurn(
  env: Env,
  params: { tenant: string; cacheSalt: string; messages: ChatMessage[]; tools: ToolDefinition[] | undefined; sampling: SamplingParams; constraint: ReplyConstraint | undefined; model: string | undefined; thinking?: boolean; cachePoints?: CachePoint[]; speculative?: false },
  signal?: AbortSignal,
): AsyncGenerator<TurnEvent> {
  const settings = edgeSettings(env);
  checkLimits(params, settings.limits);
  checkToolAnswers(params.messages);
  // Events flow through an object stream: the relay's emit waits until the consumer took the
  // previous event (as the trajectory object's stream does), and fails once it stopped reading.
  const { readable, writable } = new TransformStream<TurnEvent, TurnEvent>();
  const writer = writable.getWriter();
  const abort = new AbortController();
  const onAbort = () => abort.abort();
  signal?.addEventListener("abort", onAbort);
  const emit = (event: TurnEvent): Promise<boolean> =>
    writer.write(event).then(
      () => true,
      () => false,
    );
  const run = (async () => {
    // Cache-aware without a session, and without tokenizing: two keys name what the request
    // shares. The conversation's (first two messages: a client resending its growing history keeps
    // them) finds the backend that served its earlier turns; else the first message's (the system
    // prompt and tools) finds one holding the shared prefix. The pool places by them (prefixKey),
    // in the cell the first message's key ranks first (so every conversation under one system
    // prompt meets in one cell), over that cell's view as cached in this isolate: one pool call.
    const id = crypto.randomUUID();
    const base = { cacheSalt: params.cacheSalt, model: params.model, first: params.messages[0], tools: params.tools };
    const key = await prefixKey(base);
    const conversationKey = params.messages.length > 1 ? await prefixKey({ ...base, second: params.messages[1] }) : undefined;
    const { cell, view } = await placementCell(env, settings, { key: async () => key, model: params.model });
    const pool = poolCell(env, cell);
    const backends = routedBackends(view, settings.backendSecret);
    const place = () => pool.place({ hashes: [], key: conversationKey ?? key, ...(conversationKey ? { fallbackKey: key } : {}), trajectoryId: id });
    const { backend, reason, placed } = await chooseBackend({ policy: routingPolicyOf(settings), pinned: null, trajectoryId: id, turnsDone: 0, backends, place });
    const result = await relayTurn({
      backend,
      backends,
      trajectoryId: id,
      mode: "full",
      fullReason: null,
      route: reason,
      timeoutMs: settings.backendTimeoutMs,
      emit,
      signal: abort.signal,
      request: (_mode, target) => ({
        requestId: crypto.randomUUID(),
        cacheSalt: params.cacheSalt,
        mode: "full",
        // The pool named another backend holding more of this prefix: pull it from there.
        ...(placed?.kvSource !== undefined && placed.kvSource !== target.url ? { kvSource: { url: placed.kvSource } } : {}),
        messages: params.messages,
        sampling: params.sampling,
        ...(params.constraint ? { constraint: params.constraint } : {}),
        ...(params.cachePoints && params.cachePoints.length > 0 ? { cachePoints: params.cachePoints } : {}),
        ...(params.tools && params.tools.length > 0 ? { tools: params.tools } : {}),
        ...(params.model ? { model: params.model } : {}),
        ...(params.thinking !== undefined ? { thinking: params.thinking } : {}),
        ...(params.speculative === false ? { speculative: false } : {}),
      }),
    });
    const { done } = result;
    await emit({ type: "done", message: normalizeMessage(done.message) as AssistantReply, finishReason: done.finishReason, usage: done.usage, replayed: false, turn: turnRecord(result, { turn: 0 }), ...(done.stopSequence !== undefined ? { stopSequence: done.stopSequence } : {}), ...(done.cacheWrites ? { cacheWrites: done.cacheWrites } : {}) });
    // After the answer: the pool learns where this prefix's blocks now are (best effort).
    const hashes = done.promptBlockHashes ?? [];
    await pool.notePrefix(conversationKey ? [key, conversationKey] : key, result.backend.url, hashes, id).catch((e: unknown) => console.error("notePrefix for a stateless turn failed:", e));
  })()
    .catch(async (e: unknown) => {
      const err = toProtocolError(e);
      await emit(err.toFrame());
    })
    .finally(() => writer.close().catch(() => {}));
  const reader = readable.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    // The consumer stopped early (client gone): stop the relay and let its writes fail.
    abort.abort();
    await reader.cancel().catch(() => {});
    signal?.removeEventListener("abort", onAbort);
    await run;
  }
}
