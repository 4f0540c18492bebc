import { Worker } from "node:worker_threads";

/**
 * A worker thread that keeps a backend registered while its own heartbeats do not get through.
 * onnxruntime-node runs each engine step synchronously on the main thread, so a long step
 * (seconds on a loaded CPU) stops the heartbeat timer; and between steps the main thread's beat
 * can still sit behind them (its request, its response and the next timer each wait for a turn
 * of the event loop). The pool would then report a busy backend as down and trajectories would
 * move off it, losing their caches. The main thread hands this thread every heartbeat it sends
 * (`beat`) and says when one got through (`delivered`); when no beat got through for `graceMs`,
 * the thread resends the last beat's load without KV events (those stay with the main thread's
 * batches), at most once per `graceMs`, until one does. A backend that is really dead stops both
 * threads.
 *
 * @example
 * const keepalive = startKeepalive({ graceMs: 2500 });
 * keepalive.beat(url, headers, bodyWithoutEvents);
 * // ... after the main thread's beat was answered 2xx:
 * keepalive.delivered();
 */
export interface Keepalive {
  beat(url: string, headers: Record<string, string>, body: string): void;
  /** A heartbeat from the main thread got through (answered 2xx). */
  delivered(): void;
  stop(): Promise<void>;
}

// Plain JavaScript, evaluated: no TypeScript loader is needed inside the worker.
const SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
let last;
let deliveredAt = Date.now();
let attemptAt = 0;
parentPort.on("message", (m) => {
  if (m.url) last = m;
  if (m.delivered) deliveredAt = Date.now();
});
let inFlight = false;
const timer = setInterval(async () => {
  const now = Date.now();
  if (!last || inFlight || now - Math.max(deliveredAt, attemptAt) < workerData.graceMs) return;
  inFlight = true;
  attemptAt = now;
  try {
    const res = await fetch(last.url, { method: "POST", headers: last.headers, body: last.body, signal: AbortSignal.timeout(5000) });
    if (res.ok) deliveredAt = Date.now();
    await res.arrayBuffer();
  } catch {}
  inFlight = false;
}, Math.max(50, Math.floor(workerData.graceMs / 5)));
`;

export function startKeepalive(o: { graceMs: number }): Keepalive {
  const worker = new Worker(SOURCE, { eval: true, workerData: { graceMs: o.graceMs } });
  worker.unref();
  return {
    beat: (url, headers, body) => worker.postMessage({ url, headers, body }),
    delivered: () => worker.postMessage({ delivered: true }),
    stop: async () => {
      await worker.terminate();
    },
  };
}
