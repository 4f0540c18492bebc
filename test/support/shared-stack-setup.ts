import type { TestProject } from "vitest/node";
import type {} from "../../gpu-backend/model/testing/tiny-model";
import { SHARED_STACK_OPTIONS, startTestStack } from "./stack-fixture";

/**
 * Global setup of the `e2e` project: starts one local stack (a backend on the tiny model and
 * `wrangler dev`, as `startTestStack` does) for all of that project's files, which only read
 * (`sharedTestStack`), and provides its URLs, secret and inspector port, and the tiny model's
 * folder. vitest runs it only when the project has files to run, so a run of other files never
 * starts it. Stops the stack at teardown.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fixture = await startTestStack(SHARED_STACK_OPTIONS);
  const { edgeUrl, backendUrls, secret } = fixture.stack;
  project.provide("sharedStack", { edgeUrl, backendUrls, secret, inspectorPort: fixture.inspectorPort });
  project.provide("tinyModelDir", fixture.modelDir);
  return () => fixture.stop();
}
