import type { Heartbeat } from "../../../protocol/messages";
import type { LoadRequest, LoadResponse } from "../driver-protocol";
import type { PoolOf } from "./run-ops";

/** Distinct chunks of synthetic hashes the beats cycle through (shared by every backend). */
const CHUNKS = 48;
/** Beats a backend keeps a chunk before its `removed` names it. */
const HELD_BEATS = 2;
/** How long the phase waits for calls still in flight once it ends. */
const DRAIN_MS = 10_000;

/**
 * Open-loop load on the pool (its objects: each backend beats into its own, each turn is placed
 * by the first of its `pools` that answers and noted there) for `r.seconds`, timed in this Worker (the caller's view):
 *
 *   beat k        -> backend k % n, scheduled at k * beatEveryMs / n (each backend once per interval)
 *   placed turn i -> scheduled at i / placeRate s: `place`, then its `notePrefix` turnMs later
 *                    (or when the phase ends, untimed, for turns still running then)
 *
 * Every call is sent when due without waiting for earlier ones (the object serializes them), and
 * timed from when it was DUE, so queueing behind a slow object counts (no coordinated omission).
 * A beat stores one chunk of `eventsPerBeat` synthetic hashes and removes the chunk it stored
 * HELD_BEATS beats before; the chunks are built before the clock starts, so making them costs
 * the object's thread nothing while timed.
 */
export async function runLoad(poolOf: PoolOf, r: LoadRequest): Promise<LoadResponse> {
  const chunks = Array.from({ length: CHUNKS }, (_, c) => Array.from({ length: r.eventsPerBeat }, (_, j) => `e${c.toString(16).padStart(3, "0")}${j.toString(16).padStart(12, "0")}`));
  const n = r.backends.length;
  const seqs = r.backends.map((b) => b.seq);
  const beatsDone = r.backends.map(() => 0);
  const placeMs: number[] = [];
  const beatMs: number[] = [];
  const inFlight = new Set<Promise<void>>();
  let resyncs = 0;
  const track = (p: Promise<void>) => {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };
  const turnMs = r.turnMs;
  const endMs = r.seconds * 1000;
  const beatGapMs = n > 0 ? r.beatEveryMs / n : Infinity;
  const t0 = performance.now();
  let nextBeat = 0;
  let nextPlace = 0;
  const notes: { at: number; key: string; url: string; hashes: string[]; id: string; pool: string }[] = [];
  const note = (n: (typeof notes)[number]) => track(poolOf(n.pool).notePrefix(n.key, n.url, n.hashes, n.id));
  for (let now = 0; now < endMs; now = performance.now() - t0) {
    for (; nextBeat * beatGapMs <= now && n > 0; nextBeat++) {
      const due = nextBeat * beatGapMs;
      const b = nextBeat % n;
      const k = beatsDone[b]!++;
      const beat = beatOf(r.backends[b]!, ++seqs[b]!, chunks[(b + k) % CHUNKS]!, k >= HELD_BEATS ? chunks[(b + k - HELD_BEATS) % CHUNKS]! : [], b);
      track(poolOf(r.backends[b]!.pool ?? r.pool).heartbeat(beat).then((reply) => {
        beatMs.push(performance.now() - t0 - due);
        if (reply.kv === "resync") resyncs++;
      }));
    }
    for (; (nextPlace * 1000) / r.placeRate <= now && r.turns.length > 0; nextPlace++) {
      const due = (nextPlace * 1000) / r.placeRate;
      const turn = r.turns[nextPlace % r.turns.length]!;
      const id = `load-${nextPlace}`;
      track(placeIn(poolOf, turn.pools ?? [r.pool], { hashes: turn.hashes, key: turn.key, trajectoryId: id }).then((placed) => {
        placeMs.push(performance.now() - t0 - due);
        if (placed) notes.push({ at: due + turnMs, key: turn.key, url: placed.url, hashes: turn.hashes, id, pool: placed.pool });
      }));
    }
    while (notes.length > 0 && notes[0]!.at <= now) note(notes.shift()!);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  const placed = nextPlace;
  const beats = nextBeat;
  // Turns still running when the phase ends are noted now (untimed), so every placed turn costs its note.
  for (const n of notes.splice(0)) note(n);
  await Promise.race([Promise.allSettled([...inFlight]), new Promise((resolve) => setTimeout(resolve, DRAIN_MS))]);
  return { placeMs, beatMs, unfinished: placed + beats - placeMs.length - beatMs.length, seqs, elapsedMs: performance.now() - t0, resyncs };
}

/** The first of `pools` that places the turn, in order (null: none had a backend up). */
async function placeIn(poolOf: PoolOf, pools: readonly string[], p: { hashes: string[]; key: string; trajectoryId: string }): Promise<{ url: string; pool: string } | null> {
  for (const pool of pools) {
    const placed = await poolOf(pool).place(p);
    if (placed) return { url: placed.url, pool };
  }
  return null;
}

/** A simulated backend's beat: a light steady load and one chunk of KV events. */
function beatOf(b: { id: string; url: string }, seq: number, stored: string[], removed: string[], i: number): Heartbeat {
  const running = 1 + (i % 3);
  return { id: b.id, url: b.url, model: "sim", kvCapacityBlocks: 8192, running, waiting: 0, kvUsage: 0.9, tokensPerS: 0, loadAvg: running, kvEvents: { seq, kind: "delta", stored, removed } };
}
