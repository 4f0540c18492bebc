import type { PoolDO } from "../../../durable-objects/pool/pool-do";
import type { OpResult, OpsRequest, OpsResponse, PoolOp } from "../driver-protocol";

/**
 * Runs `r.ops` on the pool one after another (or all at once when `r.concurrent`), each timed
 * from its call to its answer (the clock advances on I/O in workerd, in whole ms, and each RPC
 * answer is I/O), then reads the index's figures.
 *
 * @example await runOps(pool, { pool: "p", ops: [{ op: "view" }] }) // { results: [{ ms: 0, up: 8 }], wallMs: 0, stats }
 */
export async function runOps(pool: DurableObjectStub<PoolDO>, r: OpsRequest): Promise<OpsResponse> {
  const t0 = performance.now();
  let results: OpResult[] = [];
  if (r.concurrent) {
    results = await Promise.all(r.ops.map((op) => runOp(pool, op).then((x) => ({ ...x, ms: performance.now() - t0 }))));
  } else for (const op of r.ops) results.push(await runOp(pool, op));
  const wallMs = performance.now() - t0;
  return { results, wallMs, stats: await pool.indexStats() };
}

/** One call, timed. */
export async function runOp(pool: DurableObjectStub<PoolDO>, op: PoolOp): Promise<OpResult> {
  const t0 = performance.now();
  switch (op.op) {
    case "heartbeat": {
      const reply = await pool.heartbeat(op.beat);
      return { ms: performance.now() - t0, ...(reply.kv ? { kv: reply.kv } : {}) };
    }
    case "place": {
      const placed = await pool.place({ hashes: op.hashes, trajectoryId: op.trajectoryId, ...(op.key !== undefined ? { key: op.key } : {}) });
      return { ms: performance.now() - t0, url: placed?.url ?? null };
    }
    case "note":
      await pool.notePrefix(op.key, op.url, op.hashes, op.trajectoryId);
      return { ms: performance.now() - t0 };
    case "view": {
      const view = await pool.view();
      return { ms: performance.now() - t0, up: view.filter((b) => b.up).length };
    }
  }
}
