import { Hono, type Context } from "hono";
import { decodeGenerateRequest, decodeKvFetchRequest, decodeKvPullRequest, decodeLeaseRequest, decodeReleaseLeaseRequest, decodeReleaseStateRequest, decodeTokenizeRequest, encode, type DecodeResult } from "../../protocol/codec";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import { secretsEqual } from "../../protocol/hex";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type ErrorFrame, type Frame } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { Engine } from "../engine/engine";
import type { Drain } from "./drain";
import type { DrainPush } from "./drain-push";
import { createMetrics } from "./metrics";

export interface BackendAppOptions {
  engine: Engine;
  /** Shared secret required in `x-agent-edge-secret` on every route but /healthz. */
  secret: string;
  backendId: string;
  /** Largest accepted request body. Default 32 MiB. */
  maxBodyBytes?: number;
  /** The backend's drain (`POST /v1/drain`); absent: the route answers 404. */
  drain?: Drain;
  /** Its push of blocks to peers (a drain request may name them). */
  drainPush?: DrainPush;
}

/**
 * The backend's HTTP surface (HTTP only: the engine does the work).
 *
 * - `POST /v1/generate`: msgpack `GenerateRequest` in, a stream of msgpack frames out.
 * - `POST /v1/states/release`: msgpack `ReleaseStateRequest`, answers a msgpack `{ released }`.
 * - `POST /v1/tokenize`: msgpack `TokenizeRequest`, answers a msgpack `TokenizeResponse` (the
 *   prompt tokens a full turn over those messages and tools has; nothing runs).
 * - `POST /v1/leases`, `POST /v1/leases/release`: tool-pause leases (msgpack); `GET /v1/leases`
 *   lists the active ones (JSON, for debugging).
 * - `POST /v1/kv/pull`: msgpack `KvPullRequest` from another backend, answers a binary stream of
 *   checked KV blocks (gpu-backend/transfer/kv-stream.ts).
 * - `POST /v1/kv/fetch`: msgpack `KvFetchRequest` (a draining peer pushing): pulls those blocks
 *   from the named source now, answers the pull's msgpack `KvPullReport`.
 * - `POST /v1/drain`: start draining (drain.ts), optional JSON body `{ peers: [url] }` (where to
 *   push its blocks, else the pool's heartbeat reply says); JSON `{ draining, running, waiting }`.
 * - `GET /v1/models`: JSON list of served models, each with its `context_length` and
 *   `max_output_tokens` (the context, or demo agent mode's N) and `demo_agent` (N) when on.
 * - `GET /healthz`: JSON liveness, no secret needed.
 * - `GET /metrics`: Prometheus text.
 *
 * Errors before streaming starts answer with the error code's HTTP status and one msgpack
 * error frame; errors after it are an error frame at the end of the stream.
 *
 * @example
 * serve({ fetch: createBackendApp({ engine, secret, backendId: "b0" }).fetch, port: 8080 });
 */
