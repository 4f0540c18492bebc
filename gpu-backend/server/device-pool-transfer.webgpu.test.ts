import { serve, type ServerType } from "@hono/node-server";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DoneFrame, Frame, GenerateRequest, SamplingParams } from "../../protocol/messages";
import type { Engine } from "../engine/engine";
import { createEngine } from "../engine/create-engine";
import { loadModel, type LoadedModel } from "../engine/load-model";
import { BlockPool } from "../kv/block-pool";
import { DevicePoolExecutor } from "../model/executors/device-pool-executor";
import type { Executor } from "../model/executors/executor";
import { HostPoolExecutor } from "../model/executors/host-pool-executor";
import { tinyModelDir } from "../model/testing/tiny-model";
import { createBackendApp } from "./app";
import { Drain } from "./drain";

/**
 * KV blocks in and out of a pool that lives on the device (the device-pool executor on
 * onnxruntime-node's WebGPU provider, lavapipe in CI), through its gather and scatter sessions:
 * the host tier takes evicted blocks and gives them back, and a real backend serves its cached
 * chain over HTTP to a host-pool backend and pulls one from it (same block format). Every reply
 * equals the one an engine that computed everything gives. Project "webgpu".
 */
const SECRET = "device-pool-secret";
const B = 16;
const sampling: SamplingParams = { maxTokens: 5, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
let dir: string;
let model: LoadedModel;
const executors: Executor[] = [];
const servers: ServerType[] = [];

type Kind = "device-pool" | "host-pool";

async function engineOn(kind: Kind, o: { numBlocks: number; hostTierBlocks?: number; id: string }): Promise<{ engine: Engine; executor: Executor }> {
  const common = { spec: model.spec, weights: model.weights, numBlocks: o.numBlocks, blockSize: B };
  const executor = kind === "device-pool" ? await DevicePoolExecutor.create(common) : await HostPoolExecutor.create({ ...common, provider: "node-webgpu" });
  executors.push(executor);
  const engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks: o.numBlocks, blockSize: B }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 4, blockSize: B },
    enablePrefixCache: true,
    backendId: o.id,
    transfer: { secret: SECRET, timeoutMs: 10_000 },
    ...(o.hostTierBlocks ? { hostTierBytes: o.hostTierBlocks * executor.blockIO!.bytesPerBlock } : {}),
  });
  return { engine, executor };
}

async function serveEngine(engine: Engine, id: string): Promise<string> {
  const app = createBackendApp({ engine, secret: SECRET, backendId: id, drain: new Drain() });
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

const agent = (i: number, over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: `r${i}`,
  mode: "full",
  messages: [
    { role: "system", content: `Agent ${i}. ${"Check each file, then report what changed and why. ".repeat(9)}` },
    { role: "user", content: `Task ${i}.` },
  ],
  sampling,
  ...over,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-device-pool-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
}, 120_000);

afterAll(async () => {
  for (const s of servers) s.close();
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("device-pool blocks", () => {
  it("offloads evicted blocks to the host tier and brings them back: the reply equals computing them", async () => {
    const { engine } = await engineOn("device-pool", { numBlocks: 24, hostTierBlocks: 64, id: "tier" });
    const first = await turn(engine, agent(0));
    const blocks = Math.floor((first.usage.promptTokens - 1) / B);
    for (const i of [1, 2, 3, 4, 5]) await turn(engine, agent(i)); // fill the pool: agent 0's blocks go to the tier
    expect(engine.hostTier!.stats.puts).toBeGreaterThan(0);
    const again = await turn(engine, agent(0));
    expect(again.hostTierTokens).toBeGreaterThan(0);
    expect(again.usage.cachedTokens).toBe(blocks * B);
    expect(again.text).toBe(first.text);
    engine.kv.checkInvariants();
  });

  for (const [holderKind, pullerKind] of [["device-pool", "host-pool"], ["host-pool", "device-pool"]] as const) {
    it(`serves and pulls blocks over HTTP: ${holderKind} holder, ${pullerKind} puller, the same reply as computing`, async () => {
      const holder = await engineOn(holderKind, { numBlocks: 64, id: "holder" });
      const puller = await engineOn(pullerKind, { numBlocks: 64, id: "puller" });
      const cold = await engineOn(pullerKind, { numBlocks: 64, id: "cold" });
      expect(holder.executor.blockIO!.format).toBe(puller.executor.blockIO!.format);
      const url = await serveEngine(holder.engine, "holder");
      await turn(holder.engine, agent(7));
      const moved = await turn(puller.engine, agent(7, { kvSource: { url, backendId: "holder" } }));
      const reference = await turn(cold.engine, agent(7));
      const full = Math.floor((moved.usage.promptTokens - 1) / B);
      expect(moved.kvPull).toMatchObject({ outcome: "pulled", blocks: full, bytes: full * holder.executor.blockIO!.bytesPerBlock });
      expect(moved.usage.cachedTokens).toBe(full * B);
      expect(moved.text).toBe(reference.text);
      holder.engine.kv.checkInvariants();
      puller.engine.kv.checkInvariants();
    });
  }
});
