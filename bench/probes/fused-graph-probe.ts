/**
 * Fused paged graph probe (docs/webgpu.md "Fused paged graph"), on onnxruntime-node's WebGPU
 * provider with every node on WebGPU (`disable_cpu_ep_fallback`):
 *
 *   npx tsx bench/probes/fused-graph-probe.ts ops       the fused ops against TypeScript references:
 *        SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization (fp32, fp16, 2-D and 3-D),
 *        PagedAttention's own rotary (do_rotary=1, packed or not) against the same op fed q/k
 *        rotated in TypeScript, for head / rotary dims that the 1.30 kernel takes or refuses,
 *        QuickGelu(alpha 1) as silu
 *   npx tsx bench/probes/fused-graph-probe.ts counts    nodes per step, demo model's shape, unfused vs fused
 *   npx tsx bench/probes/fused-graph-probe.ts timing [--validation-mode M] [--steps N]
 *        decode steps of the demo-shaped graph (fp32 and fp16, unfused and fused): median ms per
 *        step and the first tokens; M (disabled | wgpuOnly | basic | full) is passed as the
 *        provider option `validationMode` (run one process per mode: the WebGPU context is made once)
 *
 * Needs a WebGPU adapter (scripts/install-webgpu-deps.sh on a CPU-only machine) and XDG_RUNTIME_DIR.
 * Lavapipe timings are not GPU timings.
 */
import * as ort from "onnxruntime-node";
import { DataType, GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { PAGED_IO, buildPagedLlamaGraph } from "../../gpu-backend/model/graph/paged-llama-graph";
import { f16ToF32, f32ToF16 } from "../../gpu-backend/model/quant/float-formats";
import { QuantizedWeights } from "../../gpu-backend/model/quant/quantized-weights";
import { randomWeights } from "../../gpu-backend/model/testing/random-weights";
import { tinySpec } from "../../gpu-backend/model/testing/tiny-spec";
import { mulberry32 } from "../../protocol/random";

const F = DataType.FLOAT;
const F16 = DataType.FLOAT16;
const I32 = DataType.INT32;
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const validationMode = arg("--validation-mode");

const session = (model: Uint8Array) =>
  ort.InferenceSession.create(model, {
    executionProviders: [validationMode ? ({ name: "webgpu", validationMode } as unknown as "webgpu") : "webgpu"],
    logSeverityLevel: 3,
    extra: { session: { disable_cpu_ep_fallback: "1" } },
  });

const random = mulberry32(7);
const rand = (n: number, scale = 1) => Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
const asF32 = (t: ort.Tensor) => (t.type === "float16" ? f16ToF32(new Uint16Array((t.data as Uint16Array).buffer)) : (t.data as Float32Array));
const tensor = (half: boolean, data: Float32Array, dims: number[]) => (half ? new ort.Tensor("float16", f32ToF16(data), dims) : new ort.Tensor("float32", data, dims));
const round16 = (x: Float32Array) => f16ToF32(f32ToF16(x));
const failure = (e: unknown) => `FAILED ${(e as Error).message.split("\n")[0]!.slice(0, 160)}`;

function rmsNorm(x: Float32Array, w: Float32Array, dim: number, eps: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let r = 0; r < x.length / dim; r++) {
    let s = 0;
    for (let i = 0; i < dim; i++) s += x[r * dim + i]! ** 2;
    const inv = 1 / Math.sqrt(s / dim + eps);
    for (let i = 0; i < dim; i++) out[r * dim + i] = x[r * dim + i]! * inv * w[i]!;
  }
  return out;
}

async function norms(): Promise<void> {
  for (const half of [false, true]) {
    const dt = half ? F16 : F;
    for (const dims of [[5, 64], [5, 4, 24]]) {
      const dim = dims[dims.length - 1]!;
      const g = new GraphBuilder("norms");
      const [x, skip, w] = [g.input("x", dt, dims), g.input("skip", dt, dims), g.input("w", dt, [dim])];
      const epsilon = { float: 1e-6 };
      g.output(g.op("SimplifiedLayerNormalization", [x, w], { attributes: { axis: -1, epsilon } }), dt, dims, "y");
      const [y2, , , sum] = g.opN("SkipSimplifiedLayerNormalization", [x, skip, w], 4, { domain: "com.microsoft", attributes: { epsilon }, emptyOutputs: [1, 2] });
      g.output(y2!, dt, dims, "y2");
      g.output(sum!, dt, dims, "sum");
      const n = dims.reduce((a, b) => a * b, 1);
      const [xs, ss, ws] = [rand(n, 3), rand(n, 3), rand(dim)];
      const label = `${half ? "fp16" : "fp32"} [${dims}]`;
      try {
        const r = await (await session(g.encode())).run({ x: tensor(half, xs, dims), skip: tensor(half, ss, dims), w: tensor(half, ws, [dim]) });
        const [xr, sr, wr] = half ? [round16(xs), round16(ss), round16(ws)] : [xs, ss, ws];
        const sumRef = xr.map((v, i) => v + sr[i]!);
        const diffs = [maxDiff(asF32(r.y!), rmsNorm(xr, wr, dim, 1e-6)), maxDiff(asF32(r.y2!), rmsNorm(sumRef, wr, dim, 1e-6)), maxDiff(asF32(r.sum!), sumRef)];
        console.log(`${label}: SimplifiedLayerNormalization ${diffs[0]!.toExponential(2)}, Skip... ${diffs[1]!.toExponential(2)}, its sum ${diffs[2]!.toExponential(2)}`);
      } catch (e) {
        console.log(`${label}: ${failure(e)}`);
      }
    }
  }
}

