import type { LoadedModel } from "../gpu-backend/engine/load-model";
import type { ChatMessage } from "../protocol/messages";

/**
 * The workload of `npm run bench -- speculative`: agent turns whose reply copies from the prompt
 * (a tool call repeating an id and a path from the tool's observation, a file re-emitted with one
 * edit, a JSON answer restating a record's fields) and turns whose reply does not (free text).
 * Each kind has `variants` seeded versions (other ids, paths, values, topics), one per concurrent
 * request at batch 8, so that no two requests share a reply.
 *
 * The prompts are written so that the trained SmolLM2-135M copies under greedy decoding (checked
 * by `copiedFraction` on its actual output, reported per turn): `maxTokens` is about the length of
 * the reply the turn asks for (the model otherwise runs on past the file or the JSON).
 *
 * @example
 * const turns = speculativeTurns(8);
 * const prompt = codec.encode(codec.render({ messages: turns[0].variants[3], addGenerationPrompt: true }));
 */

/** Whether a turn's reply is meant to copy from its prompt. */
export type TurnClass = "copy" | "free";

export interface SpeculativeTurn {
  /** Short name: tool-call, file-edit, json-restate, story, explain. */
  kind: string;
  class: TurnClass;
  /** What the reply is meant to copy (or not), in words. */
  about: string;
  /** Most generated tokens (the reply stops earlier at the model's end of turn). */
  maxTokens: number;
  /** One transcript per variant (variant 0 is the batch-1 turn). */
  variants: ChatMessage[][];
}

/** A turn kind's prompts as token ids, one per variant. */
export interface TokenTurn extends Omit<SpeculativeTurn, "variants"> {
  prompts: number[][];
}

/** The workload's transcripts rendered with the model's chat template and tokenized. */
export function tokenTurns(model: Pick<LoadedModel, "codec">, turns: readonly SpeculativeTurn[]): TokenTurn[] {
  return turns.map(({ variants, ...t }) => ({ ...t, prompts: variants.map((messages) => model.codec.encode(model.codec.render({ messages, addGenerationPrompt: true }))) }));
}

/** The turns, `variants` versions of each (>= 1). */
export function speculativeTurns(variants: number): SpeculativeTurn[] {
  const v = Array.from({ length: variants }, (_, i) => i);
  return [
    { kind: "tool-call", class: "copy", about: "a tool call repeating a file id and a path from the tool's observation", maxTokens: 80, variants: v.map(toolCall) },
    { kind: "file-edit", class: "copy", about: "a config file re-emitted with one value changed", maxTokens: 90, variants: v.map(fileEdit) },
    { kind: "json-restate", class: "copy", about: "a JSON answer restating the fields of a record from a tool's observation", maxTokens: 100, variants: v.map(jsonRestate) },
    { kind: "story", class: "free", about: "a short story (nothing to copy)", maxTokens: 120, variants: v.map(story) },
    { kind: "explain", class: "free", about: "a paragraph of explanation (nothing to copy)", maxTokens: 120, variants: v.map(explain) },
  ];
}

const PATHS = ["src/server/routes/upload_handler.ts", "lib/billing/invoice_totals.py", "app/models/user_profile.rb", "pkg/cache/lru_store.go", "src/components/CheckoutForm.tsx", "services/auth/token_refresh.py", "internal/queue/retry_policy.go", "web/pages/settings/notifications.vue"];
const NAMES = ["Maria Lopez", "Kenji Watanabe", "Amara Okafor", "Lukas Novak", "Priya Raman", "Tom Becker", "Sofia Rossi", "Omar Haddad"];
const STORIES = ["a lighthouse keeper who finds a message in a bottle", "a baker who opens a shop on the moon", "a girl who can talk to trees", "an old clock that runs backwards", "a robot learning to paint", "a fisherman and a silver whale", "a city where it never stops raining", "a lost dog finding its way home"];
const TOPICS = ["why regular exercise is good for health", "how rain forms in clouds", "why the sea is salty", "how bees make honey", "why leaves change colour in autumn", "how a bicycle stays upright", "why we need sleep", "how volcanoes erupt"];

