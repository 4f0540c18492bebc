import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DEV_SECRET } from "../protocol/messages";
import { isPortFree } from "./free-port";
import { ManagedProcess, type ProcessExit } from "./managed-process";

export { freePort, isPortFree } from "./free-port";
export { isProcessAlive, processGroupPids, type ProcessExit } from "./managed-process";

/** The repository root (where package.json and wrangler.toml are). */
export const repoRoot = fileURLToPath(new URL("..", import.meta.url).href);

/** The secret used when neither AGENT_EDGE_SECRET nor .dev.vars gives one. */

export interface StackOptions {
  /** How many local backends (default 1), on consecutive ports from `backendPort`. */
  backends?: number;
  /** Port of the first backend (default 8080). */
  backendPort?: number;
  /** Exact backend ports; overrides `backends` and `backendPort` (tests pass free ports). */
  backendPorts?: number[];
  /** Port of the edge, `wrangler dev --port` (default 8787). */
  edgePort?: number;
  /** wrangler's devtools inspector port (default: wrangler's own choice, 9229 when free). */
  inspectorPort?: number;
  /**
   * wrangler's devtools inspector (default true). With it, wrangler dev reports every subrequest
   * and every streamed chunk of the Worker to its Node process (the devtools Network domain, also
   * appended to its debug log file): about 40 ms of CPU per streamed turn here, a cost of the
   * local tool that a deployed Worker does not have. Benchmarks turn it off.
   */
  devtools?: boolean;
  /** Where wrangler keeps local Durable Object state (default `.wrangler/state`). */
  persistTo?: string;
  /** Shared edge-backend secret (default: `resolveSecret().secret`). */
  secret?: string;
  /** Backend `--model DIR` (default: the embedded demo model). */
  modelDir?: string;
  /** Backend `--kv-memory`, e.g. "512MiB" (default: the backend's, 1GiB). */
  kvMemory?: string;
  /** Backend `--no-prefix-cache`. */
  noPrefixCache?: boolean;
  /** Backend `--weights` (default: the backend's, per device). */
  weights?: string;
  /** Backend `--threads` (default: the backend's, all cores). */
  threads?: number;
  /** More backend flags, appended as given. */
  backendArgs?: string[];
  /** Backends heartbeat into the edge's pool (`--register`); default true. */
  register?: boolean;
  /**
   * Start no backends: wire the edge to these already running ones (e.g. another stack's, started
   * with `startEdge: false`, which heartbeat to this `edgePort`). Benchmarks restart only the edge.
   */
  backendUrls?: string[];
  /** Start the edge (`wrangler dev`); default true. False starts only the backends. */
  startEdge?: boolean;
  /** More Worker vars, each passed as `--var NAME:VALUE` (`BACKEND_URLS: ""`: no static backends, only registered ones). */
  vars?: Record<string, string>;
  /** How long every part may take to answer GET /healthz (default 300 000 ms). */
  readyTimeoutMs?: number;
  /** Receives every child output line, prefixed (`[backend-8080] ...`), and the stack's own. */
  onLine?: (line: string) => void;
  /** Aborting it during start-up stops what was started and rejects with a StackStartError. */
  signal?: AbortSignal;
}

/** One child of the stack: a backend (`backend-<port>`) or the edge (`wrangler`). */
export interface StackPart {
  name: string;
  kind: "backend" | "edge";
  /** Base URL; GET `${url}/healthz` answers 200 once it is up. */
  url: string;
  process: ManagedProcess;
}

export interface Stack {
  /** The edge Worker, e.g. http://127.0.0.1:8787. */
  edgeUrl: string;
  /** The backends' base URLs, as passed to the Worker in BACKEND_URLS. */
  backendUrls: string[];
  secret: string;
  /** Backends first, then the edge. */
  parts: StackPart[];
  /** Seconds from `startStack` until every part answered /healthz. */
  readySeconds: number;
  /** Resolves when a child exits on its own (not through `stop()`); never resolves otherwise. */
  exited: Promise<{ part: StackPart; exit: ProcessExit }>;
  /** Live pids of every part's process group (wrangler's workerd children included). */
  pids(): number[];
  /** Stops every part's process group: SIGINT to backends (SIGTERM would drain them), SIGTERM to the edge, SIGKILL after 5 s. Idempotent. */
  stop(): Promise<void>;
}

