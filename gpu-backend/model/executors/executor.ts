import type { DecoderSpec } from "../graph/decoder-spec";

/**
 * The model executor: runs one engine step over a batch of sequences, reading and writing the
 * KV block pool it owns. Executors are named by where their pool lives (`ExecutorKind`), with
 * the onnxruntime provider that runs the graph as an option (`ExecutorProvider`); in this folder:
 *   - `cpu` (cpu-executor.ts): standard ONNX ops on onnxruntime-node's CPU provider, fp32 pool in host memory;
 *   - `device-pool` (device-pool-executor.ts on `node-webgpu`, web-device-pool-executor.ts on
 *     `web-webgpu`): PagedAttention over an fp16 pool resident on the GPU, updated in place;
 *   - `host-pool` (host-pool-executor.ts, on `node-cuda` or `node-webgpu`): PagedAttention over an
 *     fp16 pool in host memory, the blocks a step reads uploaded each step (onnxruntime-node's
 *     JavaScript API has no CUDA device tensors).
 * `createExecutor` builds one from a choice (`resolveExecutor` in device.ts makes the choice). One
 * conformance suite (`executor-conformance.ts`, test-only) runs against every executor available.
 */
export interface Executor {
  readonly kind: ExecutorKind;
  readonly provider: ExecutorProvider;
  readonly spec: DecoderSpec;
  readonly numBlocks: number;
  readonly blockSize: number;
  /** Bytes held by the KV pool (K and V, all layers). */
  readonly kvBytes: number;
  /** Runs one step; returns logits per sequence, in the order given. */
  run(sequences: readonly StepSequence[]): Promise<StepResult>;
  /** Byte counters for host <-> device traffic (CPU: bytes handed to / taken from onnxruntime). */
  readonly transfer: TransferStats;
  /**
   * Whole KV blocks as bytes, to move them between backends and tiers (transfer/kv-pull.ts, kv-serve.ts);
   * absent where the executor cannot read its pool out (the device pool on onnxruntime-web).
   */
  readonly blockIO?: BlockIO;
  dispose(): Promise<void>;
}

/**
 * Reads and writes one KV block (every layer's K and V rows of its slots) as bytes. Two pools
 * exchange blocks only when their `format` strings are equal (same dtype, layout and shape).
 *
 * Ordered, not necessarily immediate: a read or write takes effect in order with the executor's
 * steps (after every step already handed to `run`, before every later one), so callers never
 * overlap a write with a step that reads that block (a block being written is in no block table
 * yet) nor a read with a step that rewrites it. A read's `out` holds the block, and a write's
 * `bytes` may be changed, only once `settled()` resolves. Host pools (cpu, host-pool) complete
 * both at call time; a device pool queues them (`DevicePoolBlocks`).
 */
export interface BlockIO {
  /** e.g. "f32/kv-layer-head-slot-dim/L2/H4/B16/D64": equal strings, interchangeable bytes. */
  readonly format: string;
  readonly bytesPerBlock: number;
  /** Copies block `blockId` into `out` (bytesPerBlock bytes). */
  read(blockId: number, out: Uint8Array): void;
  /** Overwrites block `blockId` with `bytes` (bytesPerBlock bytes). */
  write(blockId: number, bytes: Uint8Array): void;
  /** Resolves once every read and write made so far has taken effect; rejects when one failed. */
  settled(): Promise<void>;
}

/** Where the KV pool lives: the executor's name. */
export type ExecutorKind = "cpu" | "device-pool" | "host-pool";

/**
 * What runs the graph: onnxruntime-node's CPU, WebGPU (Dawn inside onnxruntime) or CUDA provider,
 * or onnxruntime-web's WebGPU provider on Dawn's Node binding (the `webgpu` npm package).
 */
export type ExecutorProvider = "node-cpu" | "node-webgpu" | "node-cuda" | "web-webgpu";

