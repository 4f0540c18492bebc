import { setTimeout as sleep } from "node:timers/promises";
import { SECRET_HEADER } from "../../protocol/messages";
import { round } from "./report";

/**
 * The edge pool's view of the backends (GET /v1/pool: registered by heartbeat, up, load), as the
 * benchmarks wait on it and sample it.
 */

/** What the pool calls need of a stack: the edge's URL and the shared secret. */
export interface EdgeAccess {
  edgeUrl: string;
  secret: string;
}

/** Waits until `n` backends have registered with the edge's pool by heartbeat and are up. */
export async function waitForPool(edge: EdgeAccess, n: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const up = (await poolView(edge).catch(() => [])).filter((b) => b.source === "registered" && b.up).length;
    if (up >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${up} of ${n} backends up in the pool within ${timeoutMs / 1000} s`);
    await sleep(250);
  }
}

interface PoolBackend {
  id: string;
  source: string;
  up: boolean;
  running: number;
  waiting: number;
}

async function poolView(edge: EdgeAccess): Promise<PoolBackend[]> {
  const res = await fetch(`${edge.edgeUrl}/v1/pool`, { headers: { [SECRET_HEADER]: edge.secret } });
  if (!res.ok) throw new Error(`GET /v1/pool answered ${res.status}`);
  return ((await res.json()) as { backends: PoolBackend[] }).backends;
}

/** Samples the pool's view every second: mean load (running + waiting, from heartbeats) and samples showing each backend down. */
export function samplePool(edge: EdgeAccess): { stop: () => Promise<{ load: Record<string, number>; down: Record<string, number> }> } {
  const sums = new Map<string, number>();
  const down = new Map<string, number>();
  let samples = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const view = await poolView(edge).catch(() => undefined);
      if (view) {
        samples++;
        for (const b of view) {
          if (b.source !== "registered") continue;
          sums.set(b.id, (sums.get(b.id) ?? 0) + b.running + b.waiting);
          down.set(b.id, (down.get(b.id) ?? 0) + (b.up ? 0 : 1));
        }
      }
      await sleep(1000);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return {
        load: Object.fromEntries([...sums].sort().map(([id, s]) => [id, round(s / Math.max(1, samples), 2)])),
        down: Object.fromEntries([...down].sort().filter(([, n]) => n > 0)),
      };
    },
  };
}
