import { decodeKvPullReport, encode } from "../../protocol/codec";
import { FAILED_KV_PULL_OUTCOMES, MSGPACK_CONTENT_TYPE, SECRET_HEADER, type KvFetchRequest, type KvPullReport } from "../../protocol/messages";
import { rendezvous } from "../../protocol/rendezvous";
import { ROUTES } from "../../protocol/routes";
import type { Engine } from "../engine/engine";
import type { KeptTokens } from "../engine/state-store";

/** What a drain's push did: trajectories pushed, blocks and bytes the peers took, failed pushes, those left when its time ran out. */
export interface PushSummary {
  trajectories: number;
  blocks: number;
  bytes: number;
  failures: number;
  /** Kept trajectories not pushed: the push's time (`budgetMs`) ran out first. */
  left: number;
  ms: number;
}

/**
 * A draining backend's push: once it knows its peers (the pool's heartbeat reply, or the drain
 * request), it asks each kept trajectory's peer to take that trajectory's blocks from it now
 * (`POST /v1/kv/fetch`; the peer pulls them over `/v1/kv/pull`, checked as any pull). The peer is
 * picked by rendezvous hash of the trajectory id, so the pool's block index then shows that peer
 * holding the trajectory's prefix and its next turn is placed there. A turn running when the drain
 * began is pushed once it ends. Most recently used first,
 * `concurrency` pushes at once (the holder serves at most 4 streams). A failed push costs
 * nothing but the blocks: the trajectory's next turn pulls or prefills them.
 *
 * @example
 * const push = new DrainPush({ engine, selfUrl: "http://b0:8080", secret });
 * push.offerPeers(["http://b1:8080", "http://b2:8080"]); // starts once; later offers are ignored
 * await push.done; // { trajectories: 12, blocks: 3100, bytes: 406323200, failures: 0, left: 0, ms: 2300 }
 */
export class DrainPush {
  private started = false;
  private running = false;
  private resolveDone!: (s: PushSummary) => void;
  /** Resolves when the push has ended (never, if no peers are ever offered). */
  readonly done = new Promise<PushSummary>((r) => (this.resolveDone = r));

  constructor(
    private readonly params: {
      engine: Engine;
      /** The url peers reach this backend at (their pulls come here). */
      selfUrl: string;
      secret: string;
      concurrency?: number;
      timeoutMs?: number;
      /**
       * How long the push may take (default 30 s; `--drain-push-ms`): no push starts after it, so
       * a drain ends in bounded time. The most recently used trajectories go first, so what is
       * left is what is least likely to come back.
       */
      budgetMs?: number;
      /** How often to look again for turns ending while it pushes (default 100 ms). */
      pollMs?: number;
      fetch?: typeof fetch;
      log?: (line: string) => void;
    },
  ) {}

  /** A push is under way. */
  get busy(): boolean {
    return this.running;
  }

  /** Starts the push to `peers` (other than this backend), the first time some are offered. */
  offerPeers(peers: readonly string[]): boolean {
    const targets = [...new Set(peers.map((u) => u.replace(/\/+$/, "")))].filter((u) => u !== this.params.selfUrl.replace(/\/+$/, ""));
    if (this.started || targets.length === 0) return false;
    this.started = true;
    this.running = true;
    void this.push(targets).then((s) => {
      this.running = false;
      this.params.log?.(`drain push: ${s.trajectories} trajectories, ${s.blocks} blocks (${(s.bytes / 2 ** 20).toFixed(1)} MiB) to ${targets.length} peers in ${(s.ms / 1000).toFixed(1)} s, ${s.failures} failed, ${s.left} left (out of time)`);
      this.resolveDone(s);
    });
    return true;
  }

  /**
   * Passes over the kept states until one finds none it has not pushed and no turn is running
   * (a turn still running when the drain began ends with a new state: that one goes too).
   */
  private async push(peers: string[]): Promise<PushSummary> {
    const t0 = performance.now();
    const { engine } = this.params;
    const summary: PushSummary = { trajectories: 0, blocks: 0, bytes: 0, failures: 0, left: 0, ms: 0 };
    const deadline = t0 + (this.params.budgetMs ?? 30_000);
    const pushed = new Set<string>();
    const pending = () => engine.states.keptTokens(pushed).filter((t) => t.tokenIds.length > engine.kv.blockSize);
    for (;;) {
      if (performance.now() >= deadline) {
        summary.left = pending().length;
        break;
      }
      const work = pending();
      if (work.length > 0) await this.pass({ peers, work, summary, deadline, pushed });
      else if (engine.numRunning + engine.numWaiting === 0) break;
      else await new Promise((r) => setTimeout(r, this.params.pollMs ?? 100));
    }
    summary.ms = performance.now() - t0;
    return summary;
  }

  /** One pass over `work`: each trajectory pushed to its rendezvous peer, until `deadline`. */
  private async pass({ peers, work, summary, deadline, pushed }: { peers: string[]; work: KeptTokens[]; summary: PushSummary; deadline: number; pushed: Set<string> }): Promise<void> {
    const { engine } = this.params;
    let next = 0;
    const worker = async () => {
      while (next < work.length && performance.now() < deadline) {
        pushed.add(work[next]!.stateId);
        const t = work[next++]!;
        const peer = rendezvous(peers, t.trajectoryId ?? String(next), (u) => u);
        // A push under way when the time runs out gets 10 s more at most.
        const timeoutMs = Math.min(this.params.timeoutMs ?? 90_000, deadline - performance.now() + 10_000);
        const report = await this.fetchOne(peer, { source: { url: this.params.selfUrl }, model: engine.modelId, cacheSalt: t.cacheSalt, tokenIds: t.tokenIds }, timeoutMs);
        summary.trajectories++;
        if (!report || FAILED_KV_PULL_OUTCOMES.has(report.outcome)) summary.failures++;
        summary.blocks += report?.blocks ?? 0;
        summary.bytes += report?.bytes ?? 0;
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.params.concurrency ?? 2, work.length) }, worker));
  }

  private async fetchOne(peer: string, req: KvFetchRequest, timeoutMs: number): Promise<KvPullReport | undefined> {
    try {
      const res = await (this.params.fetch ?? fetch)(new URL(ROUTES.backend.kvFetch, peer), {
        method: "POST",
        headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: this.params.secret },
        body: encode(req),
        signal: AbortSignal.timeout(Math.max(1, Math.floor(timeoutMs))),
      });
      const bytes = new Uint8Array(await res.arrayBuffer());
      if (!res.ok) return undefined;
      const r = decodeKvPullReport(bytes);
      return r.ok ? r.value : undefined;
    } catch {
      return undefined;
    }
  }
}
