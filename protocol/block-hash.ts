import { createHash } from "node:crypto";

/**
 * Chained, content-addressed block hashes, shared by the edge and the backend.
 *
 * A block hash names the whole prefix up to and including one full block of tokens:
 *
 *   root = H("agent-edge/block-hash/v1" || u32le(len) modelId || u32le(len) salt)   (UTF-8)
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
const HEX_HASH = /^[0-9a-f]{32}$/;

/** @example hashRoot({ modelId: "demo-llama-random", salt: "" }) */
export function hashRoot(extra: HashExtra): BlockHash {
  const h = createHash("sha256").update("agent-edge/block-hash/v1", "utf8");
  for (const field of [extra.modelId, extra.salt]) {
    const bytes = Buffer.from(field, "utf8");
    const len = Buffer.alloc(4);
    len.writeUInt32LE(bytes.length, 0);
    h.update(len).update(bytes);
  }
  return h.digest().subarray(0, HASH_BYTES).toString("hex");
}

/** Hash of one full block given its parent's hash (or the root for the first block). */
export function hashBlock(parent: BlockHash, tokenIds: ArrayLike<number>): BlockHash {
  if (!HEX_HASH.test(parent)) throw new Error(`hashBlock: parent must be ${HASH_BYTES * 2} lowercase hex characters`);
  const body = new Uint8Array(HASH_BYTES + tokenIds.length * 4);
  body.set(Buffer.from(parent, "hex"), 0);
  const view = new DataView(body.buffer);
  for (let i = 0; i < tokenIds.length; i++) {
    const t = tokenIds[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) throw new Error(`hashBlock: token id ${t} is not a u32`);
    view.setUint32(HASH_BYTES + i * 4, t, true);
  }
  return createHash("sha256").update(body).digest().subarray(0, HASH_BYTES).toString("hex");
}

/**
 * Hashes of every full block of `tokenIds`, in order.
 *
 * @example hashBlocks(hashRoot(extra), [1, 2, 3, ...], 16) // one hash per 16 tokens
 */
export function hashBlocks(root: BlockHash, tokenIds: ArrayLike<number>, blockSize: number): BlockHash[] {
  if (!Number.isInteger(blockSize) || blockSize < 1) throw new Error(`hashBlocks: blockSize must be a positive integer, got ${blockSize}`);
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

/**
 * Hex characters of a short block hash: the first 64 bits of a block hash. KV events, heartbeats
 * and done frames carry short hashes (half the bytes of a full one, in flight and in the pool's
 * index); a collision between two of a pool's blocks (about n^2 / 2^65 for n blocks) can only
 * misplace a trajectory, never serve wrong KV: backends look blocks up by their full hash.
 */
export const SHORT_HASH_HEX = 16;

/** The first 64 bits of a block hash, 16 lowercase hex characters. */
export type ShortBlockHash = string;

/** @example shortBlockHash("0123456789abcdef0123456789abcdef") // "0123456789abcdef" */
export function shortBlockHash(blockHash: BlockHash): ShortBlockHash {
  return blockHash.slice(0, SHORT_HASH_HEX);
}
