import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DoneFrame, Frame, GenerateRequest } from "../../protocol/messages";
import { materializeTinyModel } from "../model/checkpoint/demo-model";
import { createBackend, type Backend } from "./backend";

/**
 * The whole engine (scheduler, prefix cache, delta turns) on the webgpu executor, against the
 * same engine on cpu: a backend built by `--device webgpu` serves a trajectory with the same
 * greedy tokens and the same cache reuse.
 */
describe("backend on --device webgpu", () => {
  let dir: string;
  let gpu: Backend;
  let cpu: Backend;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "agent-edge-webgpu-"));
    const modelDir = await materializeTinyModel(join(dir, "tiny"));
    // The same weights on both (the defaults differ: int4 on cpu, fp16 on webgpu).
    const common = { modelDir, kvMemoryBytes: 8 * 2 ** 20, blockSize: 16, maxBatchTokens: 256, enablePrefixCache: true, threads: 1, weights: "fp32" as const };
    gpu = await createBackend({ ...common, executor: "device-pool", backendId: "gpu" });
    cpu = await createBackend({ ...common, executor: "cpu", backendId: "cpu" });
  });

  afterAll(async () => {
    await gpu?.close();
    await cpu?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const turn = (b: Backend, req: GenerateRequest) =>
    new Promise<DoneFrame>((resolve, reject) =>
      b.engine.submit(req, (f: Frame) => {
        if (f.type === "done") resolve(f);
        else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
      }),
    );

  it("serves a two-turn trajectory like cpu: same tokens, same reuse, pool never downloaded", async () => {
    expect([gpu.executor.kind, gpu.executor.provider]).toEqual(["device-pool", "node-webgpu"]);
    const first: GenerateRequest = {
      requestId: "r1",
      trajectoryId: "t",
      mode: "full",
      messages: [
        { role: "system", content: "You are a careful agent. ".repeat(6) },
        { role: "user", content: "Start." },
      ],
      sampling: { maxTokens: 6, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
    };
    const [g1, c1] = [await turn(gpu, first), await turn(cpu, first)];
    expect(g1.text).toBe(c1.text);
    const second = (stateId: string): GenerateRequest => ({ ...first, requestId: "r2", mode: "delta", stateId, messages: [{ role: "tool", content: "ok", tool_call_id: "c" }] });
    const [g2, c2] = [await turn(gpu, second(g1.stateId)), await turn(cpu, second(c1.stateId))];
    expect(g2.text).toBe(c2.text);
    expect(g2.usage).toEqual(c2.usage);
    expect(g2.usage.cachedTokens).toBeGreaterThan(0);
    // Per step the webgpu executor moves only step inputs and the next token: far less than its pool.
    const t = gpu.executor.transfer;
    expect((t.hostToDeviceBytes + t.deviceToHostBytes) / t.steps).toBeLessThan(gpu.executor.kvBytes / 100);
  });
});
