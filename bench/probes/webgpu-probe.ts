/**
 * WebGPU probe: checks, on this machine, everything the `webgpu` executor will rely on, and
 * prints numbers for docs/webgpu.md.
 *
 *   npx tsx bench/probes/webgpu-probe.ts            all checks
 *   npx tsx bench/probes/webgpu-probe.ts --quick    skip the large-pool timings
 *
 * 1. an adapter exists (onnxruntime-node fails session creation without one; exit 2 here);
 * 2. MatMul + Add (float32, and float16 through Cast) on WebGPU equals CPU, and
 *    `session.disable_cpu_ep_fallback` turns a silent CPU fallback into an error;
 * 3. com.microsoft.PagedAttention (fp16, block 16, GQA, cached tokens behind a scattered block
 *    table) matches a float64 TypeScript reference, through three routes:
 *    a. onnxruntime-node, pool as CPU tensors (the whole pool crosses the bus twice per run),
 *    b. onnxruntime-node, pool as `gpu-buffer` outputs fed back as inputs (stays on the device,
 *       but the op copies it on the device each run because input and output are not aliased),
 *    c. onnxruntime-web's WebGPU EP in a child process on Dawn from the `webgpu` npm package, pool
 *       in our own GPUBuffers bound as input AND preallocated output: updated in place;
 *    each timed with a small and a large pool.
 *
 * Needs scripts/install-webgpu-deps.sh (Mesa lavapipe on a CPU-only machine) and XDG_RUNTIME_DIR.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import { DataType, GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { webGpuRuntime } from "../../gpu-backend/model/executors/web-device-pool-executor";
import {
  checkPagedAttention,
  feedShapes,
  makePagedAttentionCase,
  pagedAttentionGraph,
  type PagedAttentionCase,
} from "../../gpu-backend/model/testing/paged-attention-case";

/** fp16 tolerance against the float64 reference: inputs are fp16 in [-1, 1], outputs are
 * convex combinations of fp16 values in [-1, 1]; one fp16 ulp at 1 is ~1e-3. */
export const PAGED_ATTENTION_TOLERANCE = 2e-3;
const NO_ADAPTER = "no WebGPU adapter: run scripts/install-webgpu-deps.sh and set XDG_RUNTIME_DIR";
const SMALL_POOL_BLOCKS = 8;
const LARGE_POOL_BLOCKS = 16384;
const TIMED_RUNS = 3;

