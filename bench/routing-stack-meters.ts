import { readFileSync } from "node:fs";
import { SECRET_HEADER } from "../protocol/messages";
import type { Stack } from "../scripts/stack";
import { scrapeBackends } from "./backend-scrape";
import { round, type CpuBreakdown } from "./routing-report";

/**
 * What the routing bench reads from the running stack around a policy's run: CPU seconds (the
 * machine, the backends, the edge, this client), each backend's /metrics, and the edge pool's
 * view of the backends (registered, up, load).
 */

export interface BackendMeters {
  /** Process CPU seconds (onnxruntime threads included). */
  cpuS: number;
  /** Executor time, ms: tokens stepped / the step tokens-per-second gauge (both since start). */
  stepMs: number;
}

/** CPU seconds so far: the machine (/proc/stat), the backends' and the edge's process groups, this process. */
export function cpuSnapshot(backendStack: Stack, edgeStack: Stack): CpuBreakdown {
  const hz = 100; // USER_HZ
  const procS = (pids: number[]) =>
    pids.reduce((a, pid) => {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
        return a + (Number(fields[11]) + Number(fields[12])) / hz; // utime, stime
      } catch {
        return a;
      }
    }, 0);
  let machineBusyS = 0;
  let machineTotalS = 0;
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    machineTotalS = cpu.slice(0, 8).reduce((a, b) => a + b, 0) / hz;
    machineBusyS = machineTotalS - (cpu[3]! + cpu[4]!) / hz; // minus idle and iowait
  } catch {
    // not Linux
  }
  const usage = process.cpuUsage();
  return {
    machineBusyS,
    machineTotalS,
    backendsS: procS(backendStack.pids()),
    edgeS: procS(edgeStack.pids()),
    clientS: (usage.user + usage.system) / 1e6,
  };
}

/** Reads each backend's /metrics (prom-client text). */
export async function meters(stack: Stack): Promise<Record<string, BackendMeters>> {
  const out: Record<string, BackendMeters> = {};
  const readers = await scrapeBackends(stack);
  for (const [i, part] of stack.parts.filter((p) => p.kind === "backend").entries()) {
    const value = readers[i]!;
    const tokens = value("agent_edge_computed_prompt_tokens_total") + value("agent_edge_generated_tokens_total");
    const rate = value("agent_edge_step_tokens_per_second");
    out[part.name] = { cpuS: value("agent_edge_process_process_cpu_seconds_total"), stepMs: rate > 0 ? (tokens / rate) * 1000 : 0 };
  }
  return out;
}

/** Waits until every backend has registered with the edge's pool by heartbeat. */
export async function waitForPool(stack: Stack, n: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const view = await poolView(stack).catch(() => []);
    if (view.filter((b) => b.source === "registered" && b.up).length >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${view.filter((b) => b.source === "registered" && b.up).length} of ${n} backends up in the pool within ${timeoutMs / 1000} s`);
    await sleep(250);
  }
}

async function poolView(stack: Stack): Promise<{ id: string; source: string; up: boolean; running: number; waiting: number }[]> {
  const res = await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { [SECRET_HEADER]: stack.secret } });
  if (!res.ok) throw new Error(`GET /v1/pool answered ${res.status}`);
  return ((await res.json()) as { backends: { id: string; source: string; up: boolean; running: number; waiting: number }[] }).backends;
}

/** Samples the pool's view of load (running + waiting, from heartbeats) every second. */
export function samplePool(stack: Stack): { stop: () => Promise<{ load: Record<string, number>; down: Record<string, number> }> } {
  const sums = new Map<string, number>();
  const down = new Map<string, number>();
  let samples = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const view = await poolView(stack).catch(() => undefined);
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

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
