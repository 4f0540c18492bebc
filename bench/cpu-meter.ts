import { readFileSync } from "node:fs";

/** Cores kept busy over a stretch of time: by the whole machine, by this process, by the others. */
export interface CpuShare {
  machineCores: number;
  ownCores: number;
  /** machineCores - ownCores: what other processes (other containers on the machine too) took. */
  otherCores: number;
}

/**
 * Starts measuring how many cores the machine and this process keep busy (Linux /proc/stat:
 * user, nice, system, irq, softirq, steal; `process.cpuUsage()` for this process, every thread).
 * The returned function gives the shares since the start, or null where /proc/stat cannot be
 * read. On a 2-core machine one core taken by another process slows llama.cpp's threads (which
 * meet at a barrier after every op) several times over: a benchmark records `otherCores` so a
 * disturbed run shows.
 *
 * @example
 * const stop = startCpuMeter();
 * await work();
 * stop(); // { machineCores: 2.0, ownCores: 1.97, otherCores: 0.03 }
 */
export function startCpuMeter(): () => CpuShare | null {
  const machine0 = machineTicks();
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  return () => {
    const machine1 = machineTicks();
    if (machine0 === null || machine1 === null) return null;
    const seconds = (performance.now() - t0) / 1000;
    const own = process.cpuUsage(own0);
    // /proc/stat counts in USER_HZ (100 per second on Linux).
    const machineCores = (machine1 - machine0) / 100 / seconds;
    const ownCores = (own.user + own.system) / 1e6 / seconds;
    const round = (x: number) => Math.round(x * 100) / 100;
    return { machineCores: round(machineCores), ownCores: round(ownCores), otherCores: round(Math.max(0, machineCores - ownCores)) };
  };
}

/**
 * The shares over the next `ms` milliseconds.
 *
 * @example
 * (await measureCpu(1000))?.otherCores; // ~0 on an idle machine
 */
export async function measureCpu(ms: number): Promise<CpuShare | null> {
  const stop = startCpuMeter();
  await new Promise((resolve) => setTimeout(resolve, ms));
  return stop();
}

function machineTicks(): number | null {
  try {
    const [, user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).map(Number);
    return user! + nice! + system! + irq! + softirq! + steal!;
  } catch {
    return null;
  }
}
