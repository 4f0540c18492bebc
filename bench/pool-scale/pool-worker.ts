import { fileURLToPath } from "node:url";
import { unstable_startWorker } from "wrangler";
import type { LoadRequest, LoadResponse, OpsRequest, OpsResponse } from "./driver-protocol";

/** The bench Worker's wrangler config (the real PoolDO and its driver). */
const CONFIG = fileURLToPath(new URL("./worker/wrangler.toml", import.meta.url));

/** The bench Worker running in workerd, and the two calls the bench makes of its driver. */
export interface PoolWorker {
  ops(request: OpsRequest): Promise<OpsResponse>;
  load(request: LoadRequest): Promise<LoadResponse>;
  stop(): Promise<void>;
}

/**
 * Starts the bench Worker (bench/pool-scale/worker/) in workerd through wrangler's programmatic
 * dev API: real Durable Objects with SQLite storage, kept in memory (nothing persisted), no
 * inspector. `downAfterMs` is the pool's POOL_DOWN_AFTER_MS.
 *
 * @example
 * const worker = await startPoolWorker({ downAfterMs: 6000 });
 * await worker.ops({ pool: "p8", ops: [{ op: "view" }] });
 * await worker.stop();
 */
export async function startPoolWorker(o: { downAfterMs: number }): Promise<PoolWorker> {
  const worker = await unstable_startWorker({
    config: CONFIG,
    bindings: { POOL_DOWN_AFTER_MS: { type: "plain_text", value: String(o.downAfterMs) } },
    dev: { server: { hostname: "127.0.0.1", port: 0 }, inspector: false, persist: false, logLevel: "error", watch: false },
  });
  await worker.ready;
  const post = async <T>(path: string, body: unknown): Promise<T> => {
    const res = await worker.fetch(`http://bench${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`pool-scale worker ${path}: HTTP ${res.status}: ${text.slice(0, 500)}`);
    return JSON.parse(text) as T;
  };
  return {
    ops: (request) => post<OpsResponse>("/ops", request),
    load: (request) => post<LoadResponse>("/load", request),
    stop: () => worker.dispose(),
  };
}
