import { existsSync, statSync } from "node:fs";
import { open, rm, utimes } from "node:fs/promises";

/** A lock older than this (not touched by its holder) is taken to be a dead process's. */
const STALE_MS = 60_000;
/** How often a waiter looks again. */
const POLL_MS = 250;

/** A held download lock: `touch` while working (at least every STALE_MS), `release` at the end. */
export interface DownloadLock {
  touch(): Promise<void>;
  release(): Promise<void>;
}

/**
 * Takes `<dest>.lock` (created exclusively) so that two processes fetching the same file (two
 * backends of `npm start --backends 2 --model hf:...`) do not write into one `.incomplete` file.
 * Returns undefined without the lock when `dest` appeared while waiting (the other process
 * finished it); a lock not touched for a minute is taken over (its holder died).
 *
 * @example const lock = await lockDownload(dest, log); if (!lock) return; try { ... } finally { await lock.release(); }
 */
export async function lockDownload(dest: string, log: (line: string) => void, what: string): Promise<DownloadLock | undefined> {
  const path = `${dest}.lock`;
  let told = false;
  for (;;) {
    if (existsSync(dest)) return undefined;
    try {
      const handle = await open(path, "wx");
      await handle.writeFile(String(process.pid));
      await handle.close();
      return {
        touch: async () => {
          const now = new Date();
          await utimes(path, now, now).catch(() => undefined);
        },
        release: () => rm(path, { force: true }),
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    const age = existsSync(path) ? Date.now() - statSync(path).mtimeMs : 0;
    if (age > STALE_MS) {
      log(`${what}: taking over a stale download lock (${Math.round(age / 1000)} s old)`);
      await rm(path, { force: true });
      continue;
    }
    if (!told) log(`${what}: another process is downloading it; waiting`);
    told = true;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
