import { SHORT_HASH_HEX } from "../../protocol/block-hash";
import type { ChatMessage } from "../../protocol/messages";
import { openSchema, type SqlHost, type StoreSchema } from "../store-schema";
import type { NamedTurn } from "../turn/cache-diagnosis";
import type { ChildRecord, CommitTurn, ForkRecord, ParentLink, StoredResponse, StoredResult, TrajectoryMeta, TurnRecord, TurnStore } from "../turn/turn-types";

/**
 * Version 1: `meta` (key/value: tenant, ids, pin, state id, tools, prompt block hashes, parent),
 * `messages`, `turns`, `idempotency`; the Responses API added `responses`, `response_parts` and
 * `forks`, cache diagnostics `message_answers` (a Messages API answer's id and the turn it answered)
 * and subagent placement `children` under the same version: new tables only, created on wake when
 * missing (store-schema.ts: no new version).
 */
export const TRAJECTORY_SCHEMA: StoreSchema = {
  name: "trajectory",
  version: 1,
  create(sql) {
    sql.exec(`CREATE TABLE IF NOT EXISTS messages (idx INTEGER NOT NULL, part INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (idx, part))`);
    sql.exec(`CREATE TABLE IF NOT EXISTS turns (turn INTEGER PRIMARY KEY, record TEXT NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS idempotency (key TEXT PRIMARY KEY, turn INTEGER NOT NULL, fingerprint TEXT NOT NULL, result TEXT NOT NULL)`);
    // Responses API: one row per stored response (its JSON in parts, like messages), and forks.
    sql.exec(`CREATE TABLE IF NOT EXISTS responses (token TEXT PRIMARY KEY, turn INTEGER NOT NULL, message_end INTEGER NOT NULL, rewritten INTEGER NOT NULL DEFAULT 0)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS response_parts (token TEXT NOT NULL, part INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (token, part))`);
    sql.exec(`CREATE TABLE IF NOT EXISTS forks (trajectory_id TEXT PRIMARY KEY, turn INTEGER NOT NULL, created_at TEXT NOT NULL)`);
    // Cache diagnostics: the answers of Messages API turns that asked for them (a later turn names one by id).
    sql.exec(
      `CREATE TABLE IF NOT EXISTS message_answers (id TEXT PRIMARY KEY, turn INTEGER NOT NULL, message_end INTEGER NOT NULL, tools_hash TEXT NOT NULL, model TEXT, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, rewritten INTEGER NOT NULL DEFAULT 0)`,
    );
    // Subagents whose parent link names this trajectory; `first_turn`: their first turn's reuse (JSON), once done.
    sql.exec(`CREATE TABLE IF NOT EXISTS children (trajectory_id TEXT PRIMARY KEY, created_at TEXT NOT NULL, first_turn TEXT)`);
  },
};

/** Largest piece of one message's JSON in one row (characters); longer messages span rows. */
const PART_CHARS = 256 * 1024;

/**
 * SQLite storage of one trajectory: metadata, the transcript as append-only rows (a message's
 * JSON split into parts, so no value nears the storage limits whatever its length), turn records
 * and idempotency results. Every turn commits in one transaction, or not at all.
 *
 * @example
 * const store = new TrajectoryStore(ctx.storage);
 * store.migrate();
 * store.commitTurn({ keep: 3, messages: [toolResult, reply], record, ... });
 */
export class TrajectoryStore implements TurnStore {
  /** `idempotencyTurns`: an idempotency key is kept while its turn is among the last this many (IDEMPOTENCY_TURNS). */
  constructor(
    private readonly host: SqlHost,
    private readonly idempotencyTurns: () => number = () => 64,
  ) {}

  /** Creates the tables, or checks the schema version of existing ones (`openSchema`). */
  migrate(): void {
    openSchema(this.host, TRAJECTORY_SCHEMA);
  }

  meta(): TrajectoryMeta | null {
    const rows = this.host.sql.exec<{ key: string; value: string }>(`SELECT key, value FROM meta WHERE key != 'prompt_block_hashes'`).toArray();
    const m = new Map(rows.map((r) => [r.key, r.value]));
    if (!m.has("created_at")) return null;
    return {
      tenant: m.get("tenant")!,
      trajectoryId: m.get("trajectory_id")!,
      createdAt: m.get("created_at")!,
      backendUrl: m.get("backend_url") ?? null,
      stateId: m.get("state_id") ?? null,
      toolsJson: m.get("tools_json") ?? "[]",
    };
  }

