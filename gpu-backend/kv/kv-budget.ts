/** Sizing the KV pool from a memory budget: bytes per block and how many blocks fit. */

export interface KvBudgetParams {
  /** Bytes available for the KV pool (K and V, all layers). */
  budgetBytes: number;
  blockSize: number;
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  /** 4 for fp32, 2 for fp16. */
  bytesPerElement: number;
}

/**
 * How many blocks fit in a byte budget: one block costs
 * `2 (K and V) * numLayers * blockSize * numKvHeads * headDim * bytesPerElement` bytes.
 * Returns 0 when not even one block fits.
 *
 * @example
 * blocksForBudget({ budgetBytes: 64 << 20, blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 })
 * // 64 MiB / (2 * 2 * 16 * 2 * 64 * 4 = 32 KiB) = 2048
 */
export function blocksForBudget(params: KvBudgetParams): number {
  const { budgetBytes, blockSize, numLayers, numKvHeads, headDim, bytesPerElement } = params;
  for (const [name, v] of Object.entries({ blockSize, numLayers, numKvHeads, headDim, bytesPerElement })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`blocksForBudget: ${name} must be a positive integer, got ${v}`);
  }
  if (!Number.isFinite(budgetBytes) || budgetBytes < 0) throw new Error(`blocksForBudget: bad budgetBytes ${budgetBytes}`);
  return Math.floor(budgetBytes / bytesPerBlock(params));
}

/** Bytes of K and V for one block across all layers. @example bytesPerBlock({ blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 }) // 32768 */
export function bytesPerBlock(params: Omit<KvBudgetParams, "budgetBytes">): number {
  return 2 * params.numLayers * params.blockSize * params.numKvHeads * params.headDim * params.bytesPerElement;
}
