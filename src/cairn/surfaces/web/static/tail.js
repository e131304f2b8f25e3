// The compaction hint's words and the tail of streamed text (seed 004, DESIGN §8).
// The same rule as cairn.surfaces.tail.stream_tail, so every surface agrees to the
// character: the text itself when it is 30 characters or fewer, else "…" and its last
// 30; the cut is made on the raw text, then newlines are spelled "\n" (two characters).

export const TAIL_CHARS = 30;
export const COMPACTING = "Compacting conversation…";

export function streamTail(text, limit = TAIL_CHARS) {
  const chars = Array.from(text); // code points, as Python's len() counts them
  const shown = chars.length <= limit ? text : "…" + chars.slice(-limit).join("");
  return shown.replaceAll("\r\n", "\n").replaceAll("\n", "\\n");
}

// "Compacting conversation…", then a space and the tail once the fork streamed text.
export function compactionHint(streamed) {
  return streamed ? `${COMPACTING} ${streamTail(streamed)}` : COMPACTING;
}
