import { FrameDecoder, encode } from "../../protocol/codec";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type ErrorFrame, type Frame, type GenerateRequest } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";

export interface BackendTarget {
  /** Base URL, e.g. http://127.0.0.1:8080 */
  url: string;
  secret: string;
}

/** Bytes sent to the backend by one call (for the edge benchmark's bytes-per-turn figure). */
export interface SendStats {
  requestBytes: number;
}

/**
 * Sends a turn to a backend and yields its frames as they arrive (msgpack over HTTP, see
 * protocol/). Connection failures, timeouts and non-msgpack answers become a
 * `backend_unavailable` error; an error answered before the stream (a 4xx/5xx with one error
 * frame) is thrown as that `ProtocolError`.
 *
 * `timeoutMs` bounds the wait for the response headers (the backend answers them with the first
 * token) and then each gap between chunks.
 *
 * @example
 * for await (const frame of generateFrames(target, request, { timeoutMs: 60_000 })) relay(frame);
 */
export async function* generateFrames(
  target: BackendTarget,
  request: GenerateRequest,
  options: { timeoutMs: number; signal?: AbortSignal; stats?: SendStats },
): AsyncGenerator<Frame> {
  const body = encode(request);
  if (options.stats) options.stats.requestBytes += body.byteLength;
  const abort = new AbortController();
  const onAbort = () => abort.abort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => abort.abort(), options.timeoutMs);
  };
  try {
    arm();
    let res: Response;
    try {
      res = await fetch(`${target.url}${ROUTES.backend.generate}`, {
        method: "POST",
        headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: target.secret },
        body,
        signal: abort.signal,
      });
    } catch (e) {
      throw unavailable(target, e, options.signal);
    }
    if (!res.body) throw new ProtocolError("backend_unavailable", `backend ${target.url} answered ${res.status} without a body`);
    const decoder = new FrameDecoder();
    const reader = res.body.getReader();
    let sawFinal = false;
    for (;;) {
      arm();
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (e) {
        throw unavailable(target, e, options.signal);
      }
      if (chunk.done) break;
      let frames: Frame[];
      try {
        frames = decoder.push(chunk.value);
      } catch (e) {
        throw new ProtocolError("backend_unavailable", `backend ${target.url} sent an unreadable stream: ${toProtocolError(e).message}`);
      }
      for (const frame of frames) {
        if (!res.ok) {
          // An error known before streaming: the status and one error frame.
          if (frame.type === "error") throw fromErrorFrame(frame);
          throw new ProtocolError("backend_unavailable", `backend ${target.url} answered ${res.status}`);
        }
        if (frame.type !== "token") sawFinal = true;
        yield frame;
      }
    }
    if (!res.ok) throw new ProtocolError("backend_unavailable", `backend ${target.url} answered ${res.status} with no error frame`);
    if (!sawFinal) throw new ProtocolError("backend_unavailable", `backend ${target.url} closed the stream before the end of the turn`);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", onAbort);
    abort.abort();
  }
}

/** Asks a backend to drop a trajectory state (best effort). */
export async function releaseState(target: BackendTarget, stateId: string, timeoutMs: number): Promise<boolean> {
  try {
    const res = await fetch(`${target.url}${ROUTES.backend.releaseState}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: target.secret },
      body: encode({ stateId }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    return res.ok;
  } catch {
    return false;
  }
}

function fromErrorFrame(frame: ErrorFrame): ProtocolError {
  return ProtocolError.fromFrame(frame);
}

function unavailable(target: BackendTarget, e: unknown, signal: AbortSignal | undefined): ProtocolError {
  if (signal?.aborted) return new ProtocolError("backend_unavailable", "the turn was cancelled", { cause: e });
  return new ProtocolError("backend_unavailable", `backend ${target.url} is unavailable or timed out: ${toProtocolError(e).message}`, { cause: e });
}
