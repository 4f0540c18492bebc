import { ProtocolError, toProtocolError } from "../protocol";
import type { SamplingParams, ToolDefinition, ChatMessage } from "../protocol/messages";
import { generateFrames } from "../durable-objects/backend-client";
import { DEV_SECRET, type EdgeEnv } from "../durable-objects/edge-env";
import { poolOf, routingLoad } from "../durable-objects/pool/pool-do";
import { route } from "../durable-objects/routing/routing-policy";
import { normalizeMessage } from "../durable-objects/turn/transcript-diff";
import type { AssistantReply, TurnEvent, TurnInput } from "../durable-objects/turn/turn-types";

/**
 * Runs a turn in the trajectory's Durable Object (`<tenant>/<id>`) and yields its events as they
 * arrive (NDJSON from the object's stream).
 *
 * @example for await (const event of trajectoryTurn(env, input)) ...
 */
export async function* trajectoryTurn(env: EdgeEnv, input: TurnInput, signal?: AbortSignal): AsyncGenerator<TurnEvent> {
  const stub = env.TRAJECTORY.get(env.TRAJECTORY.idFromName(`${input.tenant}/${input.trajectoryId}`));
  const res = await stub.fetch("https://trajectory/turn", { method: "POST", body: JSON.stringify(input), ...(signal ? { signal } : {}) });
  if (!res.ok || !res.body) throw new ProtocolError("internal_error", `trajectory object answered ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += value;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) yield JSON.parse(line) as TurnEvent;
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * A turn without a trajectory: the full transcript straight to a backend (still salted, so it
 * uses the backend's prefix cache for this tenant), nothing stored.
 */
export async function* statelessTurn(
  env: EdgeEnv,
  params: { tenant: string; cacheSalt: string; messages: ChatMessage[]; tools: ToolDefinition[] | undefined; sampling: SamplingParams; model: string | undefined },
  signal?: AbortSignal,
): AsyncGenerator<TurnEvent> {
  const pool = (await poolOf(env).view()).filter((b) => b.up);
  const choice = route("least-loaded", { trajectoryId: crypto.randomUUID() }, pool.map((b) => ({ id: b.url, up: b.up, load: routingLoad(b) })));
  if (!choice) throw new ProtocolError("backend_unavailable", "no backend is configured or up");
  const target = { url: choice.backendId, secret: env.AGENT_EDGE_SECRET ?? DEV_SECRET };
  const t0 = Date.now();
  try {
    for await (const frame of generateFrames(
      target,
      {
        requestId: crypto.randomUUID(),
        cacheSalt: params.cacheSalt,
        mode: "full",
        messages: params.messages,
        sampling: params.sampling,
        ...(params.tools && params.tools.length > 0 ? { tools: params.tools } : {}),
        ...(params.model ? { model: params.model } : {}),
      },
      { timeoutMs: 120_000, ...(signal ? { signal } : {}) },
    )) {
      if (frame.type === "token") {
        if (frame.text) yield { type: "token", text: frame.text };
      } else if (frame.type === "done") {
        const message = normalizeMessage(frame.message) as AssistantReply;
        yield {
          type: "done",
          message,
          finishReason: frame.finishReason,
          usage: frame.usage,
          replayed: false,
          turn: {
            turn: 0,
            startedAt: new Date(t0).toISOString(),
            mode: "full",
            fullReason: null,
            promptTokens: frame.usage.promptTokens,
            cachedTokens: frame.usage.cachedTokens,
            computedTokens: frame.usage.computedTokens,
            completionTokens: frame.usage.completionTokens,
            ttftMs: frame.timings.ttftMs,
            backendTtftMs: frame.timings.ttftMs,
            totalMs: Date.now() - t0,
            backend: frame.backendId,
            backendUrl: target.url,
            finishReason: frame.finishReason,
            requestBytes: 0,
          },
        };
      } else {
        yield { type: "error", code: frame.code, message: frame.message, retryable: frame.retryable };
      }
    }
  } catch (e) {
    const err = toProtocolError(e);
    yield { type: "error", code: err.code, message: err.message, retryable: err.retryable };
  }
}
