import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { Engine } from "../../engine/engine";
import { tinyModelDir } from "../../model/testing/tiny-model";
import { testEngine } from "./test-engine";

/** The backend app's shared secret in tests. */
export const TEST_SECRET = "s3cret";

/** What `testApp` gives a test file once its `beforeAll` ran. */
export interface TestApp<A> {
  app: A;
  engine: Engine;
}

/**
 * An app (`makeApp`: the real backend app, from the test file, so this folder imports no server
 * module) over an in-process engine (`testEngine`) on the tiny model in a temp dir named
 * `agent-edge-<name>-...`, for one test file: made in `beforeAll`, disposed in `afterAll`. Read its
 * fields inside tests (they are set once `beforeAll` ran).
 *
 * @example const t = testApp("leases", (engine) => createBackendApp({ engine, secret: TEST_SECRET, backendId: "t" }));
 */
export function testApp<A>(name: string, makeApp: (engine: Engine) => A, options: Omit<Parameters<typeof testEngine>[0], "modelDir"> = {}): TestApp<A> {
  const fixture = {} as TestApp<A>;
  let dir: string | undefined;
  let dispose: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), `agent-edge-${name}-`));
    const { engine, executor } = await testEngine({ modelDir: await tinyModelDir(dir), ...options });
    dispose = () => executor.dispose();
    fixture.engine = engine;
    fixture.app = makeApp(engine);
  });
  afterAll(async () => {
    await dispose?.();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  return fixture;
}
