import { cpuFlags, INTEGER_FLAGS } from "../../gpu-backend/model/quant/cpu-features";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * What the benchmarks measure of this machine and its processes: cores kept busy, CPU seconds,
 * resident memory, memory copy bandwidth.
 */

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
  const machine0 = machineSeconds();
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  return () => {
    const machine1 = machineSeconds();
    if (machine0 === null || machine1 === null) return null;
    const seconds = (performance.now() - t0) / 1000;
    const own = process.cpuUsage(own0);
    const machineCores = (machine1.busyS - machine0.busyS) / seconds;
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
  await sleep(ms);
  return stop();
}

/** The machine's CPU seconds so far (/proc/stat, in USER_HZ: 100 a second): busy (user, nice, system, irq, softirq, steal) of total; null off Linux. */
function machineSeconds(): { busyS: number; totalS: number } | null {
  try {
    const ticks = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    const totalS = ticks.reduce((a, b) => a + b, 0) / 100;
    return { busyS: totalS - (ticks[3]! + ticks[4]!) / 100, totalS }; // minus idle and iowait
  } catch {
    return null;
  }
}

/**
 * This machine's memory copy bandwidth from one thread, for the physical-limit rows of the
 * benchmarks: bytes read + written per second copying a 256 MiB buffer (far beyond any cache),
 * best of 5 after one warm-up copy. Reading alone streams at about this rate here (the fp32 demo
 * model decodes at ~0.8 of it), so a decode step that reads W weight bytes takes at least about
 * W / this seconds.
 *
 * @example
 * const bytesPerS = memoryBandwidth((line) => console.error(line));
 */
export function memoryBandwidth(log: (line: string) => void = () => {}): number {
  const bytes = 256 * 2 ** 20;
  const src = new Float64Array(bytes / 8).fill(1);
  const dst = new Float64Array(bytes / 8);
  dst.set(src);
  let best = Infinity;
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    dst.set(src);
    best = Math.min(best, performance.now() - t0);
  }
  const bytesPerS = ((2 * bytes) / best) * 1000;
  log(`memory copy bandwidth ${(bytesPerS / 1e9).toFixed(1)} GB/s (read + written, one thread)`);
  return bytesPerS;
}

/**
 * The CPU's integer dot-product features, from /proc/cpuinfo (Linux; "unknown" elsewhere): which
 * integer GEMM kernels MLAS can pick (docs/quantization.md, "Prefill products").
 *
 * @example cpuFeatures() // "avx2 avx512f avx512_vnni"
 */
export function cpuFeatures(): string {
  const flags = cpuFlags();
  if (flags === null) return "unknown";
  return INTEGER_FLAGS.filter((f) => flags.has(f)).join(" ") || "none of " + INTEGER_FLAGS.join(" ");
}

export interface ResidentMemory {
  /** Resident set size now. */
  rssBytes: number;
  /** The process's peak resident set size so far (VmHWM), or the current one where /proc is unreadable. */
  peakRssBytes: number;
}

/**
 * This process's resident memory: now (`process.memoryUsage().rss`) and its high-water mark
 * (`VmHWM` of /proc/self/status on Linux), which counts native allocations (onnxruntime's
 * weights and arenas, llama.cpp's buffers) that the V8 heap figures miss.
 *
 * @example
 * const { rssBytes, peakRssBytes } = residentMemory();
 */
export function residentMemory(): ResidentMemory {
  const rssBytes = process.memoryUsage().rss;
  try {
    const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
    return { rssBytes, peakRssBytes: hwm ? Number(hwm[1]) * 1024 : rssBytes };
  } catch {
    return { rssBytes, peakRssBytes: rssBytes };
  }
}

/** Resident memory (VmRSS) of the processes `pids` whose name (/proc/PID/comm) passes `which`, in bytes; gone processes count 0. */
export function residentBytes(pids: readonly number[], which: (comm: string) => boolean = () => true): number {
  let total = 0;
  for (const pid of pids) {
    try {
      if (!which(readFileSync(`/proc/${pid}/comm`, "utf8").trim())) continue;
      const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      total += kb ? Number(kb[1]) * 1024 : 0;
    } catch {
      // exited between listing and reading
    }
  }
  return total;
}

/** CPU seconds: the machine's (busy of total), two groups of processes', this process's. */
export interface CpuBreakdown {
  machineBusyS: number;
  machineTotalS: number;
  backendsS: number;
  edgeS: number;
  clientS: number;
}

/** CPU seconds so far: the machine (/proc/stat), the processes `backends` and `edge` (/proc/PID/stat), this process. */
export function cpuSeconds(pids: { backends: readonly number[]; edge: readonly number[] }): CpuBreakdown {
  const hz = 100; // USER_HZ
  const procS = (list: readonly number[]) =>
    list.reduce((a, pid) => {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
        return a + (Number(fields[11]) + Number(fields[12])) / hz; // utime, stime
      } catch {
        return a;
      }
    }, 0);
  const machine = machineSeconds() ?? { busyS: 0, totalS: 0 };
  const usage = process.cpuUsage();
  return { machineBusyS: machine.busyS, machineTotalS: machine.totalS, backendsS: procS(pids.backends), edgeS: procS(pids.edge), clientS: (usage.user + usage.system) / 1e6 };
}
