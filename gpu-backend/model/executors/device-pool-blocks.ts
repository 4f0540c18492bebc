import * as ort from "onnxruntime-node";
import type { DecoderSpec } from "../graph/decoder-spec";
import { PAGED_IO } from "../graph/paged-llama-graph";
import { POOL_IO } from "../graph/pool-io-graphs";
import type { BlockIO } from "./executor";

type Op = { kind: "read"; blockId: number; out: Uint8Array } | { kind: "write"; blockId: number; bytes: Uint8Array };

/**
 * `BlockIO` for a pool that lives on the device (`DevicePoolExecutor`): block reads and writes
 * run as small sessions (`graph/pool-io-graphs.ts`: a gather, and a scatter through
 * PagedAttention's in-place update) on the executor's queue, in order with its steps.
 *
 * Calls made back to back form one batch, one session run per run of reads or writes; a step
 * enqueued in between closes the batch (`closeBatch`), so an operation never moves ahead of a
 * step that was enqueued before it. A read's `out` holds the block, and a write's `bytes` may be
 * reused, once `settled()` resolves; it rejects when a batch since the last call failed.
 *
 * @example const blocks = new DevicePoolBlocks({ spec, numBlocks, blockSize, pool, gather, scatter, enqueue });
 */
export class DevicePoolBlocks implements BlockIO {
  readonly format: string;
  readonly bytesPerBlock: number;
  /** Blocks moved by reads and writes (not counted in the executor's per-step `transfer`). */
  readonly stats = { blocksRead: 0, blocksWritten: 0, runs: 0 };
  private batch: Op[] | null = null;
  /** The first failed batch since the last `settled()`: its reads hold no block, its writes did not land. */
  private failure: Error | null = null;
  private readonly rowElems: number;

  constructor(
    private readonly p: {
      spec: DecoderSpec;
      numBlocks: number;
      blockSize: number;
      /** The pool tensors by graph input name (`kv_k_L`, `kv_v_L`). */
      pool: Record<string, ort.Tensor>;
      gather: ort.InferenceSession;
      scatter: ort.InferenceSession;
      /** Runs `job` on the executor's queue, after everything enqueued before. */
      enqueue: <T>(job: () => Promise<T>) => Promise<T>;
      /** Resolves when everything enqueued so far has run. */
      idle: () => Promise<void>;
    },
  ) {
    const { spec, blockSize } = p;
    this.rowElems = blockSize * spec.numKvHeads * spec.headDim;
    this.format = `f16/kv-layer-slot-head-dim/L${spec.numLayers}/H${spec.numKvHeads}/B${blockSize}/D${spec.headDim}`;
    this.bytesPerBlock = 2 * spec.numLayers * this.rowElems * 2;
  }

  read = (blockId: number, out: Uint8Array): void => this.add({ kind: "read", blockId, out });

  write = (blockId: number, bytes: Uint8Array): void => this.add({ kind: "write", blockId, bytes });

  /** Rejects with a batch's failure: a failed read must not be sent on as a block (kv-serve checksums what it reads). */
  settled = async (): Promise<void> => {
    await this.p.idle();
    const failure = this.failure;
    this.failure = null;
    if (failure) throw failure;
  };

  /** Called by the executor when it enqueues a step: later operations go after that step. */
  closeBatch(): void {
    this.batch = null;
  }

  private add(op: Op): void {
    const size = op.kind === "read" ? op.out.byteLength : op.bytes.byteLength;
    if (size !== this.bytesPerBlock) throw new Error(`block ${op.kind}: ${size} bytes, a block is ${this.bytesPerBlock}`);
    if (!(op.blockId >= 0 && op.blockId < this.p.numBlocks)) throw new Error(`block ${op.kind}: block id ${op.blockId} outside the pool of ${this.p.numBlocks}`);
    if (this.batch) return void this.batch.push(op);
    const batch: Op[] = [op];
    this.batch = batch;
    this.p
      .enqueue(async () => {
        if (this.batch === batch) this.batch = null;
        await this.runBatch(batch);
      })
      .catch((e: Error) => (this.failure ??= e));
  }

  private async runBatch(batch: Op[]): Promise<void> {
    for (let i = 0; i < batch.length; ) {
      let j = i;
      while (j < batch.length && batch[j]!.kind === batch[i]!.kind) j++;
      const run = batch.slice(i, j);
      this.stats.runs++;
      if (run[0]!.kind === "read") await this.gather(run as Extract<Op, { kind: "read" }>[]);
      else await this.scatter(run as Extract<Op, { kind: "write" }>[]);
      i = j;
    }
  }

  private async gather(ops: Extract<Op, { kind: "read" }>[]): Promise<void> {
    const ids = Int32Array.from(ops, (o) => o.blockId);
    const out = await this.p.gather.run({ ...this.p.pool, [POOL_IO.blockIds]: new ort.Tensor("int32", ids, [ids.length]) });
    const data = out[POOL_IO.blocks]!.data as Uint16Array;
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    ops.forEach((o, i) => o.out.set(bytes.subarray(i * this.bytesPerBlock, (i + 1) * this.bytesPerBlock)));
    this.stats.blocksRead += ops.length;
  }

  private async scatter(ops: Extract<Op, { kind: "write" }>[]): Promise<void> {
    const n = ops.length;
    const B = this.p.blockSize;
    const blocks = new Uint8Array(n * this.bytesPerBlock);
    ops.forEach((o, i) => blocks.set(o.bytes, i * this.bytesPerBlock));
    const cumulative = Int32Array.from({ length: n + 1 }, (_, i) => i * B);
    const feeds: Record<string, ort.Tensor> = {
      ...this.p.pool,
      [POOL_IO.blocks]: new ort.Tensor("float16", new Uint16Array(blocks.buffer), [n, 2 * this.p.spec.numLayers, this.rowElems]),
      [PAGED_IO.cumulative]: new ort.Tensor("int32", cumulative, [n + 1]),
      [PAGED_IO.past]: new ort.Tensor("int32", new Int32Array(n), [n]),
      [PAGED_IO.blockTable]: new ort.Tensor("int32", Int32Array.from(ops, (o) => o.blockId), [n, 1]),
      [PAGED_IO.attentionMetadata]: new ort.Tensor("int32", Int32Array.of(B, B, B), [3]),
    };
    await this.p.scatter.run(feeds);
    this.stats.blocksWritten += n;
  }
}
