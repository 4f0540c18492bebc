import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { loadModel } from "../gpu-backend/engine/load-model";
import { modelCacheDir } from "../gpu-backend/model/checkpoint/demo-model";
import { exportGguf, type GgufFileType } from "../gpu-backend/model/gguf/gguf-export";
import { runLlamaCppSide } from "./llamacpp-side";
import { makeLlamaCppWorkloads } from "./llamacpp-workload";
import { note } from "./progress";

/**
 * `npx tsx bench/llamacpp-check.ts [--type Q4_0|Q8_0|F16|F32] [--full] [--threads N] [--model DIR|FAMILY]`
 *
 * The llama.cpp side alone: exports the model (default: the demo model) to GGUF at `--type`
 * (default Q4_0; cached next to the model cache as `gguf/<model>-<type>.gguf`, rewritten when the
 * weights are newer), builds the workloads from its codec and prints `runLlamaCppSide`'s result
 * (quick unless --full) as JSON on stdout; progress on stderr.
 */
const { values } = parseArgs({
  options: {
    type: { type: "string", default: "Q4_0" },
    full: { type: "boolean", default: false },
    threads: { type: "string" },
    model: { type: "string" },
  },
  strict: true,
});
const fileType = values.type as GgufFileType;
if (!["F32", "F16", "Q8_0", "Q4_0"].includes(fileType)) throw new Error(`--type must be F32, F16, Q8_0 or Q4_0, got ${JSON.stringify(values.type)}`);

const log = (line: string) => note("llamacpp", line);
const { checkpoint, codec } = await loadModel({ dir: values.model, log });
const dir = join(modelCacheDir(), "..", "gguf");
mkdirSync(dir, { recursive: true });
const ggufPath = join(dir, `${checkpoint.modelId}-${fileType}.gguf`);
const weightsTime = Math.max(...checkpoint.tensorNames.map((n) => statSync(checkpoint.tensorInfo(n).file).mtimeMs));
if (!existsSync(ggufPath) || statSync(ggufPath).mtimeMs < weightsTime) exportGguf(checkpoint, ggufPath, { fileType, onProgress: log });
else log(`using ${ggufPath}`);

const quick = !values.full;
const workloads = makeLlamaCppWorkloads({ codec, quick });
log(
  `workloads: decode ${workloads.decode.generate} after ${workloads.decode.prompt.length}, prefill ${workloads.prefill.prompt.length}, ` +
    `trajectory ${workloads.trajectory.prompts.length} turns (last prompt ${workloads.trajectory.prompts.at(-1)!.length}), ` +
    `concurrent ${workloads.concurrent.trajectories.length} x ${workloads.concurrent.trajectories[0]!.prompts.length} (shared prefix ${workloads.concurrent.sharedPrefixTokens})`,
);
const result = await runLlamaCppSide({ ggufPath, threads: values.threads ? Number(values.threads) : undefined, workloads, quick });
console.log(JSON.stringify({ model: checkpoint.modelId, fileType, quick, ...result }, null, 2));
