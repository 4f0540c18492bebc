import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startStack, type Stack, type StackOptions } from "../../scripts/stack";
import { waitForPool } from "./pool";
import { note } from "./progress";

/** What the backends are started with (scripts/stack.ts's options of the same names). */
export type BackendOptions = Pick<StackOptions, "kvMemory" | "threads" | "weights" | "backendArgs">;

/** What `wrangler dev` is started with: Worker vars, its devtools inspector (default off, as deployed). */
export interface EdgeOptions {
  vars?: Record<string, string>;
  devtools?: boolean;
  /** Its Durable Objects' state folder, under the stack's own (default "edge"): a new name starts empty. */
  state?: string;
}

export interface BenchStackOptions {
  /** Names the log file (`<outDir>/<name>-stack.log`) and the temp state folder. */
  name: string;
  backends: number;
  /** Folder of the log file; without it the lines go nowhere (BENCH_VERBOSE=1 prints them). */
  outDir?: string;
  /** Backend `--model` (default: the embedded demo model). */
  model?: string;
  backend?: BackendOptions;
  /** Start `wrangler dev` too (default); false: only the backends, `startEdge` later (e.g. once per policy). */
  edge?: EdgeOptions | false;
  /** Hears every line (after the log file). */
  onLine?: (line: string) => void;
}

/**
 * The local stack every end-to-end benchmark runs on: N backends (one process each, on free
 * ports, so each can be stopped and started again on its own port) and `wrangler dev` wired to
 * them, which can be stopped and started on its own too (same port; same state folder, so its
 * Durable Objects' storage outlives it, or a fresh one). Built on scripts/stack.ts's `startStack`.
 */
export interface BenchStack {
  secret: string;
  backendUrls: string[];
  /** The edge's URL (its port is fixed, the edge need not be running). */
  edgeUrl: string;
  inspectorPort: number;
  logPath: string | undefined;
  /** The backends' stacks, in order (each one backend: `parts[0]`). */
  backends: Stack[];
  /** The running edge's stack, if one runs. */
  edge: Stack | undefined;
  /** Appends to the log (and BENCH_VERBOSE prints). */
  onLine: (line: string) => void;
  /** Live pids of the backends' process groups. */
  backendPids(): number[];
  /** Starts `wrangler dev`; resolves once every backend is up in its pool. */
  startEdge(o?: EdgeOptions): Promise<Stack>;
  /** Stops the edge's process group: SIGTERM (wrangler shuts down) or SIGKILL (a crash). */
  stopEdge(signal?: "SIGTERM" | "SIGKILL"): Promise<void>;
  /** SIGTERM: the backend drains and exits (waited for, at most `exitWithinMs`); SIGKILL: a crash. */
  stopBackend(i: number, signal: "SIGTERM" | "SIGKILL", exitWithinMs?: number): Promise<void>;
  /** Starts backend `i` again on its port; resolves once the edge's pool (if an edge runs) has every backend up. */
  startBackend(i: number): Promise<void>;
  /** Stops everything and removes the state folder. */
  close(): Promise<void>;
}

/**
 * @example
 * const s = await startBenchStack({ name: "soak", backends: 2, outDir, edge: { vars } });
 * try { await fetch(`${s.edgeUrl}/v1/models`); } finally { await s.close(); }
 */
export async function startBenchStack(o: BenchStackOptions): Promise<BenchStack> {
  let logPath: string | undefined;
  if (o.outDir) {
    mkdirSync(o.outDir, { recursive: true });
    logPath = join(o.outDir, `${o.name}-stack.log`);
    writeFileSync(logPath, "");
  }
  const onLine = (line: string) => {
    if (logPath) appendFileSync(logPath, `${new Date().toISOString()} ${line}\n`);
    if (process.env.BENCH_VERBOSE) note(o.name, line);
    o.onLine?.(line);
  };
  const dir = mkdtempSync(join(tmpdir(), `agent-edge-${o.name}-`));
  const secret = `${o.name}-bench-${Date.now()}`;
  const edgePort = await freePort();
  const inspectorPort = await freePort();
  const ports: number[] = [];
  for (let i = 0; i < o.backends; i++) ports.push(await freePort());
  const backendUrls = ports.map((p) => `http://127.0.0.1:${p}`);
  const bootBackend = (port: number) =>
    startStack({ ...(o.model ? { modelDir: o.model } : {}), ...o.backend, backendPorts: [port], edgePort, secret, startEdge: false, onLine });
  const backends: Stack[] = [];
  let edge: Stack | undefined;
  const s: BenchStack = {
    secret,
    backendUrls,
    edgeUrl: `http://127.0.0.1:${edgePort}`,
    inspectorPort,
    logPath,
    backends,
    get edge() {
      return edge;
    },
    onLine,
    backendPids: () => backends.flatMap((b) => b.pids()),
    async startEdge(e = {}) {
      edge = await startStack({ backendUrls, secret, edgePort, inspectorPort, devtools: e.devtools ?? false, persistTo: join(dir, e.state ?? "edge"), ...(e.vars ? { vars: e.vars } : {}), onLine });
      await waitForPool(edge, ports.length, 60_000);
      return edge;
    },
    async stopEdge(signal = "SIGTERM") {
      const e = edge;
      edge = undefined;
      if (signal === "SIGKILL") e?.parts[0]!.process.signalGroup("SIGKILL");
      await e?.stop();
    },
    async stopBackend(i, signal, exitWithinMs = 180_000) {
      const b = backends[i]!;
      const proc = b.parts[0]!.process;
      proc.signalGroup(signal);
      if (signal === "SIGTERM") {
        const exit = await Promise.race([proc.exited, new Promise((r) => setTimeout(r, exitWithinMs).unref())]);
        if (!exit) throw new Error(`${b.parts[0]!.name} did not exit within ${exitWithinMs / 1000} s of SIGTERM`);
      }
      await b.stop();
    },
    async startBackend(i) {
      backends[i] = await bootBackend(ports[i]!);
      if (edge) await waitForPool(edge, ports.length, 60_000);
    },
    async close() {
      await edge?.stop();
      await Promise.all(backends.map((b) => b.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    const started = await Promise.allSettled(ports.map(bootBackend));
    for (const r of started) if (r.status === "fulfilled") backends.push(r.value);
    const failed = started.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
    if (o.edge !== false) await s.startEdge(o.edge);
    return s;
  } catch (e) {
    await s.close();
    throw e;
  }
}
