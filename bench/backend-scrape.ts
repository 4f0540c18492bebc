import { readFileSync } from "node:fs";
import { SECRET_HEADER } from "../protocol/messages";
import type { Stack } from "../scripts/stack";
import { setTimeout as sleep } from "node:timers/promises";

/** One backend's /metrics, read: the value of an unlabelled series by name (0 when absent). */
export type MetricReader = (name: string) => number;

/**
 * Every backend's /metrics (prom-client text), in stack order.
 *
 * @example const [first] = await scrapeBackends(stack); first("agent_edge_queued_tokens");
 */
export async function scrapeBackends(stack: Stack): Promise<MetricReader[]> {
  return Promise.all(
    stack.parts
      .filter((p) => p.kind === "backend")
      .map(async (p) => {
        const text = await (await fetch(`${p.url}/metrics`, { headers: { [SECRET_HEADER]: stack.secret } })).text();
        return (name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, "m").exec(text)?.[1] ?? 0);
      }),
  );
}

/** Waits until no backend has a sequence running or waiting (at most `timeoutMs`); answers the ms it took. */
export async function waitIdle(stack: Stack, timeoutMs = 60_000): Promise<number> {
  const start = performance.now();
  for (;;) {
    const all = await scrapeBackends(stack);
    if (all.every((m) => m("agent_edge_running_sequences") + m("agent_edge_waiting_sequences") === 0)) return performance.now() - start;
    if (performance.now() - start > timeoutMs) throw new Error(`the backends did not go idle within ${timeoutMs / 1000} s`);
    await sleep(100);
  }
}

/** Resident memory (VmRSS) of the processes `pids` whose name (/proc/PID/comm) passes `which`, in bytes; gone processes count 0. */
export function residentBytes(pids: readonly number[], which: (comm: string) => boolean = () => true): number {
  let total = 0;
  for (const pid of pids) {
    try {
      if (!which(readFileSync(`/proc/${pid}/comm`, "utf8").trim())) continue;
      const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      total += kb ? Number(kb[1]) * 1024 : 0;
    } catch {
      // exited between listing and reading
    }
  }
  return total;
}
