import type { PrefillRate } from "../scheduler/prefill-rate";
import { hashBlocks, type BlockHash } from "../../protocol/block-hash";
import { encode } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type KvPullOutcome, type KvPullReport, type KvPullRequest, type KvSource } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { BlockIO } from "../model/executors/executor";
import { KvStreamReader } from "./kv-stream";
import { TransferCost } from "./transfer-cost";

export interface KvPullerParams {
  kv: KvCacheManager;
  io: BlockIO;
  modelId: string;
  /** The pool's shared secret (backends call each other with it). */
  secret: string;
  /** Longest a pull may take, end to end (then what arrived is kept). Default 10 s. */
  timeoutMs?: number;
  /** The HTTP client (tests wrap it to break or corrupt a stream). Default: global fetch. */
  fetch?: typeof fetch;
  /** `auto` (default): pull when the cost model says copying beats computing; `always`: whenever blocks are missing. */
  policy?: "auto" | "always";
  /** The engine's measured prefill rate (the cost model's compute side). Default: a rate of its own, never fed (the prior). */
  prefillRate?: PrefillRate;
}

/**
 * The receiver's side of a transfer: before a turn is prefilled, pulls the prompt's full blocks
 * this backend lacks from the backend that holds them, when the cost model says copying beats
 * computing. Blocks go into the prefix cache one by one as they arrive and check out (CRC-32),
 * so the turn's prefix lookup then finds them like any cached block. Nothing here can produce
 * wrong KV: a block is cached under the hash this backend computed for the prompt's own tokens,
 * only after its checksum matched; any failure stops the pull and the rest is computed.
 *
 * @example
 * const report = await puller.pull({ url: "http://b1:8080" }, { tokenIds, root, cacheSalt: "" });
 * // { outcome: "pulled", from: "http://b1:8080", missingBlocks: 250, blocks: 250, bytes: 32768000, ms: 140 }
 */
export class KvPuller {
  readonly cost: TransferCost;
  readonly totals = { pulls: 0, blocks: 0, bytes: 0, failures: 0 };

  constructor(private readonly params: KvPullerParams) {
    this.cost = new TransferCost(params.prefillRate);
  }

  /** `policy` and `timeoutMs` override the puller's (a drain's push pulls `always`, with longer to finish). */
  async pull(source: KvSource, prompt: { tokenIds: readonly number[]; root: BlockHash; cacheSalt: string }, o: { signal?: AbortSignal; policy?: "auto" | "always"; timeoutMs?: number } = {}): Promise<KvPullReport> {
    const { signal, policy = this.params.policy } = o;
    const { kv, io } = this.params;
    const t0 = performance.now();
    const B = kv.blockSize;
    const usable = Math.max(0, Math.floor((prompt.tokenIds.length - 1) / B));
    const local = kv.findCachedPrefix({ tokenIds: prompt.tokenIds, root: prompt.root }).blockIds.length;
    const missingBlocks = usable - local;
    const report = (outcome: KvPullOutcome, blocks = 0, bytes = 0): KvPullReport => ({ outcome, from: source.url, missingBlocks, blocks, bytes, ms: performance.now() - t0 });
    if (missingBlocks <= 0) return report("none-missing");
    if (policy !== "always" && !this.cost.copyBeatsCompute({ blocks: missingBlocks, blockSize: B, bytesPerBlock: io.bytesPerBlock })) return report("compute-cheaper");

    this.totals.pulls++;
    const tokenIds = prompt.tokenIds.slice(0, usable * B);
    const hashes = hashBlocks(prompt.root, tokenIds, B);
    const body: KvPullRequest = { model: this.params.modelId, cacheSalt: prompt.cacheSalt, tokenIds: [...tokenIds], fromBlock: local, format: io.format };
    const timeout = AbortSignal.timeout(o.timeoutMs ?? this.params.timeoutMs ?? 10_000);
    let blocks = 0;
    let reader: KvStreamReader | undefined;
    try {
      const res = await (this.params.fetch ?? fetch)(new URL(ROUTES.backend.kvPull, source.url), {
        method: "POST",
        headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: this.params.secret },
        body: encode(body),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      if (!res.ok || !res.body) {
        await res.body?.cancel();
        return this.failed(report(res.status === 400 || res.status === 404 ? "incompatible" : "holder-failed"));
      }
      reader = new KvStreamReader(res.body.getReader());
      const header = await reader.header();
      if (header.format !== io.format || header.bytesPerBlock !== io.bytesPerBlock) return this.failed(report("incompatible"));
      const n = Math.min(header.blocks, missingBlocks);
      for (; blocks < n; blocks++) {
        const { payload, ok } = await reader.block(io.bytesPerBlock);
        if (!ok) return this.failed(report("corrupt", blocks, blocks * io.bytesPerBlock));
        if (kv.transfer.importBlock(hashes[local + blocks]!, (id) => io.write(id, payload)) === "full") break;
        await io.settled(); // the reader reuses `payload` for the next block
      }
      const bytes = blocks * io.bytesPerBlock;
      this.totals.blocks += blocks;
      this.totals.bytes += bytes;
      const r = report(blocks === 0 && header.blocks === 0 ? "not-held" : "pulled", blocks, bytes);
      this.cost.noteCopy(bytes, r.ms);
      return r;
    } catch {
      return this.failed(report("holder-failed", blocks, blocks * io.bytesPerBlock));
    } finally {
      reader?.cancel();
    }
  }

  private failed(r: KvPullReport): KvPullReport {
    this.totals.failures++;
    this.totals.blocks += r.blocks;
    this.totals.bytes += r.bytes;
    return r;
  }
}