/** PagedAttention rotating q/k itself vs the same op fed q/k rotated here (two sequences, 3 and 4 new tokens after 5 and 9 cached). */
async function pagedRotary(hd: number, rotaryDim: number, packed: boolean): Promise<void> {
  const [nh, nkv, T, bs, numBlocks, maxPos, half] = [4, 2, 7, 16, 4, 64, rotaryDim / 2];
  const width = (nh + 2 * nkv) * hd;
  const inv = Float32Array.from({ length: half }, (_, i) => 1 / Math.pow(1e4, (2 * i) / rotaryDim));
  const table = (f: (a: number) => number) => Float32Array.from({ length: maxPos * half }, (_, j) => f(Math.floor(j / half) * inv[j % half]!));
  const positions = [5, 6, 7, 9, 10, 11, 12];
  const qkv = rand(T * width);
  const rotated = qkv.slice();
  for (let t = 0; t < T; t++) for (let h = 0; h < nh + nkv; h++) for (let i = 0; i < half; i++) {
    const o = t * width + h * hd;
    const [c, s] = [Math.cos(positions[t]! * inv[i]!), Math.sin(positions[t]! * inv[i]!)];
    rotated[o + i] = qkv[o + i]! * c - qkv[o + i + half]! * s;
    rotated[o + i + half] = qkv[o + i + half]! * c + qkv[o + i]! * s;
  }
  const build = (doRotary: boolean) => {
    const g = new GraphBuilder("paged");
    const q = g.input("qkv", F16, [T, width]);
    const cache = [g.input("kc", F16, [numBlocks, bs, nkv, hd]), g.input("vc", F16, [numBlocks, bs, nkv, hd])];
    const ints = [g.input("cum", I32, [3]), g.input("past", I32, [2]), g.input("bt", I32, [2, 1])];
    const rope = doRotary ? [g.half("cos", f32ToF16(table(Math.cos)), [maxPos, half]), g.half("sin", f32ToF16(table(Math.sin)), [maxPos, half])] : ["", ""];
    const qkvIn = packed ? [q, "", ""] : g.opN("Split", [q, g.int64s([nh * hd, nkv * hd, nkv * hd])], 3, { attributes: { axis: 1 } });
    const out = g.op("PagedAttention", [...qkvIn, ...cache, ...ints, ...rope, "", "", "", "", "", "", g.input("md", I32, [3])], {
      domain: "com.microsoft",
      attributes: { num_heads: nh, kv_num_heads: nkv, scale: { float: 1 / Math.sqrt(hd) }, ...(doRotary ? { do_rotary: 1, rotary_interleaved: 0 } : {}) },
    });
    g.output(out, F16, [T, nh * hd], "out");
    return g.encode();
  };
  const pool = [rand(numBlocks * bs * nkv * hd), rand(numBlocks * bs * nkv * hd)];
  const feeds = (data: Float32Array) => ({
    qkv: tensor(true, data, [T, width]),
    kc: tensor(true, pool[0]!, [numBlocks, bs, nkv, hd]),
    vc: tensor(true, pool[1]!, [numBlocks, bs, nkv, hd]),
    cum: new ort.Tensor("int32", Int32Array.of(0, 3, 7), [3]),
    past: new ort.Tensor("int32", Int32Array.of(5, 9), [2]),
    bt: new ort.Tensor("int32", Int32Array.of(1, 2), [2, 1]),
    md: new ort.Tensor("int32", Int32Array.of(4, 13, 13), [3]),
  });
  const label = `PagedAttention rotary: head ${hd}, rotary ${rotaryDim}, ${packed ? "packed" : "unpacked"} qkv`;
  try {
    const want = await (await session(build(false))).run(feeds(rotated));
    const got = await (await session(build(true))).run(feeds(qkv));
    console.log(`${label}: op rotary vs rotated inputs, max |diff| ${maxDiff(asF32(got.out!), asF32(want.out!)).toExponential(2)}`);
  } catch (e) {
    console.log(`${label}: ${failure(e)}`);
  }
}

