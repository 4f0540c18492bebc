import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
import type { Engine } from "../engine/engine";

/**
 * Prometheus metrics of one backend, read from the engine's counters at scrape time.
 *
 * @example
 * const metrics = createMetrics(engine);
 * res.end(await metrics.registry.metrics());
 */
export function createMetrics(engine: Engine): { registry: Registry } {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "agent_edge_process_" });
  const last = { queried: 0, hit: 0, prompt: 0, computed: 0, generated: 0, preemptions: 0, requests: 0, leaseSaved: 0, leaseExpired: 0, leaseBroken: 0, leaseCapped: 0, leaseHits: 0, leases: 0, grammar: 0, hostPuts: 0, hostHits: 0, pulled: 0, pullBytes: 0, pullFailures: 0, served: 0, overloaded: 0, drafted: 0, accepted: 0, verifies: 0 };

  /** A counter that follows a monotonically growing engine value. */
  const follow = (name: string, help: string, read: () => number, key: keyof typeof last) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const now = read();
        if (now > last[key]) this.inc(now - last[key]);
        last[key] = now;
      },
    });

  follow("agent_edge_prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache.", () => engine.kv.stats.queriedTokens, "queried");
  follow("agent_edge_prefix_cache_hit_tokens_total", "Prompt tokens found in the prefix cache.", () => engine.kv.stats.hitTokens, "hit");
  follow("agent_edge_prompt_tokens_total", "Prompt tokens of finished turns.", () => engine.counters.promptTokens, "prompt");
  follow("agent_edge_computed_prompt_tokens_total", "Prompt tokens computed by prefill (recomputation included).", () => engine.counters.computedTokens, "computed");
  follow("agent_edge_generated_tokens_total", "Generated tokens.", () => engine.counters.generatedTokens, "generated");
  follow("agent_edge_preemptions_total", "Sequences preempted for lack of KV blocks.", () => engine.counters.preemptions, "preemptions");
  follow("agent_edge_requests_total", "Turns accepted by the engine.", () => engine.counters.requests, "requests");
  follow("agent_edge_grammar_seconds_total", "Seconds constrained decoding spent in the grammar (token masks, matcher, budget checks, greedy masked argmax), outside the executor.", () => engine.counters.grammarMs / 1000, "grammar");

  const B = engine.options.pool.blockSize;
  follow("agent_edge_host_tier_stored_blocks_total", "Evicted KV blocks copied into the host tier.", () => engine.hostTier?.stats.puts ?? 0, "hostPuts");
  follow("agent_edge_host_tier_hit_tokens_total", "Prompt tokens brought back from the host tier instead of prefilled.", () => (engine.hostTier?.stats.hitBlocks ?? 0) * B, "hostHits");
  new Gauge({ name: "agent_edge_host_tier_bytes", help: "Bytes of KV blocks held in the host tier.", registers: [registry], collect() { this.set(engine.hostTier?.usedBytes ?? 0); } });
  follow("agent_edge_kv_pulled_blocks_total", "KV blocks pulled from other backends (checked and cached).", () => engine.kvPuller?.totals.blocks ?? 0, "pulled");
  follow("agent_edge_kv_pulled_bytes_total", "Bytes of KV blocks pulled from other backends.", () => engine.kvPuller?.totals.bytes ?? 0, "pullBytes");
  follow("agent_edge_kv_pull_failures_total", "Pulls that fell back to computing (holder failed, corrupt block, incompatible format).", () => engine.kvPuller?.totals.failures ?? 0, "pullFailures");
  follow("agent_edge_kv_served_blocks_total", "KV blocks streamed to other backends.", () => engine.kvServer.stats.blocks, "served");

  const leases = engine.leases.table;
  follow("agent_edge_leases_total", "Tool-pause leases granted.", () => leases.counters.created, "leases");
  follow("agent_edge_lease_hits_total", "Leases ended by a turn on their state (the agent came back in time).", () => leases.counters.hits, "leaseHits");
  follow(
    "agent_edge_lease_saved_tokens_total",
    "Cached tokens of turns that found blocks a lease kept: per lease hit, block size x the lease's blocks that plain LRU would have evicted (each eviction of a block freed after the lease's blocks counts one).",
    () => leases.counters.savedTokens,
    "leaseSaved",
  );
  follow("agent_edge_leases_expired_unused_total", "Leases that reached their deadline with no turn on their state.", () => leases.counters.expired, "leaseExpired");
  follow("agent_edge_leases_broken_total", "Leases ended early because the pool needed their blocks for running work.", () => leases.counters.broken, "leaseBroken");
  follow("agent_edge_leases_capped_total", "Leases ended early to keep leased blocks under the cap.", () => leases.counters.capped, "leaseCapped");
  new Gauge({ name: "agent_edge_leases_active", help: "Active tool-pause leases.", registers: [registry], collect() { this.set(leases.numActive); } });
  new Gauge({ name: "agent_edge_leased_blocks", help: "Distinct KV blocks held by leases.", registers: [registry], collect() { this.set(leases.numLeasedBlocks); } });

  new Gauge({ name: "agent_edge_kv_usage_ratio", help: "Fraction of KV blocks in use by running sequences.", registers: [registry], collect() { this.set(engine.kv.usage()); } });
  new Gauge({ name: "agent_edge_kv_blocks_total", help: "KV blocks in the pool.", registers: [registry], collect() { this.set(engine.options.pool.numBlocks); } });
  new Gauge({ name: "agent_edge_kv_cached_blocks", help: "KV blocks holding a content-addressed prefix.", registers: [registry], collect() { this.set(engine.options.pool.numCached); } });
  new Gauge({ name: "agent_edge_running_sequences", help: "Sequences running.", registers: [registry], collect() { this.set(engine.numRunning); } });
  new Gauge({ name: "agent_edge_waiting_sequences", help: "Sequences waiting for admission.", registers: [registry], collect() { this.set(engine.numWaiting); } });
  new Gauge({ name: "agent_edge_turn_states", help: "Turn states kept for delta turns (at most the state capacity, least recently used dropped first).", registers: [registry], collect() { this.set(engine.states.size); } });
  new Gauge({ name: "agent_edge_queued_tokens", help: "Prompt tokens queued and not yet computed (bounded by --max-queued-tokens).", registers: [registry], collect() { this.set(engine.scheduler.queuedTokens()); } });
  new Gauge({ name: "agent_edge_prefill_tokens_per_second", help: "Measured prefill rate: prompt tokens per second of the engine's prefill steps (moving average; 0 until measured). Heartbeats report it; queued tokens over it is the Retry-After of a 429.", registers: [registry], collect() { this.set(engine.prefillRate.tokensPerS ?? 0); } });
  follow("agent_edge_overloaded_total", "Turns refused because the queued tokens would pass --max-queued-tokens (429 overloaded).", () => engine.scheduler.refused, "overloaded");
  const spec = engine.counters.speculation;
  follow("agent_edge_speculative_drafted_tokens_total", "Speculative decoding: draft tokens verified.", () => spec.drafted, "drafted");
  follow("agent_edge_speculative_accepted_tokens_total", "Speculative decoding: draft tokens accepted (the model's own next tokens).", () => spec.accepted, "accepted");
  follow("agent_edge_speculative_verify_steps_total", "Speculative decoding: sequence-steps that verified a draft.", () => spec.verifies, "verifies");
  new Gauge({
    name: "agent_edge_speculative_tokens_per_step",
    help: "Speculative decoding: tokens a sequence gains per verify step (accepted draft tokens + 1), since start.",
    registers: [registry],
    collect() {
      this.set(spec.verifies > 0 ? (spec.accepted + spec.verifies) / spec.verifies : 0);
    },
  });
  new Gauge({
    name: "agent_edge_speculative_acceptance_ratio",
    help: "Speculative decoding: accepted over drafted tokens, by draft length (tokens drafted in the verify step), since start.",
    labelNames: ["draft_length"],
    registers: [registry],
    collect() {
      spec.byLength.verifies.forEach((n, k) => {
        if (n) this.set({ draft_length: String(k) }, (spec.byLength.accepted[k] ?? 0) / (n * k));
      });
    },
  });
  new Gauge({
    name: "agent_edge_step_tokens_per_second",
    help: "Tokens processed per second of executor time since start (prefill and decode).",
    registers: [registry],
    collect() {
      const c = engine.counters;
      this.set(c.stepMs > 0 ? (c.stepTokens / c.stepMs) * 1000 : 0);
    },
  });
  return { registry };
}