export function createBackendApp(options: BackendAppOptions): Hono {
  const { engine } = options;
  const maxBodyBytes = options.maxBodyBytes ?? 32 * 1024 * 1024;
  const metrics = createMetrics(engine);
  const app = new Hono();

  app.get(ROUTES.backend.healthz, (c) =>
    c.json({
      ok: true,
      backendId: options.backendId,
      model: engine.modelId,
      running: engine.numRunning,
      waiting: engine.numWaiting,
      draining: options.drain?.draining ?? false,
      ...(engine.options.demoAgent ? { demo_agent: engine.options.demoAgent.replyTokens } : {}),
    }),
  );

  app.use("*", async (c, next) => {
    if (c.req.path === ROUTES.backend.healthz) return next();
    const given = c.req.header(SECRET_HEADER);
    if (given === undefined || !(await secretsEqual(given, options.secret))) {
      return errorResponse(c, new ProtocolError("unauthorized", `missing or wrong ${SECRET_HEADER} header`));
    }
    return next();
  });

  app.get(ROUTES.backend.metrics, async (c) => c.body(await metrics.registry.metrics(), 200, { "content-type": metrics.registry.contentType }));

  app.get(ROUTES.backend.models, (c) => c.json({ object: "list", data: [modelEntry(engine)] }));

  /** A msgpack request answered with one msgpack value; errors thrown here become error frames (onError). */
  const msgpackRoute =
    <T>(decode: (bytes: Uint8Array) => DecodeResult<T>, handle: (request: T) => unknown) =>
    async (c: Context): Promise<Response> =>
      new Response(encode(handle(await decodeBody(c, maxBodyBytes, decode))), { status: 200, headers: { "content-type": MSGPACK_CONTENT_TYPE } });

  app.post(ROUTES.backend.releaseState, msgpackRoute(decodeReleaseStateRequest, (r) => ({ released: engine.releaseState(r.stateId) })));
  app.post(ROUTES.backend.tokenize, msgpackRoute(decodeTokenizeRequest, (r) => ({ promptTokens: engine.countPromptTokens(r) })));
  app.post(ROUTES.backend.leases, msgpackRoute(decodeLeaseRequest, (r) => engine.leases.lease(r.stateId, r.ttlMs, r.expectedReturnMs)));
  app.post(ROUTES.backend.releaseLease, msgpackRoute(decodeReleaseLeaseRequest, (r) => engine.leases.release(r.stateId, r.expired ?? false)));

  if (options.drain) {
    const drain = options.drain;
    app.post(ROUTES.backend.drain, async (c) => {
      const peers = drainPeers(await c.req.text());
      if (drain.start()) console.log(`[backend] ${options.backendId}: draining (POST ${ROUTES.backend.drain})`);
      if (peers) options.drainPush?.offerPeers(peers);
      return c.json({ draining: true, running: engine.numRunning, waiting: engine.numWaiting });
    });
  }

  app.post(ROUTES.backend.kvPull, async (c) => {
    options.drain?.noteActivity();
    const body = engine.kvServer.serve(await decodeBody(c, maxBodyBytes, decodeKvPullRequest));
    return new Response(body, { status: 200, headers: { "content-type": "application/octet-stream", "cache-control": "no-store" } });
  });

  app.post(ROUTES.backend.kvFetch, async (c) => {
    options.drain?.noteActivity();
    const report = await engine.fetchBlocks(await decodeBody(c, maxBodyBytes, decodeKvFetchRequest));
    return new Response(encode(report), { status: 200, headers: { "content-type": MSGPACK_CONTENT_TYPE } });
  });

  app.get(ROUTES.backend.leases, (c) => c.json({ leases: engine.leases.table.list().map((l) => ({ stateId: l.key, blocks: l.blocks, expiresAt: l.expiresAt, protectedBlocks: l.protectedBlocks })) }));

  app.post(ROUTES.backend.generate, async (c) => {
    options.drain?.noteActivity();
    const request = await decodeBody(c, maxBodyBytes, decodeGenerateRequest);

    // The first frame decides the status: an immediate error (unknown state, bad model, too long)
    // answers with its HTTP status; otherwise a 200 stream relays frames as they are produced.
    const abort = new AbortController();
    c.req.raw.signal.addEventListener("abort", () => abort.abort(), { once: true });
    let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
    const early: Frame[] = [];
    let closed = false;
    let resolveFirst!: (f: Frame) => void;
    const first = new Promise<Frame>((r) => (resolveFirst = r));
    const sink = (frame: Frame) => {
      if (closed) return;
      if (early.length === 0 && !controller) resolveFirst(frame);
      if (controller) controller.enqueue(encode(frame));
      else early.push(frame);
      if (frame.type !== "token") {
        closed = true;
        controller?.close();
      }
    };
    abort.signal.addEventListener(
      "abort",
      () => resolveFirst({ type: "error", code: "internal_error", message: "the client went away", retryable: true }),
      { once: true },
    );
    engine.submit(request, sink, abort.signal);
    const head = await first;
    if (head.type === "error" && early.length === 1) return errorResponse(c, ProtocolError.fromFrame(head));

    const stream = new ReadableStream<Uint8Array>({
      start(ctrl) {
        controller = ctrl;
        for (const f of early) ctrl.enqueue(encode(f));
        if (closed) ctrl.close();
      },
      cancel() {
        abort.abort();
      },
    });
    return new Response(stream, { status: 200, headers: { "content-type": MSGPACK_CONTENT_TYPE, "cache-control": "no-store" } });
  });

  app.notFound((c) => errorResponse(c, new ProtocolError("not_found", `no route ${c.req.method} ${c.req.path}`)));
  app.onError((e, c) => errorResponse(c, toProtocolError(e)));
  return app;
}

/** A served model as `GET /v1/models` lists it: its context, its longest reply, demo agent mode's N when on. */
function modelEntry(engine: Engine): Record<string, unknown> {
  const demo = engine.options.demoAgent?.replyTokens;
  return {
    id: engine.modelId,
    object: "model",
    owned_by: "agent-edge",
    context_length: engine.contextTokens,
    max_output_tokens: Math.min(engine.contextTokens, demo ?? Infinity),
    ...(demo ? { demo_agent: demo } : {}),
  };
}

function errorResponse(c: Context, err: ProtocolError): Response {
  const frame: ErrorFrame = err.toFrame();
  void c;
  return new Response(encode(frame), { status: err.httpStatus, headers: { "content-type": MSGPACK_CONTENT_TYPE } });
}

/** The request body (at most `maxBytes`), decoded and validated; throws the ProtocolError otherwise. */
async function decodeBody<T>(c: Context, maxBytes: number, decode: (bytes: Uint8Array) => DecodeResult<T>): Promise<T> {
  const declared = Number(c.req.header("content-length") ?? "0");
  if (declared > maxBytes) throw new ProtocolError("invalid_request", `request body of ${declared} bytes exceeds the limit of ${maxBytes}`);
  const buf = new Uint8Array(await c.req.arrayBuffer());
  if (buf.byteLength > maxBytes) throw new ProtocolError("invalid_request", `request body of ${buf.byteLength} bytes exceeds the limit of ${maxBytes}`);
  const decoded = decode(buf);
  if (!decoded.ok) throw decoded.error;
  return decoded.value;
}

/** The optional `{ peers: [url] }` body of `POST /v1/drain`. */
function drainPeers(text: string): string[] | undefined {
  if (text.trim() === "") return undefined;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ProtocolError("invalid_request", "the drain request's body must be JSON: { peers?: [url] }");
  }
  const peers = (body as { peers?: unknown } | null)?.peers;
  if (peers === undefined) return undefined;
  if (!Array.isArray(peers) || !peers.every((p): p is string => typeof p === "string" && URL.canParse(p))) throw new ProtocolError("invalid_request", "peers must be an array of backend urls");
  return peers;
}
