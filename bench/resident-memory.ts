import { readFileSync } from "node:fs";

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
