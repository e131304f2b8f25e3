// `@path` completion in a prompt box: typing `@` and a prefix asks the server for the
// workspace paths it may name (`complete {pane, prefix}` → `completions {pane, prefix,
// paths}`, AgentSession.complete_path: the page lists no folder itself) and shows them
// in a small list above the box. Tab, Enter or a click accepts one; Esc closes the list;
// ↑/↓ choose. A folder ends with "/", and accepting one asks again, one level deeper.
// Attaching the file is the server's, when the prompt is sent.

import { element } from "./rows.js";

// The `@` word the caret ends, from the start of the box or after a space: its prefix
// (what follows the `@`), or null when the caret is elsewhere.
export function atPrefix(text, caret) {
  const match = /(?:^|\s)@([^\s@]*)$/.exec(text.slice(0, caret));
  return match ? match[1] : null;
}

export class PathCompletion {
  // `box`: the textarea; `ask(prefix)`: send the `complete` frame.
  constructor(box, ask) {
    this.box = box;
    this.ask = ask;
    // The prefix asked for last: an answer for an older one is stale and dropped.
    this.asked = null;
    this.paths = [];
    this.chosen = 0;
    this.el = element("ul", "completions");
    this.el.setAttribute("role", "listbox");
    this.el.setAttribute("aria-label", "Workspace paths");
    this.el.hidden = true;
    // A click must not take the focus from the box first (the list would close).
    this.el.addEventListener("mousedown", (event) => event.preventDefault());
  }

  get open() {
    return !this.el.hidden;
  }

  // After every change to the box: ask for the `@` word the caret ends, if any.
  update() {
    const box = this.box;
    const prefix = box.selectionStart === box.selectionEnd ? atPrefix(box.value, box.selectionStart) : null;
    if (prefix === null) {
      this.close();
      return;
    }
    if (prefix === this.asked && this.open) return;
    this.asked = prefix;
    this.ask(prefix);
  }

  // The server's answer: shown if the box still ends in that prefix.
  answered(prefix, paths) {
    if (prefix !== this.asked || atPrefix(this.box.value, this.box.selectionStart) !== prefix) return;
    this.paths = paths;
    this.chosen = 0;
    this.draw();
  }

  close() {
    this.asked = null;
    this.paths = [];
    this.el.hidden = true;
    this.el.replaceChildren();
  }

  // A key in the box while the list is open: whether the list took it.
  keydown(event) {
    if (!this.open) return false;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const step = event.key === "ArrowDown" ? 1 : -1;
      this.chosen = (this.chosen + step + this.paths.length) % this.paths.length;
      this.draw();
    } else if ((event.key === "Tab" || event.key === "Enter") && !event.shiftKey && !event.isComposing) {
      this.accept(this.paths[this.chosen]);
    } else if (event.key === "Escape") {
      this.close();
    } else {
      return false;
    }
    event.preventDefault();
    return true;
  }

  // `path` in place of the prefix; a file is followed by a space (done), a folder asks on.
  accept(path) {
    const box = this.box;
    const end = box.selectionStart;
    const prefix = atPrefix(box.value, end);
    if (prefix === null) {
      this.close();
      return;
    }
    const folder = path.endsWith("/");
    box.setRangeText(folder ? path : `${path} `, end - prefix.length, end, "end");
    this.close();
    box.focus();
    if (folder) this.update();
  }

  draw() {
    if (!this.paths.length) {
      this.el.hidden = true;
      this.el.replaceChildren();
      return;
    }
    const items = this.paths.map((path, n) => {
      const item = element("li", n === this.chosen ? "completion chosen" : "completion", path);
      item.setAttribute("role", "option");
      item.setAttribute("aria-selected", String(n === this.chosen));
      item.dataset.path = path;
      item.addEventListener("click", () => this.accept(path));
      return item;
    });
    this.el.replaceChildren(...items);
    this.el.hidden = false;
    items[this.chosen]?.scrollIntoView({ block: "nearest" });
  }
}
