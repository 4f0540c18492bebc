import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { EXECUTOR_PROVIDERS, executorLabel, type ExecutorChoice, type ExecutorKind, type ExecutorProvider } from "./executor";

/** `--executor`: an executor by where its pool lives, or `auto`. */
export type ExecutorRequest = ExecutorKind | "auto";

export interface WebGpuAdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** A CPU implementation (Mesa lavapipe/llvmpipe, SwiftShader): real kernels, not a GPU. */
  software: boolean;
}

/**
 * The flags for every Dawn instance this project creates (`create(DAWN_FLAGS)` of the `webgpu`
 * npm package: executor, device choice, device probe). Dawn hides the `shader-f16` feature on every
 * NVIDIA device on Vulkan unless the toggle `vulkan_enable_f16_on_nvidia` is enabled (a guard for
 * f16 conformance failures in Chrome); our fp16 graphs need `shader-f16`. onnxruntime's own Dawn
 * (inside onnxruntime-node 1.30's WebGPU provider) enables the same toggle on its adapter. Other
 * devices ignore it (lavapipe: adapter and tests unchanged).
 */
export const DAWN_FLAGS: readonly string[] = ["enable-dawn-features=vulkan_enable_f16_on_nvidia"];

/** How to get the CUDA provider, which onnxruntime-node downloads only when asked at install time. */
export const CUDA_INSTALL_HINT =
  "onnxruntime-node's CUDA execution provider is not installed. On a machine with internet access and CUDA 12, run " +
  "`ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules/onnxruntime-node/script/install` (npm ci skips that download here).";

/**
 * Resolves `--executor` and `--provider` into an executor and its provider, and says why in
 * `reason`. `auto`: the device pool on onnxruntime-node's WebGPU provider when Dawn finds a
 * hardware adapter (lavapipe does not count), then the host pool on CUDA when its provider is
 * installed and an NVIDIA device is present, then cpu. An explicit choice that cannot work throws
 * an Error saying what to do; a provider the executor does not run on is refused.
 *
 * @example const { kind, provider, reason } = await resolveExecutor("device-pool"); log(`executor ${kind}: ${reason}`);
 */
export async function resolveExecutor(requested: ExecutorRequest, provider?: ExecutorProvider): Promise<ExecutorChoice & { reason: string }> {
  if (requested === "auto") {
    if (provider) throw new Error(`--provider ${provider} needs an explicit --executor (device-pool or host-pool)`);
    return autoExecutor();
  }
  const providers = EXECUTOR_PROVIDERS[requested];
  const chosen = provider ?? providers[0]!;
  if (!providers.includes(chosen)) throw new Error(`the ${requested} executor runs on ${providers.join(" or ")}, not ${chosen}`);
  const choice = { kind: requested, provider: chosen };
  const asked = `--executor ${requested}${provider ? ` --provider ${provider}` : ""}`;
  if (chosen === "node-cuda" && !cudaProviderInstalled()) throw new Error(CUDA_INSTALL_HINT);
  if (chosen === "node-webgpu" || chosen === "web-webgpu") {
    const info = await webGpuAdapter().catch(() => undefined);
    if (!info) throw new Error("no WebGPU adapter: run scripts/install-webgpu-deps.sh (Mesa lavapipe) or use a machine with a GPU");
    return { ...choice, reason: `${asked}: ${executorLabel(choice)} on ${describe(info)}` };
  }
  return { ...choice, reason: asked };
}

async function autoExecutor(): Promise<ExecutorChoice & { reason: string }> {
  const reasons: string[] = [];
  const info = await webGpuAdapter().catch(() => undefined);
  if (info && !info.software) return { kind: "device-pool", provider: "node-webgpu", reason: `auto: hardware WebGPU adapter ${describe(info)}` };
  reasons.push(info ? `WebGPU adapter is software (${describe(info)})` : "no WebGPU adapter");
  if (cudaProviderInstalled() && existsSync("/dev/nvidiactl")) return { kind: "host-pool", provider: "node-cuda", reason: `auto: ${reasons.join(", ")}; CUDA provider installed and an NVIDIA device present` };
  reasons.push(cudaProviderInstalled() ? "no NVIDIA device" : "CUDA provider not installed");
  return { kind: "cpu", provider: "node-cpu", reason: `auto: ${reasons.join(", ")}` };
}

/** Whether onnxruntime-node's CUDA provider library sits next to its binding. */
export function cudaProviderInstalled(): boolean {
  const require = createRequire(import.meta.url);
  const root = dirname(require.resolve("onnxruntime-node/package.json"));
  return existsSync(join(root, "bin", "napi-v6", process.platform, process.arch, "libonnxruntime_providers_cuda.so"));
}

/** The WebGPU adapter Dawn (the `webgpu` package) finds, or undefined. */
export async function webGpuAdapter(): Promise<WebGpuAdapterInfo | undefined> {
  process.env.XDG_RUNTIME_DIR ??= "/tmp";
  const dawn = (await import("webgpu")) as { create(flags: string[]): { requestAdapter(): Promise<unknown> } };
  const adapter = (await dawn.create([...DAWN_FLAGS]).requestAdapter()) as { info?: Record<string, string>; isFallbackAdapter?: boolean } | null;
  if (!adapter) return undefined;
  const info = adapter.info ?? {};
  const text = `${info.vendor ?? ""} ${info.architecture ?? ""} ${info.device ?? ""} ${info.description ?? ""}`.toLowerCase();
  return {
    vendor: info.vendor ?? "",
    architecture: info.architecture ?? "",
    device: info.device ?? "",
    description: info.description ?? "",
    software: Boolean(adapter.isFallbackAdapter) || /llvmpipe|lavapipe|swiftshader|software/.test(text),
  };
}

function describe(info: WebGpuAdapterInfo): string {
  return [info.vendor, info.device || info.description, info.software ? "(software)" : ""].filter(Boolean).join(" ");
}