/** Why `startStack` failed; `part` names the child at fault, when one is. */
export class StackStartError extends Error {
  override readonly name = "StackStartError";
  constructor(
    message: string,
    readonly reason: "port_in_use" | "exited" | "timeout" | "aborted" | "missing_dependency",
    readonly part?: string,
    readonly tail: string[] = [],
  ) {
    super(
      tail.length > 0
        ? `${message}\nLast output of ${part} (stack frames left out):\n${summarizeTail(tail)}`
        : part !== undefined
          ? `${message} (${part} printed nothing)`
          : message,
    );
  }
}

/**
 * Starts the local stack: N backend processes (`gpu-backend/server/main.ts`) and `wrangler dev`
 * wired to them (BACKEND_URLS and AGENT_EDGE_SECRET as `--var`s), each in its own process group
 * with its output prefixed, and resolves once every part answers GET /healthz. On failure
 * (a child exits, the timeout passes, `signal` aborts) it stops everything it started and
 * rejects with a StackStartError that names the part and quotes its last output lines.
 *
 * @example
 * const stack = await startStack({ modelDir, backendPorts: [await freePort()], edgePort: await freePort() });
 * await fetch(`${stack.edgeUrl}/healthz`);
 * await stack.stop();
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const t0 = performance.now();
  const onLine = options.onLine ?? ((line: string) => console.log(line));
  const host = "127.0.0.1";
  const external = options.backendUrls;
  const backendPorts = external ? [] : (options.backendPorts ?? consecutive(options.backendPort ?? 8080, options.backends ?? 1));
  const edgePort = options.edgePort ?? 8787;
  const secret = options.secret ?? resolveSecret().secret;
  const timeoutMs = options.readyTimeoutMs ?? 300_000;
  if (backendPorts.length === 0 && (external ?? []).length === 0) throw new Error("startStack needs at least one backend");
  const startEdge = options.startEdge !== false;
  if (options.signal?.aborted) throw new StackStartError("start-up interrupted", "aborted");

  const wranglerBin = join(repoRoot, "node_modules", "wrangler", "bin", "wrangler.js");
  if (!existsSync(wranglerBin)) throw new StackStartError(`wrangler is not installed (${wranglerBin} is missing): run npm ci`, "missing_dependency");
  const devtools = options.devtools !== false;
  const allPorts = [...backendPorts, ...(startEdge ? [edgePort] : []), ...(startEdge && options.inspectorPort ? [options.inspectorPort] : [])];
  if (new Set(allPorts).size !== allPorts.length) throw new Error(`ports must differ: ${allPorts.join(", ")}`);
  for (const port of allPorts) {
    if (!(await isPortFree(port, host))) {
      const what = port === edgePort ? "the edge" : port === options.inspectorPort ? "the inspector" : `backend-${port}`;
      throw new StackStartError(`port ${port} (${what}) is already in use on ${host}: is another stack running? (see --help for other ports)`, "port_in_use");
    }
  }

  const parts: StackPart[] = [];
  let stopping: Promise<void> | undefined;
  const killAll = () => parts.forEach((p) => p.process.killNow());
  process.on("exit", killAll);
  const stop = () =>
    (stopping ??= (async () => {
      // Backends take SIGINT (stop now); SIGTERM would drain them first.
      await Promise.all(parts.map((p) => (p.kind === "backend" ? p.process.stop(5000, "SIGINT") : p.process.stop())));
      process.off("exit", killAll);
    })());

  try {
    for (const port of backendPorts) {
      const name = `backend-${port}`;
      const args = ["--import", "tsx", "gpu-backend/server/main.ts", "--port", String(port), "--host", host, "--id", name, "--secret", secret];
      if (options.modelDir !== undefined) args.push("--model", options.modelDir);
      if (options.kvMemory !== undefined) args.push("--kv-memory", options.kvMemory);
      if (options.noPrefixCache) args.push("--no-prefix-cache");
      if (options.threads !== undefined) args.push("--threads", String(options.threads));
      if (options.weights !== undefined) args.push("--weights", options.weights);
      // Heartbeat into the edge's pool (load for routing, up/down); retried until the edge is up.
      if (options.register !== false) args.push("--register", `http://${host}:${edgePort}`);
      args.push(...(options.backendArgs ?? []));
      const proc = new ManagedProcess({
        name,
        command: process.execPath,
        args,
        cwd: repoRoot,
        env: { ...process.env },
        onLine,
        // The backend prefixes its own lines with "[backend] "; ours says which one.
        mapLine: (line) => line.replace(/^\[backend\] /, ""),
      });
      parts.push({ name, kind: "backend", url: `http://${host}:${port}`, process: proc });
    }

    const backendUrls = external ?? parts.map((p) => p.url);
    if (startEdge) {
      const vars: Record<string, string> = { BACKEND_URLS: backendUrls.join(","), ...options.vars, AGENT_EDGE_SECRET: secret };
      const wranglerArgs = [wranglerBin, "dev", "--port", String(edgePort), "--ip", host, "--show-interactive-dev-session=false"];
      if (options.inspectorPort !== undefined) wranglerArgs.push("--inspector-port", String(options.inspectorPort));
      if (options.persistTo !== undefined) wranglerArgs.push("--persist-to", options.persistTo);
      // wrangler splits each --var at its first ":", so URLs with ports pass through intact.
      for (const [key, value] of Object.entries(vars)) wranglerArgs.push("--var", `${key}:${value}`);
      const edge = new ManagedProcess({
        name: "wrangler",
        command: process.execPath,
        args: wranglerArgs,
        cwd: repoRoot,
        env: wranglerEnv({ devtools }),
        onLine,
      });
      parts.push({ name: "wrangler", kind: "edge", url: `http://${host}:${edgePort}`, process: edge });
    }

    await waitUntilHealthy(parts, { deadline: Date.now() + timeoutMs, timeoutMs, signal: options.signal, onLine, t0 });

    let exitedResolve!: (v: { part: StackPart; exit: ProcessExit }) => void;
    const exited = new Promise<{ part: StackPart; exit: ProcessExit }>((resolve) => (exitedResolve = resolve));
    for (const part of parts) {
      void part.process.exited.then((exit) => {
        if (stopping === undefined) exitedResolve({ part, exit });
      });
    }
    return {
      edgeUrl: `http://${host}:${edgePort}`,
      backendUrls,
      secret,
      parts,
      readySeconds: (performance.now() - t0) / 1000,
      exited,
      pids: () => parts.flatMap((p) => p.process.groupPids()),
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/**
 * The shared edge-backend secret: env AGENT_EDGE_SECRET, else AGENT_EDGE_SECRET from `.dev.vars`
 * in the repository root (the file wrangler itself reads), else "dev-secret".
 *
 * @example
 * const { secret, source } = resolveSecret(); // { secret: "dev-secret", source: "default" }
 */
