import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { materializeTinyModel } from "../../gpu-backend/model/checkpoint/demo-model";
import type {} from "../../gpu-backend/model/testing/tiny-model";

/**
 * Global setup of the `node` project: materializes the tiny random model once per run into a temp
 * folder and provides its path as `tinyModelDir`; `tinyModelDir()` (gpu-backend/server/testing/
 * tiny-model.ts) hands it to the tests that only read the model, instead of each file writing its
 * own 30 MB copy. Deletes the folder at teardown.
 */
export default async function setup(project: TestProject): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-run-model-"));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    project.provide("tinyModelDir", await materializeTinyModel(join(dir, "tiny")));
  } catch (e) {
    remove();
    throw e;
  }
  return remove;
}