  /** Creates the trajectory; `parent` links a subagent's to the trajectory of the agent that started it. */
  create(params: { tenant: string; trajectoryId: string; createdAt: string; parent?: string }): void {
    this.host.transactionSync(() => {
      this.setMeta("tenant", params.tenant);
      this.setMeta("trajectory_id", params.trajectoryId);
      this.setMeta("created_at", params.createdAt);
      if (params.parent !== undefined) this.setMeta("parent", JSON.stringify({ trajectoryId: params.parent, turn: null, relation: "subagent" } satisfies ParentLink));
    });
  }

  /**
   * Creates a fork: a new trajectory holding `messages` (its parent's transcript up to a
   * response), pinned to the parent's backend without a state (its first turn is full there,
   * reusing the parent's blocks by hash), with the tools as of that response.
   */
  createFork(p: { tenant: string; trajectoryId: string; createdAt: string; parent: { trajectoryId: string; turn: number }; messages: ChatMessage[]; toolsJson: string; backendUrl: string | null }): void {
    this.host.transactionSync(() => {
      this.setMeta("tenant", p.tenant);
      this.setMeta("trajectory_id", p.trajectoryId);
      this.setMeta("created_at", p.createdAt);
      this.setMeta("parent", JSON.stringify({ ...p.parent, relation: "fork" } satisfies ParentLink));
      this.setMeta("tools_json", p.toolsJson);
      if (p.backendUrl) this.setMeta("backend_url", p.backendUrl);
      p.messages.forEach((m, i) => this.writeParts("messages", "idx", i, JSON.stringify(m)));
    });
  }

  /** The trajectory this one was forked from, or the agent's whose subagent it is (null: neither). */
  parent(): ParentLink | null {
    const row = this.host.sql.exec<{ value: string }>(`SELECT value FROM meta WHERE key = 'parent'`).toArray()[0];
    if (!row) return null;
    const link = JSON.parse(row.value) as Omit<ParentLink, "relation"> & { relation?: ParentLink["relation"] };
    return { ...link, relation: link.relation ?? "fork" };
  }

  /** Records a fork made from this trajectory's turn `turn`. */
  addFork(f: ForkRecord): void {
    this.host.sql.exec(`INSERT OR REPLACE INTO forks (trajectory_id, turn, created_at) VALUES (?, ?, ?)`, f.trajectoryId, f.turn, f.createdAt);
  }

  forks(): ForkRecord[] {
    return this.host.sql
      .exec<{ trajectory_id: string; turn: number; created_at: string }>(`SELECT trajectory_id, turn, created_at FROM forks ORDER BY created_at, trajectory_id`)
      .toArray()
      .map((r) => ({ trajectoryId: r.trajectory_id, turn: Number(r.turn), createdAt: r.created_at }));
  }

  /** Records a subagent of this trajectory (kept as first noted when noted again). */
  addChild(c: { trajectoryId: string; createdAt: string }): void {
    this.host.sql.exec(`INSERT OR IGNORE INTO children (trajectory_id, created_at) VALUES (?, ?)`, c.trajectoryId, c.createdAt);
  }

  /** Records a subagent's first turn (noting the child if it was not yet). */
  setChildFirstTurn(trajectoryId: string, createdAt: string, firstTurn: NonNullable<ChildRecord["firstTurn"]>): void {
    this.host.transactionSync(() => {
      this.addChild({ trajectoryId, createdAt });
      this.host.sql.exec(`UPDATE children SET first_turn = ? WHERE trajectory_id = ?`, JSON.stringify(firstTurn), trajectoryId);
    });
  }

  /** This trajectory's subagents, oldest first. */
  children(): ChildRecord[] {
    return this.host.sql
      .exec<{ trajectory_id: string; created_at: string; first_turn: string | null }>(`SELECT trajectory_id, created_at, first_turn FROM children ORDER BY created_at, trajectory_id`)
      .toArray()
      .map((r) => ({ trajectoryId: r.trajectory_id, createdAt: r.created_at, firstTurn: r.first_turn === null ? null : (JSON.parse(r.first_turn) as ChildRecord["firstTurn"]) }));
  }

