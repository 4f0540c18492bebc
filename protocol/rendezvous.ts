/**
 * Rendezvous (highest random weight) hashing: of `candidates`, the one whose hash with `key` is
 * highest. Stable while the candidates are, and when one goes only the keys it won move. The edge
 * routes by it (routing-policy.ts), and a draining backend picks each trajectory's peer by it
 * (gpu-backend/server/drain-push.ts).
 *
 * @example rendezvous(["http://b1", "http://b2"], "traj_1", (u) => u) // one of them, always the same
 */
export function rendezvous<T>(candidates: readonly T[], key: string, idOf: (c: T) => string): T {
  let best: T = candidates[0]!;
  let bestScore = -1;
  for (const c of candidates) {
    const score = fnv1a(`${key}\u0000${idOf(c)}`);
    if (score > bestScore) {
      best = c;
      bestScore = score;
    }
  }
  return best;
}

/** 32-bit FNV-1a with a final avalanche, so nearby keys spread. @example fnv1a("t1") // 0..2^32-1 */
export function fnv1a(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  return h >>> 0;
}

/**
 * Every candidate, best first, by weighted rendezvous hashing: score -weight / ln(u), u the key's
 * hash with the candidate mapped into (0, 1). A candidate wins a share of keys proportional to its
 * weight, and when one goes or changes weight only keys it won (or now wins) move. The edge ranks
 * a model's pool cells by it (durable-objects/pool/cells.ts), weighted by their backends.
 *
 * @example rendezvousOrder(cells, "prefix-key", (c) => c.name, (c) => c.backends.length) // [best, next, ...]
 */
export function rendezvousOrder<T>(candidates: readonly T[], key: string, idOf: (c: T) => string, weightOf: (c: T) => number = () => 1): T[] {
  const scored = candidates.map((c) => {
    const u = (fnv1a(`${key}\u0000${idOf(c)}`) + 1) / 4294967297;
    return { c, score: Math.max(weightOf(c), 0) / -Math.log(u) };
  });
  return scored.sort((a, b) => b.score - a.score || (idOf(a.c) < idOf(b.c) ? -1 : 1)).map((s) => s.c);
}
