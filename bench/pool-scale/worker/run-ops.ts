import type { PoolDO } from "../../../durable-objects/pool/pool-do";
import type { OpResult, OpsRequest, OpsResponse, PoolIndexStats, PoolOp } from "../driver-protocol";

/** The pool object named `name`: the single pool, or one cell of a sharded pool. */
export type PoolOf = (name: string) => DurableObjectStub<PoolDO>;

/**
 * Runs `r.ops` on the pool objects one after another (or all at once when `r.concurrent`), each
 * timed from its call to its answer (the clock advances on I/O in workerd, in whole ms, and each
 * RPC answer is I/O), then, when `r.statsPools` names objects, reads their index figures, summed.
 *
 * @example await runOps(poolOf, { pool: "p", ops: [{ op: "view" }], statsPools: ["p"] }) // { results: [{ ms: 0, up: 8 }], wallMs: 0, stats }
 */
export async function runOps(poolOf: PoolOf, r: OpsRequest): Promise<OpsResponse> {
  const t0 = performance.now();
  let results: OpResult[] = [];
  if (r.concurrent) {
    results = await Promise.all(r.ops.map((op) => runOp(poolOf, r.pool, op).then((x) => ({ ...x, ms: performance.now() - t0 }))));
  } else for (const op of r.ops) results.push(await runOp(poolOf, r.pool, op));
  const wallMs = performance.now() - t0;
  if (!r.statsPools) return { results, wallMs };
  const stats = await Promise.all(r.statsPools.map((name) => poolOf(name).indexStats()));
  return { results, wallMs, stats: sumStats(stats) };
}

/** The cells' index figures as one pool's: sizes and bytes summed, backends listed. */
function sumStats(all: PoolIndexStats[]): PoolIndexStats {
  return {
    entries: all.reduce((a, s) => a + s.entries, 0),
    tierEntries: all.reduce((a, s) => a + s.tierEntries, 0),
    maxEntries: all.reduce((a, s) => a + s.maxEntries, 0),
    indexBytes: all.reduce((a, s) => a + s.indexBytes, 0),
    backends: all.flatMap((s) => s.backends),
  };
}

/** One call, timed; a `place` walks its `pools` in order until one places it. */
export async function runOp(poolOf: PoolOf, fallback: string, op: PoolOp): Promise<OpResult> {
  const t0 = performance.now();
  switch (op.op) {
    case "heartbeat": {
      const reply = await poolOf(op.pool ?? fallback).heartbeat(op.beat);
      return { ms: performance.now() - t0, ...(reply.kv ? { kv: reply.kv } : {}) };
    }
    case "place": {
      for (const name of op.pools ?? [fallback]) {
        const placed = await poolOf(name).place({ hashes: op.hashes, trajectoryId: op.trajectoryId, ...(op.key !== undefined ? { key: op.key } : {}) });
        if (placed) {
          const ranked = Object.entries(placed.prefixBlocks).sort((a, b) => b[1] - a[1]);
          return { ms: performance.now() - t0, url: placed.url, reason: placed.reason, poolBest: ranked[0]?.[1] ?? 0, poolPlaced: placed.prefixBlocks[placed.url] ?? 0, ...(ranked[0] ? { poolBestUrl: ranked[0][0] } : {}), pool: name };
        }
      }
      return { ms: performance.now() - t0, url: null };
    }
    case "note":
      await poolOf(op.pool ?? fallback).notePrefix(op.key, op.url, op.hashes, op.trajectoryId);
      return { ms: performance.now() - t0 };
    case "view": {
      const view = await poolOf(op.pool ?? fallback).view();
      return { ms: performance.now() - t0, up: view.filter((b) => b.up).length };
    }
  }
}
