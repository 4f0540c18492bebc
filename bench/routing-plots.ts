import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import type { TurnResult } from "./routing-report";
import { lineChart, type Series } from "./kit/plot";
import { mean, writeOut } from "./kit/report";

/** Writes the hit-rate and TTFT plots of a run (also from a saved routing-turns.json). */
export function writePlots(
  outDir: string,
  perTurn: Partial<Record<RoutingPolicyName, { results: TurnResult[]; ideal: number[] }>>,
  turns: number,
  info: { numBackends: number; numTrajectories: number; modelId: string },
): string[] {
  const colors: Record<RoutingPolicyName, string> = { affinity: "#1f77b4", "round-robin": "#d62728", "least-loaded": "#2ca02c", "consistent-hash": "#ff7f0e" };
  const ks = Array.from({ length: turns }, (_, i) => i + 1);
  const entries = Object.entries(perTurn) as [RoutingPolicyName, { results: TurnResult[]; ideal: number[] }][];
  const hitAt = (rs: TurnResult[], k: number, cached: (r: TurnResult, i: number) => number) => {
    let c = 0;
    let p = 0;
    rs.forEach((r, i) => {
      if (r.turn !== k) return;
      c += cached(r, i);
      p += r.promptTokens;
    });
    return p > 0 ? c / p : 0;
  };
  const hitSeries: Series[] = entries.map(([name, { results }]) => ({ name, color: colors[name], points: ks.map((k) => ({ x: k, y: hitAt(results, k, (r) => r.cachedTokens) })) }));
  const first = entries[0];
  if (first) hitSeries.push({ name: "ideal", color: "#7f7f7f", dashed: true, points: ks.map((k) => ({ x: k, y: hitAt(first[1].results, k, (_r, i) => first[1].ideal[i]!) })) });
  const title = `${info.numBackends} backends, ${info.numTrajectories} agent trajectories (${info.modelId}, CPU)`;
  const hitPath = writeOut(outDir, "routing-hit-rate.svg", lineChart({ title: `Prefix hit rate per turn: ${title}`, xLabel: "turn", yLabel: "cached / prompt tokens", series: hitSeries, legend: "bottom-right" }));
  const ttftPath = writeOut(
    outDir,
    "routing-ttft.svg",
    lineChart({
      title: `Mean time to first token per turn: ${title}`,
      xLabel: "turn",
      yLabel: "TTFT (ms, mean over trajectories)",
      logY: true,
      series: entries.map(([name, { results }]) => ({ name, color: colors[name], points: ks.map((k) => ({ x: k, y: mean(results.filter((r) => r.turn === k).map((r) => r.ttftMs)) })) })),
    }),
  );
  return [hitPath, ttftPath];
}
