// The words the page shows for a message, a tool call, the meter and a session;
// the same as the terminal's (cairn.surfaces.labels, cairn.surfaces.terminal.view).

const number = (n) => n.toLocaleString("en-US");

// "Conversation compacted · 41,210 → 9,830 tokens · llm" from a compact block's meta.
export function compactLabel(message) {
  const extra = message.meta?.extra ?? {};
  const parts = ["Conversation compacted"];
  if (Number.isInteger(extra.pre_tokens) && Number.isInteger(extra.post_tokens)) {
    parts.push(`${number(extra.pre_tokens)} → ${number(extra.post_tokens)} tokens`);
  }
  if (typeof extra.strategy === "string" && extra.strategy) parts.push(extra.strategy);
  return parts.join(" · ");
}

// "context 12,345 / 24,000 tokens · 1 compaction" from the server's reading
// (`usage.meter`, SessionUsage.meter): "~" marks the pipeline's estimate (the provider
// reported no total). Past the budget no request of that size is ever sent — the next
// one compacts first — so the meter says so instead of a number; then the background
// summary's state.
export const CONTEXT_FULL = "context full · compacts before the next request";

export function meterText(usage, prepared = null) {
  const budget = usage.inputBudget ?? usage.window;
  const compactions = usage.compactions ?? 0;
  const meter = usage.meter ?? { tokens: null, estimated: false, overBudget: false };
  let context = CONTEXT_FULL;
  if (!meter.overBudget) {
    let used = "–";
    if (meter.tokens != null) used = `${meter.estimated ? "~" : ""}${number(meter.tokens)}`;
    context = budget ? `context ${used} / ${number(budget)} tokens` : `context ${used} tokens`;
  }
  const quiet = PREPARED[prepared] ? ` · ${PREPARED[prepared]}` : "";
  return `${context} · ${compactions} ${compactions === 1 ? "compaction" : "compactions"}${quiet}`;
}

// The summary prepared in the background (summaryPrepared): a quiet word, never the hint.
const PREPARED = { preparing: "preparing summary", ready: "summary ready" };

// The text of a message's content: a string, or its text parts (an image shows as [image]).
export function messageText(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  return content.map((part) => (part.type === "text" ? part.text : "[image]")).join("");
}

// `text` on one line (line breaks as ⏎), cut to `limit` characters with "…".
export function oneLine(text, limit = 120) {
  const flat = text
    .trim()
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter(Boolean)
    .join(" ⏎ ");
  return flat.length <= limit ? flat : flat.slice(0, limit - 1) + "…";
}

export function countLabel(n, noun) {
  return `${number(n)} ${noun}${n === 1 ? "" : "s"}`;
}
