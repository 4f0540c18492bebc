import { MAX_PAUSE_SAMPLES } from "./lease-policy";
import type { SqlHost } from "../store-schema";

/** The trajectory is waiting on a tool: since when, on which state, and the lease if one was granted. */
export interface ToolWait {
  /** Epoch ms when the turn that called tools finished. */
  since: number;
  stateId: string;
  backendUrl: string;
  /** Epoch ms (edge clock) when the lease ends; null while none is granted. */
  leaseUntil: number | null;
}

/**
 * The trajectory's lease bookkeeping in its SQLite storage, next to `TrajectoryStore`'s tables:
 * observed tool pauses (the most recent `MAX_PAUSE_SAMPLES`) and the current tool wait.
 *
 * @example
 * const leases = new LeaseStore(ctx.storage); leases.migrate();
 * leases.startWait({ since: Date.now(), stateId, backendUrl, leaseUntil: null });
 */
export class LeaseStore {
  constructor(private readonly host: SqlHost) {}

  migrate(): void {
    const sql = this.host.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS tool_pauses (seq INTEGER PRIMARY KEY AUTOINCREMENT, pause_ms REAL NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS tool_wait (id INTEGER PRIMARY KEY CHECK (id = 1), since REAL NOT NULL, state_id TEXT NOT NULL, backend_url TEXT NOT NULL, lease_until REAL)`);
  }

  /** Observed tool pauses, oldest first. */
  pauses(): number[] {
    return this.host.sql.exec<{ pause_ms: number }>(`SELECT pause_ms FROM tool_pauses ORDER BY seq`).toArray().map((r) => r.pause_ms);
  }

  wait(): ToolWait | null {
    const row = this.host.sql.exec<{ since: number; state_id: string; backend_url: string; lease_until: number | null }>(`SELECT since, state_id, backend_url, lease_until FROM tool_wait WHERE id = 1`).toArray()[0];
    return row ? { since: row.since, stateId: row.state_id, backendUrl: row.backend_url, leaseUntil: row.lease_until } : null;
  }

  startWait(w: ToolWait): void {
    this.host.sql.exec(`INSERT OR REPLACE INTO tool_wait (id, since, state_id, backend_url, lease_until) VALUES (1, ?, ?, ?, ?)`, w.since, w.stateId, w.backendUrl, w.leaseUntil);
  }

  /** Records the lease of the current wait, if the wait is still on `stateId`; returns whether it did. */
  setLease(stateId: string, until: number | null): boolean {
    const cur = this.wait();
    if (!cur || cur.stateId !== stateId) return false;
    this.host.sql.exec(`UPDATE tool_wait SET lease_until = ? WHERE id = 1`, until);
    return true;
  }

  /** Ends the wait; with `pauseMs`, records it as an observed tool pause (one transaction). */
  endWait(pauseMs: number | null): void {
    this.host.transactionSync(() => {
      this.host.sql.exec(`DELETE FROM tool_wait`);
      if (pauseMs === null) return;
      this.host.sql.exec(`INSERT INTO tool_pauses (pause_ms) VALUES (?)`, pauseMs);
      this.host.sql.exec(`DELETE FROM tool_pauses WHERE seq <= (SELECT MAX(seq) FROM tool_pauses) - ?`, MAX_PAUSE_SAMPLES);
    });
  }

  clear(): void {
    this.host.transactionSync(() => {
      this.host.sql.exec(`DELETE FROM tool_pauses`);
      this.host.sql.exec(`DELETE FROM tool_wait`);
    });
  }
}
