import type { BlockHash } from "../../protocol/block-hash";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";

/**
 * The token state of a trajectory after a turn: the transcript as rendered, the exact prompt ids
 * and the exact ids the model generated. A delta turn extends it without re-tokenizing the
 * model's own output.
 */
export interface TurnState {
  stateId: string;
  trajectoryId: string | undefined;
  hashRoot: BlockHash;
  /** The tenant's cache salt `hashRoot` was made from (a drain pushes the blocks under it). */
  cacheSalt: string;
  /** Transcript including the assistant reply of this turn. */
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  /** Rendered prompt text of this turn (generation prompt included). */
  promptText: string;
  promptTokenIds: number[];
  generatedTokenIds: number[];
  /** decode(generatedTokenIds), special tokens kept. */
  generatedText: string;
}

/** A kept trajectory's tokens (prompt and reply) and salt: what a drain pushes to a peer. */
export interface KeptTokens {
  stateId: string;
  trajectoryId: string | undefined;
  cacheSalt: string;
  tokenIds: number[];
}

/**
 * Bounded LRU map of turn states. Only a trajectory's latest state is kept: a delta turn against
 * an older state of the same trajectory gets `state_unknown`, and the caller resends the full
 * transcript.
 *
 * @example
 * const store = new StateStore(4096);
 * store.put(state);
 * store.get(state.stateId); // the state, now most recently used
 */
export class StateStore {
  private readonly states = new Map<string, TurnState>();
  private readonly latestByTrajectory = new Map<string, string>();

  /** `onDrop` hears of every state let go (released, evicted, superseded): its kept tail goes with it. */
  constructor(
    readonly capacity: number,
    private readonly onDrop: (stateId: string) => void = () => {},
  ) {}

  get size(): number {
    return this.states.size;
  }

  get(stateId: string): TurnState | undefined {
    const s = this.states.get(stateId);
    if (s) {
      this.states.delete(stateId);
      this.states.set(stateId, s);
    }
    return s;
  }

  latestFor(trajectoryId: string): TurnState | undefined {
    const id = this.latestByTrajectory.get(trajectoryId);
    return id === undefined ? undefined : this.get(id);
  }

  put(state: TurnState): void {
    if (state.trajectoryId !== undefined) {
      const previous = this.latestByTrajectory.get(state.trajectoryId);
      if (previous !== undefined && this.states.delete(previous)) this.onDrop(previous);
      this.latestByTrajectory.set(state.trajectoryId, state.stateId);
    }
    this.states.set(state.stateId, state);
    while (this.states.size > this.capacity) {
      const oldest = this.states.keys().next().value as string;
      this.release(oldest);
    }
  }

  /** Every state, most recently used first. */
  list(): TurnState[] {
    return [...this.states.values()].reverse();
  }

  /** Each kept state's tokens and salt, most recently used first, but those in `skip`. @example store.keptTokens(pushed) */
  keptTokens(skip?: ReadonlySet<string>): KeptTokens[] {
    const kept = skip ? this.list().filter((s) => !skip.has(s.stateId)) : this.list();
    return kept.map((s) => ({ stateId: s.stateId, trajectoryId: s.trajectoryId, cacheSalt: s.cacheSalt, tokenIds: [...s.promptTokenIds, ...s.generatedTokenIds] }));
  }

  release(stateId: string): boolean {
    const s = this.states.get(stateId);
    if (!s) return false;
    this.states.delete(stateId);
    if (s.trajectoryId !== undefined && this.latestByTrajectory.get(s.trajectoryId) === stateId) {
      this.latestByTrajectory.delete(s.trajectoryId);
    }
    this.onDrop(stateId);
    return true;
  }
}
