import type { BlockPool } from "../../kv/block-pool";
import type { CpuExecutor } from "../../model/executors/cpu-executor";
import type { Executor, StepSequence } from "../../model/executors/executor";

/**
 * Records every step's sequences (and a copy of the logits rows it returned), so tests can look
 * at batching, block sharing and logits modes.
 *
 * @example const executor = new RecordingExecutor(await CpuExecutor.create(...));
 */
export class RecordingExecutor implements Executor {
  readonly steps: { sequences: StepSequence[]; refCounts: number[][] }[] = [];
  /** Per step, a copy of each sequence's logits (empty when its mode fetched none). */
  readonly rows: Float32Array[][] = [];
  pool: BlockPool | undefined;
  constructor(private readonly inner: CpuExecutor) {}
  get kind() { return this.inner.kind; }
  get provider() { return this.inner.provider; }
  get spec() { return this.inner.spec; }
  get numBlocks() { return this.inner.numBlocks; }
  get blockSize() { return this.inner.blockSize; }
  get kvBytes() { return this.inner.kvBytes; }
  get transfer() { return this.inner.transfer; }
  async run(sequences: readonly StepSequence[]) {
    this.steps.push({
      sequences: sequences.map((s) => ({ ...s, blockTable: [...(s.blockTable as number[])] })),
      refCounts: sequences.map((s) => Array.from(s.blockTable, (b) => this.pool?.refCount(b) ?? 0)),
    });
    const result = await this.inner.run(sequences);
    this.rows.push(result.logits.map((l) => Float32Array.from(l)));
    return result;
  }
  dispose() { return this.inner.dispose(); }
}

/**
 * Makes the (untrained) model say something: while `script` holds ids, each sampled argmax is the
 * next one of them (the real model still runs, so the KV cache is filled as usual).
 *
 * @example executor.script = codec.encode("<tool_call>..."); // the next turn replies with it
 */
export class ScriptedExecutor extends RecordingExecutor {
  script: number[] = [];
  override async run(sequences: readonly StepSequence[]) {
    const result = await super.run(sequences);
    const argmax = result.argmax.map((id, i) => (sequences[i]!.logits === "argmax" && this.script.length > 0 ? this.script.shift()! : id));
    return { ...result, argmax, argmaxRows: result.argmaxRows.map((rows, i) => (sequences[i]!.logits === "argmax" ? Int32Array.of(argmax[i]!) : rows)) };
  }
}
