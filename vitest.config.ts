import { createHash } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { configDefaults, defineConfig } from "vitest/config";
import { SlowFirstSequencer } from "./test/support/sequencer";
import { CLOSED_BACKEND_URL, TENANTS, TEST_MAX_BODY_BYTES } from "./test/workers/tenants";

/** API_KEYS as the edge expects it: SHA-256 hex digest of each key -> tenant (no key in clear). */
const apiKeys = JSON.stringify(
  Object.fromEntries(Object.values(TENANTS).map((t) => [createHash("sha256").update(t.key).digest("hex"), t.name])),
);

/**
 * Test files run at once, across all projects (one pool): at least 3, so that on a 2-core machine
 * the files that mostly wait (stack start-ups, heartbeats, a soak's clock) overlap the ones that
 * compute; vitest's default (cores - 1) would run one file at a time there. `--maxWorkers` overrides.
 * docs/testing.md has the measurements.
 */
const MAX_WORKERS = Math.max(3, availableParallelism());

/**
 * End-to-end files that only read (their own trajectory ids, no global counts, nothing killed or
 * restarted): the `e2e` project runs them against one stack for the run (`sharedTestStack`).
 * A file that kills, restarts or needs its own pool or KV size keeps its own stack (`startTestStack`).
 */
const SHARED_STACK_FILES = ["test/edge-e2e.test.ts", "test/openai-responses.test.ts", "test/anthropic-messages.test.ts", "test/agent-frameworks.test.ts"];

export default defineConfig({
  test: {
    maxWorkers: MAX_WORKERS,
    // The slow files first, longest first, whatever their project (test/support/sequencer.ts).
    sequence: { sequencer: SlowFirstSequencer },
    projects: [
      {
        // Node: protocol, backend, bench and backend-process tests.
        test: {
          name: "node",
          include: ["protocol/**/*.test.ts", "src/**/*.test.ts", "durable-objects/**/*.test.ts", "gpu-backend/**/*.test.ts", "test/**/*.test.ts", "bench/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "test/workers/**", "**/*.webgpu.test.ts", "**/*.browser.test.ts", ...SHARED_STACK_FILES],
          // The tiny model, materialized once per run for the files that only read it.
          globalSetup: ["test/support/tiny-model-setup.ts"],
          pool: "forks",
          testTimeout: 120_000,
          hookTimeout: 300_000,
        },
      },
      {
        // End-to-end files that only read, against one stack for the run, which this project's
        // global setup starts only when one of these files runs.
        test: {
          name: "e2e",
          include: SHARED_STACK_FILES,
          globalSetup: ["test/support/shared-stack-setup.ts"],
          pool: "forks",
          testTimeout: 120_000,
          hookTimeout: 300_000,
        },
      },
      {
        // The `webgpu` executor on a WebGPU adapter (Dawn from the `webgpu` npm package); on a
        // CPU-only machine Mesa lavapipe (scripts/install-webgpu-deps.sh). No adapter: the tests
        // fail with that message. Slow on lavapipe (shader compilation on first use of each shape).
        test: {
          name: "webgpu",
          include: ["gpu-backend/**/*.webgpu.test.ts"],
          pool: "forks",
          testTimeout: 300_000,
          hookTimeout: 600_000,
          env: { XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR || mkdtempSync(join(tmpdir(), "xdg-")) },
        },
      },
      {
        // Pages in real headless Chromium (Debian's, via playwright-core; scripts/install-chromium.sh)
        // against the local stack. No Chromium: the tests fail with that message.
        test: {
          name: "browser",
          include: ["test/**/*.browser.test.ts"],
          pool: "forks",
          testTimeout: 300_000,
          hookTimeout: 600_000,
        },
      },
      {
        // The edge inside workerd with real Durable Objects (SQLite storage), against a real
        // backend process started by the global setup.
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                BACKEND_URLS: inject("backendUrl"),
                AGENT_EDGE_SECRET: inject("backendSecret"),
                API_KEYS: apiKeys,
                MAX_BODY_BYTES: String(TEST_MAX_BODY_BYTES),
                // The tiny random model never calls tools: lease after every turn, so the lease
                // path (backend calls, alarm) runs in every test here (test/workers/leases.test.ts).
                LEASES: "always",
                CANONICALIZE_OFF_TENANTS: TENANTS.raw.name,
                // Tenant a is strict: a model name no backend serves and no alias maps is a 404
                // unknown_model (the tests' "no-such-model"), and a tool the server cannot run a 400.
                // Agents' vendor names reach the tiny model by alias; for tenant b (not strict) any
                // name serves the one model (src/http/model-names.ts).
                STRICT_TENANTS: TENANTS.a.name,
                DERIVED_SESSIONS: TENANTS.derived.name,
                MODEL_ALIASES: JSON.stringify({ "*": { "claude-*": "tiny-llama-random", "gpt-*": "tiny-llama-random" } }),
              },
            },
          })),
        ],
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "test/workers/backend-down/**"],
          globalSetup: ["test/workers/global-setup.ts"],
          // Room for files running beside others on a 2-core machine (fuzz.test.ts: 20 s alone).
          testTimeout: 120_000,
          hookTimeout: 300_000,
        },
      },
      {
        // The edge inside workerd with BACKEND_URLS pointing where nothing listens.
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                BACKEND_URLS: CLOSED_BACKEND_URL,
                AGENT_EDGE_SECRET: "unused-secret",
                API_KEYS: apiKeys,
                MAX_BODY_BYTES: String(TEST_MAX_BODY_BYTES),
              },
            },
          }),
        ],
        test: {
          name: "workers-backend-down",
          include: ["test/workers/backend-down/**/*.test.ts"],
          testTimeout: 60_000,
        },
      },
    ],
  },
});