  /** A stored response by its token (null: none, or deleted). */
  response(token: string): StoredResponse | null {
    const row = this.host.sql.exec<{ rewritten: number }>(`SELECT rewritten FROM responses WHERE token = ?`, token).toArray()[0];
    if (!row) return null;
    const parts = this.host.sql.exec<{ data: string }>(`SELECT data FROM response_parts WHERE token = ? ORDER BY part`, token).toArray();
    return { ...(JSON.parse(parts.map((p) => p.data).join("")) as StoredResponse), rewritten: Number(row.rewritten) === 1 };
  }

  /** The turn a Messages API answer (`msg_...`) stored for cache diagnostics answered (null: none). */
  messageAnswer(id: string): NamedTurn | null {
    const row = this.host.sql
      .exec<{ turn: number; message_end: number; tools_hash: string; model: string | null; prompt_tokens: number; completion_tokens: number; rewritten: number }>(`SELECT * FROM message_answers WHERE id = ?`, id)
      .toArray()[0];
    if (!row) return null;
    return {
      turn: Number(row.turn),
      messageEnd: Number(row.message_end),
      rewritten: Number(row.rewritten) === 1,
      toolsHash: row.tools_hash,
      model: row.model,
      promptTokens: Number(row.prompt_tokens),
      completionTokens: Number(row.completion_tokens),
    };
  }

  /** Deletes a stored response; answers whether there was one. */
  deleteResponse(token: string): boolean {
    return this.host.transactionSync(() => {
      const existed = this.host.sql.exec(`SELECT 1 FROM responses WHERE token = ?`, token).toArray().length > 0;
      this.host.sql.exec(`DELETE FROM responses WHERE token = ?`, token);
      this.host.sql.exec(`DELETE FROM response_parts WHERE token = ?`, token);
      return existed;
    });
  }

  /** The number of the turn that ran last (0: none). */
  lastTurn(): number {
    return Number(this.host.sql.exec<{ n: number | null }>(`SELECT MAX(turn) AS n FROM turns`).one().n ?? 0);
  }

  messages(): ChatMessage[] {
    const rows = this.host.sql.exec<{ idx: number; data: string }>(`SELECT idx, data FROM messages ORDER BY idx, part`).toArray();
    const out: ChatMessage[] = [];
    let current = -1;
    let buf = "";
    for (const r of rows) {
      if (r.idx !== current) {
        if (current >= 0) out.push(JSON.parse(buf) as ChatMessage);
        current = r.idx;
        buf = "";
      }
      buf += r.data;
    }
    if (current >= 0) out.push(JSON.parse(buf) as ChatMessage);
    return out;
  }

  turns(): TurnRecord[] {
    return this.host.sql
      .exec<{ record: string }>(`SELECT record FROM turns ORDER BY turn`)
      .toArray()
      .map((r) => JSON.parse(r.record) as TurnRecord);
  }

  lastTurnRecord(): TurnRecord | null {
    const row = this.host.sql.exec<{ record: string }>(`SELECT record FROM turns ORDER BY turn DESC LIMIT 1`).toArray()[0];
    return row ? (JSON.parse(row.record) as TurnRecord) : null;
  }

  numTurns(): number {
    return Number(this.host.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM turns`).one().n);
  }

  /**
   * Short hashes (16 hex) of the last turn's prompt blocks, in order: what the pool's block index
   * is asked with when the trajectory must move. Empty when the backend sent none.
   */
  promptBlockHashes(): string[] {
    const row = this.host.sql.exec<{ value: string }>(`SELECT value FROM meta WHERE key = 'prompt_block_hashes'`).toArray()[0];
    const out: string[] = [];
    if (row) for (let i = 0; i + SHORT_HASH_HEX <= row.value.length; i += SHORT_HASH_HEX) out.push(row.value.slice(i, i + SHORT_HASH_HEX));
    return out;
  }

  /** Idempotency keys remembered now (at most the last IDEMPOTENCY_TURNS turns' keys). */
  idempotencyKeyCount(): number {
    return this.host.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM idempotency`).one().n;
  }

  /** The stored outcome of the turn that used `key`, and the fingerprint of its request. */
  idempotentResult(key: string): { result: StoredResult; fingerprint: string } | null {
    const row = this.host.sql.exec<{ result: string; fingerprint: string }>(`SELECT result, fingerprint FROM idempotency WHERE key = ?`, key).toArray()[0];
    return row ? { result: JSON.parse(row.result) as StoredResult, fingerprint: row.fingerprint } : null;
  }

