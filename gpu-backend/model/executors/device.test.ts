import { describe, expect, it } from "vitest";
import { createExecutor } from "./create-executor";
import { CUDA_INSTALL_HINT, cudaProviderInstalled, resolveExecutor } from "./device";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";

describe("--executor / --provider resolution", () => {
  it("takes cpu when asked", async () => {
    expect(await resolveExecutor("cpu")).toEqual({ kind: "cpu", provider: "node-cpu", reason: "--executor cpu" });
  });

  it("refuses a provider the executor does not run on, and a provider without an executor", async () => {
    await expect(resolveExecutor("device-pool", "node-cuda")).rejects.toThrow("the device-pool executor runs on node-webgpu or web-webgpu, not node-cuda");
    await expect(resolveExecutor("cpu", "node-webgpu")).rejects.toThrow("the cpu executor runs on node-cpu, not node-webgpu");
    await expect(resolveExecutor("auto", "node-webgpu")).rejects.toThrow(/needs an explicit --executor/);
  });

  it("refuses host-pool on node-cuda without the CUDA provider, saying how to install it", async () => {
    // npm ci never downloads the CUDA provider, so this holds on every machine of this project.
    expect(cudaProviderInstalled()).toBe(false);
    await expect(resolveExecutor("host-pool")).rejects.toThrow(CUDA_INSTALL_HINT);
    expect(CUDA_INSTALL_HINT).toMatch(/ONNXRUNTIME_NODE_INSTALL=cuda12/);
    // The executor itself refuses too (a caller that skips resolveExecutor gets the same answer).
    const spec = tinySpec();
    await expect(createExecutor({ kind: "host-pool", provider: "node-cuda", spec, weights: randomWeights(spec, 1), numBlocks: 4, blockSize: 16 })).rejects.toThrow(CUDA_INSTALL_HINT);
  });

  it("auto falls back to cpu without a hardware WebGPU adapter or CUDA, and says why", async () => {
    const { kind, reason } = await resolveExecutor("auto");
    expect(kind).toBe("cpu");
    expect(reason).toMatch(/^auto: (no WebGPU adapter|WebGPU adapter is software .*), CUDA provider not installed$/);
  });
});
