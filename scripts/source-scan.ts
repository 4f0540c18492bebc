/**
 * A lexer just good enough for the structure checks: it tells a TypeScript source's code from its
 * comments, string, template and regular expression literals, keeping line numbers
 * (`maskLiterals`). scripts/check-structure.ts finds imports in the code and
 * scripts/cited-files.ts file names in the comments.
 */

/** A comment of a source text: its text (with its `//` or `/*`) and where it starts in the source. */
export interface SourceComment {
  text: string;
  /** Offset of its first character in the source text. */
  start: number;
}

/**
 * `text` with comments removed (their newlines kept; each one is kept in `comments`), each '...'
 * or "..." literal replaced by `"#i"` where `strings[i]` holds its value, and template literals
 * and regular expression literals emptied (newlines kept), so that line numbers in `code` are
 * those of `text`.
 */
export function maskLiterals(text: string): { code: string; strings: string[]; comments: SourceComment[] } {
  const strings: string[] = [];
  const comments: SourceComment[] = [];
  let code = "";
  let i = 0;
  const n = text.length;
  /** For each `${` still open inside a template literal: the brace depth inside it. */
  const templateDepths: number[] = [];
  const newlinesIn = (s: string) => s.replace(/[^\n]/g, "");

  const scanTemplate = (): void => {
    // at the character after "`" or after the "}" that closes a "${"
    let body = "";
    while (i < n) {
      const c = text[i]!;
      if (c === "\\") {
        body += text.slice(i, i + 2);
        i += 2;
      } else if (c === "`") {
        i++;
        code += newlinesIn(body) + "`";
        return;
      } else if (c === "$" && text[i + 1] === "{") {
        i += 2;
        code += newlinesIn(body) + "${";
        templateDepths.push(0);
        return;
      } else {
        body += c;
        i++;
      }
    }
    code += newlinesIn(body);
  };

  while (i < n) {
    const c = text[i]!;
    const next = text[i + 1];
    if (c === "/" && next === "/") {
      const start = i;
      while (i < n && text[i] !== "\n") i++;
      comments.push({ text: text.slice(start, i), start });
    } else if (c === "/" && next === "*") {
      const end = text.indexOf("*/", i + 2);
      const stop = end === -1 ? n : end + 2;
      comments.push({ text: text.slice(i, stop), start: i });
      code += " " + newlinesIn(text.slice(i, stop));
      i = stop;
    } else if (c === '"' || c === "'") {
      let value = "";
      i++;
      while (i < n && text[i] !== c && text[i] !== "\n") {
        if (text[i] === "\\") {
          value += text[i + 1] ?? "";
          i += 2;
        } else value += text[i++];
      }
      i++;
      code += `${c}#${strings.length}${c}`;
      strings.push(value);
    } else if (c === "`") {
      i++;
      code += "`";
      scanTemplate();
    } else if (c === "{" && templateDepths.length > 0) {
      templateDepths[templateDepths.length - 1]!++;
      code += c;
      i++;
    } else if (c === "}" && templateDepths.length > 0) {
      i++;
      if (templateDepths[templateDepths.length - 1] === 0) {
        templateDepths.pop();
        code += "}";
        scanTemplate();
      } else {
        templateDepths[templateDepths.length - 1]!--;
        code += c;
      }
    } else if (c === "/" && startsRegex(code)) {
      let inClass = false;
      i++;
      while (i < n && text[i] !== "\n") {
        const r = text[i]!;
        if (r === "\\") i += 2;
        else if (r === "[") (inClass = true), i++;
        else if (r === "]") (inClass = false), i++;
        else if (r === "/" && !inClass) break;
        else i++;
      }
      i++;
      code += "/r/";
    } else {
      code += c;
      i++;
    }
  }
  return { code, strings, comments };
}

/** Whether a "/" after `code` starts a regular expression literal (not a division). */
function startsRegex(code: string): boolean {
  const before = code.trimEnd();
  if (before === "") return true;
  const last = before[before.length - 1]!;
  if ("(,=:[!&|?{};+-*%<>~^".includes(last)) return true;
  const word = /[\w$]+$/.exec(before)?.[0];
  return word !== undefined && ["return", "typeof", "case", "do", "else", "in", "of", "yield", "await", "void", "delete", "throw", "new"].includes(word);
}

/** The 1-based line of `text` that offset `index` is on. */
export function lineAt(text: string, index: number): number {
  let line = 1;
  for (let k = text.indexOf("\n"); k !== -1 && k < index; k = text.indexOf("\n", k + 1)) line++;
  return line;
}
