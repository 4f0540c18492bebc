/**
 * One loader's answer, kept for a while (pool-view.ts keeps the pool's view this way). Only the
 * answer is kept, never a promise in flight: in workerd a promise made while serving one request
 * (or object) must not be awaited by another, so concurrent misses each load.
 *
 * @example const cache = new ViewCache(() => fetchView()); await cache.get(1000);
 */
export class ViewCache<T> {
  private entry: { at: number; value: T } | undefined;

  constructor(
    private readonly load: () => Promise<T>,
    private readonly now: () => number = Date.now,
  ) {}

  /** The kept answer when younger than `ttlMs` (counted from when its load began), else a new one. */
  async get(ttlMs: number): Promise<T> {
    const t = this.now();
    if (this.entry && t - this.entry.at <= ttlMs) return this.entry.value;
    const value = await this.load();
    if (!this.entry || this.entry.at <= t) this.entry = { at: t, value };
    return value;
  }

  /** Keeps `value` as the answer loaded now (one the caller got some other way). */
  put(value: T): void {
    this.entry = { at: this.now(), value };
  }
}
