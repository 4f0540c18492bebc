import { placeOver } from "../../durable-objects/routing/placement";
import type { SimBackend } from "./sim-backend";

/**
 * The pool-scale bench's oracle placement: what the pool's placement rule (`placeOver`, affinity
 * with its load margins) picks when it ranks by the EXACT leading blocks of every backend instead
 * of its own index's counts, over the loads the pool sees (each backend's last beat, `running`
 * and `loadAvg` alike in the simulation, plus the placements made on it since). Its backend number,
 * or undefined when none is up.
 *
 * @example oracleIndexChoice("t1", exact.leadingBlocks(hashes), sims, running, pending) // 17
 */
export function oracleIndexChoice(
  trajectoryId: string,
  exactBlocks: ReadonlyMap<number, number>,
  live: readonly SimBackend[],
  running: ReadonlyMap<string, number>,
  pending: ReadonlyMap<string, number>,
): number | undefined {
  const prefixBlocks: Record<string, number> = {};
  for (const s of live) {
    const n = exactBlocks.get(s.index) ?? 0;
    if (n > 0) prefixBlocks[s.url] = n;
  }
  const candidates = live.map((s) => {
    const load = running.get(s.url) ?? 0;
    return { url: s.url, up: true, running: load, waiting: 0, loadAvg: load, pending: pending.get(s.url) ?? 0 };
  });
  const d = placeOver({ trajectoryId, prefixBlocks }, candidates);
  return d ? live.find((s) => s.url === d.url)?.index : undefined;
}
