import { serve, type ServerType } from "@hono/node-server";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashRoot } from "../../protocol/block-hash";
import { decodeKvPullReport, encode } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type DoneFrame, type Frame, type GenerateRequest, type KvPullRequest, type SamplingParams } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { Engine } from "../engine/engine";
import { createEngine } from "../engine/create-engine";
import { loadModel, type LoadedModel } from "../engine/load-model";
import { BlockPool } from "../kv/block-pool";
import { tinyModelDir } from "../model/testing/tiny-model";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { createBackendApp, type BackendAppOptions } from "./app";
import { Drain } from "./drain";
import { DrainPush } from "./drain-push";
import { encodeStreamHeader, KvStreamReader } from "../transfer/kv-stream";

/**
 * Block transfer between two real backends (engine, HTTP app, node server on a loopback port):
 * the holder serves its cached chain, the puller checks every block and caches it, and the turn
 * that follows reuses it. Broken, corrupted, foreign-tenant and unreachable pulls fall back to
 * computing, and every reply equals the one a backend that computed everything gives.
 */
const SECRET = "transfer-secret";
const B = 16;
const sampling: SamplingParams = { maxTokens: 6, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
let dir: string;
let model: LoadedModel;
const backends: Backend[] = [];

interface Backend {
  engine: Engine;
  executor: CpuExecutor;
  server: ServerType;
  url: string;
  drain: Drain;
  drainPush: DrainPush;
}

async function startBackend(id: string, fetchFn?: typeof fetch): Promise<Backend> {
  const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 96, blockSize: B, threads: 1 });
  const engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks: 96, blockSize: B }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 8, blockSize: B },
    enablePrefixCache: true,
    backendId: id,
    transfer: { secret: SECRET, timeoutMs: 5000, ...(fetchFn ? { fetch: fetchFn } : {}) },
  });
  const drain = new Drain();
  const options: BackendAppOptions = { engine, secret: SECRET, backendId: id, drain };
  const app = createBackendApp(options);
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const drainPush = new DrainPush({ engine, selfUrl: url, secret: SECRET });
  options.drainPush = drainPush;
  const b = { engine, executor, server, url, drain, drainPush };
  backends.push(b);
  return b;
}

function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

const request = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: "r",
  mode: "full",
  cacheSalt: "tenant-a",
  messages: [
    { role: "system", content: `You are a careful agent. ${"Read the files, then report what you found. ".repeat(14)}` },
    { role: "user", content: "List the repository." },
  ],
  sampling,
  ...over,
});

/** The pulled blocks hold exactly the holder's bytes. */
function sameBlocks(holder: Backend, puller: Backend, tokenIds: number[], salt: string, blocks: number): void {
  const root = hashRoot({ modelId: model.spec.modelId, salt });
  const a = holder.engine.kv.transfer.pinCachedPrefix({ tokenIds, root, fromBlock: 0 });
  const b = puller.engine.kv.transfer.pinCachedPrefix({ tokenIds, root, fromBlock: 0 });
  try {
    expect(b.blockIds.length).toBeGreaterThanOrEqual(blocks);
    const io = holder.executor.blockIO;
    const x = new Uint8Array(io.bytesPerBlock);
    const y = new Uint8Array(io.bytesPerBlock);
    for (let i = 0; i < blocks; i++) {
      holder.executor.blockIO.read(a.blockIds[i]!, x);
      puller.executor.blockIO.read(b.blockIds[i]!, y);
      expect(Buffer.compare(x, y), `block ${i}`).toBe(0);
    }
  } finally {
    holder.engine.kv.transfer.unpin(a.blockIds);
    puller.engine.kv.transfer.unpin(b.blockIds);
  }
}