async function quickGelu(): Promise<void> {
  for (const half of [false, true]) {
    const g = new GraphBuilder("silu");
    const x = g.input("x", half ? F16 : F, [3, 8]);
    g.output(g.op("QuickGelu", [x], { domain: "com.microsoft", attributes: { alpha: { float: 1 } } }), half ? F16 : F, [3, 8], "y");
    const xs = rand(24, 4);
    try {
      const r = await (await session(g.encode())).run({ x: tensor(half, xs, [3, 8]) });
      const xr = half ? round16(xs) : xs;
      console.log(`QuickGelu(alpha 1) ${half ? "fp16" : "fp32"} vs x*sigmoid(x): max |diff| ${maxDiff(asF32(r.y!), xr.map((v) => v / (1 + Math.exp(-v)))).toExponential(2)}`);
    } catch (e) {
      console.log(`QuickGelu ${half ? "fp16" : "fp32"}: ${failure(e)}`);
    }
  }
}

/** The demo model's shape (8 layers, hidden 512, 8 query heads over 2 KV heads of 64, MLP 1536), a small vocabulary. */
function demoShaped() {
  const spec = tinySpec({
    modelId: "demo-shaped", numLayers: 8, hiddenSize: 512, numHeads: 8, numKvHeads: 2, headDim: 64, intermediateSize: 1536, vocabSize: 4096,
    rotaryDim: 64, invFreq: Float32Array.from({ length: 32 }, (_, i) => 1 / Math.pow(1e4, (2 * i) / 64)), attentionScale: 1 / 8,
  });
  return { spec, weights: randomWeights(spec, 3) };
}

function counts(): void {
  const { spec, weights } = demoShaped();
  for (const precision of ["fp32", "fp16", "int4"]) {
    const row = [false, true].flatMap((newKvOutputs) => [false, true].map((fused) => {
      const options = { fused, newKvOutputs, float16: precision === "fp16", quantized: precision === "int4" ? QuantizedWeights.open(4) : null };
      return `${newKvOutputs ? "cuda" : "webgpu"} ${fused ? "fused" : "unfused"} ${buildPagedLlamaGraph(spec, weights, 16, options).graph.nodes.length}`;
    }));
    console.log(`${precision}: ${row.join(", ")} nodes per step`);
  }
}

async function timing(steps: number): Promise<void> {
  const { spec, weights } = demoShaped();
  const [numBlocks, bs] = [8, 16];
  for (const [name, options] of [["fp32", {}], ["fp16", { float16: true }]] as const) {
    for (const fused of [false, true, false, true]) {
      const s = await session(buildPagedLlamaGraph(spec, weights, bs, { ...options, fused }).model);
      const pool = new Uint16Array(numBlocks * bs * spec.numKvHeads * spec.headDim);
      const times: number[] = [];
      const tokens: bigint[] = [];
      for (let step = 0; step < steps; step++) {
        const p = 20 + step;
        const int32 = (values: number[], dims: number[]) => new ort.Tensor("int32", Int32Array.from(values), dims);
        const feeds: Record<string, ort.Tensor> = {
          [PAGED_IO.inputIds]: int32([(step * 37) % spec.vocabSize], [1]),
          [PAGED_IO.positionIds]: int32([p], [1]),
          [PAGED_IO.cumulative]: int32([0, 1], [2]),
          [PAGED_IO.past]: int32([p], [1]),
          [PAGED_IO.blockTable]: int32([0, 1, 2, 3], [1, 4]),
          [PAGED_IO.logitIndex]: int32([0], [1]),
          [PAGED_IO.attentionMetadata]: int32([1, p + 1, p + 1], [3]),
        };
        for (let l = 0; l < spec.numLayers; l++)
          for (const kv of [PAGED_IO.kvK(l), PAGED_IO.kvV(l)]) feeds[kv] = new ort.Tensor("float16", pool, [numBlocks, bs, spec.numKvHeads, spec.headDim]);
        const t0 = performance.now();
        const r = await s.run(feeds, [PAGED_IO.nextToken]);
        times.push(performance.now() - t0);
        tokens.push((r[PAGED_IO.nextToken]!.data as BigInt64Array)[0]!);
      }
      await s.release();
      const steady = times.slice(Math.min(5, steps - 1)).sort((a, b) => a - b);
      console.log(`${name} ${fused ? "fused" : "unfused"} (validationMode ${validationMode ?? "default"}): median ${steady[steady.length >> 1]!.toFixed(1)} ms/step, tokens ${tokens.slice(0, 8).join(",")}`);
    }
  }
}

const mode = process.argv[2] ?? "ops";
if (mode === "ops") {
  await norms();
  for (const [hd, rotaryDim] of [[16, 16], [32, 16], [48, 32], [16, 12], [24, 24], [32, 24]] as const) for (const packed of [true, false]) await pagedRotary(hd, rotaryDim, packed);
  await quickGelu();
} else if (mode === "counts") {
  counts();
} else if (mode === "timing") {
  await timing(Number(arg("--steps") ?? 25));
} else {
  console.error("usage: fused-graph-probe.ts ops | counts | timing [--validation-mode M] [--steps N]");
  process.exit(2);
}
