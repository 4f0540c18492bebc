import { DurableObject } from "cloudflare:workers";
import { commonPrefixLength } from "../../protocol/common-prefix";
import { MAX_PROMPT_BLOCK_HASHES, type Heartbeat, type HeartbeatReply } from "../../protocol/messages";
import { BlockIndex } from "../routing/block-index";
import { placeOver, pullSource, type ParentPlacement, type Placed } from "../routing/placement";
import type { RoutingPolicyName } from "../routing/routing-policy";
import { edgeSettings } from "../settings";
import { FIRST_CELL } from "./cells";
import { directoryOf } from "./directory-do";
import { PoolStore, PREFIX_LIST_BLOCKS, type BackendHeartbeat } from "./pool-store";

/** A backend as the pool sees it. */
export interface PoolBackend extends BackendHeartbeat {
  up: boolean;
  /** "registered": heartbeats; "static": from BACKEND_URLS (always considered up, load unknown). */
  source: "registered" | "static";
  lastSeenMs: number;
}

/** The object of pool cell `cell` (cells.ts; the first, and with one cell the only one, is "pool"). */
export function poolCell(env: Env, cell: string): DurableObjectStub<PoolDO> {
  return env.POOL.get(env.POOL.idFromName(cell));
}

/** The first pool cell's object ("pool": the whole pool while it has one cell). */
export function poolOf(env: Env): DurableObjectStub<PoolDO> {
  return poolCell(env, FIRST_CELL);
}

/** How long a placement counts as load on its backend at most (its heartbeats show it by then). */
export const PENDING_PLACEMENT_MS = 5000;
/** A placement this much older than a backend's last heartbeat may not be in it yet. */
export const PLACEMENT_OVERLAP_MS = 1000;
/**
 * How long a new trajectory placed under a prefix key marks its backend as (about to be) holding
 * that key's shared prefix: long enough for a first prefill under load; by then the turn's done
 * frame has noted the real blocks (`notePrefix`).
 */
export const PLACED_PREFIX_MS = 30_000;
/**
 * What a block a backend holds in its host tier counts for when placing, against 1 for one in its
 * pool: it is reused at copy cost instead of a prefill, but not free (as Dynamo credits tiers).
 */
export const HOST_TIER_CREDIT = 0.5;

/** Open placements kept in memory at most (the oldest are forgotten first). */
export const MAX_OPEN_PLACEMENTS = 10_000;

/**
 * How often `notePrefix` trims the text-level index at most: its tables then hold the newest
 * MAX_PREFIX_ROWS rows plus at most this long's notes.
 */
export const PREFIX_TRIM_EVERY_MS = 1000;

/** How often a cell reports its up backends to the directory at most (`PoolDirectoryDO.report`). */
export const CELL_REPORT_EVERY_MS = 5000;

/**
 * A placement whose turn has not been noted done yet. It counts as load on `url` until a
 * heartbeat can show it (PENDING_PLACEMENT_MS at most), and, for a new trajectory, marks `url` as
 * (about to be) holding `key`'s shared prefix (PLACED_PREFIX_MS at most).
 */
interface OpenPlacement {
  url: string;
  /** The prefix key of a new trajectory; cleared once a turn under it is noted on `url`. */
  key: string | undefined;
  at: number;
}

/** RPC calls a pool object answered, per method (`PoolDO.callCounts`). */
export interface PoolCallCounts {
  heartbeat: number;
  view: number;
  place: number;
  notePrefix: number;
}

/** Where `PoolDO.place` put a trajectory, why, and the prefix counts it ranked by. */
export interface Placement extends Placed {
  prefixBlocks: Record<string, number>;
}

/**
 * The backend pool: one object (named "pool") holding the registry of backends that heartbeat
 * in (SQLite, so it survives eviction), merged with the static BACKEND_URLS list. A backend that
 * misses heartbeats for `POOL_DOWN_AFTER_MS` is reported down, and up again when they resume.
 *
 * Two prefix indexes serve placement (`prefixBlocks`):
 * - the block index (`BlockIndex`, in memory): which registered backend holds which KV blocks,
 *   from the KV events each heartbeat carries; lost when the object restarts (every backend is
 *   then answered `resync` and sends a snapshot with its next beat);
 * - the text-level index (SQLite, `PoolStore`): which backends served a trajectory prefix key
 *   (tenant salt, model, first message, tools) and, per key, the leading block hashes those
 *   trajectories share, so a NEW trajectory can be looked up in the block index before it has any hashes.
 *
 * RPC: `heartbeat(h)`, `view()`, `remove(id)`, `place(p)`, `notePrefix(key, url, hashes, trajectoryId)`,
 * `prefixBlocks(hashes, key)`, `prefixHolders(key)`, `indexStats()`.
 */
