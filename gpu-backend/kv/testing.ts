import type { BlockHash } from "../../protocol/block-hash";
import type { KvCacheManager } from "./kv-cache-manager";
import type { KvSequence } from "./kv-sequence";

/**
 * Test helpers for the kv folder (imported only by its *.test.ts files).
 */

/**
 * Wraps an object so that every method call is followed by `checkInvariants()`, also when the
 * method throws (an assertion must leave the bookkeeping consistent).
 *
 * @example const pool = checked(new BlockPool({ numBlocks: 8, blockSize: 4 }));
 */
export function checked<T extends { checkInvariants(): void }>(target: T): T {
  return new Proxy(target, {
    get(obj, prop) {
      const value: unknown = Reflect.get(obj, prop, obj);
      if (typeof value !== "function" || prop === "checkInvariants") return value;
      return (...args: unknown[]): unknown => {
        try {
          return (value as (...a: unknown[]) => unknown).apply(obj, args);
        } finally {
          obj.checkInvariants();
        }
      };
    },
  });
}

/** Integer in [lo, hi] (inclusive). */
export function randInt(rand: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rand() * (hi - lo + 1));
}

/** Token ids [start, start + n). */
export function range(start: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}

/**
 * Slots of positions `[fromPos, toPos)` under a block table: position p lives at offset p % B of
 * block `blockTable[floor(p / B)]`, slot `blockId * B + offset` (the row the executor writes).
 *
 * @example slotsOf([7, 2], 4, 3, 6) // [31, 8, 9]
 */
export function slotsOf(blockTable: readonly number[], blockSize: number, fromPos: number, toPos: number): number[] {
  const out: number[] = [];
  for (let p = fromPos; p < toPos; p++) out.push(blockTable[Math.floor(p / blockSize)]! * blockSize + (p % blockSize));
  return out;
}

/**
 * Blocks `kv.allocateSlots(seqId, numNewTokens)` must take from the pool, from the sequence's
 * computed tokens and block table.
 *
 * @example if (blocksNeeded(kv, 1, 512) > kv.numFreeBlocks) expectFailure();
 */
export function blocksNeeded(kv: KvCacheManager, seqId: number, numNewTokens: number): number {
  return Math.max(0, Math.ceil((kv.numComputedTokens(seqId) + numNewTokens) / kv.blockSize) - kv.blockTable(seqId).length);
}

/** A sequence whose tokens the test appends to (the engine's `Sequence` plays this part in production). */
export interface TestSequence extends KvSequence {
  readonly tokenIds: number[];
}

/**
 * A new ("waiting") sequence for the KV manager, with a copy of `tokenIds`.
 *
 * @example kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 10), root }));
 */
export function sequence(params: { seqId: number; tokenIds: ArrayLike<number>; root: BlockHash; resumeTail?: string }): TestSequence {
  return {
    seqId: params.seqId,
    tokenIds: Array.from(params.tokenIds),
    hashRoot: params.root,
    blockHashes: [],
    status: "waiting",
    ...(params.resumeTail !== undefined ? { resumeTail: params.resumeTail } : {}),
  };
}
