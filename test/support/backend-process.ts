import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { freePort } from "../../scripts/free-port";

export { freePort };

const repoRoot = fileURLToPath(new URL("../..", import.meta.url).href);

export interface BackendProcess {
  url: string;
  secret: string;
  child: ChildProcess;
  output: () => string;
  stop(): Promise<void>;
}

/**
 * Starts a real backend process (`tsx gpu-backend/server/main.ts`) and waits until /healthz answers.
 *
 * @example
 * const backend = await startBackend(["--model", dir, "--kv-memory", "64MiB"]);
 */
export async function startBackend(args: string[], timeoutMs = 240_000): Promise<BackendProcess> {
  const port = await freePort();
  const secret = "test-secret";
  const child = spawn(process.execPath, ["--import", "tsx", "gpu-backend/server/main.ts", "--port", String(port), "--secret", secret, ...args], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env },
  });
  let log = "";
  child.stdout!.on("data", (d) => (log += d));
  child.stderr!.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`backend exited with ${child.exitCode}:\n${log}`);
    try {
      const r = await fetch(`${url}/healthz`);
      if (r.ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`backend did not become healthy in ${timeoutMs} ms:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    secret,
    child,
    output: () => log,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 5000).unref();
      }),
  };
}
