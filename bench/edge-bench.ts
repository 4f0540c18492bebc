import { encode } from "../protocol/codec";
import type { ChatMessage, DoneFrame, GenerateRequest } from "../protocol/messages";
import { generateFrames } from "../durable-objects/backend/backend-client";
import { loadModel } from "../gpu-backend/engine/load-model";
import { greedy } from "./kit/engine";
import { Progress, note } from "./kit/progress";
import { mean, median, round, table } from "./kit/report";
import { startBenchStack } from "./kit/stack";
import { trajectoryState } from "./kit/trajectory-view";
import { sendTurn } from "./kit/turn-client";
import { answeringReply, makeWorkload } from "./kit/workload";

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
  note("edge", "starting a backend and wrangler dev");
  const stack = await startBenchStack({
    name: "edge",
    backends: 1,
    ...(o.model ? { model: o.model } : {}),
    backend: { kvMemory: "1GiB" },
    // As a deployed Worker runs: without wrangler dev's devtools inspector, which reports every
    // streamed chunk to wrangler's Node process (`AGENT_EDGE_BENCH_DEVTOOLS=1` keeps it, to compare).
    edge: { devtools: process.env.AGENT_EDGE_BENCH_DEVTOOLS === "1" },
    onLine: (line) => {
      if (!process.env.BENCH_VERBOSE && /ready in|serving|Ready on/.test(line)) note("edge", line);
    },
  });
  try {
    const model = await loadModel({ dir: o.model, log: () => {} });
    const countTokens = (t: string) => model.codec.encode(t).length;
    const [workload] = makeWorkload({ trajectories: 1, turns, systemTokens: 1200, observationTokens: [150, 300], replyTokens: [16, 16], seed: 11, countTokens });
    const { tools } = workload!;
    const backend = { url: stack.backendUrls[0]!, secret: stack.secret };
    const trajectoryId = `bench-${Date.now()}`;
    const viaEdge: Sample[] = [];
    const direct: Sample[] = [];
    const transcriptEdge: ChatMessage[] = [];
    // Each turn's new messages as both paths send them (answeringReply: no tool message without a call).
    const sent: ChatMessage[][] = [];
    let stateId: string | undefined;
    const progress = new Progress("edge", turns);

    for (let k = 0; k < turns; k++) {
      const turn = workload!.turns[k]!;
      const newMessages = answeringReply(turn.newMessages, transcriptEdge.at(-1));
      sent.push(newMessages);
      // (a) through the edge: the client sends its whole transcript, as agents do (the reply's text only back into it).
      transcriptEdge.push(...newMessages);
      const t0 = performance.now();
      const reply = await sendTurn({ edgeUrl: stack.edgeUrl, model: model.spec.modelId, trajectoryId, messages: transcriptEdge, tools, maxTokens: turn.maxTokens, stream: true });
      viaEdge.push({ ttftMs: reply.ttftMs, totalMs: performance.now() - t0 });
      transcriptEdge.push({ role: "assistant", content: reply.content });

      // (b) straight to the backend: delta turns with its state id, a different cache salt.
      const t1 = performance.now();
      const req: GenerateRequest = {
        requestId: `direct-${k}`,
        trajectoryId: `direct-${trajectoryId}`,
        cacheSalt: "bench-direct",
        mode: stateId ? "delta" : "full",
        messages: newMessages,
        tools,
        sampling: greedy(turn.maxTokens),
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

    // Bytes the edge sent per turn (its turn records) next to the transcript encoded whole.
    const records = (await trajectoryState(stack.edgeUrl, trajectoryId)).turns;
    const transcriptSoFar: ChatMessage[] = [];
    const bytes = records.map((t) => {
      transcriptSoFar.push(...sent[t.turn - 1]!);
      const transcriptBytes = encode({ mode: "full", messages: transcriptSoFar, tools }).byteLength;
      transcriptSoFar.push({ role: "assistant", content: "" });
      return { turn: t.turn, requestBytes: t.request_bytes, transcriptBytes };
    });
    const later = <T>(xs: T[]) => xs.slice(1); // turn 1 is a full prefill on both paths
    const deltaBytes = bytes.filter((b) => records[b.turn - 1]!.mode === "delta");
    const rows = viaEdge.map((e, i) => [i + 1, e.ttftMs.toFixed(0), direct[i]!.ttftMs.toFixed(0), e.totalMs.toFixed(0), direct[i]!.totalMs.toFixed(0), bytes[i]?.requestBytes ?? "-", bytes[i]?.transcriptBytes ?? "-"]);
    process.stderr.write(`\n${table(["turn", "TTFT edge", "TTFT direct", "total edge", "total direct", "bytes edge->backend", "transcript bytes"], rows)}\n\n`);
    const summary = {
      turns,
      overheadRatioTotal: round(mean(later(viaEdge).map((s) => s.totalMs)) / mean(later(direct).map((s) => s.totalMs)), 3),
      overheadRatioTtft: round(mean(later(viaEdge).map((s) => s.ttftMs)) / mean(later(direct).map((s) => s.ttftMs)), 3),
      medianTotalMs: { edge: round(median(later(viaEdge).map((s) => s.totalMs)), 1), direct: round(median(later(direct).map((s) => s.totalMs)), 1) },
      medianExtraMs: round(median(later(viaEdge).map((s, i) => s.totalMs - direct[i + 1]!.totalMs)), 1),
      deltaTurns: deltaBytes.length,
      meanDeltaRequestBytes: Math.round(mean(deltaBytes.map((b) => b.requestBytes))),
      meanTranscriptBytes: Math.round(mean(deltaBytes.map((b) => b.transcriptBytes))),
      deltaBytesOverTranscript: round(mean(deltaBytes.map((b) => b.requestBytes / b.transcriptBytes)), 3),
    };
    process.stderr.write(`${JSON.stringify(summary, null, 2)}\n`);
    return summary;
  } finally {
    await stack.close();
  }
}
