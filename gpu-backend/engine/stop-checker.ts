/**
 * Stop strings over streamed text: generation ends before the first occurrence of any stop
 * string, which is never returned. Text that could still become a stop string is held back from
 * the stream until it cannot.
 *
 * @example
 * const stops = new StopChecker(["\nUser:"]);
 * stops.push("Hello\nUs");   // { emit: "Hello", stopped: false }
 * stops.push("er: hi");      // { emit: "", stopped: true }
 */
export class StopChecker {
  private text = "";
  private emitted = 0;
  private readonly holdBack: number;
  /** The stop string that ended the text (undefined until one did). */
  private stoppedBy: string | undefined;

  constructor(private readonly stops: readonly string[]) {
    this.holdBack = stops.reduce((a, s) => Math.max(a, s.length - 1), 0);
  }

  push(delta: string): { emit: string; stopped: boolean } {
    this.text += delta;
    let cut = -1;
    let cutEnd = 0;
    for (const s of this.stops) {
      if (!s) continue;
      const at = this.text.indexOf(s, Math.max(0, this.emitted - s.length));
      // The first occurrence wins; of two starting there, the shorter (it was complete first).
      if (at >= 0 && (cut < 0 || at < cut || (at === cut && at + s.length < cutEnd))) {
        cut = at;
        cutEnd = at + s.length;
        this.stoppedBy = s;
      }
    }
    if (cut >= 0) {
      const emit = this.text.slice(this.emitted, Math.max(cut, this.emitted));
      this.text = this.text.slice(0, cut);
      this.emitted = this.text.length;
      return { emit, stopped: true };
    }
    const safe = Math.max(this.emitted, this.text.length - this.holdBack);
    const emit = this.text.slice(this.emitted, safe);
    this.emitted = safe;
    return { emit, stopped: false };
  }

  /** Releases held-back text when generation ends for another reason. */
  flush(): string {
    const emit = this.text.slice(this.emitted);
    this.emitted = this.text.length;
    return emit;
  }

  /** The stop string that ended the text: the first to occur (undefined while none did). */
  get matched(): string | undefined {
    return this.stoppedBy;
  }

  /** All text so far, stop string excluded. */
  get fullText(): string {
    return this.text;
  }
}
