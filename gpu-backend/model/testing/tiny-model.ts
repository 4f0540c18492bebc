import { join } from "node:path";
import { inject } from "vitest";
import { materializeTinyModel } from "../checkpoint/demo-model";

declare module "vitest" {
  export interface ProvidedContext {
    /** The run's tiny random model, materialized once (test/support/tiny-model-setup.ts). */
    tinyModelDir?: string;
  }
}

/**
 * The tiny random model's folder for a test that only reads it (loads it, or starts backends on
 * it: a backend's int4 cache beside it is written to a temp name and renamed, so backends may share
 * it): the one the project's global setup materialized for the whole run where there is one
 * (the `node` project), else the model materialized at `<dir>/tiny` (other projects, a global
 * setup, a script). A test that writes into the model folder materializes its own.
 *
 * @example
 * const modelDir = await tinyModelDir(mkdtempSync(join(tmpdir(), "agent-edge-x-")));
 */
export async function tinyModelDir(dir: string): Promise<string> {
  return providedTinyModel() ?? materializeTinyModel(join(dir, "tiny"));
}

/** The provided path, or undefined where none is provided or where `inject` cannot run (outside a test file: a global setup, a script). */
function providedTinyModel(): string | undefined {
  try {
    return inject("tinyModelDir");
  } catch {
    return undefined;
  }
}
