/**
 * MoE probe: which kernels of the Qwen3-MoE block (`gpu-backend/model/graph/moe-block.ts`) run on
 * onnxruntime-node's CPU and WebGPU providers, whether they match the float64 reference, and
 * what each costs per call against a dense SwiGLU MLP with the same ACTIVE parameters
 * (intermediate = k x moe_intermediate, built with the decoder's own ops).
 *
 *   npx tsx bench/probes/moe-probe.ts                   availability + CPU timings (1 and 2 threads), with
 *                                                  the int8/int4 experts of QMoE as rows of their own
 *   npx tsx bench/probes/moe-probe.ts --webgpu-timings  also time the WebGPU kernels (lavapipe: slow)
 *   npx tsx bench/probes/moe-probe.ts --quick           availability only
 *
 *   npx tsx bench/probes/moe-probe.ts --shape 512,128,8,128 --threads 1   another shape, one thread count
 *
 * Shape: hidden 512, 16 experts, k 4, moe_intermediate 256 (dense twin: intermediate 1024).
 * WebGPU needs an adapter (scripts/install-webgpu-deps.sh on a CPU-only machine) and
 * XDG_RUNTIME_DIR; without one the WebGPU rows say so.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { DataType, GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { concatTransposed, transpose } from "../../gpu-backend/model/graph/weight-layout";
import { MOE_KERNELS, moeBlockModel, pickMoeKernel, type MoeKernel, type MoeProvider } from "../../gpu-backend/model/graph/moe-block";
import { moeReference, randomMoeWeights, randomRows, type MoeShape } from "../../gpu-backend/model/testing/moe-reference";
import { mulberry32 } from "../../protocol/random";
import { QuantizedWeights } from "../../gpu-backend/model/quant/quantized-weights";

const quick = process.argv.includes("--quick");
const webgpuTimings = process.argv.includes("--webgpu-timings");
process.env.XDG_RUNTIME_DIR ||= mkdtempSync(join(tmpdir(), "xdg-"));
ort.env.logLevel = "error";

/** `--shape H,E,k,I` (hidden, experts, k, moe_intermediate); default 512,16,4,256. `--threads 1` times only that count. */
function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const [shapeH, shapeE, shapeK, shapeI] = (argValue("--shape") ?? "512,16,4,256").split(",").map(Number);
const SHAPE: MoeShape = { hiddenSize: shapeH!, numExperts: shapeE!, topK: shapeK!, moeIntermediateSize: shapeI!, normTopkProb: true };
const THREADS = argValue("--threads") ? [Number(argValue("--threads"))] : [1, 2];
const TOKENS = [1, 64, 256];
/** Each variant is timed in ROUNDS rounds of ROUND_MS, interleaved with the others, so that load
 * from other processes hits every variant alike; the tables give the fastest call (least
 * disturbed) and the median. */
const ROUNDS = 5;
const ROUND_MS = 150;
const MEMORY_GBPS = 24;
/** The gather kernel copies T·k experts' weights: skip it where that exceeds this. */
const GATHER_MAX_BYTES = 2 ** 30;

/** `qmoe-int8`/`qmoe-int4`: the `ort-moe` kernel with quantized experts (one com.microsoft.QMoE node). */
type Variant = MoeKernel | "dense-mlp" | "qmoe-int8" | "qmoe-int4" | "per-expert-int8" | "per-expert-int4";
const log = (line: string) => console.log(line);

function sessionOptions(provider: MoeProvider, threads: number): ort.InferenceSession.SessionOptions {
  return {
    executionProviders: [provider],
    graphOptimizationLevel: "all",
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: "sequential",
    logSeverityLevel: 4, // the refused CPU fallback is reported as NOT AVAILABLE below
    ...(provider === "webgpu" ? { extra: { session: { disable_cpu_ep_fallback: "1" } } } : {}),
  };
}

/** Dense SwiGLU MLP [T, H] -> [T, H] as `attentionOutputAndMlp` builds it (fused gate/up MatMul, Split, SiLU, down). */
function denseMlpModel(hid: number, inter: number, seed: number): Uint8Array {
  const rand = mulberry32(seed);
  const uniform = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.08 * Math.sqrt(3));
  const g = new GraphBuilder("dense_mlp");
  const x = g.input("x", DataType.FLOAT, ["T", hid]);
  const gu = g.op("MatMul", [x, g.weight("gate_up", concatTransposed([uniform(inter * hid), uniform(inter * hid)], hid), [hid, 2 * inter])]);
  const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: 1 } });
  const act = g.op("Mul", [g.op("Mul", [gate!, g.op("Sigmoid", [gate!])]), up!]);
  const y = g.op("MatMul", [act, g.weight("down", transpose(uniform(hid * inter), inter, hid), [inter, hid])]);
  g.output(y, DataType.FLOAT, ["T", hid], "y");
  return g.encode();
}