/** A deterministic pseudo-random hex string for variant `i` (ids that only the prompt can tell). */
export function hexId(i: number, salt: number, length = 12): string {
  let x = (i + 1) * 2654435761 + salt * 40503;
  let out = "";
  while (out.length < length) {
    x = (Math.imul(x ^ (x >>> 15), 2246822507) + 0x9e3779b9) >>> 0;
    out += x.toString(16).padStart(8, "0");
  }
  return out.slice(0, length);
}

function toolCall(i: number): ChatMessage[] {
  const id = `f_${hexId(i, 1)}`;
  const path = PATHS[i % PATHS.length]!;
  return [
    { role: "system", content: "You are a coding agent. Reply with exactly one line: the next tool call as JSON." },
    { role: "user", content: "Find the failing test and open it." },
    { role: "assistant", content: '{"tool": "search", "args": {"query": "failing test"}}' },
    { role: "tool", content: `Found 1 match: file_id=${id} path=${path} line ${100 + 7 * i}` },
    { role: "user", content: 'Open that file. Reply with the tool call {"tool": "open_file", "args": {"file_id": ..., "path": ...}} using the id and path above.' },
  ];
}

function fileEdit(i: number): ChatMessage[] {
  const port = 8080 + i;
  const file = [
    "import os",
    "",
    `HOST = "0.0.0.0"`,
    `PORT = ${port}`,
    "DEBUG = False",
    `DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///app_${hexId(i, 2, 6)}.db")`,
    `MAX_WORKERS = ${2 + (i % 4)}`,
    `LOG_LEVEL = "info"`,
  ].join("\n");
  return [
    { role: "system", content: "You are a coding agent. When asked to edit a file, output the complete edited file in a code block and nothing else." },
    { role: "user", content: `config.py:\n\`\`\`python\n${file}\n\`\`\`\nChange PORT to ${port + 1010} and output the complete file.` },
  ];
}

function jsonRestate(i: number): ChatMessage[] {
  const name = NAMES[i % NAMES.length]!;
  const record = {
    order_id: `ORD-${55231 + 977 * i}`,
    customer: name,
    email: `${name.toLowerCase().replace(" ", ".")}@example.com`,
    total: (149.9 + 37.25 * i).toFixed(2),
    currency: i % 2 ? "USD" : "EUR",
    status: i % 3 ? "pending" : "shipped",
  };
  // The record as a tool's observation, the answer still to come (the model restates it).
  return [
    { role: "system", content: "You are an agent. Your final answer is one JSON object." },
    { role: "user", content: `Give me the details of order ${record.order_id} as JSON.` },
    { role: "tool", content: JSON.stringify(record).replace(/,"/g, ', "').replace(/":/g, '": ') },
  ];
}

function story(i: number): ChatMessage[] {
  return [{ role: "user", content: `Write a short story about ${STORIES[i % STORIES.length]}.` }];
}

function explain(i: number): ChatMessage[] {
  return [{ role: "user", content: `Explain in one paragraph ${TOPICS[i % TOPICS.length]}.` }];
}

/**
 * The share of `output` that is copied from `prompt`: tokens covered by spans of at least
 * `minSpan` tokens that occur verbatim in the prompt, matched greedily left to right, longest
 * first. 0 for an empty output.
 *
 * @example
 * copiedFraction([1, 2, 3, 4, 5, 9], [7, 1, 2, 3, 4, 8], 4); // 4/6: [1, 2, 3, 4] is in the prompt
 */
export function copiedFraction(prompt: readonly number[], output: readonly number[], minSpan = 4): number {
  if (output.length === 0) return 0;
  const starts = new Map<number, number[]>();
  prompt.forEach((t, p) => {
    const list = starts.get(t);
    if (list) list.push(p);
    else starts.set(t, [p]);
  });
  let covered = 0;
  for (let i = 0; i < output.length; ) {
    let best = 0;
    for (const p of starts.get(output[i]!) ?? []) {
      let n = 0;
      while (i + n < output.length && p + n < prompt.length && prompt[p + n] === output[i + n]) n++;
      best = Math.max(best, n);
    }
    if (best >= minSpan) {
      covered += best;
      i += best;
    } else i++;
  }
  return covered / output.length;
}
