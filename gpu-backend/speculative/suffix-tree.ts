import type { DraftContext, DraftSource, FinishedReply } from "./draft-source";
import { noDraft, type MatchedDraft } from "./matched-draft";
import { TrieNode } from "./suffix-trie-node";

/** How a {@link SuffixTree} is bounded and how far it drafts. */
export interface SuffixTreeOptions {
  /** Depth of the trie (default 24, vLLM's suffix_decoding_max_tree_depth): match plus draft never exceed it. */
  maxDepth?: number;
  /** Reply tokens held, all tenants together (default 32768); the oldest replies are evicted past it. */
  maxTokens?: number;
  /** Trie nodes held, all tenants together (default 262144, some 20 MiB); the oldest replies are evicted past it. */
  maxNodes?: number;
  /** A draft is at most this many times the match length (default 1, as SuffixDecoding's MAX_SPEC = alpha * p). */
  maxSpecFactor?: number;
  /** Drafting stops where the path's probability (product of child/parent counts) falls below it (default 0.1). */
  minTokenProb?: number;
}

/** What a tree holds (for tests and metrics). */
export interface SuffixTreeStats {
  tenants: number;
  replies: number;
  tokens: number;
  nodes: number;
}

interface StoredReply {
  tenant: string;
  tokenIds: readonly number[];
}

/**
 * SuffixDecoding's global tree: the suffixes (up to `maxDepth` tokens) of the tenant's recent
 * replies in a trie whose nodes count the suffixes through them, one trie per tenant (the
 * request's cache salt: a tenant never drafts from another's replies), kept per backend and
 * bounded in tokens and nodes by evicting the oldest replies, whoever's they are.
 *
 * Drafting: the longest suffix of the context (shorter than maxDepth) that is a path of the
 * tenant's trie and has a continuation; from its node, the most frequent child, then its most
 * frequent child, and so on while the path's probability (each step: child count over parent
 * count) stays at or above `minTokenProb`, for at most min(max, maxSpecFactor * match length,
 * maxDepth - match length) tokens.
 *
 * Cost: `observe` is O(reply length * maxDepth) map steps; `propose` O(maxDepth^2) for the match
 * plus the draft's length times the children scanned.
 *
 * @example
 * const tree = new SuffixTree();
 * tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 4] });
 * tree.propose({ tenant: "a", tokenIds: [9, 1, 2], numPromptTokens: 1 }, 4); // [3, 4]
 * tree.propose({ tenant: "b", tokenIds: [9, 1, 2], numPromptTokens: 1 }, 4); // []
 */
export class SuffixTree implements DraftSource {
  private readonly maxDepth: number;
  private readonly maxTokens: number;
  private readonly maxNodes: number;
  private readonly maxSpecFactor: number;
  private readonly minTokenProb: number;
  private readonly roots = new Map<string, TrieNode>();
  private replies: StoredReply[] = [];
  private oldest = 0;
  private tokens = 0;
  private nodes = 0;
  private serial = 0;

  /** @example new SuffixTree({ maxTokens: 65536 }) */
  constructor(options: SuffixTreeOptions = {}) {
    this.maxDepth = options.maxDepth ?? 24;
    this.maxTokens = options.maxTokens ?? 32768;
    this.maxNodes = options.maxNodes ?? 262144;
    this.maxSpecFactor = options.maxSpecFactor ?? 1;
    this.minTokenProb = options.minTokenProb ?? 0.1;
    if (!(this.maxDepth >= 2)) throw new Error(`SuffixTree: maxDepth must be at least 2, got ${this.maxDepth}`);
    if (!(this.maxTokens >= 1 && this.maxNodes >= this.maxDepth)) throw new Error(`SuffixTree: maxTokens (${this.maxTokens}) must be positive and maxNodes (${this.maxNodes}) at least maxDepth`);
  }

  /** What the tree holds now. @example tree.stats().nodes */
  stats(): SuffixTreeStats {
    return { tenants: this.roots.size, replies: this.replies.length - this.oldest, tokens: this.tokens, nodes: this.nodes };
  }

