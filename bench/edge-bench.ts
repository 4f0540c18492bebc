import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encode } from "../protocol/codec";
import type { ChatMessage, DoneFrame, GenerateRequest } from "../protocol/messages";
import { generateFrames } from "../durable-objects/backend/backend-client";
import { freePort, startStack } from "../scripts/stack";
import { answeringReply, makeAgentWorkload } from "./agent-workload";
import { Progress, note } from "./progress";
import { loadModel } from "../gpu-backend/engine/load-model";
import { sseJson } from "./sse";

export interface EdgeBenchOptions {
  quick: boolean;
  turns?: number;
  model?: string;
}

interface Sample {
  ttftMs: number;
  totalMs: number;
}

/**
 * `npm run bench -- edge [--quick] [--json]`
 *
 * One local stack (a backend + `wrangler dev`). The same agent workload runs turn by turn along
 * two paths, interleaved so both see the same machine load: (a) client -> Worker -> Durable
 * Object -> backend, streaming SSE; (b) client -> backend directly (msgpack, delta turns). It
 * reports the per-turn latency overhead ratio (a / b) and the bytes the edge sent the backend per
 * delta turn next to the size of the whole transcript.
 */
export async function runEdgeBench(o: EdgeBenchOptions): Promise<Record<string, unknown>> {
  const turns = o.turns ?? (o.quick ? 8 : 16);
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-bench-"));
  note("edge", "starting a backend and wrangler dev");
  const stack = await startStack({
    ...(o.model ? { modelDir: o.model } : {}),
    backendPorts: [await freePort()],
    edgePort: await freePort(),
    inspectorPort: await freePort(),
    // As a deployed Worker runs: without wrangler dev's devtools inspector, which reports every
    // streamed chunk to wrangler's Node process (`AGENT_EDGE_BENCH_DEVTOOLS=1` keeps it, to compare).
    devtools: process.env.AGENT_EDGE_BENCH_DEVTOOLS === "1",
    persistTo: join(dir, "state"),
    kvMemory: "1GiB",
    onLine: (line) => {
      if (process.env.BENCH_VERBOSE || /ready in|serving|Ready on/.test(line)) note("edge", line);
    },
  });
  try {
    const model = await loadModel({ dir: o.model, log: () => {} });
    const modelId = model.spec.modelId;
    const countTokens = (t: string) => model.codec.encode(t).length;
    const [workload] = makeAgentWorkload({ trajectories: 1, turns, systemTokens: 1200, observationTokens: [150, 300], replyTokens: [16, 16], seed: 11, countTokens });
    const backend = { url: stack.backendUrls[0]!, secret: stack.secret };
    const trajectoryId = `bench-${Date.now()}`;
    const viaEdge: Sample[] = [];
    const direct: Sample[] = [];
    const bytes: { turn: number; requestBytes: number; transcriptBytes: number }[] = [];
    const transcriptEdge: ChatMessage[] = [];
    // Each turn's new messages as both paths send them (answeringReply: no tool message without a call).
    const sent: ChatMessage[][] = [];
    let stateId: string | undefined;
    const progress = new Progress("edge", turns);

    for (let k = 0; k < turns; k++) {
      const turn = workload!.turns[k]!;
      const sampling = { maxTokens: turn.maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
      const newMessages = answeringReply(turn.newMessages, transcriptEdge.at(-1));
      sent.push(newMessages);
      // (a) through the edge: the client sends its whole transcript, as agents do.
      transcriptEdge.push(...newMessages);
      const t0 = performance.now();
      const res = await fetch(`${stack.edgeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: "Bearer sk-local-dev", "content-type": "application/json", "x-trajectory-id": trajectoryId },
        body: JSON.stringify({ model: modelId, messages: transcriptEdge, tools: workload!.tools, max_tokens: turn.maxTokens, temperature: 0, stream: true }),
      });
      if (!res.ok || !res.body) throw new Error(`edge answered ${res.status}: ${await res.text()}`);
      let ttft: number | undefined;
      let text = "";
      for await (const chunk of sseJson(res.body)) {
        const delta = (chunk as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content;
        if (delta) {
          ttft ??= performance.now() - t0;
          text += delta;
        }
      }
      viaEdge.push({ ttftMs: ttft ?? performance.now() - t0, totalMs: performance.now() - t0 });
      transcriptEdge.push({ role: "assistant", content: text });

      // (b) straight to the backend: delta turns with its state id, a different cache salt.
      const t1 = performance.now();
      const req: GenerateRequest = {
        requestId: `direct-${k}`,
        trajectoryId: `direct-${trajectoryId}`,
        cacheSalt: "bench-direct",
        mode: stateId ? "delta" : "full",
        messages: newMessages,
        tools: workload!.tools,
        sampling,
        ...(stateId ? { stateId } : {}),
      };
      let firstDirect: number | undefined;
      let done: DoneFrame | undefined;
      for await (const f of generateFrames(backend, req, { timeoutMs: 300_000 })) {
        if (f.type === "token") firstDirect ??= performance.now() - t1;
        else if (f.type === "done") done = f;
        else throw new Error(`${f.code}: ${f.message}`);
      }
      direct.push({ ttftMs: firstDirect ?? performance.now() - t1, totalMs: performance.now() - t1 });
      stateId = done!.stateId;
      progress.tick();
    }

    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${trajectoryId}`, { headers: { authorization: "Bearer sk-local-dev" } })).json()) as {
      turns: { turn: number; mode: string; request_bytes: number }[];
    };
    const transcriptSoFar: ChatMessage[] = [];
    for (const t of state.turns) {
      transcriptSoFar.push(...sent[t.turn - 1]!);
      const full = encode({ mode: "full", messages: transcriptSoFar, tools: workload!.tools }).byteLength;
      bytes.push({ turn: t.turn, requestBytes: t.request_bytes, transcriptBytes: full });
      transcriptSoFar.push({ role: "assistant", content: "" });
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const skipFirst = <T>(xs: T[]) => xs.slice(1); // turn 1 is a full prefill on both paths
    const deltaBytes = bytes.filter((b) => state.turns[b.turn - 1]!.mode === "delta");
    const rows = viaEdge.map((e, i) => `${i + 1} | ${e.ttftMs.toFixed(0)} | ${direct[i]!.ttftMs.toFixed(0)} | ${e.totalMs.toFixed(0)} | ${direct[i]!.totalMs.toFixed(0)} | ${bytes[i]?.requestBytes ?? "-"} | ${bytes[i]?.transcriptBytes ?? "-"}`);
    process.stderr.write(`\nturn | TTFT edge | TTFT direct | total edge | total direct | bytes edge->backend | transcript bytes\n${rows.join("\n")}\n\n`);
    const summary = {
      turns,
      overheadRatioTotal: round(mean(skipFirst(viaEdge).map((s) => s.totalMs)) / mean(skipFirst(direct).map((s) => s.totalMs)), 3),
      overheadRatioTtft: round(mean(skipFirst(viaEdge).map((s) => s.ttftMs)) / mean(skipFirst(direct).map((s) => s.ttftMs)), 3),
      medianTotalMs: { edge: round(median(skipFirst(viaEdge).map((s) => s.totalMs)), 1), direct: round(median(skipFirst(direct).map((s) => s.totalMs)), 1) },
      medianExtraMs: round(median(skipFirst(viaEdge).map((s, i) => s.totalMs - direct[i + 1]!.totalMs)), 1),
      deltaTurns: deltaBytes.length,
      meanDeltaRequestBytes: Math.round(mean(deltaBytes.map((b) => b.requestBytes))),
      meanTranscriptBytes: Math.round(mean(deltaBytes.map((b) => b.transcriptBytes))),
      deltaBytesOverTranscript: round(mean(deltaBytes.map((b) => b.requestBytes / b.transcriptBytes)), 3),
    };
    process.stderr.write(`${JSON.stringify(summary, null, 2)}\n`);
    return summary;
  } finally {
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

function round(v: number, digits: number): number {
  const p = Math.pow(10, digits);
  return Math.round(v * p) / p;
}
