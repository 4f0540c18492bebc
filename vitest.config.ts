import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["protocol/**/*.test.ts", "gpu-backend/**/*.test.ts", "test/**/*.test.ts", "bench/**/*.test.ts"],
    pool: "forks",
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
