import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** One agent turn as text: everything the model sees before its reply, and the reply. */
export interface TextTurn {
  prompt: string;
  reply: string;
}

/** A trajectory's turns (each prompt extends the previous turn's prompt and reply), of one kind. */
export interface TextTrajectory {
  kind: "tool call" | "tool call, new trajectory" | "file edit" | "json answer" | "free text";
  turns: TextTurn[];
}

const SYSTEM = `You are a coding agent working in the repository agent-edge. Use the tools to look around before you change anything. Tools:
{"name": "list_files", "description": "List files under a folder with their ids and line counts", "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}
{"name": "read_file", "description": "Read a file by id and path", "parameters": {"type": "object", "properties": {"file_id": {"type": "string"}, "path": {"type": "string"}}, "required": ["file_id", "path"]}}
{"name": "write_file", "description": "Replace a file's contents", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}`;

const turnText = (role: string, text: string) => `<|im_start|>${role}\n${text}<|im_end|>\n`;
const fileId = (path: string) => `f_${createHash("sha256").update(path).digest("hex").slice(0, 10)}`;

/**
 * Agent trajectories built from this repository's own files (so they are real code, real JSON
 * and real prose, and the figures reproduce at a commit), in ChatML as SmolLM2's template renders
 * it. Copying kinds: a `read_file` call repeating a file's id and path from a `list_files`
 * observation; a file re-emitted with one line changed after `read_file` showed it; a JSON answer
 * restating fields of a JSON observation; the read_file call again, as the first reply of new
 * trajectories given the same listing (what the tenant tree is for). Free text: prose paragraphs of the docs answering a
 * question, after an observation that does not hold them.
 *
 * @example
 * const trajectories = agentTrajectories("/work/repo", files);
 * trajectories[0].turns[0].reply; // '<tool_call>\n{"name": "read_file", ...'
 */
