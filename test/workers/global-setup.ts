import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { materializeTinyModel } from "../../gpu-backend/model/checkpoint/demo-model";
import { startBackend, type BackendProcess } from "../support/backend-process";

declare module "vitest" {
  export interface ProvidedContext {
    backendUrl: string;
    backendSecret: string;
  }
}

/**
 * Global setup of the "workers" project (runs in Node, before workerd starts): materializes the
 * tiny model into a temp folder, starts one real backend process on it, and provides its URL and
 * secret, which vitest.config.ts turns into the BACKEND_URLS / AGENT_EDGE_SECRET bindings.
 * Stops the backend and deletes the folder at teardown.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-workers-"));
  let backend: BackendProcess | undefined;
  try {
    const modelDir = await materializeTinyModel(join(dir, "tiny"));
    backend = await startBackend(["--model", modelDir, "--kv-memory", "32MiB", "--threads", "1"]);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  project.provide("backendUrl", backend.url);
  project.provide("backendSecret", backend.secret);
  return async () => {
    await backend?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
}