function modelFor(variant: Variant, shape: MoeShape, weights: ReturnType<typeof randomMoeWeights>): Uint8Array {
  if (variant === "dense-mlp") return denseMlpModel(shape.hiddenSize, shape.topK * shape.moeIntermediateSize, 11);
  if (variant === "qmoe-int8" || variant === "qmoe-int4")
    return moeBlockModel({ ...shape, layer: 0, weights, kernel: "ort-moe", quantized: QuantizedWeights.open(variant === "qmoe-int8" ? 8 : 4) });
  if (variant === "per-expert-int8" || variant === "per-expert-int4")
    return moeBlockModel({ ...shape, layer: 0, weights, kernel: "per-expert", quantized: QuantizedWeights.open(variant === "per-expert-int8" ? 8 : 4) });
  return moeBlockModel({ ...shape, layer: 0, weights, kernel: variant });
}

async function run(session: ort.InferenceSession, x: Float32Array, T: number, hid: number): Promise<Float32Array> {
  const out = await session.run({ x: new ort.Tensor("float32", x, [T, hid]) });
  return out.y!.data as Float32Array;
}

/** Adds the ms of each call, over at least ROUND_MS (and 3 calls), to `times`. */
async function timeRound(session: ort.InferenceSession, x: Float32Array, T: number, hid: number, times: number[]): Promise<void> {
  const start = performance.now();
  for (let n = 0; n < 3 || performance.now() - start < ROUND_MS; n++) {
    const t0 = performance.now();
    await run(session, x, T, hid);
    times.push(performance.now() - t0);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

function maxDiff(y: Float32Array, ref: Float64Array): number {
  let d = 0;
  for (let i = 0; i < y.length; i++) d = Math.max(d, Math.abs(y[i]! - ref[i]!));
  return d;
}

/** 1. Which kernels exist on which provider, and do they match the float64 reference. */
async function availability(): Promise<Map<MoeProvider, Set<MoeKernel>>> {
  const small: MoeShape = { hiddenSize: 64, moeIntermediateSize: 32, numExperts: 8, topK: 2, normTopkProb: true };
  const runs = new Map<MoeProvider, Set<MoeKernel>>([["cpu", new Set()], ["webgpu", new Set()]]);
  for (const provider of ["cpu", "webgpu"] as const) {
    for (const normTopkProb of [true, false]) {
      const shape = { ...small, normTopkProb };
      const weights = randomMoeWeights(shape, 0, 3, 0.2);
      for (const kernel of MOE_KERNELS) {
        let session: ort.InferenceSession;
        try {
          session = await ort.InferenceSession.create(moeBlockModel({ ...shape, layer: 0, weights, kernel }), sessionOptions(provider, 1));
        } catch (e) {
          const msg = String(e);
          const why = msg.includes("fallback to CPU EP has been explicitly disabled") ? "no kernel on this provider (a node would fall back to CPU)" : msg.slice(0, 160);
          if (normTopkProb) log(`  ${provider.padEnd(6)} ${kernel.padEnd(10)} NOT AVAILABLE: ${why}`);
          continue;
        }
        const diffs: string[] = [];
        for (const T of [1, 17]) {
          const x = randomRows(T, shape.hiddenSize, 100 + T);
          const ref = moeReference(x, T, shape, weights, 0);
          diffs.push(`T=${T} ${maxDiff(await run(session, x, T, shape.hiddenSize), ref.out).toExponential(1)}`);
        }
        runs.get(provider)!.add(kernel);
        log(`  ${provider.padEnd(6)} ${kernel.padEnd(10)} norm_topk_prob=${String(normTopkProb).padEnd(5)} runs; max |y - ref| ${diffs.join(", ")}`);
        await session.release();
      }
    }
  }
  return runs;
}

async function timings(provider: MoeProvider, threads: number, kernels: readonly MoeKernel[]): Promise<void> {
  const { hiddenSize: H, moeIntermediateSize: I, numExperts: E, topK: k } = SHAPE;
  const weights = randomMoeWeights(SHAPE, 0, 7);
  const variants: Variant[] = ["dense-mlp", ...kernels, ...(provider === "cpu" ? (["qmoe-int8", "qmoe-int4", "per-expert-int8", "per-expert-int4"] as const) : [])];
  const sessions = new Map<Variant, ort.InferenceSession>();
  for (const v of variants) sessions.set(v, await ort.InferenceSession.create(modelFor(v, SHAPE, weights), sessionOptions(provider, threads)));
  const best = new Map<string, number>();
  const mid = new Map<string, number>();
  for (const T of TOKENS) {
    const x = randomRows(T, H, 200 + T);
    const active = variants.filter((v) => {
      const bytes = T * k * 3 * H * I * 4;
      if (v !== "gather" || bytes <= GATHER_MAX_BYTES) return true;
      log(`  ${provider} threads=${threads} gather     T=${String(T).padStart(3)}  skipped: would copy ${(bytes / 2 ** 30).toFixed(1)} GiB of expert weights`);
      return false;
    });
    const times = new Map(active.map((v) => [v, [] as number[]]));
    for (const v of active) for (let w = 0; w < (provider === "webgpu" ? 2 : 3); w++) await run(sessions.get(v)!, x, T, H);
    for (let r = 0; r < ROUNDS; r++) for (const v of active) await timeRound(sessions.get(v)!, x, T, H, times.get(v)!);
    for (const v of active) {
      best.set(`${v}/${T}`, Math.min(...times.get(v)!));
      mid.set(`${v}/${T}`, median(times.get(v)!));
      const ms = best.get(`${v}/${T}`)!;
      const ratio = best.get(`dense-mlp/${T}`)! / ms;
      log(`  ${provider} threads=${threads} ${v.padEnd(10)} T=${String(T).padStart(3)}  best ${ms.toFixed(3).padStart(8)} ms (median ${mid.get(`${v}/${T}`)!.toFixed(3)}, ${times.get(v)!.length} calls)  ${((T / ms) * 1000).toFixed(0).padStart(7)} tok/s  vs dense MLP x${ratio.toFixed(2)}`);
    }
  }
  for (const s of sessions.values()) await s.release();
  const table = ["| kernel | " + TOKENS.map((T) => `T=${T}: best ms (median) | tok/s vs dense`).join(" | ") + " |", "|---|" + TOKENS.map(() => "---|---|").join("")];
  for (const v of variants) {
    const cells = TOKENS.map((T) => {
      const ms = best.get(`${v}/${T}`);
      return ms === undefined ? "skipped | -" : `${ms.toFixed(3)} (${mid.get(`${v}/${T}`)!.toFixed(3)}) | x${(best.get(`dense-mlp/${T}`)! / ms).toFixed(2)}`;
    });
    table.push(`| ${v} | ${cells.join(" | ")} |`);
  }
  log(`\n${provider}, ${threads} intra-op thread(s), hidden ${H}, ${E} experts, k ${k}, moe_intermediate ${I}:\n${table.join("\n")}\n`);
}

function physicalLimit(): void {
  const { hiddenSize: H, moeIntermediateSize: I, numExperts: E, topK: k } = SHAPE;
  const active = k * 3 * H * I * 4;
  const router = E * H * 4;
  const all = E * 3 * H * I * 4;
  const ms = (bytes: number) => ((bytes / (MEMORY_GBPS * 1e9)) * 1e3).toFixed(3);
  log(`Physical limit per decoded token (fp32, ${MEMORY_GBPS} GB/s):`);
  log(`  active experts ${k} x 3 x ${H} x ${I} x 4 B = ${(active / 2 ** 20).toFixed(2)} MiB + router ${(router / 1024).toFixed(0)} KiB -> >= ${ms(active + router)} ms per layer per decode step (dense twin: same bytes)`);
  log(`  all ${E} experts = ${(all / 2 ** 20).toFixed(2)} MiB -> ${ms(all)} ms (what the dense all-experts kernel reads)`);
  log(`  gather kernel: copies the ${k} experts (read + write) then MatMul reads the copy: ~3x active = ${ms(3 * active)} ms`);
}

async function main(): Promise<void> {
  log("== 1. kernels per provider (small shape: hidden 64, 8 experts, k 2, moe_intermediate 32; fp32 tolerance 1e-5)");
  const runs = await availability();
  for (const p of ["cpu", "webgpu"] as const) log(`  ${p}: runs ${[...runs.get(p)!].join(", ") || "nothing"}; picked: ${pickMoeKernel(p, false)} (float), ${pickMoeKernel(p, true)} (int8/int4)`);
  physicalLimit();
  if (quick) return;
  for (const threads of THREADS) {
    log(`== 2. CPU timings, ${threads} thread(s)`);
    await timings("cpu", threads, MOE_KERNELS);
  }
  if (webgpuTimings && runs.get("webgpu")!.size > 0) {
    log("== 3. WebGPU timings (onnxruntime-node WebGPU EP; lavapipe = software Vulkan: NOT representative of a GPU)");
    await timings("webgpu", 1, MOE_KERNELS.filter((k) => runs.get("webgpu")!.has(k)));
  }
}

await main();
