import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inject } from "vitest";
import { tinyModelDir } from "../../gpu-backend/model/testing/tiny-model";
import { freePort, startStack, StackStartError, type Stack, type StackOptions } from "../../scripts/stack";

/** A fresh temp dir and the tiny random model (the run's shared copy, or `dir/tiny`: `tinyModelDir`). */
export interface TestModelDir {
  dir: string;
  /** Read only: in a vitest run it is the run's one copy, which other files use too. */
  modelDir: string;
  /** Removes the temp dir. */
  remove(): void;
}

/**
 * Creates a temp dir named `agent-edge-<name>-...` and gives the tiny random model: the one the run
 * materialized once (test/support/tiny-model-setup.ts), else one materialized in the temp dir.
 *
 * @example
 * const tmp = await makeTestModelDir("stack");
 * await startStack({ modelDir: tmp.modelDir, ... });
 * tmp.remove();
 */
export async function makeTestModelDir(name: string): Promise<TestModelDir> {
  const dir = mkdtempSync(join(tmpdir(), `agent-edge-${name}-`));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    return { dir, modelDir: await tinyModelDir(dir), remove };
  } catch (e) {
    remove();
    throw e;
  }
}

/** What a test may set; ports, model and state dir come from the fixture. */
export type TestStackOptions = Omit<StackOptions, "backendPorts" | "backendPort" | "edgePort" | "inspectorPort" | "persistTo" | "modelDir"> & {
  /** Names the temp dir (`agent-edge-<name>-...`). */
  name: string;
  /** Backends to start (default 1). */
  backends?: number;
};

/** A started local stack, its temp dir and the ports it was given. */
export interface TestStack {
  stack: Stack;
  dir: string;
  modelDir: string;
  /** wrangler's devtools inspector port (listening only while `devtools` is on). */
  inspectorPort: number;
  /** Stops every process of the stack, then removes the temp dir. */
  stop(): Promise<void>;
}

/**
 * The local stack as the end-to-end tests run it: a temp dir, the tiny random model, `backends`
 * backend processes (heartbeating into the pool) and `wrangler dev` with its Durable Object state
 * in the temp dir, all on free ports (all different). Output lines go nowhere unless `onLine` is
 * given. If anything fails to start, what did start is stopped and the temp dir removed.
 *
 * @example
 * let fixture: TestStack | undefined;
 * beforeAll(async () => { fixture = await startTestStack({ name: "e2e", kvMemory: "64MiB", threads: 1 }); });
 * afterAll(() => fixture?.stop());
 */
export async function startTestStack(options: TestStackOptions): Promise<TestStack> {
  const { name, backends = 1, ...stackOptions } = options;
  const tmp = await makeTestModelDir(name);
  try {
    const start = async () => {
      const [edgePort, inspectorPort, ...backendPorts] = await freePorts(2 + backends);
      const stack = await startStack({
        onLine: () => {},
        ...stackOptions,
        modelDir: tmp.modelDir,
        backendPorts,
        edgePort: edgePort!,
        inspectorPort: inspectorPort!,
        persistTo: join(tmp.dir, "wrangler-state"),
      });
      return { stack, inspectorPort: inspectorPort! };
    };
    const { stack, inspectorPort } = await withPortRetries(start);
    return {
      stack,
      dir: tmp.dir,
      modelDir: tmp.modelDir,
      inspectorPort,
      async stop() {
        try {
          await stack.stop();
        } finally {
          tmp.remove();
        }
      },
    };
  } catch (e) {
    tmp.remove(); // startStack stops the parts it started before it throws
    throw e;
  }
}

/**
 * `start`, again on fresh ports (up to 3 tries) when a process of the stack found a port taken:
 * between `freePort` closing a port and a child binding it, another test file's processes (3 run
 * at once) may take it, or wrangler's own choice of an internal port may meet one of theirs (seen
 * once in CI: workerd "Address already in use" on a port none of ours). Other failures throw at once.
 */
async function withPortRetries<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (e) {
      const taken = e instanceof StackStartError && (e.reason === "port_in_use" || /address already in use/i.test(e.message));
      if (!taken || attempt === 3) throw e;
    }
  }
}

/** `n` free ports (`freePort` never hands this process the same port twice). */
async function freePorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  for (let i = 0; i < n; i++) ports.push(await freePort());
  return ports;
}

/** What a file that only reads gets of a stack: the edge's URL and what its checks need. */
export interface SharedStack {
  edgeUrl: string;
  backendUrls: string[];
  secret: string;
  /** wrangler's devtools inspector port (listening: the shared stack keeps devtools on). */
  inspectorPort: number;
  /** Stops the stack if this file started it; a no-op on the run's shared stack. */
  stop(): Promise<void>;
}

/** The options of the run's shared stack, and of a file's own when it runs without one. */
export const SHARED_STACK_OPTIONS: TestStackOptions = { name: "shared", kvMemory: "64MiB", threads: 1 };

declare module "vitest" {
  export interface ProvidedContext {
    /** The `e2e` project's stack, started once for its files (test/support/shared-stack-setup.ts). */
    sharedStack?: Omit<SharedStack, "stop">;
  }
}

/**
 * The stack for an end-to-end file that only reads: one that creates trajectories with ids of its
 * own, checks no global count and kills or restarts nothing. In the `e2e` project (vitest.config.ts)
 * it is the run's one stack, started by that project's global setup; anywhere else (a file moved
 * out of that project, a script) the file starts its own with the same options.
 *
 * @example
 * let stack: SharedStack | undefined;
 * beforeAll(async () => { stack = await sharedTestStack(); });
 * afterAll(() => stack?.stop());
 */
export async function sharedTestStack(): Promise<SharedStack> {
  const shared = providedStack();
  if (shared) return { ...shared, stop: async () => {} };
  const own = await startTestStack(SHARED_STACK_OPTIONS);
  return { edgeUrl: own.stack.edgeUrl, backendUrls: own.stack.backendUrls, secret: own.stack.secret, inspectorPort: own.inspectorPort, stop: () => own.stop() };
}

function providedStack(): Omit<SharedStack, "stop"> | undefined {
  try {
    return inject("sharedStack");
  } catch {
    return undefined; // not in a test file
  }
}
