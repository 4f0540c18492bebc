import type { DecoderSpec } from "./decoder-spec";

/**
 * The model executor: runs one engine step over a batch of sequences, reading and writing the
 * KV block pool it owns. Implementations: `cpu` (standard ONNX ops, this folder), and the GPU
 * executors of a later issue; one conformance suite runs against every executor available.
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
  /** Which rows of logits to return: none (a middle prefill chunk), the last token, or all. */
  logits: "none" | "last" | "all";
}

export interface StepResult {
  /** Per sequence: [rows * vocabSize] logits (empty for `logits: "none"`). */
  logits: Float32Array[];
}

export interface TransferStats {
  hostToDeviceBytes: number;
  deviceToHostBytes: number;
  steps: number;
}
