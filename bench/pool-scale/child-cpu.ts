import { readdirSync, readFileSync } from "node:fs";

/**
 * CPU milliseconds (user + system) taken so far by this process's child processes named
 * `name` (wrangler's workerd is a direct child of the bench's Node process), from /proc; 0 off
 * Linux. Subtract two readings for a stretch of time.
 *
 * @example const before = childCpuMs("workerd"); await work(); childCpuMs("workerd") - before
 */
export function childCpuMs(name: string): number {
  let ms = 0;
  let dirs: string[];
  try {
    dirs = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return 0;
  }
  for (const pid of dirs) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // After the name: state, ppid, ... utime (14th field of the line) and stime (15th), in ticks of 10 ms.
      if (comm !== name || Number(fields[1]) !== process.pid) continue;
      ms += (Number(fields[11]) + Number(fields[12])) * 10;
    } catch {
      // The process ended while read.
    }
  }
  return ms;
}
