import { Worker } from "node:worker_threads";

/**
 * A worker thread that keeps a backend registered while its main thread is blocked. onnxruntime-node
 * runs each engine step synchronously on the main thread, so a long step (seconds on a loaded CPU)
 * stops the heartbeat timer; the pool would then report a busy backend as down and trajectories
 * would move off it, losing their caches. The main thread hands this thread every heartbeat it
 * sends (`beat`) and ticks it while its event loop runs (`alive`, every 250 ms); when neither came
 * for `graceMs`, the thread resends the last beat's load without KV events (those stay with the
 * main thread's batches), and again every `graceMs` until the main thread is back. A backend that
 * is really dead stops both threads.
 *
 * @example
 * const keepalive = startKeepalive({ graceMs: 2500 });
 * setInterval(() => keepalive.alive(), 250);
 * keepalive.beat(url, headers, bodyWithoutEvents);
 */
export interface Keepalive {
  beat(url: string, headers: Record<string, string>, body: string): void;
  /** The main thread's event loop is running. */
  alive(): void;
  stop(): Promise<void>;
}

// Plain JavaScript, evaluated: no TypeScript loader is needed inside the worker.
const SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
let last;
let lastAt = Date.now();
parentPort.on("message", (m) => {
  if (m.url) last = m;
  lastAt = Date.now();
});
let inFlight = false;
const timer = setInterval(async () => {
  if (!last || inFlight || Date.now() - lastAt < workerData.graceMs) return;
  inFlight = true;
  try {
    await fetch(last.url, { method: "POST", headers: last.headers, body: last.body, signal: AbortSignal.timeout(5000) });
  } catch {}
  lastAt = Date.now();
  inFlight = false;
}, Math.max(50, Math.floor(workerData.graceMs / 5)));
`;

export function startKeepalive(o: { graceMs: number }): Keepalive {
  const worker = new Worker(SOURCE, { eval: true, workerData: { graceMs: o.graceMs } });
  worker.unref();
  return {
    beat: (url, headers, body) => worker.postMessage({ url, headers, body }),
    alive: () => worker.postMessage({}),
    stop: async () => {
      await worker.terminate();
    },
  };
}