export class PoolDO extends DurableObject<Env> {
  private readonly store: PoolStore;
  private readonly index = new BlockIndex();
  /** Per trajectory id, oldest first: its placement until `notePrefix` says its turn is done. */
  private readonly placements = new Map<string, OpenPlacement>();
  /** When `notePrefix` last trimmed the text-level index (0: not yet). */
  private lastTrimMs = 0;
  /** When this cell last reported its up backends to the directory (0: not yet). */
  private lastReportMs = 0;
  /** RPC calls answered since the object started, per method (`callCounts`). */
  private readonly calls: PoolCallCounts = { heartbeat: 0, view: 0, place: 0, notePrefix: 0 };

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new PoolStore(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => this.store.migrate());
  }

  /**
   * Registers a backend or refreshes it, and applies its KV events to the block index. Answers
   * whether it was new, and `kv: "resync"` when its batch could not be applied (then its next
   * batch must be a snapshot). A backend that was down is forgotten by the block index first. A
   * `leaving` beat (its last, as it exits) marks it down at once and drops its blocks; its row
   * stays (a static BACKEND_URLS entry it shadows would otherwise count as up) until it beats again.
   *
   * `cell`: this object's cell name, given by the edge's heartbeat route: the cell then reports
   * its up backends to the directory (at most every CELL_REPORT_EVERY_MS, after the reply), which
   * forgets backends no cell reports and rebalances the cells (directory-do.ts).
   */
  async heartbeat(h: Heartbeat, cell?: string): Promise<HeartbeatReply> {
    this.calls.heartbeat++;
    const now = Date.now();
    const previous = this.store.lastSeenMs(h.id);
    if (previous !== undefined && now - previous > this.downAfterMs()) this.index.drop(h.url);
    this.store.putBackend(h, now);
    const up = this.dropDownBackends();
    if (cell !== undefined && (now - this.lastReportMs >= CELL_REPORT_EVERY_MS || previous === undefined)) {
      this.lastReportMs = now;
      this.ctx.waitUntil(directoryOf(this.env).report(cell, up.map((b) => b.id)).catch((e: unknown) => console.error(`pool cell ${cell}: report to the directory failed:`, e)));
    }
    const reply: HeartbeatReply = { registered: previous === undefined };
    if (h.leaving) return reply;
    if (h.kvEvents) reply.kv = this.index.apply(h.url, h.kvEvents);
    // A draining backend learns where its trajectories move, to push their blocks there.
    if (h.draining) reply.peers = this.currentView().filter((b) => b.up && !b.draining && b.url !== h.url).map((b) => b.url);
    return reply;
  }

  async remove(id: string): Promise<boolean> {
    const url = this.store.removeBackend(id);
    if (url !== undefined) this.index.drop(url);
    return url !== undefined;
  }

  /**
   * Notes that `url` served (and so caches) the trajectory prefix named `key` (see
   * `prefixKey`; several: a stateless turn's conversation and prefix keys, in one call), with the short hashes of that turn's prompt blocks (`hashes`, may be empty),
   * after the turn of `trajectoryId` (when given: its placement stops counting as load there):
   * the block index marks them held by `url` now, without waiting for its next heartbeat, and
   * the key keeps the common prefix of its lists (first PREFIX_LIST_BLOCKS hashes), i.e. the
   * blocks every trajectory under the key shares. The text index is approximate and bounded
   * (`PoolStore.trimPrefixes`).
   */
  async notePrefix(keys: string | readonly string[], url: string, hashes: string[] = [], trajectoryId?: string): Promise<void> {
    this.calls.notePrefix++;
    const now = Date.now();
    // That trajectory's placed turn is done: it no longer loads the backend.
    if (trajectoryId !== undefined) this.placements.delete(trajectoryId);
    if (hashes.length > 0) this.index.noteHeld(url, hashes.slice(0, MAX_PROMPT_BLOCK_HASHES));
    for (const key of typeof keys === "string" ? [keys] : keys) {
      this.store.noteHolder(key, url, now);
      if (hashes.length === 0) continue;
      const mine = hashes.slice(0, PREFIX_LIST_BLOCKS);
      const known = this.store.list(key, now);
      this.store.setList(key, known ? mine.slice(0, commonPrefixLength(known, mine)) : mine, now);
      // A turn under the key has ended there: the block index knows what it holds from now on.
      for (const p of this.placements.values()) if (p.key === key && p.url === url) p.key = undefined;
    }
    // Reads skip expired rows themselves; trimming (two scans and a sort per table) bounds the
    // storage only, so it runs at most once per PREFIX_TRIM_EVERY_MS, not on every note.
    if (now - this.lastTrimMs >= PREFIX_TRIM_EVERY_MS) {
      this.store.trimPrefixes(now);
      this.lastTrimMs = now;
    }
  }

  /**
   * Per backend url, how many LEADING blocks of a trajectory it holds (only counts > 0): what
   * placement of a new or moving trajectory ranks backends by. One call per placement.
   *
   * - `hashes`: the trajectory's last prompt block hashes (a moving trajectory); empty for a new
   *   one, which uses the list noted under `key` instead.
   * - Backends whose blocks are indexed count their real leading blocks (stopping at the first
   *   one they lack), so a backend whose blocks were evicted counts 0 even if it served the key.
   *   A block in a backend's host tier continues its run and counts HOST_TIER_CREDIT (0.5).
   * - Backends not indexed (static BACKEND_URLS, a registered one before its first snapshot) count
   *   1 when they recently served `key`; so do all holders when no list is known for the key.
   * - For a new trajectory (no hashes), a backend where `place` put another new trajectory
   *   under the same key in the last PLACED_PREFIX_MS counts as holding the key's whole list (1
   *   when none is known yet): its first prefill of the shared prefix may still be running, and
   *   the requests behind it share it there. The mark ends when a turn under the key is noted
   *   there with its hashes (`notePrefix`): from then on the block index counts for it. Without
   *   this, a burst of new trajectories arriving before the first one's prefill ends would find
   *   no holder and scatter over the pool, prefilling the same system prompt on every backend.
   * - A backend marked down counts nothing (and its blocks are dropped from the index).
   *
   * @example await pool.prefixBlocks([], key) // { "http://10.0.0.2:8080": 14 }
   */
  async prefixBlocks(hashes: string[], key?: string): Promise<Record<string, number>> {
    return (await this.rankPrefix(this.dropDownBackends().map((b) => b.url), hashes, key)).blocks;
  }

  /** `prefixBlocks` over the backends `up` (already pruned from the index), with the block list it ranked by. */
  private async rankPrefix(up: string[], hashes: string[], key: string | undefined): Promise<{ blocks: Record<string, number>; list: string[] | undefined }> {
    let list: string[] | undefined = hashes.length > 0 ? hashes.slice(0, MAX_PROMPT_BLOCK_HASHES) : undefined;
    if (!list && key !== undefined) list = this.store.list(key, Date.now());
    const out: Record<string, number> = {};
    if (list) {
      for (const [url, n] of this.index.leadingBlocks(list, up, HOST_TIER_CREDIT)) if (n > 0) out[url] = n;
    }
    if (key !== undefined) {
      for (const url of await this.prefixHolders(key)) {
        if (list && this.index.isIndexed(url)) continue;
        out[url] = Math.max(out[url] ?? 0, 1);
      }
      if (hashes.length === 0) {
        const upSet = new Set([...up, ...edgeSettings(this.env).backends.map((t) => t.url)]);
        const now = Date.now();
        for (const p of this.placements.values()) {
          if (p.key === key && now - p.at <= PLACED_PREFIX_MS && upSet.has(p.url)) out[p.url] = Math.max(out[p.url] ?? 0, list?.length ?? 1);
        }
      }
    }
    return { blocks: out, list };
  }

  /**
   * Places a new or moving trajectory (one call, serialized in this object): ranks backends by
   * `prefixBlocks(hashes, key)` and decides with `placeOver` (routing/placement.ts: affinity by
   * default, over each backend's placement load, which counts the placements made here since its
   * last heartbeat, at most PENDING_PLACEMENT_MS old). So a burst
   * of new trajectories sharing a popular system prompt, all arriving before the next heartbeat,
   * spreads once the holder is overloaded instead of piling onto it (the hotspot failure).
   * Null when no backend is up.
   *
   * `fallbackKey`: asked when no backend holds anything under `key` (a stateless request's
   * conversation key, then its first message's: src/http/turn-events.ts).
   *
   * `parent`: a subagent's first placement (placement.ts rule 1b): its parent's pinned backend
   * (`url`, taken unless overloaded) and the parent's prompt block hashes, which rank the
   * backends and name the pull source in place of the child's own (it has none yet).
   *
   * @example await pool.place({ hashes: [], key, trajectoryId: "t1" }) // { url, reason: "prefix", prefixBlocks }
   */
  async place(p: { hashes: string[]; key?: string; fallbackKey?: string; trajectoryId: string; pinned?: string; policy?: RoutingPolicyName; parent?: ParentPlacement }): Promise<Placement | null> {
    this.calls.place++;
    const hashes = p.hashes.length > 0 ? p.hashes : (p.parent?.hashes ?? []);
    // One pass over the registry per placement: the ranking, its fallback and the pull source share it.
    const up = this.dropDownBackends().map((b) => b.url);
    let ranked = await this.rankPrefix(up, hashes, p.key);
    let key = p.key;
    // A longer key no backend holds yet (a sessionless conversation's first turn): the shorter one.
    if (p.fallbackKey !== undefined && Object.keys(ranked.blocks).length === 0) {
      ranked = await this.rankPrefix(up, hashes, p.fallbackKey);
      key = p.fallbackKey;
    }
    const prefixBlocks = ranked.blocks;
    const now = Date.now();
    const view = this.currentView();
    const d = placeOver({ ...p, parent: p.parent?.url ?? undefined, prefixBlocks }, view.map((b) => ({ ...b, pending: this.pendingPlacements(b.url, b.lastSeenMs, now) })));
    if (!d) return null;
    const source = pullSource(d.url, this.heldBlocks(ranked.list, up), view);
    this.placements.delete(p.trajectoryId); // re-inserted last: the Map stays oldest first
    this.placements.set(p.trajectoryId, { url: d.url, key: p.hashes.length === 0 ? key : undefined, at: now });
    for (const [id, open] of this.placements) {
      if (this.placements.size <= MAX_OPEN_PLACEMENTS && now - open.at <= PLACED_PREFIX_MS) break;
      this.placements.delete(id);
    }
    return { ...d, prefixBlocks, ...(source !== undefined ? { kvSource: source } : {}) };
  }

  /** Per indexed backend of `up`, the leading blocks of `list` (the placement's ranking list) it really holds: what a pull could fetch. */
  private heldBlocks(list: string[] | undefined, up: string[]): Record<string, number> {
    const out: Record<string, number> = {};
    if (list) for (const [url, n] of this.index.leadingBlocks(list, up)) if (n > 0) out[url] = n;
    return out;
  }

  /** Placements on `url` not yet reflected in its last heartbeat (made after it, or just before). */
  private pendingPlacements(url: string, lastSeenMs: number, now: number): number {
    let n = 0;
    for (const p of this.placements.values()) if (p.url === url && now - p.at <= PENDING_PLACEMENT_MS && p.at >= lastSeenMs - PLACEMENT_OVERLAP_MS) n++;
    return n;
  }

  /** Backends that recently served a trajectory with this prefix key. */
  async prefixHolders(key: string): Promise<string[]> {
    return this.store.holders(key, Date.now());
  }

  /** The block index's size, its estimated memory (`BlockIndex.memoryBytes`) and the backends it covers (for tests, the inspector, the pool-scale bench). */
  async indexStats(): Promise<{ entries: number; tierEntries: number; maxEntries: number; indexBytes: number; backends: { url: string; indexed: boolean }[] }> {
    return {
      entries: this.index.size,
      tierEntries: this.index.tierSize,
      maxEntries: this.index.maxEntries,
      indexBytes: this.index.memoryBytes(),
      backends: this.index.backends().map((url) => ({ url, indexed: this.index.isIndexed(url) })),
    };
  }

  /** Every known backend with its load and whether it is up now. */
  async view(): Promise<PoolBackend[]> {
    this.calls.view++;
    return this.currentView();
  }

  /**
   * The RPC calls this object answered since it started, per method: what a request costs the
   * pool (a sessionless request: one `place` before its reply, its `notePrefix` after it, and a
   * `view` per POOL_VIEW_TTL_MS per isolate; test/workers/chat.test.ts).
   */
  async callCounts(): Promise<PoolCallCounts> {
    return { ...this.calls };
  }

  private currentView(): PoolBackend[] {
    const now = Date.now();
    const registered: PoolBackend[] = this.store.backends(now - this.downAfterMs()).map((r) => ({ ...r.heartbeat, source: "registered", lastSeenMs: r.lastSeenMs, up: r.up }));
    const known = new Set(registered.map((b) => b.url));
    const statics: PoolBackend[] = edgeSettings(this.env).backends
      .filter((t) => !known.has(t.url))
      .map((t) => ({ id: t.url, url: t.url, model: "", kvCapacityBlocks: 0, running: 0, waiting: 0, kvUsage: 0, tokensPerS: 0, source: "static", lastSeenMs: now, up: true }));
    return [...registered, ...statics];
  }

  private downAfterMs(): number {
    return edgeSettings(this.env).poolDownAfterMs;
  }

  /** Drops from the block index every backend that is down or gone; returns those up (ids and urls). */
  private dropDownBackends(): { id: string; url: string }[] {
    const up = this.store.upBackends(Date.now() - this.downAfterMs());
    const upSet = new Set(up.map((b) => b.url));
    for (const url of this.index.backends()) if (!upSet.has(url)) this.index.drop(url);
    return up;
  }
}
