import type { BlockHash } from "../../protocol/block-hash";
import { commonPrefixLength } from "../../protocol/common-prefix";
import type { CachePoint, CacheWrite, ChatMessage, ToolDefinition } from "../../protocol/messages";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { LeaseTable } from "../kv/lease-table";
import type { ChatCodec } from "./chat-codec";

/** A finished turn's prompt, as the cache points are resolved against it. */
export interface LeasedPrompt {
  /** The whole transcript the prompt renders (a delta turn's kept messages included). */
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  promptText: string;
  tokenIds: readonly number[];
  root: BlockHash;
  /** Prompt tokens the turn found cached (not computed). */
  cachedTokens: number;
}

/**
 * Client-named cache prefixes (Anthropic's `cache_control`) as leases: after a turn, the prompt's
 * full blocks up to each cache point are held for the point's TTL in the same lease table as
 * tool-pause leases (so the same cap and breaking rules apply; the table may shorten a TTL). The
 * lease's key is the hash of its last block, which names the prefix (tokens and tenant salt)
 * exactly: the next request naming the same prefix re-leases it, which refreshes the TTL.
 *
 * A point covers the transcript's first `messages` messages: its token offset is where the
 * prompt's text of those messages ends (the template rendered over them, without a generation
 * prompt; the prompt's tokens before the rest of the text), so a delta turn's kept ids count.
 * What the turn computed under its points (past what it found cached) is its cache writes.
 *
 * @example
 * const writes = prefixLeases.afterTurn(points, { messages, tools, promptText, tokenIds, root, cachedTokens });
 * // [{ ttlMs: 300000, tokens: 1184 }]
 */
export class PrefixLeases {
  constructor(private readonly p: { kv: KvCacheManager; table: LeaseTable; codec: ChatCodec }) {}

  afterTurn(points: readonly CachePoint[], prompt: LeasedPrompt): CacheWrite[] {
    const ends = points.map((point) => ({ ttlMs: point.ttlMs, tokens: this.held(point, prompt) })).sort((a, b) => a.tokens - b.tokens);
    const writes = new Map<number, number>();
    let covered = prompt.cachedTokens;
    for (const end of ends) {
      writes.set(end.ttlMs, (writes.get(end.ttlMs) ?? 0) + Math.max(0, end.tokens - covered));
      covered = Math.max(covered, end.tokens);
    }
    return [...writes].map(([ttlMs, tokens]) => ({ ttlMs, tokens }));
  }

  /** Leases the point's full blocks; answers the prompt tokens held (block-aligned; 0: none). */
  private held(point: CachePoint, prompt: LeasedPrompt): number {
    const end = this.offset(point.messages, prompt);
    const blockSize = this.p.kv.blockSize;
    // One token past the last full block: a cache lookup always leaves the last token to compute.
    const prefix = prompt.tokenIds.slice(0, Math.floor(end / blockSize) * blockSize + 1);
    const cached = this.p.kv.findCachedPrefix({ tokenIds: prefix, root: prompt.root });
    const last = cached.blockHashes.at(-1);
    if (last === undefined) return 0;
    const r = this.p.table.lease({ key: `prefix:${last}`, blockIds: cached.blockIds, ttlMs: point.ttlMs });
    return r.leased ? cached.numCachedTokens : 0;
  }

  /** The prompt token offset where the text of the first `count` messages ends. */
  private offset(count: number, prompt: LeasedPrompt): number {
    const { codec } = this.p;
    let text: string;
    try {
      text = codec.render({ messages: prompt.messages.slice(0, Math.min(count, prompt.messages.length)), ...(prompt.tools ? { tools: prompt.tools } : {}), addGenerationPrompt: false });
    } catch {
      return 0; // a template that cannot render this prefix alone (e.g. no messages): nothing to hold
    }
    if (!prompt.promptText.startsWith(text)) return commonPrefixLength(codec.encode(text), prompt.tokenIds);
    const rest = codec.encode(prompt.promptText.slice(text.length)).length;
    return Math.max(0, Math.min(prompt.tokenIds.length, prompt.tokenIds.length - rest));
  }
}
