import type { BlockHash } from "../../protocol/block-hash";
import { ProtocolError } from "../../protocol/errors";
import type { KvPullRequest } from "../../protocol/messages";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { BlockIO } from "../model/executors/executor";
import { encodeBlockFrames, encodeStreamHeader } from "./kv-stream";

/**
 * The holder's side of `POST /v1/kv/pull`: streams the cached blocks of the asked prompt's chain
 * from `fromBlock` on. The chain is hashed here, under this backend's root for the request's model
 * and salt, so only blocks that chain names leave (another tenant's salt names none). The blocks
 * are pinned while they stream (not evicted, not reused) and unpinned when the stream ends or the
 * puller goes away. At most `maxConcurrent` streams at once; more are refused as `overloaded`.
 *
 * @example
 * const server = new KvServer({ kv, io: executor.blockIO, modelId, rootFor });
 * return new Response(server.serve(request));
 */
export class KvServer {
  readonly stats = { streams: 0, blocks: 0, bytes: 0, refused: 0 };
  private active = 0;

  /** Block streams open now. */
  get activeStreams(): number {
    return this.active;
  }
  private readonly maxConcurrent: number;

  constructor(private readonly params: { kv: KvCacheManager; io: BlockIO | undefined; modelId: string; rootFor: (salt: string) => BlockHash; maxConcurrent?: number }) {
    this.maxConcurrent = params.maxConcurrent ?? 4;
  }

  /** The answer's body; throws a ProtocolError (nothing pinned) when the request cannot be served. */
  serve(req: KvPullRequest): ReadableStream<Uint8Array> {
    const { kv, io } = this.params;
    if (!io) throw new ProtocolError("invalid_request", "this backend's KV pool cannot be read out (its executor has no block I/O)");
    if (req.model && req.model !== this.params.modelId) throw new ProtocolError("unknown_model", `model ${JSON.stringify(req.model)} is not served here (this backend serves ${this.params.modelId})`);
    if (req.format !== io.format) throw new ProtocolError("invalid_request", `KV format ${JSON.stringify(req.format)} differs from this pool's ${JSON.stringify(io.format)}`);
    if (this.active >= this.maxConcurrent) {
      this.stats.refused++;
      throw new ProtocolError("overloaded", `already serving ${this.active} KV pulls`);
    }
    const { blockIds } = kv.transfer.pinCachedPrefix({ tokenIds: req.tokenIds, root: this.params.rootFor(req.cacheSalt ?? ""), fromBlock: req.fromBlock });
    this.active++;
    this.stats.streams++;
    let next = 0;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      this.active--;
      kv.transfer.unpin(blockIds);
    };
    // Up to 1 MiB of blocks per chunk: fewer, larger writes.
    const perChunk = Math.max(1, Math.floor(2 ** 20 / io.bytesPerBlock));
    return new ReadableStream<Uint8Array>({
      start: (controller) => controller.enqueue(encodeStreamHeader({ format: io.format, bytesPerBlock: io.bytesPerBlock, blocks: blockIds.length })),
      pull: async (controller) => {
        if (next === blockIds.length) {
          end();
          controller.close();
          return;
        }
        const count = Math.min(perChunk, blockIds.length - next);
        const from = next;
        next += count;
        try {
          controller.enqueue(await encodeBlockFrames(blockIds.slice(from, from + count), io));
        } catch (err) {
          end(); // a failed read gives its pins back: the stream errors, no cancel follows
          throw err;
        }
        this.stats.blocks += count;
        this.stats.bytes += count * io.bytesPerBlock;
      },
      cancel: end,
      // Produce up to 4 chunks ahead of the socket: reading blocks overlaps with sending them.
    }, { highWaterMark: 4 });
  }
}
