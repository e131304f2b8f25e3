// Pasted blocks in the prompt box: a paste over the threshold shows as
// "[Pasted text #1 · 2,000 lines]" and is sent whole. The threshold is not written
// here: it is cairn.agent.paste's, which the server sends in its first frame
// (`config`: {paste: {lines, chars, headLines}}), so the page can never drift from the
// rule every surface folds by. The label's wording is paste_label's; the browser
// tests check the two agree on the same texts.

const number = (n) => n.toLocaleString("en-US");

// Lines as Python's text.count("\n") + 1 counts them (none for "").
function lineCount(text) {
  if (!text) return 0;
  let lines = 1;
  for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) lines += 1;
  return lines;
}

// Characters as Python's len() counts them: code points, not UTF-16 units.
function charCount(text) {
  let chars = 0;
  for (const _ of text) chars += 1;
  return chars;
}

// Whether `text` is a paste to fold, by the server's `rule` ({lines, chars}).
export function isLargePaste(text, rule) {
  return lineCount(text) > rule.lines || charCount(text) > rule.chars;
}

// "[Pasted text #1 · 2,000 lines]", or "· 4,500 characters" for a few long lines.
export function pasteLabel(n, text, rule) {
  const lines = lineCount(text);
  const size = lines > rule.lines ? `${number(lines)} lines` : `${number(charCount(text))} characters`;
  return `[Pasted text #${n} · ${size}]`;
}

// The pastes one prompt holds, by label; the prompt's text with each label still in
// it replaced by its paste, in one pass (a paste that holds a label's words is sent
// as it is, never expanded again). A label the user deleted takes its paste with it.
export class Pastes {
  constructor() {
    this.byLabel = new Map();
  }

  add(text, rule) {
    const label = pasteLabel(this.byLabel.size + 1, text, rule);
    this.byLabel.set(label, text);
    return label;
  }

  expand(text) {
    if (this.byLabel.size === 0) return text;
    const escaped = [...this.byLabel.keys()].map((label) => label.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    return text.replace(new RegExp(escaped.join("|"), "g"), (label) => this.byLabel.get(label));
  }

  clear() {
    this.byLabel.clear();
  }
}