export interface ExecutorChoice {
  kind: ExecutorKind;
  provider: ExecutorProvider;
}

/** The providers each executor runs on, its default first. */
export const EXECUTOR_PROVIDERS: Record<ExecutorKind, readonly ExecutorProvider[]> = {
  cpu: ["node-cpu"],
  "device-pool": ["node-webgpu", "web-webgpu"],
  "host-pool": ["node-cuda", "node-webgpu"],
};

/** "device-pool on node-webgpu", "cpu": for logs and bench reports. */
export function executorLabel(c: ExecutorChoice): string {
  return c.kind === "cpu" ? "cpu" : `${c.kind} on ${c.provider}`;
}

export interface StepSequence {
  /** New tokens of this sequence in this step (at least one). */
  tokenIds: ArrayLike<number>;
  /** Tokens of this sequence already in the KV pool; the new tokens take positions from here. */
  startPos: number;
  /** Block table covering at least startPos + tokenIds.length tokens. */
  blockTable: ArrayLike<number>;
  /**
   * What to return for this sequence: nothing (a middle prefill chunk), only the argmax of the
   * last token's logits (greedy decoding: the step then skips fetching logits), only the argmax
   * of every new token's logits (a greedy verify run), the last token's logits, or every new
   * token's logits.
   */
  logits: "none" | "argmax" | "argmax-all" | "last" | "all";
  /**
   * A verify run (speculative decoding: the last token and a draft): each new token is attended
   * as if it were decoded alone, so its logits equal a decode step's (bit for bit on the cpu
   * executor, whose decode group attends row by row; executors that attend every row alike ignore
   * it). Meant for short runs: each row reads its sequence's whole context.
   */
  verify?: boolean;
}

export interface StepResult {
  /** Per sequence: [rows * vocabSize] logits (empty for "none", "argmax" and "argmax-all"). */
  logits: Float32Array[];
  /** Per sequence: argmax of its last logits row (-1 for "none"). */
  argmax: number[];
  /** Per sequence: the argmax of each of its logits rows (one per new token for "all" and "argmax-all", one for "argmax" and "last", none for "none"). */
  argmaxRows: Int32Array[];
}

/** Whether a sequence's mode computes a logits row for every new token (else only the last token's, or none). */
export const everyRow = (mode: StepSequence["logits"]): boolean => mode === "all" || mode === "argmax-all";

/** Whether a sequence's mode returns logits rows (not only argmaxes). */
export const returnsLogits = (mode: StepSequence["logits"]): boolean => mode === "last" || mode === "all";

/**
 * A step's result from what its graph returned, for every executor: `next`, the graph's argmax of
 * each logits row (the rows of every sequence one after another; `ranges`: each sequence's
 * [from, to) in them), and `logitsAll`, those rows' logits when the step fetched them. Logits are
 * views into `logitsAll` (no copy); the argmaxes one copy for the step.
 */
export function stepResult(
  sequences: readonly StepSequence[],
  ranges: readonly [number, number][],
  next: Int32Array | BigInt64Array,
  logitsAll: Float32Array | undefined,
  vocab: number,
): StepResult {
  const ids = next instanceof Int32Array ? next.slice() : Int32Array.from(next, Number);
  const argmaxRows = ranges.map(([from, to]) => ids.subarray(from, to));
  const empty = new Float32Array(0);
  return {
    logits: ranges.map(([from, to], i) => (logitsAll && returnsLogits(sequences[i]!.logits) ? logitsAll.subarray(from * vocab, to * vocab) : empty)),
    argmax: ranges.map(([from, to]) => (to > from ? ids[to - 1]! : -1)),
    argmaxRows,
  };
}

export interface TransferStats {
  hostToDeviceBytes: number;
  deviceToHostBytes: number;
  /** Of deviceToHostBytes, the step's new K/V rows taken back to a host-resident pool (cpu, cuda). */
  kvDeviceToHostBytes: number;
  steps: number;
}
