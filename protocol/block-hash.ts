import { createHash } from "node:crypto";

/**
 * Chained, content-addressed block hashes, shared by the edge and the backend.
 *
 * A block hash names the whole prefix up to and including one full block of tokens:
 *
 *   root = H("agent-edge/block-hash/v1" 0x00 modelId 0x00 salt)
 *   h_0  = H(root    || u32le(tokens_0))
 *   h_i  = H(h_{i-1} || u32le(tokens_i))
 *
 * H is SHA-256 truncated to 16 bytes, written as 32 lowercase hex characters. The root carries the
 * `extra` inputs (model id and the per-tenant salt), so every h_i depends on them: two tenants with
 * different salts never share or probe each other's blocks. Only full blocks are hashed.
 *
 * Runs on Node and in workerd (`nodejs_compat`).
 */
export type BlockHash = string;

export interface HashExtra {
  modelId: string;
  /** Per-tenant salt; empty string when the caller has no tenant. */
  salt: string;
}

const HASH_BYTES = 16;

/** @example hashRoot({ modelId: "demo-llama-random", salt: "" }) */
export function hashRoot(extra: HashExtra): BlockHash {
  return createHash("sha256")
    .update(`agent-edge/block-hash/v1\u0000${extra.modelId}\u0000${extra.salt}`, "utf8")
    .digest()
    .subarray(0, HASH_BYTES)
    .toString("hex");
}

/** Hash of one full block given its parent's hash (or the root for the first block). */
export function hashBlock(parent: BlockHash, tokenIds: ArrayLike<number>): BlockHash {
  const body = new Uint8Array(HASH_BYTES + tokenIds.length * 4);
  body.set(Buffer.from(parent, "hex"), 0);
  const view = new DataView(body.buffer);
  for (let i = 0; i < tokenIds.length; i++) view.setUint32(HASH_BYTES + i * 4, tokenIds[i]! >>> 0, true);
  return createHash("sha256").update(body).digest().subarray(0, HASH_BYTES).toString("hex");
}

/**
 * Hashes of every full block of `tokenIds`, in order.
 *
 * @example hashBlocks(hashRoot(extra), [1, 2, 3, ...], 16) // one hash per 16 tokens
 */
export function hashBlocks(root: BlockHash, tokenIds: ArrayLike<number>, blockSize: number): BlockHash[] {
  const out: BlockHash[] = [];
  let parent = root;
  const full = Math.floor(tokenIds.length / blockSize);
  for (let b = 0; b < full; b++) {
    const slice = Array.prototype.slice.call(tokenIds, b * blockSize, (b + 1) * blockSize) as number[];
    parent = hashBlock(parent, slice);
    out.push(parent);
  }
  return out;
}
