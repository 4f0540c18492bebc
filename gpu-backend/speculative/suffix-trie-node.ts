/**
 * A node of the tenant trees of suffix-tree.ts: how many stored suffixes pass through it, the
 * serial of the latest reply that passed (the tie-break: most frequent, then most recent), and
 * its children by token. Most nodes deep in the trie have one child, held in two fields; a Map is
 * made only at the second child, so a chain costs one small object per token.
 *
 * @example
 * const root = new TrieNode();
 * const child = root.childOrAdd(42); child.count++;
 * root.child(42) === child; // true
 */
export class TrieNode {
  /** Stored suffixes through this node (the root: all stored suffixes). */
  count = 0;
  /** Serial of the latest reply stored through this node (not lowered by eviction). */
  lastSeen = 0;
  private onlyToken = -1;
  private onlyChild: TrieNode | null = null;
  private many: Map<number, TrieNode> | null = null;

  /** The child for `token`, or undefined. @example node.child(7) */
  child(token: number): TrieNode | undefined {
    if (this.many) return this.many.get(token);
    return this.onlyToken === token ? this.onlyChild! : undefined;
  }

  /** The child for `token`, made (count 0) if missing. @example node.childOrAdd(7).count++ */
  childOrAdd(token: number): TrieNode {
    const found = this.child(token);
    if (found) return found;
    const made = new TrieNode();
    if (this.many) this.many.set(token, made);
    else if (this.onlyChild === null) {
      this.onlyToken = token;
      this.onlyChild = made;
    } else {
      this.many = new Map([[this.onlyToken, this.onlyChild], [token, made]]);
      this.onlyToken = -1;
      this.onlyChild = null;
    }
    return made;
  }

  /** Removes the child for `token` (and its subtree). @example node.removeChild(7) */
  removeChild(token: number): void {
    if (this.many) {
      this.many.delete(token);
      if (this.many.size === 1) {
        const [only, node] = this.many.entries().next().value!;
        this.onlyToken = only;
        this.onlyChild = node;
        this.many = null;
      }
    } else if (this.onlyToken === token) {
      this.onlyToken = -1;
      this.onlyChild = null;
    }
  }

  /**
   * The most frequent child (ties: the one stored through most recently, then the smaller token),
   * or undefined for a leaf.
   * @example const [token, next] = node.bestChild() ?? [];
   */
  bestChild(): [number, TrieNode] | undefined {
    if (!this.many) return this.onlyChild ? [this.onlyToken, this.onlyChild] : undefined;
    let best: [number, TrieNode] | undefined;
    for (const entry of this.many) {
      if (!best || beats(entry, best)) best = entry;
    }
    return best;
  }
}

function beats([token, node]: [number, TrieNode], [bestToken, best]: [number, TrieNode]): boolean {
  if (node.count !== best.count) return node.count > best.count;
  if (node.lastSeen !== best.lastSeen) return node.lastSeen > best.lastSeen;
  return token < bestToken;
}
