import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

export type DeviceRequest = "cpu" | "webgpu" | "cuda" | "auto";
export type Device = "cpu" | "webgpu" | "cuda";

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
 * Resolves `--device`: `auto` takes cuda when its provider is installed and an NVIDIA device is
 * present, then a hardware WebGPU adapter, then cpu, and says why in `reason`. An explicit device
 * that cannot work throws an Error saying what to do. `cudaExecutionProvider: "webgpu"` runs the
 * cuda executor on onnxruntime-node's bundled WebGPU provider, which needs no CUDA download.
 *
 * @example const { device, reason } = await resolveDevice("auto"); log(`device ${device}: ${reason}`);
 */
export async function resolveDevice(requested: DeviceRequest, cudaExecutionProvider: "cuda" | "webgpu" = "cuda"): Promise<{ device: Device; reason: string }> {
  if (requested === "cpu") return { device: "cpu", reason: "--device cpu" };
  if (requested === "cuda" && cudaExecutionProvider === "webgpu") return { device: "cuda", reason: "--device cuda on onnxruntime-node's WebGPU provider" };
  if (requested === "cuda") {
    if (!cudaProviderInstalled()) throw new Error(CUDA_INSTALL_HINT);
    return { device: "cuda", reason: "--device cuda" };
  }
  if (requested === "webgpu") {
    const info = await webGpuAdapter();
    if (!info) throw new Error("no WebGPU adapter: run scripts/install-webgpu-deps.sh (Mesa lavapipe) or use a machine with a GPU");
    return { device: "webgpu", reason: `--device webgpu on ${describe(info)}` };
  }
  const reasons: string[] = [];
  if (cudaProviderInstalled() && existsSync("/dev/nvidiactl")) return { device: "cuda", reason: "auto: CUDA provider installed and an NVIDIA device present" };
  reasons.push(cudaProviderInstalled() ? "no NVIDIA device" : "CUDA provider not installed");
  const info = await webGpuAdapter().catch(() => undefined);
  if (info && !info.software) return { device: "webgpu", reason: `auto: ${reasons.join(", ")}; hardware WebGPU adapter ${describe(info)}` };
  reasons.push(info ? `WebGPU adapter is software (${describe(info)})` : "no WebGPU adapter");
  return { device: "cpu", reason: `auto: ${reasons.join(", ")}` };
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
