import { accessSync, constants } from "node:fs";

/** Where the inspector's browser test looks for Chromium when CHROMIUM_PATH is not set (Debian's `chromium`). */
export const DEFAULT_CHROMIUM = "/usr/bin/chromium";

/**
 * The Chromium the browser tests drive through playwright-core (never a downloaded browser):
 * env CHROMIUM_PATH, else /usr/bin/chromium; undefined when that file is not executable.
 * `scripts/install-chromium.sh` installs Debian's package.
 *
 * @example const executablePath = chromiumExecutable() ?? fail("no chromium");
 */
export function chromiumExecutable(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const path = env.CHROMIUM_PATH || DEFAULT_CHROMIUM;
  try {
    accessSync(path, constants.X_OK);
    return path;
  } catch {
    return undefined;
  }
}
