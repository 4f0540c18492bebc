// Types of `env` and `exports` from "cloudflare:workers" inside the workers tests.
import type { EdgeEnv } from "../../durable-objects/edge-env";

declare global {
  namespace Cloudflare {
    interface Env extends EdgeEnv {}
    interface GlobalProps {
      mainModule: typeof import("../../src/index");
      durableNamespaces: "TrajectoryDO";
    }
  }
}
