import type { DecoderSpec } from "../graph/decoder-spec";

/**
 * The model executor: runs one engine step over a batch of sequences, reading and writing the
 * KV block pool it owns. Implementations, in this folder: `cpu` (standard ONNX ops, fp32 pool),
 * `webgpu` and `cuda` (PagedAttention over an fp16 pool); `createExecutor` picks one by device. One
 * conformance suite (`executor-conformance.ts`, test-only) runs against every executor available.
 */
export interface Executor {
  readonly device: ExecutorDevice;
  readonly spec: DecoderSpec;
  readonly numBlocks: number;
  readonly blockSize: number;
  /** Bytes held by the KV pool (K and V, all layers). */
  readonly kvBytes: number;
  /** Runs one step; returns logits per sequence, in the order given. */
  run(sequences: readonly StepSequence[]): Promise<StepResult>;
  /** Byte counters for host <-> device traffic (CPU: bytes handed to / taken from onnxruntime). */
  readonly transfer: TransferStats;
  dispose(): Promise<void>;
}

export type ExecutorDevice = "cpu" | "webgpu" | "cuda";

export interface StepSequence {
  /** New tokens of this sequence in this step (at least one). */
  tokenIds: ArrayLike<number>;
  /** Tokens of this sequence already in the KV pool; the new tokens take positions from here. */
  startPos: number;
  /** Block table covering at least startPos + tokenIds.length tokens. */
  blockTable: ArrayLike<number>;
  /**
   * What to return for this sequence: nothing (a middle prefill chunk), only the argmax of the
   * last token's logits (greedy decoding: the step then skips fetching logits), the last token's
   * logits, or every new token's logits.
   */
  logits: "none" | "argmax" | "last" | "all";
}

export interface StepResult {
  /** Per sequence: [rows * vocabSize] logits (empty for "none" and "argmax"). */
  logits: Float32Array[];
  /** Per sequence: argmax of its last logits row (-1 for "none"). */
  argmax: number[];
}

export interface TransferStats {
  hostToDeviceBytes: number;
  deviceToHostBytes: number;
  /** Of deviceToHostBytes, the step's new K/V rows taken back to a host-resident pool (cpu, cuda). */
  kvDeviceToHostBytes: number;
  steps: number;
}
