import { PoolDO } from "../../../durable-objects/pool/pool-do";
import type { LoadRequest, OpsRequest } from "../driver-protocol";
import { runLoad } from "./run-load";
import { runOps } from "./run-ops";

/**
 * The pool-scale bench's Worker (bench/pool-scale/worker/wrangler.toml): the real `PoolDO` and a
 * driver that calls it over RPC from this Worker, as the edge's routes and trajectory objects do,
 * timing each call where it is made. `POST /ops` runs a list of calls in order; `POST /load`
 * offers open-loop load for a few seconds. Bench only: nothing of the product imports it.
 */
export { PoolDO };

export interface BenchEnv {
  POOL: DurableObjectNamespace<PoolDO>;
}

export default {
  async fetch(request: Request, env: BenchEnv): Promise<Response> {
    const path = new URL(request.url).pathname;
    // One stub per object named in this request (the single pool, or each cell of a sharded one).
    const stubs = new Map<string, DurableObjectStub<PoolDO>>();
    const poolOf = (name: string) => stubs.get(name) ?? stubs.set(name, poolNamed(env, name)).get(name)!;
    if (request.method !== "POST") return new Response("POST /ops or /load", { status: 405 });
    if (path === "/ops") {
      const body = await request.json<OpsRequest>();
      return Response.json(await runOps(poolOf, body));
    }
    if (path === "/load") {
      const body = await request.json<LoadRequest>();
      return Response.json(await runLoad(poolOf, body));
    }
    return new Response("not found", { status: 404 });
  },
} satisfies ExportedHandler<BenchEnv>;

/** The pool object named `name` (the single pool, or one cell of a sharded one). */
function poolNamed(env: BenchEnv, name: string): DurableObjectStub<PoolDO> {
  return env.POOL.get(env.POOL.idFromName(name));
}
