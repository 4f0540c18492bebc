import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../gpu-backend/engine/load-model";
import { materializeModel, tinyDemoConfig } from "../gpu-backend/model/checkpoint/demo-model";
import { decodeParameters, PRECISION_PAIRS, runLlamaCppBench } from "./llamacpp-bench";
import type { EngineFigures } from "./llamacpp-ours";
import type { LlamaCppSideResult } from "./llamacpp-side";
import { makeLlamaCppWorkloads } from "./llamacpp-workload";

/**
 * `npm run bench -- llamacpp` end to end on the tiny llama (hidden 64, 2 layers; context raised to
 * 8k for the 5,900-token trajectory): both engines really run every workload in child processes,
 * so the JSON contract, the refusal of fp16 on cpu, prefix reuse and the plots are checked; the
 * figures themselves are the benchmark's business, not the test's.
 */
let dir: string;
let model: string;
let summary: Record<string, unknown>;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "llamacpp-bench-"));
  model = await materializeModel({ dir: join(dir, "tiny"), config: { ...tinyDemoConfig(), maxPositionEmbeddings: 8192 }, seed: 3, modelId: "tiny-llamacpp-bench" });
  summary = await runLlamaCppBench({ quick: true, smoke: true, bandwidth: { bytesPerS: 20e9, source: "the test's" }, model, outDir: join(dir, "out"), ggufDir: join(dir, "gguf"), precisions: ["fp32", "fp16", "int4"], threads: 1 });
}, 600_000);
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

type Run = { ours: EngineFigures | { refused: string }; llamacpp: LlamaCppSideResult | { failed: string } };
const run = (p: string) => (summary.runs as Record<string, Run>)[p]!;
const ours = (p: string) => run(p).ours as EngineFigures;
const theirs = (p: string) => run(p).llamacpp as LlamaCppSideResult;

describe("npm run bench -- llamacpp", () => {
  it("gives the four ratios per precision run, above 0, and int4DecodeOverFp32", () => {
    for (const p of ["fp32", "int4"]) {
      const r = summary[p] as Record<string, number>;
      expect(Object.keys(r).sort()).toEqual(["concurrentVsLlamaCpp", "decodeVsLlamaCpp", "prefillVsLlamaCpp", "trajectoryVsLlamaCpp"]);
      for (const v of Object.values(r)) expect(v).toBeGreaterThan(0);
      expect(r.decodeVsLlamaCpp).toBeCloseTo(ours(p).decode.tokensPerS / theirs(p).decode.tokensPerS, 1);
      expect(r.trajectoryVsLlamaCpp).toBeCloseTo(theirs(p).trajectory.wallMs / ours(p).trajectory.wallMs, 1);
    }
    expect(summary.int4DecodeOverFp32).toBeCloseTo(ours("int4").decode.tokensPerS / ours("fp32").decode.tokensPerS, 1);
    expect(summary).not.toHaveProperty("int8");
  });

  it("refuses fp16 on the cpu executor with the reason, still runs llama.cpp's F16, and gives null ratios", () => {
    expect((run("fp16").ours as { refused: string }).refused).toMatch(/fp16 weights are not served on cpu/);
    expect(theirs("fp16").decode.tokensPerS).toBeGreaterThan(0);
    expect(Object.values(summary.fp16 as object)).toEqual([null, null, null, null]);
  });

  it("runs the same workloads on both sides, and our prefix cache computes the shared system prompt once", async () => {
    const { codec } = await loadModel({ dir: model });
    const w = makeLlamaCppWorkloads({ codec, quick: true });
    for (const side of [ours("int4"), theirs("int4")]) {
      expect(side.decode.contextTokens).toBe(w.decode.prompt.length);
      expect(side.prefill.promptTokens).toBe(w.prefill.prompt.length);
      expect(side.trajectory.lastPromptTokens).toBe(w.trajectory.prompts.at(-1)!.length);
      expect(side.trajectory.ttftMs).toHaveLength(20);
      expect(side.concurrent.promptTokens).toBe(w.concurrent.trajectories.reduce((a, t) => a + t.prompts.reduce((b, p) => b + p.length, 0), 0));
    }
    // The trajectory: both keep the earlier turns' KV; ours reuses whole 16-token blocks only.
    const newTokens = w.trajectory.prompts.reduce((a, p, k) => a + p.length - (k ? w.trajectory.prompts[k - 1]!.length : 0), 0);
    expect(ours("int4").trajectory.evaluatedPromptTokens).toBeLessThanOrEqual(newTokens + 20 * 16);
    // 8 trajectories share a ~1,500-token system prompt: llama.cpp's sequences each prefill it.
    const shared = w.concurrent.sharedPrefixTokens;
    expect(theirs("int4").concurrent.evaluatedPromptTokens - ours("int4").concurrent.evaluatedPromptTokens).toBeGreaterThan(6 * shared);
  });

  it("reports the bandwidth limit from the weights one token reads, and resident memory and the KV pool", async () => {
    const { spec, checkpoint } = await loadModel({ dir: model });
    // Every 2-D weight but the embedding table, which the tied LM head reads once per token.
    const matrices = checkpoint.tensorNames.filter((n) => checkpoint.tensorInfo(n).shape.length === 2);
    const total = matrices.reduce((a, n) => a + checkpoint.tensorInfo(n).shape.reduce((x, y) => x * y, 1), 0);
    expect(decodeParameters(spec)).toBe(total);
    const limit = summary.physicalLimit as { bandwidthGBps: number; perPrecision: Record<string, { weightBytesPerToken: { ours: number; llamacpp: number }; decodeLimitTokensPerS: { ours: number } }> };
    expect(limit.perPrecision.int4!.weightBytesPerToken.ours).toBe(Math.round((total * PRECISION_PAIRS.int4.ourBits) / 8));
    expect(limit.perPrecision.fp32!.weightBytesPerToken.llamacpp).toBe(total * 4);
    expect(limit.perPrecision.int4!.decodeLimitTokensPerS.ours).toBeCloseTo((limit.bandwidthGBps * 1e9) / ((total * 5) / 8), -2);
    expect(ours("fp32").memory.kvPoolBytes).toBe(2 ** 30);
    expect(ours("fp32").memory.peakRssBytes).toBeGreaterThanOrEqual(ours("fp32").memory.rssBytes);
    expect(theirs("fp32").memory.rssBytes).toBeGreaterThan(0);
  });

  it("draws decode and prefill tokens/s by bits per weight for both engines", () => {
    for (const path of summary.plots as string[]) {
      expect(existsSync(path)).toBe(true);
      const svg = readFileSync(path, "utf8");
      expect(svg).toMatch(/^<svg/);
      expect(svg).toContain("Agent Edge (cpu)");
      expect(svg).toContain("llama.cpp (cpu)");
    }
  });
});
