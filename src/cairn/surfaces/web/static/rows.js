// One row's element, from a Transcript row. Text is always set as text, never as HTML.

export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function cursor() {
  return element("span", "cursor");
}

// A <details> that remembers, on its row, whether the user opened it.
function details(row, className, summary, ...body) {
  const node = element("details", className);
  node.open = Boolean(row.open);
  node.addEventListener("toggle", () => {
    row.open = node.open;
  });
  node.append(summary, ...body);
  return node;
}

const RENDER = {
  user(row) {
    return [element("div", "bubble", row.text)];
  },
  assistant(row) {
    const parts = [];
    if (row.reasoning) {
      parts.push(
        details(row, "reasoning", element("summary", "", "Thinking"), element("div", "", row.reasoning)),
      );
    }
    const text = element("div", "text", row.text);
    if (row.streaming) text.append(cursor());
    parts.push(text);
    return parts;
  },
  tool(row) {
    const summary = element("summary");
    summary.append(element("span", "tool-name", row.name), " ", element("span", "tool-args", row.text));
    if (row.result == null) summary.append(element("span", "tool-status", "running…"));
    else if (row.failed) summary.append(element("span", "tool-status", "failed"));
    const result = element("pre", "tool-result", row.result ?? "");
    return [details(row, row.failed ? "tool failed" : "tool", summary, result)];
  },
  notice(row) {
    return [element("div", "text", row.text)];
  },
  error(row) {
    return [element("div", "text", row.text)];
  },
  compact(row) {
    const summary = element("summary", "", row.label);
    return [details(row, "compact-block", summary, element("div", "summary-text", row.text))];
  },
};

export function renderRow(row) {
  const node = element("div", `row ${row.kind}`);
  node.append(...RENDER[row.kind](row));
  return node;
}
