import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import { PAGED_IO } from "../graph/paged-llama-graph";
import type { QuantizedWeights } from "../quant/quantized-weights";
import { everyRow, returnsLogits, stepResult, type StepResult, type StepSequence } from "./executor";

/**
 * Longest run of new tokens of one sequence handed to PagedAttention as one entry. onnxruntime
 * 1.30's WebGPU PagedAttention returns wrong outputs for query rows >= 8 when one entry has 32 or
 * more new tokens (measured on lavapipe with head sizes 16, 32 and 64; 31 and fewer are right, as
 * are several entries totalling more). Longer chunks are passed as consecutive entries of at
 * most this many tokens with the same block table: the op scatters every entry's K/V before
 * attending, so later pieces see earlier ones (checked by the conformance suite's 40-token prefill).
 */
export const MAX_QUERY_PIECE = 16;

/** What every executor of the paged graph is built from (device-pool, host-pool). */
export interface PagedExecutorOptions {
  spec: DecoderSpec;
  weights: WeightSource;
  /** int8/int4 linear weights (MatMulNBits); float32 when absent. */
  quantized?: QuantizedWeights | null | undefined;
  /** Float weights in float16 (`--weights fp16`). */
  float16?: boolean | undefined;
  numBlocks: number;
  /** Power of two >= 16 (PagedAttention). */
  blockSize: number;
  /** Longest per-sequence query entry handed to PagedAttention (default MAX_QUERY_PIECE). */
  maxQueryPiece?: number;
}

/** @throws Error for a block size PagedAttention cannot take (checked before any runtime starts). */
export function checkPagedBlockSize(blockSize: number): void {
  if (blockSize < 16 || (blockSize & (blockSize - 1)) !== 0) throw new Error(`PagedAttention needs a power-of-two block size >= 16, got ${blockSize}`);
}

/**
 * The inputs of one run of the paged decoder graph (`paged-llama-graph.ts`) for a step, shared
 * by the executors that run it (webgpu, cuda).
 *
 * Each sequence's new tokens go to PagedAttention as consecutive entries of at most `maxPiece`
 * tokens with the same block table (`past` = startPos + offset): see `MAX_QUERY_PIECE`. Rows of `blockTable` past an entry's `rowBlocks` are padding (0)
 * and never read.
 */
export interface PagedStepInputs {
  /** Flat new tokens and their positions, sequence by sequence: [T]. */
  ids: Int32Array;
  positions: Int32Array;
  /** Per entry: 0, n0, n0+n1, ... [B+1]. */
  cumulative: Int32Array;
  /** Per entry: tokens already in the pool [B]. */
  past: Int32Array;
  /** Per entry: physical blocks, padded [B, maxBlocks]. */
  blockTable: Int32Array;
  maxBlocks: number;
  /** Per entry: how many leading entries of its blockTable row are real. */
  rowBlocks: Int32Array;
  /**
   * PagedAttention's `attention_metadata` for this step, [3]: the most new tokens of one entry,
   * the most past + new tokens of one entry, and that again as the lower bound of the longest.
   */
  metadata: Int32Array;
  /** Flat rows whose logits (and argmax) the graph computes: [R], at least one. */
  logitIndex: Int32Array;
  /** Per sequence: its [from, to) range of logit rows. */
  logitRanges: [number, number][];
  /** Whether any sequence asked for logits (not only an argmax). */
  wantLogits: boolean;
}

/**
 * Validates a step and lays out its graph inputs.
 *
 * @example const step = pagedStepInputs(sequences, spec, 16, numBlocks, 16);
 */
