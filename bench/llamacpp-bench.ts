import { existsSync, mkdirSync, statSync } from "node:fs";
import { availableParallelism, cpus } from "node:os";
import { join } from "node:path";
import { loadModel } from "../gpu-backend/engine/load-model";
import { precisionRefusal, type WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { modelCacheDir } from "../gpu-backend/model/checkpoint/demo-model";
import { EXECUTOR_PROVIDERS, executorLabel, type ExecutorKind, type ExecutorProvider } from "../gpu-backend/model/executors/executor";
import { exportGguf, type GgufFileType } from "../gpu-backend/model/export/gguf-export";
import type { DecoderSpec } from "../gpu-backend/model/graph/decoder-spec";
import { spawnSide } from "./llamacpp-child";
import type { EngineFigures } from "./llamacpp-ours";
import type { LlamaCppSideResult } from "./llamacpp-side";
import { cpuFeatures, memoryBandwidth } from "./kit/machine";
import { note } from "./kit/progress";
import { lineChart } from "./kit/plot";
import { round, writeOut } from "./kit/report";

export interface LlamaCppBenchOptions {
  quick: boolean;
  /** llama.cpp untuned (n_batch 512, flash attention off, one run each): a check that every workload runs on both sides, not a measurement (the test's). */
  smoke?: boolean;
  /** Model folder or demo family; undefined: the embedded demo model. */
  model: string | undefined;
  outDir: string;
  /** Precisions to run (default all four). */
  precisions?: BenchPrecision[];
  /** Our executor (default cpu). */
  /** Our executor (default cpu) and its provider (default: the executor's first, `EXECUTOR_PROVIDERS`). */
  executor?: ExecutorKind;
  provider?: ExecutorProvider;
  /** llama.cpp's build (default false: its CPU build). */
  llamaGpu?: false | "cuda" | "vulkan";
  /** Run one side only (the other's figures and the ratios are null): e.g. a second llama.cpp build against ours already measured. */
  only?: "ours" | "llamacpp";
  /** Threads for both engines (default every core). */
  threads?: number;
  /** Where the GGUF exports go (default: `gguf/` beside the model cache), `<modelId>-<type>.gguf`, rewritten when the weights are newer. */
  ggufDir?: string;
  /** Memory bandwidth for the physical-limit row, bytes/s, and where it comes from; default: measured here (a CPU copy). */
  bandwidth?: { bytesPerS: number; source: string };
}

export type BenchPrecision = "fp32" | "fp16" | "int8" | "int4";
export const BENCH_PRECISIONS: readonly BenchPrecision[] = ["fp32", "fp16", "int8", "int4"];

/** llama.cpp's matching GGUF type per precision, and each side's stored bits per weight (scales included). */
export const PRECISION_PAIRS: Record<BenchPrecision, { gguf: GgufFileType; ourBits: number; ggufBits: number }> = {
  fp32: { gguf: "F32", ourBits: 32, ggufBits: 32 },
  fp16: { gguf: "F16", ourBits: 16, ggufBits: 16 },
  // Ours: MatMulNBits' 32 packed weights and a float32 scale per block; ggml's Q8_0/Q4_0 a float16 scale.
  int8: { gguf: "Q8_0", ourBits: 8 + 32 / 32, ggufBits: 8 + 16 / 32 },
  int4: { gguf: "Q4_0", ourBits: 4 + 32 / 32, ggufBits: 4 + 16 / 32 },
};

export interface PrecisionRatios {
  decodeVsLlamaCpp: number | null;
  prefillVsLlamaCpp: number | null;
  trajectoryVsLlamaCpp: number | null;
  concurrentVsLlamaCpp: number | null;
}

interface PrecisionRun {
  ours: EngineFigures | { refused: string };
  llamacpp: LlamaCppSideResult | { failed: string };
  /** Weight bytes one decoded token reads (every linear, the LM head; not the embedding row). */
  weightBytesPerToken: { ours: number; llamacpp: number };
  /** bandwidth / weightBytesPerToken: the decode tokens/s no single stream can pass. */
  decodeLimitTokensPerS: { ours: number; llamacpp: number };
}

/**
 * `npm run bench -- llamacpp [--quick] [--json] [--weights fp32,fp16,int8,int4] [--model DIR|FAMILY]
 * [--executor cpu|device-pool|host-pool] [--provider P] [--llama-gpu cuda|vulkan] [--threads N] [--bandwidth GB/s] [--only ours|llamacpp]`
 *
 * Agent Edge against llama.cpp on the same weights, per precision: our engine at fp32 / fp16 /
 * int8 / int4, llama.cpp (node-llama-cpp 3.21.1, prebuilt build, never compiled) on GGUF files our
 * writer exports from the same checkpoint at F32 / F16 / Q8_0 / Q4_0 (pure files: every weight in
 * that type, LM head included, as ours). A model loaded from a GGUF file (`--model smollm2`,
 * `--model FILE.gguf`) is compared with llama.cpp on that file at its native type instead. Same thread count, same token workloads
 * (llamacpp-workload.ts), each side in a process of its own (llamacpp-child.ts), one after the
 * other. Ratios are ours / theirs for rates and theirs / ours for times: above 1, Agent Edge is better.
 *
 * The physical-limit row: a decoded token reads every weight once, so bandwidth / weight bytes per
 * token bounds single-stream decode.
 */
export async function runLlamaCppBench(o: LlamaCppBenchOptions): Promise<Record<string, unknown>> {
  const log = (line: string) => note("llamacpp", line);
  const precisions = o.precisions ?? [...BENCH_PRECISIONS];
  const kind = o.executor ?? "cpu";
  const provider = o.provider ?? EXECUTOR_PROVIDERS[kind][0]!;
  const device = executorLabel({ kind, provider });
  const threads = o.threads ?? availableParallelism();
  const { checkpoint, spec } = await loadModel({ dir: o.model, log });
  const bandwidth = o.bandwidth ?? { bytesPerS: memoryBandwidth(log), source: "measured: one-thread copy of 256 MiB, bytes read + written / s, best of 5" };
  const params = decodeParameters(spec);
  log(`${spec.modelId}: ${(params / 1e6).toFixed(1)}M weights read per decoded token; bandwidth ${(bandwidth.bytesPerS / 1e9).toFixed(1)} GB/s (${bandwidth.source})`);

  const ggufDir = o.ggufDir ?? join(modelCacheDir(), "..", "gguf");
  mkdirSync(ggufDir, { recursive: true });
  const weightsTime = Math.max(...checkpoint.tensorNames.map((n) => statSync(checkpoint.tensorInfo(n).file).mtimeMs));
  const common = [...(o.quick ? ["--quick"] : []), ...(o.smoke ? ["--smoke"] : []), "--threads", String(threads), ...(o.model ? ["--model", o.model] : [])];
  const runs: Partial<Record<BenchPrecision, PrecisionRun>> = {};
  for (const [i, precision] of precisions.entries()) {
    const pair = PRECISION_PAIRS[precision];
    log(`precision ${i + 1}/${precisions.length}: ours ${precision} on ${device} vs llama.cpp ${pair.gguf} (${o.llamaGpu || "cpu"})`);
    const refusal = precisionRefusal(kind, precision as WeightPrecision);
    const ours: PrecisionRun["ours"] = o.only === "llamacpp" ? { refused: "not run (--only llamacpp)" } : refusal ? { refused: refusal } : await spawnSide<EngineFigures>(["--side", "ours", "--weights", precision, "--executor", kind, "--provider", provider, ...common]);
    if (refusal) log(`ours ${precision}: not run (${refusal})`);
    // A model loaded from a GGUF file (e.g. --model smollm2): llama.cpp runs that file at its native
    // type for every precision of ours; otherwise our writer exports the pair's type.
    const ggufPath = checkpoint.ggufPath ?? join(ggufDir, `${checkpoint.modelId}-${pair.gguf}.gguf`);
    if (!checkpoint.ggufPath && o.only !== "ours" && (!existsSync(ggufPath) || statSync(ggufPath).mtimeMs < weightsTime)) exportGguf(checkpoint, ggufPath, { fileType: pair.gguf, onProgress: log });
    const llamacpp = o.only === "ours" ? { failed: "not run (--only ours)" } : await spawnSide<LlamaCppSideResult>(["--side", "llamacpp", "--gguf", ggufPath, ...(o.llamaGpu ? ["--gpu", o.llamaGpu] : []), ...common]).catch((e: Error) => ({ failed: e.message }));
    // A native file's weight bytes per token: the file's size (its weights, each read once a token).
    const bytes = { ours: (params * pair.ourBits) / 8, llamacpp: checkpoint.ggufPath ? statSync(checkpoint.ggufPath).size : (params * pair.ggufBits) / 8 };
    runs[precision] = {
      ours,
      llamacpp,
      weightBytesPerToken: { ours: Math.round(bytes.ours), llamacpp: Math.round(bytes.llamacpp) },
      decodeLimitTokensPerS: { ours: round(bandwidth.bytesPerS / bytes.ours, 1), llamacpp: round(bandwidth.bytesPerS / bytes.llamacpp, 1) },
    };
  }

  const ratios: Partial<Record<BenchPrecision, PrecisionRatios>> = {};
  for (const p of precisions) ratios[p] = ratiosOf(runs[p]!);
  const figures = (p: BenchPrecision) => {
    const r = runs[p];
    return r && "decode" in r.ours ? r.ours : null;
  };
  const int4DecodeOverFp32 = figures("int4") && figures("fp32") ? round(figures("int4")!.decode.tokensPerS / figures("fp32")!.decode.tokensPerS, 2) : null;
  const plots = writePlots(o.outDir, precisions, runs, device, o.llamaGpu || "cpu");
  log(`plots: ${plots.join(", ")}`);
  return {
    model: spec.modelId,
    device,
    llamaCpp: o.llamaGpu || "cpu",
    threads,
    cpu: cpus()[0]?.model ?? "unknown",
    cpuFeatures: cpuFeatures(),
    quick: o.quick,
    ...ratios,
    int4DecodeOverFp32,
    physicalLimit: {
      bandwidthGBps: round(bandwidth.bytesPerS / 1e9, 1),
      bandwidthSource: bandwidth.source,
      decodeParameters: params,
      perPrecision: Object.fromEntries(precisions.map((p) => [p, { weightBytesPerToken: runs[p]!.weightBytesPerToken, decodeLimitTokensPerS: runs[p]!.decodeLimitTokensPerS }])),
    },
    runs,
    plots,
  };
}

/** Weights one decoded token reads: every layer's attention and MLP (MoE: the top-k experts and the router) and the LM head. */
export function decodeParameters(spec: DecoderSpec): number {
  const h = spec.hiddenSize;
  const attention = h * spec.headDim * (2 * spec.numHeads + 2 * spec.numKvHeads);
  let total = spec.vocabSize * h;
  for (let l = 0; l < spec.numLayers; l++) {
    const moe = spec.moe?.sparseLayers[l] ? spec.moe : null;
    const mlp = moe ? moe.topK * 3 * h * moe.intermediateSize + moe.numExperts * h : 3 * h * spec.intermediateSize;
    total += attention + mlp;
  }
  return total;
}

function ratiosOf(r: PrecisionRun): PrecisionRatios {
  if (!("decode" in r.ours) || !("decode" in r.llamacpp)) return { decodeVsLlamaCpp: null, prefillVsLlamaCpp: null, trajectoryVsLlamaCpp: null, concurrentVsLlamaCpp: null };
  const [a, b] = [r.ours, r.llamacpp];
  return {
    decodeVsLlamaCpp: round(a.decode.tokensPerS / b.decode.tokensPerS, 2),
    prefillVsLlamaCpp: round(a.prefill.tokensPerS / b.prefill.tokensPerS, 2),
    trajectoryVsLlamaCpp: round(b.trajectory.wallMs / a.trajectory.wallMs, 2),
    concurrentVsLlamaCpp: round(b.concurrent.wallMs / a.concurrent.wallMs, 2),
  };
}

/** Decode and prefill tokens/s by bits per weight, both engines, and decode's bandwidth limit. */
function writePlots(outDir: string, precisions: BenchPrecision[], runs: Partial<Record<BenchPrecision, PrecisionRun>>, device: string, llamaBuild: string): string[] {
  const points = (side: "ours" | "llamacpp", f: (x: EngineFigures) => number) =>
    precisions.flatMap((p) => {
      const figures = runs[p]![side];
      return "decode" in figures ? [{ x: side === "ours" ? PRECISION_PAIRS[p].ourBits : PRECISION_PAIRS[p].ggufBits, y: f(figures) }] : [];
    });
  const limit = (side: "ours" | "llamacpp") => precisions.map((p) => ({ x: side === "ours" ? PRECISION_PAIRS[p].ourBits : PRECISION_PAIRS[p].ggufBits, y: runs[p]!.decodeLimitTokensPerS[side] }));
  const chart = (file: string, title: string, f: (x: EngineFigures) => number, withLimit: boolean) => {
    const series = [
      { name: `Agent Edge (${device})`, color: "#1f77b4", points: points("ours", f) },
      { name: `llama.cpp (${llamaBuild})`, color: "#d62728", points: points("llamacpp", f) },
      ...(withLimit ? [{ name: "bandwidth limit (ours)", color: "#1f77b4", dashed: true, points: limit("ours") }, { name: "bandwidth limit (llama.cpp)", color: "#d62728", dashed: true, points: limit("llamacpp") }] : []),
    ].filter((s) => s.points.length > 0);
    return writeOut(outDir, file, lineChart({ title, xLabel: "bits per weight (scales included)", yLabel: "tokens/s", series, logX: true, logY: withLimit }));
  };
  return [
    chart("llamacpp-decode.svg", "Single-stream decode at 1k context, by weight precision", (x) => x.decode.tokensPerS, true),
    chart("llamacpp-prefill.svg", "Prefill of a 2,000-token prompt, by weight precision", (x) => x.prefill.tokensPerS, false),
  ];
}
