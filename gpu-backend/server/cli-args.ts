/**
 * Flag value parsing shared by the command-line entry points; a bad value prints what was
 * expected and exits with status 2.
 *
 * @example const port = positiveInt(values.port, "--port");
 */
export function positiveInt(v: string, flag: string, max = Infinity): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0 || n > max) {
    console.error(`${flag} must be a positive integer${max < Infinity ? ` of at most ${max}` : ""}, got ${JSON.stringify(v)}`);
    process.exit(2);
  }
  return n;
}

/**
 * `argv` with `fallback` inserted after `flag` where no value follows it (the end, or another
 * flag): a flag whose value is optional, such as `--demo-agent [N]`, for `parseArgs`.
 *
 * @example withOptionalValue(["--demo-agent", "--port", "8080"], "--demo-agent", "48") // ["--demo-agent", "48", "--port", "8080"]
 */
export function withOptionalValue(argv: readonly string[], flag: string, fallback: string): string[] {
  return argv.flatMap((arg, i) => (arg === flag && (argv[i + 1] === undefined || argv[i + 1]!.startsWith("-")) ? [arg, fallback] : [arg]));
}

/** A byte size such as 512MiB, 2GiB or 1000000. @example parseSize("512MiB", "--kv-memory") */
export function parseSize(v: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?$/i.exec(v.trim());
  if (!m) {
    console.error(`${flag} must look like 512MiB or 2GiB, got ${JSON.stringify(v)}`);
    process.exit(2);
  }
  const units: Record<string, number> = { b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, kb: 1e3, mb: 1e6, gb: 1e9 };
  return Math.floor(Number(m[1]) * units[(m[2] ?? "b").toLowerCase()]!);
}