export function resolveSecret(params: { env?: NodeJS.ProcessEnv; root?: string } = {}): { secret: string; source: "env" | ".dev.vars" | "default" } {
  const env = params.env ?? process.env;
  if (env.AGENT_EDGE_SECRET) return { secret: env.AGENT_EDGE_SECRET, source: "env" };
  const devVars = join(params.root ?? repoRoot, ".dev.vars");
  if (existsSync(devVars)) {
    const value = parseDotenvValue(readFileSync(devVars, "utf8"), "AGENT_EDGE_SECRET");
    if (value) return { secret: value, source: ".dev.vars" };
  }
  return { secret: DEV_SECRET, source: "default" };
}

// ---------------------------------------------------------------------------------------------

/**
 * wrangler must never wait on a prompt or on the network (only loopback exists here): no
 * telemetry or error reports, no download of the `Request.cf` placeholder, CI mode (prompts take
 * their defaults). Its update check has its own short timeout.
 *
 * `wrangler dev` has no flag that turns its devtools inspector off. It leaves it off inside a VS
 * Code JavaScript debug terminal, which it recognizes by VSCODE_INSPECTOR_OPTIONS being set;
 * `devtools: false` sets it. (wrangler 4.x and its miniflare use the variable for nothing else,
 * unless NODE_OPTIONS also requires VS Code's debugger bootloader.)
 */
