/**
 * A backend's drain (`POST /v1/drain`, SIGTERM): from the moment it starts, the heartbeat says
 * `draining`, the edge places nothing new here and moves this backend's trajectories on their next
 * turn, each pulling its blocks from here (`kvSource`). The backend keeps serving (a turn already
 * routed here still runs; pulls are answered) and exits once it has been idle, with no sequence
 * running or waiting, no block stream open and no request for `graceMs`, or at `timeoutMs`.
 *
 * @example
 * const drain = new Drain();
 * drain.start("SIGTERM");
 * await drain.finished({ graceMs: 10_000, timeoutMs: 120_000, busy: () => engine.numRunning > 0 });
 */
export class Drain {
  private startedAt: number | undefined;
  private lastActivity = Date.now();
  private readonly waiters: (() => void)[] = [];

  get draining(): boolean {
    return this.startedAt !== undefined;
  }

  /** Starts draining (idempotent); `why` is logged by the caller. */
  start(): boolean {
    if (this.startedAt !== undefined) return false;
    this.startedAt = Date.now();
    this.lastActivity = this.startedAt;
    for (const w of this.waiters.splice(0)) w();
    return true;
  }

  /** A request arrived (a turn, a pull): the idle clock restarts. */
  noteActivity(): void {
    this.lastActivity = Date.now();
  }

  /** Resolves when a drain has started. */
  started(): Promise<void> {
    if (this.draining) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves once idle for `graceMs` (`idle`) or at `timeoutMs` after the drain began (`timeout`). */
  async finished(o: { graceMs: number; timeoutMs: number; busy: () => boolean; pollMs?: number }): Promise<"idle" | "timeout"> {
    await this.started();
    const deadline = this.startedAt! + o.timeoutMs;
    for (;;) {
      const now = Date.now();
      if (o.busy()) this.lastActivity = now;
      else if (now - this.lastActivity >= o.graceMs) return "idle";
      if (now >= deadline) return "timeout";
      await new Promise((r) => setTimeout(r, o.pollMs ?? 100));
    }
  }
}
