import { describe, expect, it } from "vitest";
import { createExecutor } from "./create-executor";
import { CUDA_INSTALL_HINT, cudaProviderInstalled, resolveDevice } from "./device";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";

describe("--device resolution", () => {
  it("takes cpu when asked", async () => {
    expect(await resolveDevice("cpu")).toEqual({ device: "cpu", reason: "--device cpu" });
  });

  it("refuses cuda without its provider, saying how to install it", async () => {
    // npm ci never downloads the CUDA provider, so this holds on every machine of this project.
    expect(cudaProviderInstalled()).toBe(false);
    await expect(resolveDevice("cuda")).rejects.toThrow(CUDA_INSTALL_HINT);
    expect(CUDA_INSTALL_HINT).toMatch(/ONNXRUNTIME_NODE_INSTALL=cuda12/);
    // The executor itself refuses too (a caller that skips resolveDevice gets the same answer).
    const spec = tinySpec();
    await expect(createExecutor({ device: "cuda", spec, weights: randomWeights(spec, 1), numBlocks: 4, blockSize: 16 })).rejects.toThrow(CUDA_INSTALL_HINT);
  });

  it("auto falls back to cpu without CUDA or a hardware WebGPU adapter, and says why", async () => {
    const { device, reason } = await resolveDevice("auto");
    expect(device).toBe("cpu");
    expect(reason).toMatch(/^auto: CUDA provider not installed, (no WebGPU adapter|WebGPU adapter is software)/);
  });
});
