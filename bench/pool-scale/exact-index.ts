/**
 * The bench's oracle: exactly which simulated backend holds which block, as a plain map
 * hash -> set of backend numbers, kept by the simulated backends as they store and evict.
 *
 * @example
 * const exact = new ExactIndex();
 * exact.add("h0", 3);
 * exact.leadingBlocks(["h0", "h1"]); // Map { 3 => 1 }
 */
export class ExactIndex {
  private readonly holders = new Map<string, Set<number>>();

  add(hash: string, backend: number): void {
    let set = this.holders.get(hash);
    if (!set) this.holders.set(hash, (set = new Set()));
    set.add(backend);
  }

  remove(hash: string, backend: number): void {
    const set = this.holders.get(hash);
    if (!set) return;
    set.delete(backend);
    if (set.size === 0) this.holders.delete(hash);
  }

  /** Hashes held by some backend. */
  get size(): number {
    return this.holders.size;
  }

  /**
   * Per backend holding at least the first hash (and in `live`, when given): how many LEADING
   * hashes of `hashes` it holds, stopping at its first miss.
   */
  leadingBlocks(hashes: readonly string[], live?: ReadonlySet<number>): Map<number, number> {
    const out = new Map<number, number>();
    let alive: Set<number> | undefined;
    for (let i = 0; i < hashes.length; i++) {
      const held = this.holders.get(hashes[i]!);
      const next = new Set<number>();
      for (const b of alive ?? held ?? []) {
        if (alive === undefined && live && !live.has(b)) continue;
        if (held?.has(b)) next.add(b);
        else out.set(b, i);
      }
      alive = next;
      if (alive.size === 0) return out;
    }
    for (const b of alive ?? []) out.set(b, hashes.length);
    return out;
  }
}
