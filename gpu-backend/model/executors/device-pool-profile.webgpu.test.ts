import * as ort from "onnxruntime-node";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DevicePoolExecutor } from "./device-pool-executor";
import { newestProfile, readOrtProfile, type OrtRunProfile } from "./ort-profile";
import { feedShapes, makePagedAttentionCase, pagedAttentionGraph } from "../testing/paged-attention-case";
import { randomWeights } from "../testing/random-weights";
import { tinySpec } from "../testing/tiny-spec";

/**
 * onnxruntime's own profile of device-pool decode steps on lavapipe (its WebGPU provider records
 * every GPU program it dispatches): every kernel on the WebGPU provider, no Memcpy node, no
 * PagedAttention metadata readback (`PagedAttentionPackMetadata` is the program of the path
 * that copies the lengths back to the host; `attention_metadata` avoids it), the same dispatches
 * every decode step, and dispatches per layer within `LAYER_DISPATCH_BUDGET` (the fixed part
 * within `FIXED_DISPATCH_BUDGET`). Project "webgpu". Counts, not times: lavapipe is a CPU.
 */
// Measured on the fused graph (fp32 weights, tinySpec): 16 a layer (PagedAttention is 4 programs:
// scatter, metadata on the device, decode QK, V reduce), 18 fixed; the unfused graph took 30 and 46.
const LAYER_DISPATCH_BUDGET = 16;
const FIXED_DISPATCH_BUDGET = 18;
const DECODE_STEPS = 4;
const dir = mkdtempSync(join(tmpdir(), "agent-edge-profile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function decodeProfile(numLayers: number): Promise<OrtRunProfile[]> {
  const spec = { ...tinySpec(), numLayers };
  const prefix = join(dir, `layers${numLayers}`);
  const exec = await DevicePoolExecutor.create({ spec, weights: randomWeights(spec, 3), numBlocks: 8, blockSize: 16, profileFilePrefix: prefix });
  try {
    const table = [4, 1];
    let next = (await exec.run([{ tokenIds: [5, 9, 14, 2, 77], startPos: 0, blockTable: table, logits: "argmax" }])).argmax[0]!;
    for (let i = 0; i < DECODE_STEPS; i++) next = (await exec.run([{ tokenIds: [next], startPos: 5 + i, blockTable: table, logits: "argmax" }])).argmax[0]!;
    return readOrtProfile(await exec.endProfiling()).runs.slice(1); // the decode steps
  } finally {
    await exec.dispose();
  }
}

describe("device-pool decode steps in onnxruntime's profile", () => {
  it("runs every kernel on WebGPU, copies nothing, reads no metadata back, and stays within its dispatch budget", async () => {
    const [two, four] = [await decodeProfile(2), await decodeProfile(4)];
    expect(two).toHaveLength(DECODE_STEPS);
    for (const [layers, runs] of [[2, two], [4, four]] as const) {
      for (const run of runs) {
        expect(run.nodes.length).toBeGreaterThan(0);
        expect(run.nodes.filter((n) => n.provider !== "WebGpuExecutionProvider" || n.op.startsWith("Memcpy"))).toEqual([]);
        expect(run.dispatches.filter((d) => d.program.includes("PackMetadata"))).toEqual([]);
        expect(run.dispatches.filter((d) => d.program === "PagedAttention&ScatterKVToPagedCache")).toHaveLength(layers);
        // The same programs every decode step.
        expect(run.dispatches.map((d) => d.program)).toEqual(runs[0]!.dispatches.map((d) => d.program));
      }
    }
    const perLayer = (four[0]!.dispatches.length - two[0]!.dispatches.length) / 2;
    const fixed = two[0]!.dispatches.length - 2 * perLayer;
    console.log(`[device-pool profile] dispatches per decode step: ${two[0]!.dispatches.length} (2 layers), ${four[0]!.dispatches.length} (4 layers): ${perLayer} per layer + ${fixed} fixed`);
    expect(perLayer).toBeLessThanOrEqual(LAYER_DISPATCH_BUDGET);
    expect(fixed).toBeLessThanOrEqual(FIXED_DISPATCH_BUDGET);
  });

  it("would see a metadata readback: PagedAttention without attention_metadata dispatches PagedAttentionPackMetadata", async () => {
    const c = makePagedAttentionCase();
    const prefix = join(dir, "no-metadata");
    const session = await ort.InferenceSession.create(pagedAttentionGraph(c.dims), { executionProviders: ["webgpu"], enableProfiling: true, profileFilePrefix: prefix });
    const s = feedShapes(c);
    const feeds: Record<string, ort.Tensor> = {};
    for (const [name, data] of [["query", c.query], ["key", c.key], ["value", c.value], ["key_cache", c.keyCache], ["value_cache", c.valueCache]] as const) feeds[name] = new ort.Tensor("float16", data, s[name]);
    for (const [name, data] of [["cumulative_sequence_length", c.cumulative], ["past_seqlens", c.past], ["block_table", c.blockTable]] as const) feeds[name] = new ort.Tensor("int32", data, s[name]);
    await session.run(feeds);
    await session.endProfiling();
    await session.release();
    const [run] = readOrtProfile(newestProfile(prefix)).runs;
    expect(run!.dispatches.map((d) => d.program)).toContain("PagedAttention&PagedAttentionPackMetadata");
  });
});
