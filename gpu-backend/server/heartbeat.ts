import { SECRET_HEADER, type HeartbeatReply } from "../../protocol/messages";
import type { Engine } from "../engine/engine";

export interface HeartbeatOptions {
  /** The edge's base URL; heartbeats go to `${edgeUrl}/v1/pool/heartbeat`. */
  edgeUrl: string;
  secret: string;
  backendId: string;
  /** The URL the edge should reach this backend at. */
  advertiseUrl: string;
  engine: Engine;
  intervalMs?: number;
  log?: (line: string) => void;
}

/**
 * Registers this backend with the edge's pool and keeps it alive: every `intervalMs` (default
 * 2 s) a heartbeat with its load (running and waiting sequences, KV usage, tokens/s) and its KV
 * events since the last beat (`kvEvents`: stored / removed short block hashes, or a snapshot of
 * every cached hash after a resync; see `KvEventLog`). Beats never overlap: one still in flight
 * when the next is due makes that one skip. A failed beat, or a pool answering `kv: "resync"`
 * (it restarted, or missed a batch), makes the next batch a snapshot. Failures are logged once
 * per outage and retried; the pool marks the backend down after 3 missed beats.
 *
 * @example const stop = startHeartbeat({ edgeUrl, secret, backendId, advertiseUrl, engine });
 */
export function startHeartbeat(o: HeartbeatOptions): () => void {
  const log = o.log ?? (() => {});
  let failing = false;
  let lastTokens = o.engine.counters.stepTokens;
  let lastAt = performance.now();
  let inFlight = false;
  const beat = async () => {
    if (inFlight) return;
    inFlight = true;
    const now = performance.now();
    const tokens = o.engine.counters.stepTokens;
    const tokensPerS = now > lastAt ? ((tokens - lastTokens) / (now - lastAt)) * 1000 : 0;
    lastTokens = tokens;
    lastAt = now;
    try {
      const res = await fetch(`${o.edgeUrl.replace(/\/+$/, "")}/v1/pool/heartbeat`, {
        method: "POST",
        headers: { "content-type": "application/json", [SECRET_HEADER]: o.secret },
        body: JSON.stringify({
          id: o.backendId,
          url: o.advertiseUrl,
          model: o.engine.modelId,
          kvCapacityBlocks: o.engine.options.pool.numBlocks,
          running: o.engine.numRunning,
          waiting: o.engine.numWaiting,
          kvUsage: o.engine.kv.usage(),
          tokensPerS,
          kvEvents: o.engine.kvEventBatch(),
        }),
        signal: AbortSignal.timeout(5000),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
      const reply = (await res.json()) as HeartbeatReply;
      if (reply.kv === "resync") o.engine.kvEvents.requestResync();
      if (reply.registered || failing) log(`registered with the pool at ${o.edgeUrl}`);
      failing = false;
    } catch (e) {
      // The pool may or may not have applied the batch: only a snapshot is safe next.
      o.engine.kvEvents.requestResync();
      if (!failing) log(`heartbeat to ${o.edgeUrl} failed (${(e as Error).message}); retrying`);
      failing = true;
    } finally {
      inFlight = false;
    }
  };
  void beat();
  const timer = setInterval(() => void beat(), o.intervalMs ?? 2000);
  timer.unref();
  return () => clearInterval(timer);
}
