/** Time constant of the smoothed load a backend reports (`loadAvg` in its heartbeats). */
export const LOAD_AVG_TAU_MS = 4000;

/**
 * An exponentially weighted average of a load signal over time (not over samples): each sample
 * weighs by how long it has held, so irregular sampling (a blocked event loop) does not skew it.
 *
 * @example
 * const avg = new LoadAverage(); avg.sample(engine.numRunning + engine.numWaiting); avg.value;
 */
export class LoadAverage {
  private avg: number | undefined;
  private last = 0;
  private lastAt = 0;

  constructor(
    private readonly tauMs = LOAD_AVG_TAU_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Records the current load (it held since the previous sample at that previous value). */
  sample(load: number): void {
    const t = this.now();
    if (this.avg === undefined) {
      this.avg = load;
    } else {
      const alpha = 1 - Math.exp(-(t - this.lastAt) / this.tauMs);
      this.avg += alpha * (this.last - this.avg);
    }
    this.last = load;
    this.lastAt = t;
  }

  /** The average up to now (the last sample counts as holding until now). */
  get value(): number {
    if (this.avg === undefined) return 0;
    const alpha = 1 - Math.exp(-(this.now() - this.lastAt) / this.tauMs);
    return this.avg + alpha * (this.last - this.avg);
  }
}
