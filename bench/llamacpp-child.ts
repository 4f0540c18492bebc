import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { loadModel } from "../gpu-backend/engine/load-model";
import { parsePrecision } from "../gpu-backend/engine/weight-precision";
import { EXECUTOR_PROVIDERS, type ExecutorKind, type ExecutorProvider } from "../gpu-backend/model/executors/executor";
import { runLlamaCppSide } from "./llamacpp-side";
import { runOurSide } from "./llamacpp-ours";
import { makeLlamaCppWorkloads } from "./llamacpp-workload";
import { note } from "./kit/progress";

/**
 * One side of `npm run bench -- llamacpp` in a process of its own, so that each side's resident
 * memory is its own and neither engine's threads or buffers linger into the other's run:
 *
 *   npm run bench -- llamacpp-child --side ours --weights int4 [--executor cpu|device-pool|host-pool] [--provider P] [--quick] [--threads N] [--model DIR|FAMILY]
 *   npm run bench -- llamacpp-child --side llamacpp --gguf FILE [--gpu cuda|vulkan] [--quick] [--smoke] [--threads N] [--model DIR|FAMILY]
 *
 * Both build the same workloads from the model's codec (llamacpp-workload.ts, deterministic).
 * Progress on stderr; the last stdout line is the side's figures as one JSON object.
 */
export async function runLlamaCppChild(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      side: { type: "string" },
      weights: { type: "string", default: "fp32" },
      executor: { type: "string", default: "cpu" },
      gguf: { type: "string" },
      provider: { type: "string" },
      gpu: { type: "string" },
      quick: { type: "boolean", default: false },
      smoke: { type: "boolean", default: false },
      threads: { type: "string" },
      model: { type: "string" },
    },
    strict: true,
  });
  const threads = values.threads ? Number(values.threads) : undefined;
  const quick = values.quick!;
  const name = values.side === "ours" ? `ours ${values.weights} ${values.executor}${values.provider ? ` on ${values.provider}` : ""}` : `llama.cpp ${values.gpu ?? "cpu"}`;
  const log = (line: string) => note(name, line);
  const { codec } = await loadModel({ dir: values.model });
  const workloads = makeLlamaCppWorkloads({ codec, quick });
  if (values.side === "ours") {
    const weights = parsePrecision(values.weights!);
    const executor = values.executor as ExecutorKind;
    if (!(executor in EXECUTOR_PROVIDERS)) badValue("--executor", values.executor!);
    const provider = values.provider as ExecutorProvider | undefined;
    const result = await runOurSide({ modelDir: values.model, weights, executor, provider, threads, workloads, quick, smoke: values.smoke!, onProgress: log });
    console.log(JSON.stringify(result));
  } else if (values.side === "llamacpp") {
    if (!values.gguf) throw new Error("--side llamacpp needs --gguf FILE");
    if (values.gpu !== undefined && values.gpu !== "cuda" && values.gpu !== "vulkan") throw new Error(`--gpu must be cuda or vulkan, got ${JSON.stringify(values.gpu)}`);
    const gpu = (values.gpu as "cuda" | "vulkan" | undefined) ?? false;
    const result = await runLlamaCppSide({ ggufPath: values.gguf, gpu, threads, workloads, quick, smoke: values.smoke!, onProgress: log });
    console.log(JSON.stringify(result));
  } else {
    throw new Error(`--side must be ours or llamacpp, got ${JSON.stringify(values.side)}`);
  }
}

/** The bench's entry point the children run: bench/main.ts (through tsx), or a bundle of it (`useBenchEntry`). */
let benchEntry = fileURLToPath(new URL("./main.ts", import.meta.url));

/** Called by the entry point with its own path (`process.argv[1]`), so that a bundled bench spawns itself. */
export function useBenchEntry(path: string): void {
  benchEntry = path;
}

/**
 * Runs one side in a child process through the bench's entry point (`llamacpp-child ARGS`) and
 * returns its figures; the child's stderr (progress) passes through.
 *
 * @throws Error when the child exits non-zero or prints no JSON line
 */
export function spawnSide<T>(args: string[]): Promise<T> {
  return new Promise((resolve, reject) => {
    const flags = benchEntry.endsWith(".ts") ? ["--import", "tsx"] : [];
    const child = spawn(process.execPath, [...flags, benchEntry, "llamacpp-child", ...args], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.on("error", reject);
    child.on("close", (code) => {
      const last = out.trim().split("\n").at(-1) ?? "";
      if (code !== 0 || !last.startsWith("{")) return reject(new Error(`llamacpp-child ${args.join(" ")} exited ${code}${last ? ": " + last.slice(0, 300) : ""}`));
      resolve(JSON.parse(last) as T);
    });
  });
}

function badValue(flag: string, got: string): never {
  throw new Error(`${flag} must be cpu, device-pool or host-pool, got ${JSON.stringify(got)}`);
}
