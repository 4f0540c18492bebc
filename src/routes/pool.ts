import { Hono } from "hono";
import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { MAX_KV_EVENTS_PER_BATCH, SECRET_HEADER } from "../../protocol/messages";
import { DEV_SECRET, type EdgeEnv } from "../../durable-objects/edge-env";
import { poolOf, type HeartbeatInput } from "../../durable-objects/pool/pool-do";
import { maxBodyBytes, readJson } from "../body";

const shortHash = z.string().regex(/^[0-9a-f]{16}$/, "must be a short block hash (16 lowercase hex characters)");

const kvEvents = z
  .object({
    seq: z.number().int().min(1),
    kind: z.enum(["delta", "snapshot"]),
    stored: z.array(shortHash),
    removed: z.array(shortHash),
  })
  .refine((b) => b.stored.length + b.removed.length <= MAX_KV_EVENTS_PER_BATCH, { message: `must hold at most ${MAX_KV_EVENTS_PER_BATCH} hashes` })
  .refine((b) => b.kind === "delta" || b.removed.length === 0, { path: ["removed"], message: "must be empty in a snapshot" });

const heartbeat = z.object({
  id: z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/),
  url: z.url(),
  model: z.string().min(1),
  kvCapacityBlocks: z.number().int().min(0),
  running: z.number().int().min(0),
  waiting: z.number().int().min(0),
  kvUsage: z.number().min(0).max(1),
  tokensPerS: z.number().min(0),
  loadAvg: z.number().min(0).optional(),
  /** KV events since the previous heartbeat (absent: the backend publishes none). */
  kvEvents: kvEvents.optional(),
});

/**
 * The backends' side of the pool: `POST /v1/pool/heartbeat` (register or refresh, with the
 * backend's KV events; answers `{ registered, kv? }`) and `GET /v1/pool` (the pool as routing
 * sees it). Authenticated with the shared backend secret
 * (`x-agent-edge-secret`), not with tenant API keys.
 */
export const poolRoutes = new Hono<{ Bindings: EdgeEnv }>()
  .use("/v1/pool/*", async (c, next) => {
    checkSecret(c.req.header(SECRET_HEADER), c.env.AGENT_EDGE_SECRET ?? DEV_SECRET);
    await next();
  })
  .use("/v1/pool", async (c, next) => {
    checkSecret(c.req.header(SECRET_HEADER), c.env.AGENT_EDGE_SECRET ?? DEV_SECRET);
    await next();
  })
  .post("/v1/pool/heartbeat", async (c) => {
    const parsed = heartbeat.safeParse(await readJson(c, maxBodyBytes(c.env)));
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ProtocolError("invalid_request", `${issue.path.join(".") || "body"}: ${issue.message}`);
    }
    const { kvEvents: batch, ...load } = parsed.data;
    const h: HeartbeatInput = { ...load, url: load.url.replace(/\/+$/, ""), ...(batch ? { kvEvents: batch } : {}) };
    return c.json(await poolOf(c.env).heartbeat(h));
  })
  .get("/v1/pool", async (c) => {
    const pool = poolOf(c.env);
    return c.json({ object: "pool", backends: await pool.view(), index: await pool.indexStats() });
  });

function checkSecret(given: string | undefined, expected: string): void {
  // Compare digests of equal length so timing says nothing about the secret.
  if (given === undefined || !timingSafeEqualStrings(given, expected)) {
    throw new ProtocolError("unauthorized", `missing or wrong ${SECRET_HEADER} header`);
  }
}

function timingSafeEqualStrings(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  for (let i = 0; i < Math.max(ea.length, eb.length); i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}
