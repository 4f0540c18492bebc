import type { CompiledGrammar, GrammarCompiler, StructuralTag } from "@mlc-ai/web-xgrammar";
import { ProtocolError } from "../../protocol/errors";
import type { VocabEncoding } from "../tokenizer/tokenizer";
import { ANY_OBJECT, type ReplyGrammar, type SchemaSource } from "./reply-grammar";
import { xgrammar } from "./xgrammar";

/** What the grammar engine needs of a model's tokenizer (the engine's ChatCodec provides it). */
export interface GrammarCodec {
  encode(text: string): number[];
  decode(tokenIds: number[]): string;
  readonly eosTokenIds: readonly number[];
  /** One token's raw bytes (to find the tokens that are one byte). */
  tokenPiece(tokenId: number): { bytes: number[] };
  /** Every id's piece (special tokens empty, tool-call markers kept) and how pieces spell bytes. */
  grammarVocabulary(): { pieces: string[]; encoding: VocabEncoding };
}

/** JSON is written on one line with Python's json.dumps separators, as templates render arguments. */
const JSON_SEPARATORS: [string, string] = [", ", ": "];

/**
 * A structural tag's JSON-schema contents as grammars of compact JSON: xgrammar's structural tags
 * allow any whitespace between JSON tokens, which an untrained model fills until its budget ends.
 * The EBNF comes from xgrammar's own schema converter (no whitespace, JSON_SEPARATORS). A schema
 * it cannot convert is `invalid_schema` naming its source (`tools[3] (Bash): ...`), or, for a
 * lenient source, any JSON object.
 */
async function compactTags(tag: StructuralTag, sources: readonly SchemaSource[]): Promise<StructuralTag> {
  const X = xgrammar();
  const ebnf = (schema: string) => X.Testings._jsonSchemaToEBNF(schema, false, -1, JSON_SEPARATORS, true);
  const compact = async (schema: string): Promise<string> => {
    try {
      return await ebnf(schema);
    } catch (e) {
      const source = sources.find((s) => s.schema === schema);
      if (source?.lenient) return ebnf(JSON.stringify(ANY_OBJECT));
      throw new ProtocolError("invalid_schema", `${source?.where ?? "a schema"}: the grammar engine cannot compile this schema (${reason(e)})`);
    }
  };
  const visit = async (node: unknown): Promise<unknown> => {
    if (Array.isArray(node)) return Promise.all(node.map(visit));
    if (typeof node !== "object" || node === null) return node;
    const n = node as Record<string, unknown>;
    if (n.type === "json_schema" && "json_schema" in n) return { type: "grammar", grammar: await compact(JSON.stringify(n.json_schema)) };
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(n)) out[k] = await visit(v);
    return out;
  };
  return (await visit(tag)) as StructuralTag;
}

/** Compiled grammars kept per model (each holds its token-mask cache in WebAssembly memory). */
export const GRAMMAR_CACHE_ENTRIES = 128;

/**
 * One model's grammar engine: xgrammar's TokenizerInfo over the codec's vocabulary (built once,
 * ~0.35 s for a 152k vocabulary), its compiler, and the compiled grammars by their spec, least
 * recently used dropped past {@link GRAMMAR_CACHE_ENTRIES}. Also what completions need: the id of
 * each printable ASCII character that is a token of its own.
 *
 * @example
 * const grammars = await GrammarCache.create(codec, spec.vocabSize);
 * const compiled = await grammars.compile({ kind: "json_schema", schema: '{"type": "object"}', strictMode: false });
 */
export class GrammarCache {
  private readonly compiled = new Map<string, CompiledGrammar>();

  private constructor(
    private readonly compiler: GrammarCompiler,
    readonly stopTokenIds: readonly number[],
    /** Printable ASCII (and "\n") -> the id of the token that is exactly that character. */
    readonly charTokens: ReadonlyMap<string, number>,
    /** Tokens that are one UTF-8 continuation byte (0x80-0xBF), in byte order: they finish a character left open. */
    readonly continuationTokens: readonly number[],
  ) {}

  static async create(codec: GrammarCodec, vocabSize: number): Promise<GrammarCache> {
    const X = xgrammar();
    const { pieces, encoding } = codec.grammarVocabulary();
    const info = await X.TokenizerInfo.createTokenizerInfo(pieces, encoding, false, vocabSize, [...codec.eosTokenIds]);
    const compiler = await X.GrammarCompiler.createGrammarCompiler(info, false);
    const charTokens = new Map<string, number>();
    for (const c of ["\n", ...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i))]) {
      const ids = codec.encode(c);
      if (ids.length === 1 && codec.decode(ids) === c) charTokens.set(c, ids[0]!);
    }
    const continuation = new Map<number, number>();
    pieces.forEach((p, id) => {
      // One-byte tokens: a one-character byte-level piece, or a byte-fallback "<0xAB>".
      if (p.length === 1 || /^<0x[0-9A-F]{2}>$/.test(p)) {
        const bytes = codec.tokenPiece(id).bytes;
        if (bytes.length === 1 && bytes[0]! >= 0x80 && bytes[0]! <= 0xbf && !continuation.has(bytes[0]!)) continuation.set(bytes[0]!, id);
      }
    });
    const continuationTokens = [...continuation.entries()].sort((a, b) => a[0] - b[0]).map(([, id]) => id);
    return new GrammarCache(compiler, [...codec.eosTokenIds], charTokens, continuationTokens);
  }

  async compile(grammar: ReplyGrammar): Promise<CompiledGrammar> {
    const key = JSON.stringify(grammar);
    const hit = this.compiled.get(key);
    if (hit) {
      this.compiled.delete(key);
      this.compiled.set(key, hit);
      return hit;
    }
    let compiled: CompiledGrammar;
    try {
      compiled =
        grammar.kind === "json_schema"
          ? await this.compiler.compileJSONSchema(grammar.schema, false, -1, JSON_SEPARATORS, grammar.strictMode)
          : await this.compiler.compileStructuralTag(await compactTags(grammar.tag, grammar.sources ?? []));
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      // xgrammar aborts with its reason on stderr only; schemas were checked before (schema-check.ts).
      const where = grammar.kind === "json_schema" ? grammar.where : grammar.sources?.map((s) => s.where).join(", ");
      throw new ProtocolError("invalid_schema", `${where ? `${where}: ` : ""}the grammar engine could not compile this schema (${reason(e)})`);
    }
    this.compiled.set(key, compiled);
    if (this.compiled.size > GRAMMAR_CACHE_ENTRIES) {
      const [oldest, dropped] = this.compiled.entries().next().value as [string, CompiledGrammar];
      this.compiled.delete(oldest);
      dropped.dispose();
    }
    return compiled;
  }
}

/** xgrammar's error as text ("Aborted()": its reason went to stderr). */
function reason(e: unknown): string {
  return String((e as Error)?.message ?? e);
}
