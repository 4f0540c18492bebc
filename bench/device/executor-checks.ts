import { copyFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModel } from "../../gpu-backend/engine/load-model";
import { createExecutor } from "../../gpu-backend/model/executors/create-executor";
import { DevicePoolExecutor } from "../../gpu-backend/model/executors/device-pool-executor";
import { executorLabel, type ExecutorChoice } from "../../gpu-backend/model/executors/executor";
import { executorGreedy } from "../../gpu-backend/model/executors/executor-greedy";
import { readOrtProfile, timeByProgram } from "../../gpu-backend/model/executors/ort-profile";

/**
 * The GPU executors on the default (demo) model, for the device kit (`device-probe.ts greedy`
 * and `profile`; `npx tsx bench/device/device-probe.ts greedy` here runs them on lavapipe):
 *
 *   greedy   32 greedy tokens after a 64-token prompt on cpu and on each GPU executor, fp32
 *            weights on all (the same model): `ok` when every token equals cpu's;
 *   profile  the device pool at fp16 (the GPU default), a 256-token prompt, then 16 decode steps
 *            under onnxruntime's profiler: dispatches per step, wall time per step, GPU time per
 *            program (where the step's time goes), the profile saved to $OUT when set.
 */
const PROMPT = Array.from({ length: 64 }, (_, i) => 100 + ((i * 7919) % 5000));
const BLOCK = 16;

export async function greedyCheck(): Promise<boolean> {
  const { spec, weights } = await loadModel({ dir: undefined });
  const numBlocks = 16;
  const run = async (c: ExecutorChoice) => {
    const exec = await createExecutor({ ...c, spec, weights, numBlocks, blockSize: BLOCK });
    try {
      return await executorGreedy(exec, PROMPT, 32, Array.from({ length: Math.ceil((PROMPT.length + 32) / BLOCK) }, (_, i) => i));
    } finally {
      await exec.dispose();
    }
  };
  const reference = await run({ kind: "cpu", provider: "node-cpu" });
  let ok = true;
  for (const c of [{ kind: "device-pool", provider: "node-webgpu" }, { kind: "host-pool", provider: "node-webgpu" }, { kind: "device-pool", provider: "web-webgpu" }] as const) {
    try {
      const tokens = await run(c);
      const same = tokens.filter((t, i) => t === reference[i]).length;
      const first = tokens.findIndex((t, i) => t !== reference[i]);
      ok &&= same === tokens.length;
      console.log(`${same === tokens.length ? "ok  " : "FAIL"} greedy ${executorLabel(c)} vs cpu (${spec.modelId}, fp32 weights): ${same}/${tokens.length} tokens equal${first >= 0 ? `, first difference at token ${first}` : ""}`);
    } catch (e) {
      ok = false;
      console.log(`FAIL greedy ${executorLabel(c)}: ${(e as Error).message}`);
    }
  }
  return ok;
}

export async function profileCheck(steps = 16): Promise<void> {
  const { spec, weights } = await loadModel({ dir: undefined });
  const prefix = join(mkdtempSync(join(tmpdir(), "ort-profile-")), "decode");
  const prompt = Array.from({ length: 256 }, (_, i) => 100 + ((i * 7919) % 5000));
  const exec = await DevicePoolExecutor.create({ spec, weights, float16: true, numBlocks: 32, blockSize: BLOCK, profileFilePrefix: prefix });
  const wall: number[] = [];
  try {
    const table = Array.from({ length: 32 }, (_, i) => i);
    let next = 0;
    for (let at = 0; at < prompt.length; at += 128) next = (await exec.run([{ tokenIds: prompt.slice(at, at + 128), startPos: at, blockTable: table, logits: "argmax" }])).argmax[0]!;
    for (let i = 0; i < steps; i++) {
      const t0 = performance.now();
      next = (await exec.run([{ tokenIds: [next], startPos: prompt.length + i, blockTable: table, logits: "argmax" }])).argmax[0]!;
      wall.push(performance.now() - t0);
    }
  } finally {
    const file = await exec.endProfiling().catch(() => undefined);
    await exec.dispose();
    if (file) report(file, wall, steps);
  }
}

function report(file: string, wall: number[], steps: number): void {
  const runs = readOrtProfile(file).runs.slice(-steps);
  const gpuUs = runs.map((r) => r.dispatches.reduce((a, d) => a + d.durUs, 0));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  console.log(
    `ok   profile device-pool on node-webgpu, fp16, ${steps} decode steps at context 256: ${runs[0]?.dispatches.length ?? 0} dispatches and ${runs[0]?.nodes.length ?? 0} kernels a step;` +
      ` wall ${median(wall).toFixed(2)} ms a step (median), GPU time ${(median(gpuUs) / 1000).toFixed(2)} ms a step (sum of program timestamps)`,
  );
  for (const p of timeByProgram(runs).slice(0, 15)) console.log(`     ${(p.totalUs / steps / 1000).toFixed(3)} ms/step  ${String(p.count / steps).padStart(4)}x  ${p.program}`);
  if (process.env.OUT) {
    copyFileSync(file, join(process.env.OUT, "decode-profile.json"));
    console.log(`     profile: ${join(process.env.OUT, "decode-profile.json")}`);
  }
}
