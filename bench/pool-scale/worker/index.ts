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
    if (request.method !== "POST") return new Response("POST /ops or /load", { status: 405 });
    if (path === "/ops") {
      const body = await request.json<OpsRequest>();
      return Response.json(await runOps(poolNamed(env, body.pool), body));
    }
    if (path === "/load") {
      const body = await request.json<LoadRequest>();
      return Response.json(await runLoad(poolNamed(env, body.pool), body));
    }
    return new Response("not found", { status: 404 });
  },
} satisfies ExportedHandler<BenchEnv>;

function poolNamed(env: BenchEnv, name: string): DurableObjectStub<PoolDO> {
  return env.POOL.get(env.POOL.idFromName(name));
}
