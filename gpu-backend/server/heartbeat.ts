import { validateHeartbeatReply } from "../../protocol/codec";
import type { Drain } from "./drain";
import { SECRET_HEADER, type Heartbeat } from "../../protocol/messages";
import { edgePath } from "../../protocol/routes";
import type { Engine } from "../engine/engine";
import { startKeepalive } from "./keepalive-thread";
import { LoadAverage } from "./load-average";

export interface HeartbeatOptions {
  /** The edge's base URL; heartbeats go to `${edgeUrl}` + `edgePath("pool", "heartbeat")`. */
  edgeUrl: string;
  secret: string;
  backendId: string;
  /** The URL the edge should reach this backend at. */
  advertiseUrl: string;
  engine: Engine;
  /** Reported as `draining` while it is; a beat goes out at once when it starts. */
  drain?: Drain;
  /** Hears the pool's `peers` (answered to a draining backend): where to push its blocks. */
  onPeers?: (peers: string[]) => void;
  intervalMs?: number;
  log?: (line: string) => void;
  /** Resend the last load from a worker thread while the main thread is blocked (default true). */
  keepalive?: boolean;
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
 * The load reported for routing is `loadAvg`, running + waiting sampled every 250 ms and averaged
 * over LOAD_AVG_TAU_MS (load-average.ts), with the queued prompt tokens (`queuedTokens`, what
 * the queue bound counts) and the measured prefill rate (`prefillTokensPerS`, once measured): the
 * pool's placement compares how long each backend's prefill queue takes to drain. When no beat got through for 1.25 intervals (an
 * engine step blocking the main thread, or beats stuck behind steps), a keepalive thread resends
 * the last beat's load (keepalive-thread.ts), so a busy backend is not taken for a dead one.
 *
 * @example const heartbeat = startHeartbeat({ edgeUrl, secret, backendId, advertiseUrl, engine }); await heartbeat.leave();
 */
export interface HeartbeatHandle {
  /** Stops beating. */
  stop(): void;
  /**
   * Stops beating and sends one last beat marked `leaving` (at most `timeoutMs`, default 2 s), so
   * the pool forgets this backend and its blocks now rather than after 3 missed beats. Never throws.
   */
  leave(timeoutMs?: number): Promise<void>;
}

export function startHeartbeat(o: HeartbeatOptions): HeartbeatHandle {
  const log = o.log ?? (() => {});
  let failing = false;
  let lastTokens = o.engine.counters.stepTokens;
  let lastAt = performance.now();
  let inFlight = false;
  const url = `${o.edgeUrl.replace(/\/+$/, "")}${edgePath("pool", "heartbeat")}`;
  const headers = { "content-type": "application/json", [SECRET_HEADER]: o.secret };
  const intervalMs = o.intervalMs ?? 2000;
  const keepalive = o.keepalive === false ? undefined : startKeepalive({ graceMs: Math.max(1000, Math.round(intervalMs * 1.25)) });
  const load = new LoadAverage();
  const sampleLoad = () => load.sample(o.engine.numRunning + o.engine.numWaiting);
  sampleLoad();
  const sampler = setInterval(sampleLoad, 250);
  sampler.unref();
  const statusNow = (tokensPerS: number): Heartbeat => ({
    id: o.backendId,
    url: o.advertiseUrl,
    model: o.engine.modelId,
    kvCapacityBlocks: o.engine.options.pool.numBlocks,
    running: o.engine.numRunning,
    waiting: o.engine.numWaiting,
    kvUsage: o.engine.kv.usage(),
    tokensPerS,
    loadAvg: Math.round(load.value * 100) / 100,
    queuedTokens: o.engine.scheduler.queuedTokens(),
    ...prefillRate(o.engine),
    ...(o.drain?.draining ? { draining: true } : {}),
  });
  const beat = async () => {
    if (inFlight) return;
    inFlight = true;
    const now = performance.now();
    const tokens = o.engine.counters.stepTokens;
    const tokensPerS = now > lastAt ? ((tokens - lastTokens) / (now - lastAt)) * 1000 : 0;
    lastTokens = tokens;
    lastAt = now;
    try {
      sampleLoad();
      const status = statusNow(tokensPerS);
      keepalive?.beat(url, headers, JSON.stringify(status));
      const res = await fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify({ ...status, kvEvents: o.engine.kvEventBatch() } satisfies Heartbeat),
        signal: AbortSignal.timeout(5000),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
      keepalive?.delivered();
      const reply = validateHeartbeatReply(await res.json());
      if (!reply.ok) throw reply.error;
      if (reply.value.kv === "resync") o.engine.kvEvents.requestResync();
      if (reply.value.peers) o.onPeers?.(reply.value.peers);
      if (reply.value.registered || failing) log(`registered with the pool at ${o.edgeUrl}`);
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
  void o.drain?.started().then(() => beat());
  const timer = setInterval(() => void beat(), intervalMs);
  timer.unref();
  const stop = () => {
    clearInterval(timer);
    clearInterval(sampler);
    void keepalive?.stop();
  };
  return {
    stop,
    async leave(timeoutMs = 2000) {
      stop();
      try {
        const res = await fetch(url, { method: "POST", headers, body: JSON.stringify({ ...statusNow(0), leaving: true } satisfies Heartbeat), signal: AbortSignal.timeout(timeoutMs) });
        await res.body?.cancel();
      } catch (e) {
        log(`last heartbeat (leaving) to ${o.edgeUrl} failed (${(e as Error).message}); the pool marks this backend down after 3 missed beats`);
      }
    },
  };
}

/** The engine's measured prefill rate as a heartbeat field (none before its first measurement). */
function prefillRate(engine: Engine): Pick<Heartbeat, "prefillTokensPerS"> {
  const rate = engine.prefillRate.tokensPerS;
  return rate === undefined ? {} : { prefillTokensPerS: rate };
}
