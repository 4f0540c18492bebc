/**
 * The fuzzers' shared mutations (fuzz-backend.ts: msgpack values; fuzz-edge.ts: JSON values): a
 * random value tree from a kind's scalars and keys, and a valid value with one field changed.
 */
export interface ValueKind {
  /** Makes one random scalar. */
  scalars: readonly ((rand: () => number) => unknown)[];
  /** Keys random maps use (the fields the routes know, and some they do not). */
  keys: readonly string[];
  /** Keys a mutation may add to a map (an own `__proto__` among them). */
  extraKeys: readonly string[];
  /** Leaves that are scalars to the mutation (e.g. binary), not maps to walk into. */
  isLeaf?: (v: object) => boolean;
}

/** A random value: a scalar, or an array or map of random values, `depth` levels at most. */
export function randomTree(kind: ValueKind, rand: () => number, depth: number): unknown {
  const r = rand();
  if (depth <= 0 || r < 0.5) return kind.scalars[Math.floor(rand() * kind.scalars.length)]!(rand);
  if (r < 0.75) return Array.from({ length: Math.floor(rand() * 5) }, () => randomTree(kind, rand, depth - 1));
  return Object.fromEntries(Array.from({ length: Math.floor(rand() * 5) }, () => [kind.keys[Math.floor(rand() * kind.keys.length)]!, randomTree(kind, rand, depth - 1)]));
}

/** `v` with a field somewhere replaced by a random value, removed, or an unknown one added. */
export function mutateValue(kind: ValueKind, v: unknown, rand: () => number): unknown {
  if (v === null || typeof v !== "object" || kind.isLeaf?.(v)) return rand() < 0.7 ? randomTree(kind, rand, 2) : v;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(v) ? [...v] : { ...(v as Record<string, unknown>) };
  const keys = Object.keys(copy);
  const op = rand();
  if (keys.length === 0 || op < 0.1) {
    // An own `__proto__` key (as a decoder makes it), not the object's prototype.
    const extra = kind.extraKeys[Math.floor(rand() * kind.extraKeys.length)]!;
    Object.defineProperty(copy, extra, { value: randomTree(kind, rand, 2), enumerable: true, writable: true, configurable: true });
    return copy;
  }
  const k = keys[Math.floor(rand() * keys.length)]!;
  const rec = copy as Record<string, unknown>;
  if (op < 0.25) delete rec[k];
  else if (op < 0.6) rec[k] = randomTree(kind, rand, 2);
  else rec[k] = mutateValue(kind, rec[k], rand);
  return copy;
}
