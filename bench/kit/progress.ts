/**
 * Periodic progress lines for long runs (stderr, so `--json` output on stdout stays clean).
 *
 * @example
 * const p = new Progress("agent", 40);
 * p.tick("cache on"); // "[agent] cache on 1/40 (2%) 3.1 s"
 */
export class Progress {
  private done = 0;
  private readonly start = performance.now();
  private lastPrint = 0;

  constructor(
    private readonly name: string,
    private readonly total: number,
    private readonly everyMs = 2000,
  ) {}

  tick(label = "", n = 1): void {
    this.done += n;
    const now = performance.now();
    if (this.done < this.total && now - this.lastPrint < this.everyMs) return;
    this.lastPrint = now;
    const pct = this.total > 0 ? Math.floor((100 * this.done) / this.total) : 100;
    const bar = "#".repeat(Math.floor(pct / 5)).padEnd(20, ".");
    process.stderr.write(`[${this.name}] ${label} [${bar}] ${this.done}/${this.total} (${pct}%) ${((now - this.start) / 1000).toFixed(1)} s\n`);
  }
}

/** A one-off progress line. */
export function note(name: string, line: string): void {
  process.stderr.write(`[${name}] ${line}\n`);
}
