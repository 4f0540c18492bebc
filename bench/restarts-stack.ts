import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startStack, type Stack } from "../scripts/stack";
import { waitForPool } from "./routing-stack-meters";

/**
 * One backend and `wrangler dev` as separate stacks (as bench/restart-bench.ts runs them), so that
 * either can be stopped and started again on its own port: the edge with the same `--persist-to`
 * folder (its Durable Objects' SQLite storage outlives the process), the backend as a new process
 * (its turn states and KV cache gone). The backend heartbeats into the edge's pool by its port.
 */
export interface RestartStack {
  edgeUrl: string;
  backendUrl: string;
  secret: string;
  /** Stops the edge's process group: SIGTERM (wrangler shuts down), or SIGKILL (a crash). */
  stopEdge(signal: "SIGTERM" | "SIGKILL"): Promise<void>;
  /** Starts `wrangler dev` again on the same port and state folder; resolves once the pool has the backend up. */
  startEdge(): Promise<void>;
  /** SIGKILLs the backend's process group and waits until it is gone. */
  killBackend(): Promise<void>;
  /** Starts a new backend process on the same port; resolves once the edge's pool has it up. */
  startBackend(): Promise<void>;
  /** Stops whatever runs and removes the state folder. */
  stop(): Promise<void>;
}

export async function startRestartStack(o: { name: string; modelDir?: string; kvMemory?: string; threads?: number; onLine: (line: string) => void }): Promise<RestartStack> {
  const dir = mkdtempSync(join(tmpdir(), `agent-edge-${o.name}-`));
  const edgePort = await freePort();
  const backendPort = await freePort();
  const inspectorPort = await freePort();
  const secret = `${o.name}-${Date.now()}`;
  const persistTo = join(dir, "edge");
  const bootBackend = () =>
    startStack({
      ...(o.modelDir ? { modelDir: o.modelDir } : {}),
      backendPorts: [backendPort],
      edgePort,
      secret,
      kvMemory: o.kvMemory ?? "256MiB",
      threads: o.threads ?? 1,
      startEdge: false,
      onLine: o.onLine,
    });
  let backend: Stack | undefined;
  let edge: Stack | undefined;
  const bootEdge = async () => {
    edge = await startStack({ backendUrls: backend!.backendUrls, secret, edgePort, inspectorPort, devtools: false, persistTo, onLine: o.onLine });
    await waitForPool(edge, 1, 60_000);
  };
  const stopAll = async () => {
    await edge?.stop();
    await backend?.stop();
    edge = backend = undefined;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    backend = await bootBackend();
    await bootEdge();
  } catch (e) {
    await stopAll();
    throw e;
  }
  return {
    edgeUrl: edge!.edgeUrl,
    backendUrl: backend.backendUrls[0]!,
    secret,
    async stopEdge(signal) {
      const e = edge;
      if (!e) return;
      edge = undefined;
      if (signal === "SIGKILL") e.parts[0]!.process.signalGroup("SIGKILL");
      await e.stop();
    },
    startEdge: bootEdge,
    async killBackend() {
      const b = backend;
      if (!b) return;
      backend = undefined;
      b.parts[0]!.process.signalGroup("SIGKILL");
      await b.stop();
    },
    async startBackend() {
      backend = await bootBackend();
      if (edge) await waitForPool(edge, 1, 60_000);
    },
    stop: stopAll,
  };
}