function wranglerEnv(params: { devtools: boolean }): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    WRANGLER_SEND_METRICS: "false",
    WRANGLER_SEND_ERROR_REPORTS: "false",
    CLOUDFLARE_CF_FETCH_ENABLED: "false",
    CI: "true",
  };
  if (!params.devtools) env.VSCODE_INSPECTOR_OPTIONS = "{}";
  return env;
}

async function waitUntilHealthy(
  parts: StackPart[],
  params: { deadline: number; timeoutMs: number; signal: AbortSignal | undefined; onLine: (line: string) => void; t0: number },
): Promise<void> {
  const pending = new Set(parts);
  params.onLine(`[start] waiting for ${parts.map((p) => p.name).join(", ")} to answer GET /healthz`);
  for (;;) {
    await Promise.all(
      [...pending].map(async (part) => {
        if ((await answersHealthz(part.url)) && !params.signal?.aborted) {
          pending.delete(part);
          params.onLine(`[start] ${part.name} is up at ${part.url} (${((performance.now() - params.t0) / 1000).toFixed(1)} s)`);
        }
      }),
    );
    if (pending.size === 0) return;
    for (const part of pending) {
      const exit = part.process.exit;
      if (exit) {
        throw new StackStartError(`${part.name} ${describeExit(exit)} before answering GET ${part.url}/healthz`, "exited", part.name, part.process.tail());
      }
    }
    if (params.signal?.aborted) throw new StackStartError("start-up interrupted", "aborted");
    if (Date.now() > params.deadline) {
      const part = [...pending][0]!;
      const names = [...pending].map((p) => p.name).join(", ");
      throw new StackStartError(`${names} did not answer GET /healthz within ${Math.round(params.timeoutMs / 1000)} s`, "timeout", part.name, part.process.tail());
    }
    await sleep(250, params.signal);
  }
}

async function answersHealthz(url: string): Promise<boolean> {
  try {
    const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}

function describeExit(exit: ProcessExit): string {
  if (exit.error) return `could not be started (${exit.error.message})`;
  if (exit.signal) return `was killed by ${exit.signal}`;
  return `exited with code ${exit.code}`;
}

function consecutive(first: number, count: number): number[] {
  if (!Number.isInteger(count) || count < 1) throw new Error(`backends must be a positive integer, got ${count}`);
  return Array.from({ length: count }, (_, i) => first + i);
}

/** The value of `key` in dotenv text (`KEY=value`, optionally quoted, `export` allowed). */
function parseDotenvValue(text: string, key: string): string | undefined {
  for (const raw of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(raw);
    if (!m || m[1] !== key) continue;
    const value = m[2]!.trim();
    const quoted = /^(["'`])(.*)\1$/.exec(value);
    return quoted ? quoted[2]! : value.replace(/\s+#.*$/, "");
  }
  return undefined;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** The last 20 lines that say something: no blank lines, no `    at ...` stack frames. */
function summarizeTail(tail: string[]): string {
  const lines = tail.filter((l) => l.trim() !== "" && !/^\s+at\s/.test(l) && !/^\s+\.\.\. \d+ lines matching/.test(l));
  return lines
    .slice(-20)
    .map((l) => `  | ${l}`)
    .join("\n");
}