export function agentTrajectories(root: string, files: readonly string[]): TextTrajectory[] {
  const read = (path: string) => readFileSync(join(root, path), "utf8");
  const listing = files.map((path) => ({ id: fileId(path), path, lines: read(path).split("\n").length }));
  const listingText = JSON.stringify(listing, null, 1);
  const base = turnText("system", SYSTEM) + turnText("user", "Find where the KV cache evicts blocks and tidy that code.");
  const listCall = `<tool_call>\n{"name": "list_files", "arguments": {"folder": "gpu-backend"}}\n</tool_call>`;
  const afterListing = base + turnText("assistant", listCall) + turnText("tool", listingText);

  // Tool calls that repeat an id and a path from the listing, one turn each, the context growing.
  const picks = listing.filter((_, i) => i % Math.max(1, Math.floor(listing.length / 8)) === 3).slice(0, 8);
  const toolTurns: TextTurn[] = [];
  let prompt = afterListing;
  for (const pick of picks) {
    const reply = `<tool_call>\n{"name": "read_file", "arguments": {"file_id": "${pick.id}", "path": "${pick.path}"}}\n</tool_call>`;
    toolTurns.push({ prompt: prompt + "<|im_start|>assistant\n", reply });
    prompt += turnText("assistant", reply) + turnText("tool", `(${pick.lines} lines)`);
  }

  // The same kind of call, each the first of a new trajectory (subagents given the same listing):
  // the context holds no earlier read_file call, the tenant's earlier replies do.
  const freshTurns = listing
    .filter((_, i) => i % Math.max(1, Math.floor(listing.length / 8)) === 5)
    .slice(0, 8)
    .map((pick) => ({ prompt: afterListing + "<|im_start|>assistant\n", reply: `<tool_call>\n{"name": "read_file", "arguments": {"file_id": "${pick.id}", "path": "${pick.path}"}}\n</tool_call>` }));

  // Files re-emitted with one line changed (the middle line's first identifier renamed, or a line added).
  const editTurns: TextTurn[] = [];
  prompt = base;
  for (const path of ["gpu-backend/kv/free-block-queue.ts", "gpu-backend/kv/kept-tails.ts", "gpu-backend/scheduler/sequence.ts"]) {
    const text = read(path);
    const call = `<tool_call>\n{"name": "read_file", "arguments": {"file_id": "${fileId(path)}", "path": "${path}"}}\n</tool_call>`;
    prompt += turnText("assistant", call) + turnText("tool", text);
    const reply = `Here is ${path} with the fix:\n\`\`\`ts\n${oneLineEdited(text)}\`\`\``;
    editTurns.push({ prompt: prompt + "<|im_start|>assistant\n", reply });
    prompt += turnText("assistant", reply) + turnText("tool", "written");
  }

  // A JSON answer restating fields of a JSON observation (package.json).
  const pkg = JSON.parse(read("package.json")) as { name: string; version: string; engines: unknown; scripts: Record<string, string>; dependencies: Record<string, string> };
  const pkgText = read("package.json");
  const jsonPrompt = base + turnText("assistant", `<tool_call>\n{"name": "read_file", "arguments": {"file_id": "${fileId("package.json")}", "path": "package.json"}}\n</tool_call>`) + turnText("tool", pkgText) + turnText("user", "Answer in JSON: the package, its engines, its test and bench scripts and its tokenizer dependencies.");
  const answer = {
    name: pkg.name,
    version: pkg.version,
    engines: pkg.engines,
    scripts: { test: pkg.scripts.test, bench: pkg.scripts.bench },
    dependencies: Object.fromEntries(Object.entries(pkg.dependencies).filter(([name]) => name.includes("tokenizer"))),
  };
  const jsonTurns: TextTurn[] = [{ prompt: jsonPrompt + "<|im_start|>assistant\n", reply: JSON.stringify(answer, null, 2) }];

  // Free text: paragraphs of the docs, after an observation of code that does not hold them.
  const freeTurns: TextTurn[] = [];
  prompt = base + turnText("assistant", `<tool_call>\n{"name": "read_file", "arguments": {"file_id": "${fileId("gpu-backend/kv/block-pool.ts")}", "path": "gpu-backend/kv/block-pool.ts"}}\n</tool_call>`) + turnText("tool", read("gpu-backend/kv/block-pool.ts"));
  for (const paragraph of proseParagraphs(read("README.md"), 3).concat(proseParagraphs(read("docs/engine.md"), 3))) {
    freeTurns.push({ prompt: prompt + turnText("user", "Explain the design in your own words.") + "<|im_start|>assistant\n", reply: paragraph });
    prompt += turnText("user", "Explain the design in your own words.") + turnText("assistant", paragraph);
  }

  return [
    { kind: "tool call", turns: toolTurns },
    { kind: "tool call, new trajectory", turns: freshTurns },
    { kind: "file edit", turns: editTurns },
    { kind: "json answer", turns: jsonTurns },
    { kind: "free text", turns: freeTurns },
  ];
}

/** The text with one line changed: the middle line's first word of 4+ letters gets a suffix. */
function oneLineEdited(text: string): string {
  const lines = text.split("\n");
  let at = Math.floor(lines.length / 2);
  while (at < lines.length - 1 && !/[A-Za-z]{4,}/.test(lines[at]!)) at++;
  lines[at] = lines[at]!.replace(/[A-Za-z]{4,}/, (word) => `${word}Checked`);
  return lines.join("\n");
}

/** The first `count` paragraphs of plain prose (no code, tables, lists or headings) of at least 300 characters. */
function proseParagraphs(markdown: string, count: number): string[] {
  return markdown
    .split(/\n\s*\n/)
    .map((p) => p.trim())
    .filter((p) => p.length >= 300 && !/^(#|\||-|\*|```|\d+\.|>)/.test(p) && !p.includes("```"))
    .slice(0, count);
}
