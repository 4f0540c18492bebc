/**
 * Device probe for the device kit (bench/device/device-kit.sh bundles it to `.devkit/js/device-probe.mjs`,
 * bench/device/device-run.sh runs it): one check per process, so that a crash or a hang in one native
 * library is reported by its own `timeout` and the others still run.
 *
 *   node device-probe.mjs dawn                 the WebGPU adapter Dawn (the `webgpu` package) finds: vendor, device, description,
 *                                              shader-f16 with DAWN_FLAGS and without them
 *   node device-probe.mjs llama false|vulkan|cuda
 *                                              node-llama-cpp's prebuilt binary for that gpu (`build: "never"`):
 *                                              loaded gpu type, device names, VRAM, the binding path
 *   node device-probe.mjs llama-run false|vulkan|cuda [F32|F16|Q8_0|Q4_0]
 *                                              runs kernels: a small seeded model (hidden 256, 2 layers, head
 *                                              dim 64, as GGUF, default Q4_0) evaluates 600 tokens and generates
 *                                              16, flash attention off then on; times the first token, which
 *                                              holds the CUDA JIT / Vulkan pipeline compiles of first use
 *   node device-probe.mjs greedy               greedy tokens of every GPU executor equal to cpu's on the default model
 *   node device-probe.mjs profile              onnxruntime's profile of 16 device-pool decode steps: dispatches, time per program
 *   (greedy and profile: executor-checks.ts)
 *
 * Prints `ok ...` lines, or `FAIL ...` with the error, and exits 0 / 1. Runs as well under tsx here:
 * `npx tsx bench/device/device-probe.ts llama false`.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadCheckpoint } from "../../gpu-backend/model/checkpoint/checkpoint";
import { materializeModel, tinyDemoConfig } from "../../gpu-backend/model/checkpoint/demo-model";
import { exportGguf, type GgufFileType } from "../../gpu-backend/model/export/gguf-export";
import { DAWN_FLAGS } from "../../gpu-backend/model/executors/device";
import { greedyCheck, profileCheck } from "./executor-checks";

const [what, arg] = process.argv.slice(2);
const t0 = performance.now();
const ms = () => `${(performance.now() - t0).toFixed(0)} ms`;

async function dawn(): Promise<void> {
  process.env.XDG_RUNTIME_DIR ||= mkdtempSync(join(tmpdir(), "xdg-"));
  const webgpu = (await import("webgpu")) as { create(flags: string[]): { requestAdapter(o?: Record<string, unknown>): Promise<unknown> } };
  const gpu = webgpu.create([...DAWN_FLAGS]);
  for (const powerPreference of ["high-performance", "low-power"]) {
    const adapter = (await gpu.requestAdapter({ powerPreference })) as {
      info?: Record<string, unknown>;
      isFallbackAdapter?: boolean;
      limits?: Record<string, unknown>;
      features?: Iterable<string>;
    } | null;
    if (!adapter) {
      console.log(`FAIL dawn (${powerPreference}): no adapter (${ms()})`);
      process.exitCode = 1;
      continue;
    }
    const info = adapter.info ?? {};
    const pick = (k: string) => String(info[k] ?? "");
    console.log(
      `ok   dawn (${powerPreference}): vendor=${pick("vendor")} architecture=${pick("architecture")} device=${pick("device")}` +
        ` description=${JSON.stringify(pick("description"))} fallback=${Boolean(adapter.isFallbackAdapter)}` +
        ` maxBufferSize=${String(adapter.limits?.maxBufferSize ?? "?")} maxStorageBufferBindingSize=${String(adapter.limits?.maxStorageBufferBindingSize ?? "?")}` +
        ` shader-f16=${adapter.features ? [...adapter.features].includes("shader-f16") : "?"} (${ms()})`,
    );
  }
  // The one Dawn instance without DAWN_FLAGS, on purpose: shows what the toggle changes on this card
  // (NVIDIA on Vulkan: shader-f16 false without it; elsewhere the same).
  const bare = (await webgpu.create([]).requestAdapter()) as { features?: Iterable<string> } | null;
  console.log(`ok   dawn without DAWN_FLAGS: shader-f16=${bare?.features ? [...bare.features].includes("shader-f16") : "no adapter"} (${ms()})`);
}

function parseGpu(gpuArg: string | undefined): false | "vulkan" | "cuda" {
  if (gpuArg !== "false" && gpuArg !== "vulkan" && gpuArg !== "cuda") throw new Error(`expected false, vulkan or cuda, got ${JSON.stringify(gpuArg)}`);
  return gpuArg === "false" ? false : gpuArg;
}

async function llama(gpuArg: string | undefined): Promise<void> {
  const gpu = parseGpu(gpuArg);
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
  const llamaInstance = await getLlama({ gpu, build: "never", logLevel: LlamaLogLevel.warn, progressLogs: true });
  const names = await llamaInstance.getGpuDeviceNames().catch((e: Error) => [`(error: ${e.message})`]);
  const vram = llamaInstance.gpu === false ? null : await llamaInstance.getVramState().catch(() => null);
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;
  // A GPU build that finds no device (lavapipe is a CPU device, which ggml's Vulkan backend skips) is a failure too.
  const ok = llamaInstance.gpu === gpu && (gpu === false || names.length > 0);
  console.log(
    `${ok ? "ok  " : "FAIL"} llama gpu=${String(gpu)}: loaded gpu=${String(llamaInstance.gpu)} build=${llamaInstance.buildType}` +
      ` devices=${JSON.stringify(names)}${vram ? ` vram total=${gib(vram.total)} free=${gib(vram.free)}` : ""}` +
      ` mathCores=${llamaInstance.cpuMathCores} (${ms()})`,
  );
  console.log(`     systemInfo: ${llamaInstance.systemInfo}`);
  await llamaInstance.dispose();
  if (!ok) process.exitCode = 1;
}

async function llamaRun(gpuArg: string | undefined, typeArg: string | undefined): Promise<void> {
  const gpu = parseGpu(gpuArg);
  const fileType = (typeArg ?? "Q4_0") as GgufFileType;
  if (!["F32", "F16", "Q8_0", "Q4_0"].includes(fileType)) throw new Error(`file type must be F32, F16, Q8_0 or Q4_0, got ${JSON.stringify(typeArg)}`);
  const dir = mkdtempSync(join(tmpdir(), "llama-run-"));
  try {
    const config = { ...tinyDemoConfig(), hiddenSize: 256, intermediateSize: 512, headDim: 64 };
    const modelDir = await materializeModel({ dir: join(dir, "model"), config, seed: 11, modelId: "device-probe" });
    const ggufPath = join(dir, `device-probe-${fileType}.gguf`);
    exportGguf(await loadCheckpoint(modelDir), ggufPath, { fileType });
    console.log(`     ${fileType} GGUF of a hidden-256 2-layer model written (${ms()})`);
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    const llamaInstance = await getLlama({ gpu, build: "never", logLevel: LlamaLogLevel.warn, progressLogs: true });
    const model = await llamaInstance.loadModel({ modelPath: ggufPath, gpuLayers: gpu === false ? 0 : "max" });
    const devices = await llamaInstance.getGpuDeviceNames().catch(() => []);
    console.log(`     loaded on gpu=${String(llamaInstance.gpu)} devices=${JSON.stringify(devices)}, ${model.gpuLayers} layers offloaded (${ms()})`);
    if (gpu !== false && devices.length === 0) console.log(`FAIL llama-run gpu=${gpu}: the ${gpu} build sees no device, what follows runs on the CPU`);
    const prompt = Array.from({ length: 600 }, (_, i) => 10 + ((i * 7919) % 5000));
    let failed = false;
    for (const flashAttention of [false, true]) {
      const context = await model.createContext({ contextSize: 2048, batchSize: 512, flashAttention });
      const sequence = context.getSequence();
      const t0 = performance.now();
      const times: number[] = [];
      for await (const _token of sequence.evaluate(prompt as Parameters<typeof sequence.evaluate>[0], { temperature: 0, yieldEogToken: true })) {
        times.push(performance.now() - t0);
        if (times.length === 16) break;
      }
      const decode = times.length > 1 ? ((times.length - 1) / (times.at(-1)! - times[0]!)) * 1000 : 0;
      const ok = times.length === 16;
      failed ||= !ok;
      console.log(
        `${ok ? "ok  " : "FAIL"} llama-run gpu=${String(gpu)} ${fileType} flash attention ${flashAttention ? "on" : "off"}:` +
          ` first token after ${times[0]?.toFixed(0) ?? "-"} ms (600-token prompt, first use: includes JIT / pipeline compiles),` +
          ` then ${decode.toFixed(1)} tokens/s over ${times.length} tokens (${ms()})`,
      );
      await context.dispose();
    }
    await model.dispose();
    await llamaInstance.dispose();
    if (failed || (gpu !== false && devices.length === 0)) process.exitCode = 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

try {
  if (what === "dawn") await dawn();
  else if (what === "llama") await llama(arg);
  else if (what === "llama-run") await llamaRun(arg, process.argv[4]);
  else if (what === "greedy") process.exitCode = (await greedyCheck()) ? 0 : 1;
  else if (what === "profile") await profileCheck();
  else {
    console.error("usage: device-probe (dawn | llama false|vulkan|cuda | llama-run false|vulkan|cuda [F32|F16|Q8_0|Q4_0] | greedy | profile)");
    process.exitCode = 2;
  }
} catch (e) {
  console.log(`FAIL ${what} ${arg ?? ""}: ${(e as Error).stack ?? String(e)} (${ms()})`);
  process.exitCode = 1;
}
