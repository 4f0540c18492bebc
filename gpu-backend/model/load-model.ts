/**
 * Temporary re-export: `loadModel` moved to gpu-backend/server/load-model.ts. Only
 * bench/routing-bench.ts (being split in another branch) still imports this path; delete this
 * file once it imports "../gpu-backend/server/load-model".
 */
export * from "../server/load-model";