const quick = process.argv.includes("--quick");
let failures = 0;
const fail = (what: string) => {
  failures++;
  console.log(`FAIL ${what}`);
};
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(2)} MiB`;

function tensorBytes(tensors: Record<string, ort.Tensor>): number {
  let n = 0;
  for (const t of Object.values(tensors)) n += (t.data as ArrayBufferView).byteLength;
  return n;
}

function cpuFeeds(c: PagedAttentionCase): Record<string, ort.Tensor> {
  const s = feedShapes(c);
  return {
    query: new ort.Tensor("float16", c.query, s.query),
    key: new ort.Tensor("float16", c.key, s.key),
    value: new ort.Tensor("float16", c.value, s.value),
    key_cache: new ort.Tensor("float16", c.keyCache, s.key_cache),
    value_cache: new ort.Tensor("float16", c.valueCache, s.value_cache),
    cumulative_sequence_length: new ort.Tensor("int32", c.cumulative, s.cumulative_sequence_length),
    past_seqlens: new ort.Tensor("int32", c.past, s.past_seqlens),
    block_table: new ort.Tensor("int32", c.blockTable, s.block_table),
  };
}

function reportCheck(label: string, c: PagedAttentionCase, r: ReturnType<typeof checkPagedAttention>): void {
  const ok = r.maxAbsError <= PAGED_ATTENTION_TOLERANCE && r.keyCacheMismatches === 0 && r.valueCacheMismatches === 0;
  console.log(
    `${ok ? "ok  " : "FAIL"} ${label}: max |out - ref| = ${r.maxAbsError.toExponential(2)} (tol ${PAGED_ATTENTION_TOLERANCE}),` +
      ` pool mismatches K ${r.keyCacheMismatches} V ${r.valueCacheMismatches} of ${c.expectedKeyCache.length}`,
  );
  if (!ok) failures++;
}

async function timeRuns(run: () => Promise<void>): Promise<{ firstMs: number; steadyMs: number }> {
  let t = performance.now();
  await run();
  const firstMs = performance.now() - t;
  const times: number[] = [];
  for (let i = 0; i < TIMED_RUNS; i++) {
    t = performance.now();
    await run();
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return { firstMs, steadyMs: times[Math.floor(times.length / 2)]! };
}

// ---------------------------------------------------------------------------------------------
// 1. adapter

async function checkAdapter(): Promise<void> {
  const g = new GraphBuilder("adapter");
  g.output(g.op("Relu", [g.input("x", DataType.FLOAT, [1])]), DataType.FLOAT, [1], "y");
  try {
    const s = await ort.InferenceSession.create(g.encode(), { executionProviders: ["webgpu"], logSeverityLevel: 3 });
    await s.release();
  } catch (e) {
    const message = (e as Error).message;
    console.error(NO_ADAPTER);
    console.error(`  (onnxruntime: ${message.split("\n")[0]})`);
    process.exit(2);
  }
  console.log("ok   WebGPU adapter found (onnxruntime-node session on the webgpu EP created)");
}

// ---------------------------------------------------------------------------------------------
// 2. MatMul + Add, float32 and float16; CPU fallback made an error

async function checkMatMulAdd(): Promise<void> {
  const w = Float32Array.from({ length: 24 }, (_, i) => Math.cos(i) / 2);
  const b = Float32Array.from({ length: 6 }, (_, i) => i / 10 - 0.3);
  const x = new ort.Tensor("float32", Float32Array.from({ length: 12 }, (_, i) => Math.sin(i)), [3, 4]);
  for (const fp16 of [false, true]) {
    const g = new GraphBuilder("matmul_add");
    let h = g.input("x", DataType.FLOAT, ["n", 4]);
    let wt = g.weight("w", w, [4, 6]);
    let bt = g.weight("b", b, [6]);
    if (fp16) {
      const half = { attributes: { to: DataType.FLOAT16 } };
      [h, wt, bt] = [g.op("Cast", [h], half), g.op("Cast", [wt], half), g.op("Cast", [bt], half)];
    }
    let y = g.op("Add", [g.op("MatMul", [h, wt]), bt]);
    if (fp16) y = g.op("Cast", [y], { attributes: { to: DataType.FLOAT } });
    g.output(y, DataType.FLOAT, ["n", 6], "y");
    const bytes = g.encode();
    const results: Float32Array[] = [];
    for (const ep of ["cpu", "webgpu"]) {
      const s = await ort.InferenceSession.create(bytes, {
        executionProviders: [ep],
        logSeverityLevel: 3,
        // Fails session creation if any node would land on the CPU EP (no silent fallback).
        ...(ep === "webgpu" ? { extra: { session: { disable_cpu_ep_fallback: "1" } } } : {}),
      });
      results.push((await s.run({ x })).y!.data as Float32Array);
      await s.release();
    }
    let maxDiff = 0;
    for (let i = 0; i < results[0]!.length; i++) maxDiff = Math.max(maxDiff, Math.abs(results[0]![i]! - results[1]![i]!));
    const tol = fp16 ? 2e-3 : 1e-6; // fp32: summation order only; fp16: rounding of the fp16 sums
    const label = `MatMul + Add ${fp16 ? "float16 (Cast)" : "float32"}: webgpu vs cpu max diff ${maxDiff.toExponential(2)} (tol ${tol})`;
    if (maxDiff <= tol) console.log(`ok   ${label}`);
    else fail(label);
  }

  // float64 has no WebGPU kernel: by default the node silently runs on CPU; with
  // session.disable_cpu_ep_fallback=1 session creation fails instead.
  const g = new GraphBuilder("f64");
  const x64 = g.input("x", 11 as DataType, [2]);
  g.output(g.op("Add", [x64, x64]), 11 as DataType, [2], "y");
  let silent = false;
  try {
    const s = await ort.InferenceSession.create(g.encode(), { executionProviders: ["webgpu"], logSeverityLevel: 4 });
    silent = true;
    await s.release();
  } catch {
    /* not expected */
  }
  let refused = false;
  try {
    await ort.InferenceSession.create(g.encode(), {
      executionProviders: ["webgpu"],
      logSeverityLevel: 4,
      extra: { session: { disable_cpu_ep_fallback: "1" } },
    });
  } catch (e) {
    refused = /fallback to CPU EP has been explicitly disabled/.test((e as Error).message);
  }
  const label = `CPU fallback: float64 Add silently on CPU by default (${silent}), refused with disable_cpu_ep_fallback (${refused})`;
  if (silent && refused) console.log(`ok   ${label}`);
  else fail(label);
}

// ---------------------------------------------------------------------------------------------
// 3a. PagedAttention, onnxruntime-node, pool as CPU tensors

async function pagedAttentionCpuTensors(): Promise<void> {
  const session = await ort.InferenceSession.create(pagedAttentionGraph(makePagedAttentionCase().dims), {
    executionProviders: ["webgpu"],
    logSeverityLevel: 3,
    extra: { session: { disable_cpu_ep_fallback: "1" } },
  });
  for (const numBlocks of quick ? [SMALL_POOL_BLOCKS] : [SMALL_POOL_BLOCKS, LARGE_POOL_BLOCKS]) {
    const c = makePagedAttentionCase({ numBlocks });
    const feeds = cpuFeeds(c);
    let out: ort.InferenceSession.ReturnType = {};
    const t = await timeRuns(async () => {
      out = await session.run(feeds);
    });
    reportCheck(
      `PagedAttention node/cpu-tensors pool ${numBlocks} blocks`,
      c,
      checkPagedAttention(
        c,
        out.output!.data as Uint16Array,
        out.key_cache_out!.data as Uint16Array,
        out.value_cache_out!.data as Uint16Array,
      ),
    );
    const poolBytes = c.keyCache.byteLength + c.valueCache.byteLength;
    const up = tensorBytes(feeds);
    const down = tensorBytes(out as Record<string, ort.Tensor>);
    console.log(
      `     bytes per run: host->device ${mib(up)} (pool ${mib(poolBytes)}), device->host ${mib(down)} (pool ${mib(poolBytes)});` +
        ` first run ${t.firstMs.toFixed(0)} ms, steady ${t.steadyMs.toFixed(1)} ms`,
    );
  }
  await session.release();
}

// ---------------------------------------------------------------------------------------------
// 3b. PagedAttention, onnxruntime-node, pool as gpu-buffer outputs chained into the next run

async function pagedAttentionNodeGpuBuffers(): Promise<void> {
  // Upload: Identity with gpu-buffer outputs (the only way to create a device tensor from JS in
  // onnxruntime-node). Download: Identity with CPU outputs (Tensor.getData() on a gpu-buffer
  // tensor aborts the process in onnxruntime-node 1.30: never call it).
  const cacheShape = ["num_blocks", 16, 2, 16];
  const id = new GraphBuilder("identity2");
  id.output(id.op("Identity", [id.input("a", DataType.FLOAT16, cacheShape)]), DataType.FLOAT16, cacheShape, "a_out");
  id.output(id.op("Identity", [id.input("b", DataType.FLOAT16, cacheShape)]), DataType.FLOAT16, cacheShape, "b_out");
  const upload = await ort.InferenceSession.create(id.encode(), {
    executionProviders: ["webgpu"],
    preferredOutputLocation: "gpu-buffer",
    logSeverityLevel: 3,
  });
  const download = await ort.InferenceSession.create(id.encode(), { executionProviders: ["webgpu"], logSeverityLevel: 3 });
  const session = await ort.InferenceSession.create(pagedAttentionGraph(makePagedAttentionCase().dims), {
    executionProviders: ["webgpu"],
    logSeverityLevel: 3, // level 2 shows, per run: "cache outputs are not aliased with cache inputs; falling back to a GPU cache copy"
    preferredOutputLocation: { output: "cpu", key_cache_out: "gpu-buffer", value_cache_out: "gpu-buffer" },
    extra: { session: { disable_cpu_ep_fallback: "1" } },
  });
  for (const numBlocks of quick ? [SMALL_POOL_BLOCKS] : [SMALL_POOL_BLOCKS, LARGE_POOL_BLOCKS]) {
    const c = makePagedAttentionCase({ numBlocks });
    const s = feedShapes(c);
    const up = await upload.run({
      a: new ort.Tensor("float16", c.keyCache, s.key_cache),
      b: new ort.Tensor("float16", c.valueCache, s.value_cache),
    });
    let k = up.a_out!;
    let v = up.b_out!;
    const feeds = cpuFeeds(c);
    let output: Uint16Array | undefined;
    // The first run writes the new K/V; later runs write the same values at the same slots, so
    // the pool stays comparable with the reference while each run feeds the previous run's pool.
    const t = await timeRuns(async () => {
      const out = await session.run({ ...feeds, key_cache: k, value_cache: v });
      if (out.key_cache_out!.location !== "gpu-buffer") throw new Error("cache output not on the device");
      k.dispose();
      v.dispose();
      k = out.key_cache_out!;
      v = out.value_cache_out!;
      output = out.output!.data as Uint16Array;
    });
    const back = await download.run({ a: k, b: v });
    reportCheck(
      `PagedAttention node/gpu-buffer pool ${numBlocks} blocks (pool chained through ${TIMED_RUNS + 1} runs)`,
      c,
      checkPagedAttention(c, output!, back.a_out!.data as Uint16Array, back.b_out!.data as Uint16Array),
    );
    const small = tensorBytes(feeds) - c.keyCache.byteLength - c.valueCache.byteLength;
    console.log(
      `     bytes per run: host->device ${small} B, device->host ${output!.byteLength} B (pool stays on the device, copied there once per run);` +
        ` first run ${t.firstMs.toFixed(0)} ms, steady ${t.steadyMs.toFixed(1)} ms`,
    );
    k.dispose();
    v.dispose();
  }
  await Promise.all([session.release(), upload.release(), download.release()]);
}

// ---------------------------------------------------------------------------------------------
// 3c. onnxruntime-web's WebGPU EP on dawn.node (child process): pool in our GPUBuffers, in place

async function pagedAttentionWebInPlace(): Promise<void> {
  // The executor's own set-up: dawn.node as navigator.gpu, its writeBuffer shim, an adapter check.
  let rt: Awaited<ReturnType<typeof webGpuRuntime>>;
  try {
    rt = await webGpuRuntime();
  } catch {
    console.log(NO_ADAPTER + " (dawn.node)");
    process.exit(2);
  }
  const ortWeb = rt.ort as unknown as typeof import("onnxruntime-web");
  const G = rt.globals as Record<string, any>;
  ortWeb.env.logLevel = "warning"; // the "not aliased" warning would show here: it does not
  const session = await ortWeb.InferenceSession.create(pagedAttentionGraph(makePagedAttentionCase().dims), {
    executionProviders: ["webgpu"],
    preferredOutputLocation: { output: "cpu", key_cache_out: "gpu-buffer", value_cache_out: "gpu-buffer" },
  });
  const device = (await ortWeb.env.webgpu.device) as any;
  const U = G.GPUBufferUsage;
  const upload = (data: Uint16Array) => {
    const b = device.createBuffer({ size: Math.ceil(data.byteLength / 4) * 4, usage: U.STORAGE | U.COPY_SRC | U.COPY_DST });
    device.queue.writeBuffer(b, 0, data);
    return b;
  };
  const read = async (b: any, bytes: number): Promise<Uint16Array> => {
    const r = device.createBuffer({ size: b.size, usage: U.MAP_READ | U.COPY_DST });
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(b, 0, r, 0, b.size);
    device.queue.submit([enc.finish()]);
    await r.mapAsync(G.GPUMapMode.READ);
    const out = new Uint16Array(r.getMappedRange().slice(0, bytes));
    r.unmap();
    r.destroy();
    return out;
  };
  for (const numBlocks of quick ? [SMALL_POOL_BLOCKS] : [SMALL_POOL_BLOCKS, LARGE_POOL_BLOCKS]) {
    const c = makePagedAttentionCase({ numBlocks });
    const s = feedShapes(c);
    const kBuf = upload(c.keyCache);
    const vBuf = upload(c.valueCache);
    const k = ortWeb.Tensor.fromGpuBuffer(kBuf, { dataType: "float16", dims: s.key_cache! });
    const v = ortWeb.Tensor.fromGpuBuffer(vBuf, { dataType: "float16", dims: s.value_cache! });
    const feeds = {
      query: new ortWeb.Tensor("float16", c.query, s.query),
      key: new ortWeb.Tensor("float16", c.key, s.key),
      value: new ortWeb.Tensor("float16", c.value, s.value),
      key_cache: k,
      value_cache: v,
      cumulative_sequence_length: new ortWeb.Tensor("int32", c.cumulative, s.cumulative_sequence_length),
      past_seqlens: new ortWeb.Tensor("int32", c.past, s.past_seqlens),
      block_table: new ortWeb.Tensor("int32", c.blockTable, s.block_table),
    };
    let output: Uint16Array | undefined;
    let sameBuffer = true;
    const t = await timeRuns(async () => {
      // The cache tensors are both inputs and preallocated outputs: one GPUBuffer each.
      const out = await session.run(feeds, { output: null, key_cache_out: k, value_cache_out: v });
      sameBuffer &&= out.key_cache_out === k && out.value_cache_out === v;
      output = out.output!.data as Uint16Array;
    });
    reportCheck(
      `PagedAttention web/in-place pool ${numBlocks} blocks (pool read back from the GPUBuffers we created; same tensors returned: ${sameBuffer})`,
      c,
      checkPagedAttention(c, output!, await read(kBuf, c.keyCache.byteLength), await read(vBuf, c.valueCache.byteLength)),
    );
    const small = c.query.byteLength + c.key.byteLength + c.value.byteLength + 4 * (c.cumulative.length + c.past.length + c.blockTable.length);
    console.log(
      `     bytes per run: host->device ${small} B, device->host ${output!.byteLength} B (pool updated in place, no copy);` +
        ` first run ${t.firstMs.toFixed(0)} ms, steady ${t.steadyMs.toFixed(1)} ms`,
    );
    kBuf.destroy();
    vBuf.destroy();
  }
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  if (process.argv.includes("--web-child")) {
    await pagedAttentionWebInPlace();
    process.exit(failures ? 1 : 0);
  }
  process.env.XDG_RUNTIME_DIR ||= mkdtempSync(join(tmpdir(), "xdg-"));
  console.log(`onnxruntime-node ${ort.env.versions.common}; fp16 tolerance ${PAGED_ATTENTION_TOLERANCE}`);
  await checkAdapter();
  await checkMatMulAdd();
  await pagedAttentionCpuTensors();
  await pagedAttentionNodeGpuBuffers();

  let webAvailable = true;
  try {
    await import("webgpu");
  } catch {
    webAvailable = false;
  }
  if (!webAvailable) {
    console.log("skip onnxruntime-web in-place check: the `webgpu` npm package (dawn.node) is not installed");
  } else {
    // A separate process: onnxruntime-node and dawn.node each carry their own Dawn.
    const child = spawnSync(
      process.execPath,
      [...process.execArgv, fileURLToPath(import.meta.url), "--web-child", ...(quick ? ["--quick"] : [])],
      { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", env: process.env, timeout: 600_000 },
    );
    process.stdout.write(child.stdout);
    const stderr = child.stderr.split("\n").filter((l) => l && !/artificially reduced/.test(l));
    if (stderr.length) console.log(stderr.map((l) => `     [web] ${l}`).join("\n"));
    if (child.status !== 0) fail(`onnxruntime-web child exited with ${child.status ?? child.signal}`);
  }

  console.log(failures ? `${failures} check(s) failed` : "all checks passed");
  process.exit(failures ? 1 : 0);
}

await main();
