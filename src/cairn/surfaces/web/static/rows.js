// One row's element, from a Transcript row. Text is always set as text. The one HTML
// ever inserted is a row's `html`: an answer or a summary as the server rendered it
// from markdown and sanitized it against an allow-list (cairn.surfaces.web.markdown);
// the page's Content-Security-Policy would stop a script in it all the same.

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

// The server's sanitized HTML, or the text as text when it sent none (while it streams).
function markdown(className, html, text) {
  if (!html) return element("div", className, text);
  const node = element("div", `${className} markdown`);
  node.innerHTML = html;
  return node;
}

// The "⋯" of a prompt the user typed: its menu (Rewind to here) is the pane's, which
// listens on the list for it. Its glyph is drawn by the stylesheet, so the row's text
// stays the message's.
function promptMenu() {
  const button = element("button", "row-menu");
  button.type = "button";
  button.title = "Rewind to here…";
  button.setAttribute("aria-label", "Message actions");
  button.setAttribute("aria-haspopup", "menu");
  return button;
}

const RENDER = {
  user(row) {
    const menu = row.prompt ? [promptMenu()] : [];
    if (!row.fold) return [element("div", "bubble", row.text), ...menu];
    // Folded: its first lines and the label; opened, the whole message.
    const summary = element("summary");
    summary.append(element("div", "fold-head", row.fold.head), element("span", "fold-label", row.fold.label));
    const bubble = element("div", "bubble folded");
    bubble.append(details(row, "fold", summary, element("div", "fold-body", row.text)));
    return [bubble, ...menu];
  },
  // A !command the user ran: the command and its output, as plain text.
  shell(row) {
    const block = element("div", row.ok === false ? "shell-block failed" : "shell-block");
    block.append(element("pre", "shell-command", `!${row.command}`), element("pre", "shell-output", row.text));
    return [block];
  },
  assistant(row) {
    const parts = [];
    if (row.reasoning) {
      parts.push(
        details(row, "reasoning", element("summary", "", "Thinking"), element("div", "", row.reasoning)),
      );
    }
    const text = row.streaming ? element("div", "text", row.text) : markdown("text", row.html, row.text);
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
    return [details(row, "compact-block", summary, markdown("summary-text", row.html, row.text))];
  },
};

export function renderRow(row) {
  const node = element("div", `row ${row.kind}`);
  node.append(...RENDER[row.kind](row));
  return node;
}