export function pagedStepInputs(
  sequences: readonly StepSequence[],
  spec: DecoderSpec,
  blockSize: number,
  numBlocks: number,
  maxPiece: number,
): PagedStepInputs {
  if (sequences.length === 0) throw new Error("a step needs at least one sequence");
  const entries: { seq: number; past: number; n: number }[] = [];
  let T = 0;
  let maxBlocks = 1;
  sequences.forEach((s, b) => {
    const n = s.tokenIds.length;
    if (n === 0) throw new Error("a step sequence needs at least one token");
    if (s.startPos + n > spec.maxPositions) throw new Error(`position ${s.startPos + n - 1} beyond maxPositions`);
    const blocks = Math.ceil((s.startPos + n) / blockSize);
    if (s.blockTable.length < blocks) throw new Error(`block table too short for position ${s.startPos + n - 1}`);
    for (let j = 0; j < blocks; j++) {
      const id = s.blockTable[j]!;
      if (!(id >= 0 && id < numBlocks)) throw new Error(`block id ${id} outside the pool of ${numBlocks}`);
    }
    maxBlocks = Math.max(maxBlocks, blocks);
    for (let off = 0; off < n; off += maxPiece) entries.push({ seq: b, past: s.startPos + off, n: Math.min(maxPiece, n - off) });
    T += n;
  });
  const B = entries.length;
  const ids = new Int32Array(T);
  const positions = new Int32Array(T);
  const cumulative = new Int32Array(B + 1);
  const past = new Int32Array(B);
  const blockTable = new Int32Array(B * maxBlocks);
  const rowBlocks = new Int32Array(B);
  const metadata = new Int32Array(3);
  entries.forEach((e, i) => {
    metadata[0] = Math.max(metadata[0]!, e.n);
    metadata[1] = Math.max(metadata[1]!, e.past + e.n);
    const s = sequences[e.seq]!;
    past[i] = e.past;
    cumulative[i + 1] = cumulative[i]! + e.n;
    const blocks = Math.ceil((e.past + e.n) / blockSize);
    rowBlocks[i] = blocks;
    for (let j = 0; j < blocks; j++) blockTable[i * maxBlocks + j] = s.blockTable[j]!;
  });
  metadata[2] = metadata[1]!;
  const logitRows: number[] = [];
  const logitRanges: [number, number][] = [];
  let row = 0;
  for (const s of sequences) {
    const n = s.tokenIds.length;
    for (let j = 0; j < n; j++) {
      ids[row + j] = s.tokenIds[j]!;
      positions[row + j] = s.startPos + j;
    }
    const from = logitRows.length;
    if (everyRow(s.logits)) for (let j = 0; j < n; j++) logitRows.push(row + j);
    else if (s.logits !== "none") logitRows.push(row + n - 1);
    logitRanges.push([from, logitRows.length]);
    row += n;
  }
  // At least one logit row: a zero-row LM head is a needless edge case for the kernels.
  const logitIndex = Int32Array.from(logitRows.length ? logitRows : [T - 1]);
  const wantLogits = sequences.some((s) => returnsLogits(s.logits));
  return { ids, positions, cumulative, past, blockTable, maxBlocks, rowBlocks, metadata, logitIndex, logitRanges, wantLogits };
}

/** Bytes of the step's small inputs (everything but the pool). */
export function stepInputBytes(s: PagedStepInputs): number {
  return s.ids.byteLength + s.positions.byteLength + s.cumulative.byteLength + s.past.byteLength + s.blockTable.byteLength + s.logitIndex.byteLength + s.metadata.byteLength;
}

/** The step's graph inputs but the pool, as tensors of whichever onnxruntime runs the graph (all int32). */
export function stepFeeds<T>(s: PagedStepInputs, tensor: (data: Int32Array, dims: number[]) => T): Record<string, T> {
  const T_ = s.ids.length;
  const B = s.past.length;
  return {
    [PAGED_IO.inputIds]: tensor(s.ids, [T_]),
    [PAGED_IO.positionIds]: tensor(s.positions, [T_]),
    [PAGED_IO.cumulative]: tensor(s.cumulative, [B + 1]),
    [PAGED_IO.past]: tensor(s.past, [B]),
    [PAGED_IO.blockTable]: tensor(s.blockTable, [B, s.maxBlocks]),
    [PAGED_IO.logitIndex]: tensor(s.logitIndex, [s.logitIndex.length]),
    [PAGED_IO.attentionMetadata]: tensor(s.metadata, [3]),
  };
}

/** The outputs a step fetches: `next_token`, and `logits` only when a sequence asks for them. */
export function stepFetches(s: PagedStepInputs): string[] {
  return s.wantLogits ? [PAGED_IO.nextToken, PAGED_IO.logits] : [PAGED_IO.nextToken];
}

/**
 * A step's result from the outputs `session.run` returned for `stepFetches(step)` (any onnxruntime's
 * tensors, host-resident), adding their bytes to `transfer.deviceToHostBytes`.
 */
export function fetchedStepResult(
  sequences: readonly StepSequence[],
  step: PagedStepInputs,
  outputs: Record<string, { data: unknown }>,
  vocab: number,
  transfer: { deviceToHostBytes: number },
): StepResult {
  const next = outputs[PAGED_IO.nextToken]!.data as Int32Array;
  const logitsAll = step.wantLogits ? (outputs[PAGED_IO.logits]!.data as Float32Array) : undefined;
  transfer.deviceToHostBytes += next.byteLength + (logitsAll?.byteLength ?? 0);
  return stepResult(sequences, step.logitRanges, next, logitsAll, vocab);
}

/**
 * Runs jobs one at a time, in the order given (steps, and block reads and writes, share the pool).
 *
 * @example const next = this.jobs.run(() => this.runStep(sequences));
 */
export class JobQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const next = this.tail.then(job);
    this.tail = next.catch(() => undefined);
    return next;
  }

  /** Resolves once every job queued so far has run. */
  idle(): Promise<void> {
    return this.tail.then(() => undefined);
  }
}
