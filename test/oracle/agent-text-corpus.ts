import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import type { TokenizerFamily } from "../../gpu-backend/model/checkpoint/family-tokenizers";
import type { ChatTemplate } from "../../gpu-backend/tokenizer/chat-template";

/**
 * Agent text for tokenizer comparisons: tool calls, code, chat-template prompts with special
 * tokens, unicode, whitespace and numbers. Every string is in NFC and contains no plain
 * vocabulary entry that llama.cpp re-types as a control token (see KNOWN_TOKENIZER_DIFFERENCES).
 */
export const AGENT_TEXTS: readonly string[] = [
  // Tool calls and tool results (JSON).
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
  '{"id":"call_8f3a","type":"function","function":{"name":"search_files","arguments":"{\\"pattern\\":\\"**/*.ts\\",\\"max\\":50}"}}',
  '<tool_response>\n{"status": 200, "items": [{"path": "src/index.ts", "size": 1024}, {"path": "README.md", "size": 88}], "next": null}\n</tool_response>',
  '{"temperature": -12.5, "ok": true, "tags": ["a", "b\\n", "\\u00e9"], "nested": {"x": [1, 2, [3, {"y": {}}]]}}',
  // Code.
  'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
  "export async function load<T>(url: string): Promise<T> {\n  const res = await fetch(url, { headers: { Accept: 'application/json' } });\n  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return (await res.json()) as T;\n}\n",
  'fn main() {\n    let v: Vec<u32> = (1..=10).filter(|x| x % 2 == 0).collect();\n    println!("{:?}", v);\n}\n',
  'package main\n\nimport "fmt"\n\nfunc main() {\n\tch := make(chan int, 3)\n\tgo func() { ch <- 42 }()\n\tfmt.Println(<-ch)\n}\n',
  "#include <vector>\ntemplate <typename T> T sum(const std::vector<T>& v) { T s{}; for (auto& x : v) s += x; return s; }\n",
  "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 3;",
  'for f in *.log; do grep -c "ERROR" "$f" | awk \'{s+=$1} END {print s}\'; done 2>/dev/null && echo "done" || exit 1',
  '<div class="card" data-id="7"><p>Hello &amp; welcome</p><!-- comment --></div>',
  "I'm sure they'll say it's fine; WE'RE NOT, you'd think. She's done, hasn't she? I've, we'd, they're.",
  // Unicode: CJK, Japanese, Korean, emoji (ZWJ, flags, skin tones, keycaps), RTL, combining marks.
  "你好，世界！这是一个测试。机器学习模型的推理服务需要高效的缓存。",
  "東京の天気は晴れです。カタカナとひらがなを混ぜた文章。",
  "안녕하세요, 세계! 한국어 문장입니다.",
  "Emoji: 🤖🚀✨ 👩‍💻 👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 1️⃣ ❤️ 🫠",
  "RTL: مرحبا بالعالم — שלום עולם (mixed with English) ‏‎",
  "Combining marks without a precomposed form: q̇ x̃ n̈ a̧ ṃ̄ — Devanagari नमस्ते दुनिया — Thai สวัสดีครับ",
  "Vietnamese (NFC): Tiếng Việt có dấu — Ελληνικά — Русский текст — café naïve façade",
  "Zero width: a\u200bb\u200cc\u200dd\ufeffe and soft\u00adhyphen",
  "Spaces: nbsp\u00a0x\u00a0\u00a0y ideographic\u3000\u3000z NEL\u0085x LS\u2028x PS\u2029y VT\u000bFF\u000cy",
  "Letters: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 ﬁnance ﬂow ＡＢＣ１２３ İstanbul ı ß ẞ Ǆ ǅ 𠀀𪚥 ক্ষ ไทย 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
  "Quotes: ’s ’T 's 'S 'LL don'T WON'T «guillemets» „low“ 「括弧」",
  // Whitespace runs.
  "tabs\t\tand  double  spaces   triple    quad\n\n\nthree newlines\r\nCRLF\r\n\r\n  indented\n    more\n\ttab",
  "   leading spaces and trailing spaces   ",
  "\n\n\n\n",
  "x" + " ".repeat(40) + "y\n" + "\t".repeat(9) + "z",
  // Numbers.
  "1234567890 3.14159 -0.000123 1e-10 6.022e23 0xDEADBEEF 0b1011 1,234,567.89 +1 (555) 010-9999 v2.10.3",
  "2024-07-02T12:34:56.789Z 99.99% $1,000 €20 ¥300 1/3 ½ ²³ Ⅻ ١٢٣ ٤٥٦",
];

