import { setTimeout as sleep } from "node:timers/promises";
import { SECRET_HEADER } from "../../protocol/messages";

/** One backend's /metrics, read: the value of an unlabelled series by name (0 when absent). */
export type MetricReader = (name: string) => number;

/** What the metric calls need of a stack: the backends' URLs and the shared secret. */
export interface BackendAccess {
  backendUrls: readonly string[];
  secret: string;
}

/**
 * Every backend's /metrics (prom-client text), in stack order.
 *
 * @example const [first] = await scrapeBackends(stack); first("agent_edge_queued_tokens");
 */
export async function scrapeBackends(stack: BackendAccess): Promise<MetricReader[]> {
  return Promise.all(
    stack.backendUrls.map(async (url) => {
      const text = await (await fetch(`${url}/metrics`, { headers: { [SECRET_HEADER]: stack.secret } })).text();
      return (name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, "m").exec(text)?.[1] ?? 0);
    }),
  );
}

/** Waits until no backend has a sequence running or waiting (at most `timeoutMs`); answers the ms it took. */
export async function waitIdle(stack: BackendAccess, timeoutMs = 60_000): Promise<number> {
  const start = performance.now();
  for (;;) {
    const all = await scrapeBackends(stack);
    if (all.every((m) => m("agent_edge_running_sequences") + m("agent_edge_waiting_sequences") === 0)) return performance.now() - start;
    if (performance.now() - start > timeoutMs) throw new Error(`the backends did not go idle within ${timeoutMs / 1000} s`);
    await sleep(100);
  }
}

export interface BackendMeters {
  /** Process CPU seconds (onnxruntime threads included). */
  cpuS: number;
  /** Executor time, ms: tokens stepped / the step tokens-per-second gauge (both since start). */
  stepMs: number;
}

/** Each backend's CPU seconds and executor time so far, by its URL's port (`backend-<port>`, its pool id). */
export async function backendMeters(stack: BackendAccess): Promise<Record<string, BackendMeters>> {
  const readers = await scrapeBackends(stack);
  return Object.fromEntries(
    stack.backendUrls.map((url, i) => {
      const value = readers[i]!;
      const tokens = value("agent_edge_computed_prompt_tokens_total") + value("agent_edge_generated_tokens_total");
      const rate = value("agent_edge_step_tokens_per_second");
      return [`backend-${new URL(url).port}`, { cpuS: value("agent_edge_process_process_cpu_seconds_total"), stepMs: rate > 0 ? (tokens / rate) * 1000 : 0 }];
    }),
  );
}