/** A fetch whose answer body is altered: `cut` errors the stream after that many bytes; `flip` xors one byte. */
function tamperingFetch(t: { cut?: number; flip?: number }): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (!String(input instanceof Request ? input.url : input).endsWith(ROUTES.backend.kvPull) || !res.body) return res;
    let seen = 0;
    const body = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          const out = new Uint8Array(chunk);
          if (t.flip !== undefined && t.flip >= seen && t.flip < seen + out.length) out[t.flip - seen]! ^= 0x40;
          if (t.cut !== undefined && seen + out.length > t.cut) {
            controller.enqueue(out.subarray(0, t.cut - seen));
            controller.error(new Error("connection reset (the holder died)"));
            return;
          }
          seen += out.length;
          controller.enqueue(out);
        },
      }),
    );
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

/** Bytes before the first block frame (the header of a stream of a few blocks: msgpack sizes a small count in one byte). */
function streamHeaderBytes(io: { format: string; bytesPerBlock: number }): number {
  return encodeStreamHeader({ format: io.format, bytesPerBlock: io.bytesPerBlock, blocks: 1 }).length;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-transfer-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
}, 120_000);

afterAll(async () => {
  for (const b of backends) {
    b.server.close();
    await b.executor.dispose();
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("KV transfer between backends", () => {
  it("pulls the blocks a turn lacks from their holder, byte for byte, and the turn reuses them with the same reply", async () => {
    const holder = await startBackend("holder");
    const puller = await startBackend("puller");
    const cold = await startBackend("cold");
    await turn(holder.engine, request());
    const moved = await turn(puller.engine, request({ kvSource: { url: holder.url, backendId: "holder" } }));
    const reference = await turn(cold.engine, request());
    const prompt = moved.usage.promptTokens;
    const full = Math.floor((prompt - 1) / B);
    expect(full).toBeGreaterThanOrEqual(8);
    expect(moved.kvPull).toMatchObject({ outcome: "pulled", from: holder.url, missingBlocks: full, blocks: full, bytes: full * holder.executor.blockIO.bytesPerBlock });
    expect(moved.usage.cachedTokens).toBe(full * B);
    expect(moved.usage.computedTokens).toBe(prompt - full * B);
    expect(moved.text).toBe(reference.text);
    expect(reference.usage.cachedTokens).toBe(0);
    const tokenIds = puller.engine.states.get(moved.stateId)!.promptTokenIds;
    sameBlocks(holder, puller, tokenIds, "tenant-a", full);
    expect(holder.engine.kvServer.stats).toMatchObject({ streams: 1, blocks: full });
    // Nothing stays pinned on the holder once the stream ended.
    holder.engine.kv.checkInvariants();

    // A second pull of the same prompt finds nothing missing.
    const again = await turn(puller.engine, request({ kvSource: { url: holder.url } }));
    expect(again.kvPull).toMatchObject({ outcome: "none-missing", blocks: 0 });
  });

  it("serves only the requesting tenant's chain: another salt gets no blocks, and its turn computes", async () => {
    const holder = await startBackend("holder-t");
    const puller = await startBackend("puller-t");
    const first = await turn(holder.engine, request());
    const tokenIds = holder.engine.states.get(first.stateId)!.promptTokenIds;
    const ask = async (cacheSalt: string) => {
      const body: KvPullRequest = { model: model.spec.modelId, cacheSalt, tokenIds, fromBlock: 0, format: holder.executor.blockIO.format };
      const res = await fetch(new URL(ROUTES.backend.kvPull, holder.url), { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body: encode(body) });
      expect(res.status).toBe(200);
      const reader = new KvStreamReader(res.body!.getReader());
      const header = await reader.header();
      reader.cancel();
      return header.blocks;
    };
    expect(await ask("tenant-a")).toBe(Math.floor(tokenIds.length / B));
    expect(await ask("tenant-b")).toBe(0);
    // Without the secret: refused.
    const res = await fetch(new URL(ROUTES.backend.kvPull, holder.url), { method: "POST", body: encode({ tokenIds, fromBlock: 0, format: "x" }) });
    expect(res.status).toBe(401);
    // A wrong format: refused before anything is pinned.
    const wrong = await fetch(new URL(ROUTES.backend.kvPull, holder.url), {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET },
      body: encode({ tokenIds, fromBlock: 0, format: "f16/other" }),
    });
    expect(wrong.status).toBe(400);

    const other = await turn(puller.engine, request({ cacheSalt: "tenant-b", kvSource: { url: holder.url } }));
    expect(other.kvPull).toMatchObject({ outcome: "not-held", blocks: 0 });
    expect(other.usage.cachedTokens).toBe(0);
    expect(other.text).toBe(first.text);
  });

  it("keeps the blocks checked before a corrupted one, drops the rest, and computes them", async () => {
    const holder = await startBackend("holder-c");
    const io = holder.executor.blockIO;
    const puller = await startBackend("puller-c", tamperingFetch({ flip: streamHeaderBytes(io) + 2 * (4 + io.bytesPerBlock) + 4 + 1000 }));
    const first = await turn(holder.engine, request());
    const moved = await turn(puller.engine, request({ kvSource: { url: holder.url } }));
    expect(moved.kvPull).toMatchObject({ outcome: "corrupt", blocks: 2 });
    expect(moved.usage.cachedTokens).toBe(2 * B);
    expect(moved.text).toBe(first.text);
    sameBlocks(holder, puller, puller.engine.states.get(moved.stateId)!.promptTokenIds, "tenant-a", Math.floor((moved.usage.promptTokens - 1) / B));
    puller.engine.kv.checkInvariants();
  });

  it("falls back to computing when the holder dies mid-stream or cannot be reached, keeping what arrived whole", async () => {
    const holder = await startBackend("holder-k");
    const io = holder.executor.blockIO;
    const puller = await startBackend("puller-k", tamperingFetch({ cut: streamHeaderBytes(io) + 3 * (4 + io.bytesPerBlock) + 5000 }));
    const first = await turn(holder.engine, request());
    const moved = await turn(puller.engine, request({ kvSource: { url: holder.url } }));
    expect(moved.kvPull).toMatchObject({ outcome: "holder-failed", blocks: 3 });
    expect(moved.usage.cachedTokens).toBe(3 * B);
    expect(moved.text).toBe(first.text);
    // The holder's pins went with the broken stream.
    await new Promise((r) => setTimeout(r, 50));
    holder.engine.kv.checkInvariants();

    const lonely = await startBackend("puller-u");
    const unreachable = await turn(lonely.engine, request({ kvSource: { url: "http://127.0.0.1:9" } }));
    expect(unreachable.kvPull).toMatchObject({ outcome: "holder-failed", blocks: 0 });
    expect(unreachable.text).toBe(first.text);
  });

  it("computes instead when the cost model says copying is slower", async () => {
    const holder = await startBackend("holder-m");
    const puller = await startBackend("puller-m");
    await turn(holder.engine, request());
    puller.engine.kvPuller!.cost.bytesPerMs = 1; // 1 kB/s: recomputing wins
    const moved = await turn(puller.engine, request({ kvSource: { url: holder.url } }));
    expect(moved.kvPull).toMatchObject({ outcome: "compute-cheaper", blocks: 0 });
    expect(holder.engine.kvServer.stats.streams).toBe(0);
  });

  it("drains by pushing each kept trajectory's blocks to a peer (POST /v1/drain naming them), whose next full turn then reuses them", async () => {
    const leaving = await startBackend("leaving");
    const peers = [await startBackend("peer-1"), await startBackend("peer-2")];
    const tenants = ["tenant-a", "tenant-b", "tenant-c"];
    const firsts = await Promise.all(tenants.map((salt, i) => turn(leaving.engine, request({ cacheSalt: salt, trajectoryId: `traj-${i}` }))));
    const kept = leaving.engine.states.keptTokens();
    expect(kept).toHaveLength(3);

    // A drain request with a malformed body is refused and starts nothing.
    const bad = await fetch(new URL(ROUTES.backend.drain, leaving.url), { method: "POST", headers: { [SECRET_HEADER]: SECRET }, body: JSON.stringify({ peers: "nope" }) });
    expect(bad.status).toBe(400);
    expect(leaving.drain.draining).toBe(false);
    const res = await fetch(new URL(ROUTES.backend.drain, leaving.url), { method: "POST", headers: { [SECRET_HEADER]: SECRET, "content-type": "application/json" }, body: JSON.stringify({ peers: [...peers.map((p) => p.url), leaving.url] }) });
    expect(res.status).toBe(200);
    expect(leaving.drain.draining).toBe(true);
    const summary = await leaving.drainPush.done;
    expect(summary).toMatchObject({ trajectories: 3, failures: 0, left: 0 });
    expect(leaving.drainPush.busy).toBe(false);

    let pushedBlocks = 0;
    for (const [i, t] of kept.entries()) {
      const root = hashRoot({ modelId: model.spec.modelId, salt: t.cacheSalt });
      const full = Math.floor((t.tokenIds.length - 1) / B);
      const holders = peers.filter((p) => p.engine.kv.findCachedPrefix({ tokenIds: t.tokenIds, root }).blockIds.length === full);
      // Exactly one peer took it (rendezvous by trajectory id), under the trajectory's own tenant chain.
      expect(holders, `trajectory ${i}`).toHaveLength(1);
      pushedBlocks += full;
      const holder = holders[0]!;
      sameBlocks(leaving, holder, t.tokenIds, t.cacheSalt, full);
      // The trajectory's next turn lands there in full (no state there) and computes only past the pushed blocks.
      const j = tenants.indexOf(t.cacheSalt);
      const next = await turn(holder.engine, request({ cacheSalt: t.cacheSalt, trajectoryId: `traj-${j}`, messages: [...request().messages, firsts[j]!.message, { role: "user", content: "Now open the README." }] }));
      expect(next.usage.cachedTokens).toBeGreaterThanOrEqual(Math.floor(firsts[j]!.usage.promptTokens / B) * B);
    }
    expect(summary.blocks).toBe(pushedBlocks);
    expect(summary.bytes).toBe(pushedBlocks * leaving.executor.blockIO.bytesPerBlock);
    leaving.engine.kv.checkInvariants();
    for (const p of peers) p.engine.kv.checkInvariants();
  });

  it("stops starting pushes when its time runs out: what is left is counted, nothing is half-cached", async () => {
    const leaving = await startBackend("leaving-budget");
    const peer = await startBackend("peer-budget");
    await Promise.all(["tenant-a", "tenant-b"].map((salt, i) => turn(leaving.engine, request({ cacheSalt: salt, trajectoryId: `budget-${i}` }))));
    const push = new DrainPush({ engine: leaving.engine, selfUrl: leaving.url, secret: SECRET, budgetMs: 0 });
    push.offerPeers([peer.url]);
    expect(await push.done).toMatchObject({ trajectories: 0, blocks: 0, failures: 0, left: 2 });
    for (const t of leaving.engine.states.keptTokens()) {
      expect(peer.engine.kv.findCachedPrefix({ tokenIds: t.tokenIds, root: hashRoot({ modelId: model.spec.modelId, salt: t.cacheSalt }) }).blockIds).toHaveLength(0);
    }
  });

  it("answers a fetch from an unreachable source with holder-failed, and refuses one without the secret", async () => {
    const peer = await startBackend("fetch-peer");
    const body = encode({ source: { url: "http://127.0.0.1:9" }, cacheSalt: "tenant-a", tokenIds: Array.from({ length: 40 }, (_, i) => i + 3) });
    const res = await fetch(new URL(ROUTES.backend.kvFetch, peer.url), { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body });
    expect(res.status).toBe(200);
    const report = decodeKvPullReport(new Uint8Array(await res.arrayBuffer()));
    expect(report.ok && report.value).toMatchObject({ outcome: "holder-failed", blocks: 0 });
    const refused = await fetch(new URL(ROUTES.backend.kvFetch, peer.url), { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: "wrong" }, body });
    expect(refused.status).toBe(401);
  });
});