const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "read_file",
      description: "Read a file from the workspace.",
      parameters: { type: "object", properties: { path: { type: "string", description: "Relative path" } }, required: ["path"] },
    },
  },
];

const TRANSCRIPT: ChatMessage[] = [
  { role: "system", content: "You are a careful coding agent. Answer briefly." },
  { role: "user", content: "Open src/main.ts and tell me what it exports. 日本語でもOK 👍" },
  {
    role: "assistant",
    content: "<think>\nI should read the file first.\n</think>\n\n",
    tool_calls: [{ id: "call_1", type: "function", function: { name: "read_file", arguments: '{"path": "src/main.ts"}' } }],
  },
  { role: "tool", content: 'export const answer = 42;\nexport function main(): void {\n  console.log("hi");\n}\n', tool_call_id: "call_1" },
  { role: "user", content: "Thanks!\n\nNow   with   spaces\tand tabs." },
];

/**
 * Chat-template-rendered prompts (special tokens included) from the model's own template.
 *
 * @example
 * renderedPrompts(checkpoint.template); // [prompt with tools, prompt without]
 */
export function renderedPrompts(template: ChatTemplate): string[] {
  let withTools: string;
  try {
    withTools = template.render({ messages: TRANSCRIPT, tools: TOOLS, addGenerationPrompt: true });
  } catch {
    // Gemma 3's template drops tool results and tool-call turns, then demands alternating
    // user/assistant roles: end the transcript at the tool result instead.
    withTools = template.render({ messages: TRANSCRIPT.slice(0, 4), tools: TOOLS, addGenerationPrompt: true });
  }
  return [
    withTools,
    template.render({ messages: TRANSCRIPT.slice(0, 2), addGenerationPrompt: true, extra: { enable_thinking: false } }),
  ];
}

/**
 * Inputs on which llama.cpp's tokenizer differs from the Hugging Face tokenizer by design, per
 * tokenizer; kept out of AGENT_TEXTS. The test checks that each still differs, so the list stays true.
 */
export const KNOWN_TOKENIZER_DIFFERENCES: Record<TokenizerFamily, readonly { text: string; why: string }[]> = {
  qwen3: [
    {
      // Decomposed "é" (e + U+0301): the tokenizer.json normalizer is NFC; llama.cpp applies none.
      text: "cafe\u0301",
      why: "llama.cpp skips tokenizer.json's NFC normalizer",
    },
    {
      // The Ohm sign U+2126 is not NFC-stable either (NFC maps it to Greek capital omega U+03A9).
      text: "\u2126 ohm",
      why: "llama.cpp skips tokenizer.json's NFC normalizer",
    },
    {
      // Qwen's vocabulary has a plain entry "</s>" (id 128247); llama.cpp's loader re-types
      // end-of-generation-looking texts as control tokens, so with special-token parsing on it
      // matches "</s>" in the text as one token, where Hugging Face splits it with BPE.
      text: "a </s> b",
      why: "llama.cpp turns the plain vocabulary entry </s> into a control token",
    },
  ],
  // None found: Gemma 3's and the Phi-3 demo's tokenizer.json normalize nothing but spaces (no NFC),
  // and Phi-3's "</s>" is an added token that both split out as one token.
  gemma3: [],
  phi3: [],
};

/**
 * Tokens whose control flag llama.cpp changes at load from the type the export wrote (it re-types
 * end-of-generation-looking texts as control), per tokenizer.
 */
export const RETYPED_AT_LOAD: Record<TokenizerFamily, readonly string[]> = {
  qwen3: ["</s>"],
  gemma3: ["</s>"],
  phi3: ["</s>"],
};
