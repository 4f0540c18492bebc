import { spawnSync } from "node:child_process";
import { webGpuAdapter } from "../gpu-backend/model/device";

/**
 * `npm test` after the type checks: every vitest project. The `webgpu` project needs a WebGPU
 * adapter (on a machine without a GPU: Mesa's software Vulkan, `scripts/install-webgpu-deps.sh`).
 * Without one, a developer's run says clearly that those tests did not run; CI (CI=true) fails
 * instead, so CI never passes by skipping them.
 */
const projects = ["node", "workers", "workers-backend-down"];
const adapter = await webGpuAdapter().catch(() => undefined);
if (adapter) projects.push("webgpu");
else if (process.env.CI) {
  console.error("no WebGPU adapter: CI must run the webgpu tests; run scripts/install-webgpu-deps.sh first (.ci/run does)");
  process.exit(1);
}
const result = spawnSync(process.execPath, ["node_modules/vitest/vitest.mjs", "run", ...projects.flatMap((p) => ["--project", p])], { stdio: "inherit" });
if (!adapter) {
  console.warn(
    "\nNOTE: the webgpu tests did NOT run: no WebGPU adapter here. Run `sudo bash scripts/install-webgpu-deps.sh` once (Mesa lavapipe), then `npm test` or `npm run test:webgpu`. CI runs them.",
  );
}
process.exit(result.status ?? 1);