  /** Writes one finished turn atomically: transcript, turn record, metadata (pin, state id, tools, prompt block hashes), idempotency result. */
  commitTurn(c: CommitTurn): void {
    const sql = this.host.sql;
    this.host.transactionSync(() => {
      sql.exec(`DELETE FROM messages WHERE idx >= ?`, c.keep);
      c.messages.forEach((m, i) => this.writeParts("messages", "idx", c.keep + i, JSON.stringify(m)));
      // Responses whose transcript this turn rewrote can be read, not continued.
      sql.exec(`UPDATE responses SET rewritten = 1 WHERE message_end > ?`, c.keep);
      sql.exec(`UPDATE message_answers SET rewritten = 1 WHERE message_end > ?`, c.keep);
      if (c.answer) {
        const a = c.answer;
        sql.exec(
          `INSERT OR REPLACE INTO message_answers (id, turn, message_end, tools_hash, model, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?)`,
          a.id,
          c.record.turn,
          c.keep + c.messages.length,
          a.toolsHash,
          a.model,
          c.record.promptTokens,
          c.record.completionTokens,
        );
      }
      if (c.response) {
        const messageEnd = c.keep + c.messages.length;
        const stored: Omit<StoredResponse, "rewritten"> = {
          token: c.response.token,
          turn: c.record.turn,
          createdAt: c.response.createdAt,
          echo: c.response.echo,
          inputFrom: c.response.inputFrom,
          messageEnd,
          instructions: c.response.instructions,
          toolsJson: c.toolsJson,
          finishReason: c.result.finishReason,
          usage: c.result.usage,
          reply: c.result.message,
        };
        sql.exec(`INSERT INTO responses (token, turn, message_end) VALUES (?, ?, ?)`, c.response.token, c.record.turn, messageEnd);
        this.writeParts("response_parts", "token", c.response.token, JSON.stringify(stored));
      }
      sql.exec(`INSERT INTO turns (turn, record) VALUES (?, ?)`, c.record.turn, JSON.stringify(c.record));
      this.setMeta("backend_url", c.backendUrl);
      this.setMeta("state_id", c.stateId);
      this.setMeta("tools_json", c.toolsJson);
      if (c.promptBlockHashes.length > 0) this.setMeta("prompt_block_hashes", c.promptBlockHashes.join(""));
      else sql.exec(`DELETE FROM meta WHERE key = 'prompt_block_hashes'`);
      if (c.idempotencyKey !== undefined) {
        sql.exec(
          `INSERT OR REPLACE INTO idempotency (key, turn, fingerprint, result) VALUES (?, ?, ?, ?)`,
          c.idempotencyKey,
          c.record.turn,
          c.fingerprint,
          JSON.stringify(c.result),
        );
      }
      // Keys expire with their turn's age: only a recent turn is ever retried.
      sql.exec(`DELETE FROM idempotency WHERE turn <= ?`, c.record.turn - this.idempotencyTurns());
    });
  }

  /** Forgets the backend state id (after `state_unknown`, or when the trajectory ends). */
  clearState(): void {
    this.host.sql.exec(`DELETE FROM meta WHERE key = 'state_id'`);
  }

  /** Deletes everything this trajectory stored. */
  deleteAll(): void {
    this.host.transactionSync(() => {
      for (const table of ["messages", "turns", "idempotency", "responses", "response_parts", "forks", "message_answers", "children"]) this.host.sql.exec(`DELETE FROM ${table}`);
      // The schema version stays: the tables are emptied, not dropped.
      this.host.sql.exec(`DELETE FROM meta WHERE key != 'schema_version'`);
    });
  }

  /** Writes one JSON value as rows of at most PART_CHARS characters (`key` = the row's id). */
  private writeParts(table: "messages" | "response_parts", keyColumn: "idx" | "token", key: number | string, json: string): void {
    for (let part = 0, off = 0; off < json.length || part === 0; part++) {
      let end = Math.min(off + PART_CHARS, json.length);
      // Never split a surrogate pair: SQLite keeps text as UTF-8, where half a pair is lost.
      if (end < json.length && isHighSurrogate(json.charCodeAt(end - 1))) end--;
      this.host.sql.exec(`INSERT INTO ${table} (${keyColumn}, part, data) VALUES (?, ?, ?)`, key, part, json.slice(off, end));
      off = end;
    }
  }

  private setMeta(key: string, value: string): void {
    this.host.sql.exec(`INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)`, key, value);
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
