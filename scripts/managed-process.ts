import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";

/** How a process ended: an exit code, a signal, or a spawn error (then both are null). */
export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  error?: Error;
}

export interface ManagedProcessParams {
  /** Shown before every output line, e.g. `backend-8080` gives `[backend-8080] ...`. */
  name: string;
  command: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Receives each output line (stdout and stderr), already prefixed with `[name] `. */
  onLine?: (line: string) => void;
  /** Rewrites a raw line before it is prefixed and kept, e.g. to drop the child's own prefix. */
  mapLine?: (line: string) => string;
  /** How many of the last output lines `tail()` keeps (default 40). */
  tailLines?: number;
}

/**
 * A child process in its own process group (`detached: true`), so that signals reach everything
 * it started (wrangler's workerd, for one) and a terminal's Ctrl-C reaches only the parent, which
 * decides the order of shutdown. Output is split into lines and prefixed with the name.
 *
 * @example
 * const p = new ManagedProcess({ name: "wrangler", command: process.execPath, args, cwd, env, onLine: console.log });
 * await p.stop(); // SIGTERM to the group, SIGKILL after 5 s
 */
export class ManagedProcess {
  readonly name: string;
  /** The child's pid, which is also its process group id; undefined when spawning failed. */
  readonly pid: number | undefined;
  /** Resolves once the group leader has exited (or failed to spawn). */
  readonly exited: Promise<ProcessExit>;
  private exitInfo: ProcessExit | undefined;
  private readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private readonly tailLines: number;
  private stopping: Promise<ProcessExit> | undefined;

  constructor(params: ManagedProcessParams) {
    this.name = params.name;
    this.tailLines = params.tailLines ?? 40;
    this.child = spawn(params.command, params.args, {
      cwd: params.cwd,
      env: params.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    this.pid = this.child.pid;
    this.exited = new Promise((resolve) => {
      this.child.on("error", (error) => {
        // 'error' without 'exit' when the command could not be spawned at all.
        if (this.child.pid === undefined) {
          this.exitInfo ??= { code: null, signal: null, error };
          resolve(this.exitInfo);
        }
      });
      this.child.once("exit", (code, signal) => {
        this.exitInfo ??= { code, signal };
        resolve(this.exitInfo);
      });
    });
    const emit = (raw: string) => {
      const line = params.mapLine ? params.mapLine(raw) : raw;
      this.lines.push(line);
      if (this.lines.length > this.tailLines) this.lines.shift();
      params.onLine?.(`[${this.name}] ${line}`);
    };
    for (const stream of [this.child.stdout!, this.child.stderr!]) {
      let partial = "";
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => {
        const parts = (partial + chunk).split(/\r?\n/);
        partial = parts.pop()!;
        for (const part of parts) emit(part);
      });
      stream.on("end", () => {
        if (partial !== "") emit(partial);
        partial = "";
      });
    }
  }

  /** How the group leader exited, or undefined while it runs. */
  get exit(): ProcessExit | undefined {
    return this.exitInfo;
  }

  /** The last output lines (unprefixed), oldest first. */
  tail(): string[] {
    return [...this.lines];
  }

  /** Live (non-zombie) pids in this process group, the leader included if alive. */
  groupPids(): number[] {
    return this.pid === undefined ? [] : processGroupPids(this.pid);
  }

  /** Sends `signal` to the whole process group; false when nothing was there to receive it. */
  signalGroup(signal: NodeJS.Signals): boolean {
    if (this.pid === undefined) return false;
    try {
      process.kill(-this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Stops the whole group: `signal` (SIGTERM by default), then SIGKILL for what is left after `graceMs`. Resolves with
   * the leader's exit once no process of the group is left (or, for unreapable zombies'
   * sake, at most 3 s after the SIGKILL). Idempotent.
   */
  stop(graceMs = 5000, signal: "SIGTERM" | "SIGINT" = "SIGTERM"): Promise<ProcessExit> {
    this.stopping ??= (async () => {
      if (this.pid === undefined) return this.exited;
      this.signalGroup(signal);
      if (!(await this.waitGroupGone(graceMs))) {
        this.signalGroup("SIGKILL");
        await this.waitGroupGone(3000);
      }
      return this.exited;
    })();
    return this.stopping;
  }

  /** SIGKILL to the group, synchronously (for `process.on("exit")`). */
  killNow(): void {
    this.signalGroup("SIGKILL");
  }

  private async waitGroupGone(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    for (;;) {
      if (this.exitInfo !== undefined && this.groupPids().length === 0) return true;
      if (Date.now() >= deadline) return false;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * Live pids whose process group is `pgid`. On Linux this reads /proc and leaves out zombies
 * (which a container's init may never reap); elsewhere it can only say whether the group has
 * any member, and answers `[pgid]` when it does.
 *
 * @example
 * processGroupPids(stack.processes[0].pid!) // [1234, 1240, 1241]
 */
export function processGroupPids(pgid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    try {
      process.kill(-pgid, 0);
      return [pgid];
    } catch {
      return [];
    }
  }
  const pids: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(Number(entry));
    if (stat && stat.pgrp === pgid && stat.state !== "Z" && stat.state !== "X") pids.push(Number(entry));
  }
  return pids;
}

/**
 * Whether `pid` names a live process (a zombie counts as gone).
 *
 * @example
 * expect(isProcessAlive(pid)).toBe(false);
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  const stat = readStat(pid);
  if (stat === undefined) return !existsSync("/proc/self/stat");
  return stat.state !== "Z" && stat.state !== "X";
}

function readStat(pid: number): { state: string; pgrp: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0] ?? "", pgrp: Number(fields[2]) };
}