  /**
   * Stores a finished reply under its tenant (its last `maxTokens` tokens when longer), then
   * evicts the oldest replies until the bounds hold again.
   * @example tree.observe({ tenant: salt, tokenIds: seq.tokenIds.slice(seq.numPromptTokens) })
   */
  observe(reply: FinishedReply): void {
    if (reply.tokenIds.length === 0) return;
    const tokenIds = reply.tokenIds.slice(-this.maxTokens);
    let root = this.roots.get(reply.tenant);
    if (!root) {
      root = new TrieNode();
      this.roots.set(reply.tenant, root);
    }
    this.serial++;
    for (let start = 0; start < tokenIds.length; start++) {
      let node = root;
      node.count++;
      const stop = Math.min(tokenIds.length, start + this.maxDepth);
      for (let i = start; i < stop; i++) {
        const child = node.childOrAdd(tokenIds[i]!);
        if (child.count === 0) this.nodes++;
        child.count++;
        child.lastSeen = this.serial;
        node = child;
      }
    }
    this.replies.push({ tenant: reply.tenant, tokenIds });
    this.tokens += tokenIds.length;
    while (this.tokens > this.maxTokens || this.nodes > this.maxNodes) this.evictOldest();
  }

  /** Up to `max` tokens: the most frequent continuation of the longest matching suffix. @example tree.propose(context, 8) */
  propose(context: DraftContext, max: number): number[] {
    return this.lookup(context, max).tokenIds;
  }

  /** The draft with the length of the suffix it matched (0: no match). @example tree.lookup(context, 8).matchLength */
  lookup(context: DraftContext, max: number): MatchedDraft {
    const root = this.roots.get(context.tenant);
    const tokens = context.tokenIds;
    if (!root || max <= 0) return noDraft();
    for (let length = Math.min(this.maxDepth - 1, tokens.length); length >= 1; length--) {
      const node = walk(root, tokens, tokens.length - length);
      if (!node) continue;
      const limit = Math.min(max, Math.floor(this.maxSpecFactor * length), this.maxDepth - length);
      const tokenIds = this.draftFrom(node, limit);
      if (tokenIds.length > 0) return { tokenIds, matchLength: length };
    }
    return noDraft();
  }

  private draftFrom(start: TrieNode, limit: number): number[] {
    const draft: number[] = [];
    let node = start;
    let probability = 1;
    while (draft.length < limit) {
      const best = node.bestChild();
      if (!best) break;
      probability *= best[1].count / node.count;
      if (probability < this.minTokenProb) break;
      draft.push(best[0]);
      node = best[1];
    }
    return draft;
  }

  private evictOldest(): void {
    const reply = this.replies[this.oldest]!;
    this.replies[this.oldest++] = undefined as unknown as StoredReply;
    if (this.oldest * 2 > this.replies.length) {
      this.replies = this.replies.slice(this.oldest);
      this.oldest = 0;
    }
    this.tokens -= reply.tokenIds.length;
    const root = this.roots.get(reply.tenant)!;
    const tokenIds = reply.tokenIds;
    for (let start = 0; start < tokenIds.length; start++) {
      let node = root;
      node.count--;
      const stop = Math.min(tokenIds.length, start + this.maxDepth);
      for (let i = start; i < stop; i++) {
        const child = node.child(tokenIds[i]!)!;
        if (--child.count === 0) {
          // Its count was 1: below it is this suffix's own chain only, one node per token left.
          node.removeChild(tokenIds[i]!);
          this.nodes -= stop - i;
          break;
        }
        node = child;
      }
    }
    if (root.count === 0) this.roots.delete(reply.tenant);
  }
}

/** The node of the path tokens[from..] from `root`, or undefined when it is not in the trie. */
function walk(root: TrieNode, tokens: readonly number[], from: number): TrieNode | undefined {
  let node: TrieNode | undefined = root;
  for (let i = from; i < tokens.length && node; i++) node = node.child(tokens[i]!);
  return node;
}
