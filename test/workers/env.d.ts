// Types of `env` inside the workers tests: the generated bindings (worker-configuration.d.ts)
// plus the optional settings the tests configure (vitest.config.ts bindings).
import type { EdgeVars } from "../../durable-objects/settings";

declare global {
  namespace Cloudflare {
    interface Env extends EdgeVars {}
  }
}
