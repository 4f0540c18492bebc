import { hashRoot, type BlockHash } from "../../protocol/block-hash";
import { GrammarCache } from "../constraint/grammar-cache";
import { EvictionLog } from "../kv/eviction-log";
import { HostTier } from "../kv/host-tier";
import { KvCacheManager } from "../kv/kv-cache-manager";
import { KvEventLog } from "../kv/kv-events";
import { LeaseTable } from "../kv/lease-table";
import { MIN_PREFILL_STEP_TOKENS, PrefillRate } from "../scheduler/prefill-rate";
import { Scheduler } from "../scheduler/scheduler";
import { KvPuller } from "../transfer/kv-pull";
import { KvServer } from "../transfer/kv-serve";
import { Engine } from "./engine";
import type { EngineOptions, EngineParts } from "./engine-options";
import { StateLeases } from "./state-leases";
import { StateStore } from "./state-store";

/**
 * The engine's composition root: builds the subsystems it runs on over the options' executor and
 * pool (KV manager, scheduler, turn states and their leases, KV events, evictions, the block
 * server and puller, the host tier, the grammar cache), wires them to each other and to the
 * pool, and hands them to a new `Engine`. `createBackend` (server/backend.ts) calls it after
 * loading the model; tests and benches call it with their own executor and pool.
 *
 * @example
 * const engine = createEngine({ executor, pool, codec, modelId, scheduler: { maxBatchTokens: 512, maxRunningSequences: 64 },
 *   enablePrefixCache: true, backendId: "b0" });
 */
export function createEngine(options: EngineOptions): Engine {
  return new Engine(engineParts(options));
}

/** The parts `createEngine` gives the engine, built and wired. */
function engineParts(options: EngineOptions): EngineParts {
  const { pool, executor, modelId, enablePrefixCache } = options;
  const io = executor.blockIO;
  const rootFor = hashRoots(modelId);
  const kv = new KvCacheManager({ pool, enablePrefixCache });
  const states = new StateStore(options.stateCapacity ?? 4096, (stateId) => kv.dropTail(stateId));
  const kvEvents = new KvEventLog();
  const evictions = new EvictionLog();
  pool.setEvictionLog(evictions);
  // With the prefix cache off nothing is ever hashed: the batches stay empty.
  pool.setEventSink(kvEvents);
  const hostTier = io && enablePrefixCache && (options.hostTierBytes ?? 0) > 0 ? new HostTier(options.hostTierBytes!, kvEvents, evictions) : undefined;
  if (hostTier && io) kv.transfer.setHostTier({ tier: hostTier, bytesPerBlock: io.bytesPerBlock, read: io.read, write: io.write });
  let grammars: Promise<GrammarCache> | undefined;
  const prefillRate = new PrefillRate(Math.min(MIN_PREFILL_STEP_TOKENS, options.scheduler.maxBatchTokens));
  return {
    options,
    kv,
    scheduler: new Scheduler(kv, options.scheduler, prefillRate),
    prefillRate,
    states,
    leases: new StateLeases({ kv, states, table: new LeaseTable({ pool, ...options.leases }), codec: options.codec }),
    kvEvents,
    evictions,
    kvServer: new KvServer({ kv, io, modelId, rootFor }),
    kvPuller: io && options.transfer && enablePrefixCache ? new KvPuller({ kv, io, modelId, prefillRate, ...options.transfer }) : undefined,
    hostTier,
    grammars: () => (grammars ??= GrammarCache.create(options.codec, executor.spec.vocabSize)),
    rootFor,
  };
}

/** The block-hash root of `modelId` under each cache salt, computed once per salt. */
function hashRoots(modelId: string): (salt: string) => BlockHash {
  const roots = new Map<string, BlockHash>();
  return (salt) => {
    let root = roots.get(salt);
    if (!root) {
      root = hashRoot({ modelId, salt });
      roots.set(salt, root);
    }
    return root;
  };
}
