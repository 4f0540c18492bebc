import { readFileSync } from "node:fs";

/** The CPU flags that decide which integer GEMM kernel MLAS runs (docs/quantization.md, "Prefill products"). */
export const INTEGER_FLAGS = ["avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8"] as const;

let flags: Set<string> | null | undefined;

/**
 * This CPU's flags from /proc/cpuinfo, or null where it cannot be read (not Linux), read once.
 *
 * @example cpuFlags()?.has("avx512_vnni") // true on an AVX-512 VNNI CPU
 */
export function cpuFlags(): ReadonlySet<string> | null {
  if (flags !== undefined) return flags;
  try {
    const line = /^flags\s*:(.*)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1];
    flags = line === undefined ? null : new Set(line.trim().split(/\s+/));
  } catch {
    flags = null;
  }
  return flags;
}

/** Whether MLAS's u8 x s8 kernels sum products into int32 directly (VNNI or AMX) rather than pairs into int16 first. */
export function hasVnni(f: ReadonlySet<string> | null = cpuFlags()): boolean {
  return f !== null && (f.has("avx_vnni") || f.has("avx512_vnni") || f.has("amx_int8"));
}
