// One pane: a session's history (virtualized), the cursor and the compaction hint
// after it, permission requests, the prompt box, its mode and the context meter.
//
// The prompt box stays open while the session works: a line sent then is queued by
// the server (AgentSession.send) and shown under the list as "queued" (the
// `queueChange` event), with Edit (back into the box, withdrawn) and Cancel. `@path`
// completes workspace paths (complete.js). A prompt the user typed has a "⋯" menu:
// Rewind to here asks the server for the points (`points`), confirms — conversation
// only, or with the files when files changed after it — and the pane then shows the
// branch, the prompt back in the box (`rewound`).
//
// A paste over the server's threshold (`host.pasteRule()`, from its `config` frame)
// goes into the prompt box as its label, "[Pasted text #1 · 2,000 lines]", and the
// prompt is sent with every label still in it replaced by its whole paste.
//
// A long history comes a page at a time: `opened` holds its end, from position
// `start` on; when the view nears the top of the list and `start > 0`, the pane asks
// for the page before it (`history`) and puts it before every row, keeping the rows
// in view where they are. Live events only ever append, so one arriving while a page
// is on its way is neither lost nor repeated.

import { PathCompletion } from "./complete.js";
import { countLabel, meterText, oneLine } from "./labels.js";
import { isLargePaste, Pastes } from "./paste.js";
import { cursor, element, renderRow } from "./rows.js";
import { compactionHint } from "./tail.js";
import { Transcript } from "./transcript.js";
import { VirtualList } from "./virtual-list.js";

const DECISIONS = { allow_once: "Allow once", allow_always: "Allow always", reject: "Reject" };
const EMPTY_USAGE = { latestTotalTokens: null, window: null, inputBudget: null, compactions: 0 };
// Entries one `history` frame asks for (the server's first page is as long).
const HISTORY_LIMIT = 300;
// How near the top of the list (in heights of the view) the next page is asked for, so
// it is usually there before the user reaches the top.
const EARLIER_SCREENS = 2;
const PLACEHOLDER = "Ask Cairn, @path, !command, or /help";
// AgentSession's modes, in Shift+Tab's order (cairn.agent.events.SESSION_MODES).
const MODES = ["ask", "accept-edits", "bypass", "plan"];
const READ_ONLY_PLACEHOLDER = "Read-only: another process is writing this session";

export class Pane {
  // `host`: {send(frame), focus(pane), close(pane), guardChanged(pane), pasteRule()}
  constructor(id, host) {
    this.id = id;
    this.host = host;
    this.sessionId = null;
    this.busy = false;
    this.readOnly = false;
    this.status = "idle";
    this.usage = EMPTY_USAGE;
    this.prepared = null;
    this.compacting = false;
    this.compactionText = "";
    this.permissions = [];
    // The lines waiting for the turn to end ([{id, text}], the server's queue).
    this.queue = [];
    // The session's mode; null for a followed session (not this page's to change).
    this.mode = null;
    // The prompt a rewind is being confirmed for ({id, text}), until the server's points come.
    this.rewinding = null;
    this.transcript = new Transcript();
    // The large pastes in the prompt box, by their labels.
    this.pastes = new Pastes();
    // The history's position of the first message held (0: it holds them all).
    this.start = 0;
    // Whether a page was asked for and has not come yet.
    this.fetching = false;
    // A page could not be read: ask no more until the session is opened again.
    this.stalled = false;
    this.build();
    this.list = new VirtualList(this.scroller, {
      rows: () => this.transcript.rows,
      render: renderRow,
      laidOut: () => this.fetchEarlier(),
    });
    this.scroller.prepend(this.earlier); // before the list's spacer
    this.redraw();
  }

  build() {
    this.el = element("section", "pane");
    this.el.dataset.pane = this.id;
    const head = element("header", "pane-head");
    this.title = element("span", "title", "New chat");
    this.stop = element("button", "stop", "Stop");
    this.stop.type = "button";
    this.stop.title = "Stop the response (Esc)";
    this.stop.addEventListener("click", () => this.cancel());
    this.closer = element("button", "close", "×");
    this.closer.type = "button";
    this.closer.title = "Close this pane";
    this.closer.addEventListener("click", () => this.host.close(this));
    head.append(this.title, this.stop, this.closer);

    this.scroller = element("div", "messages");
    this.earlier = element("div", "earlier");
    this.earlier.hidden = true;
    this.tail = element("div", "tail");
    this.scroller.append(this.tail);
    // A prompt's "⋯": its menu, over the list.
    this.scroller.addEventListener("click", (event) => {
      const button = event.target.closest(".row-menu");
      const key = button?.closest(".row")?.dataset.key;
      if (key !== undefined) this.openMenu(key, button);
    });
    this.scroller.addEventListener("scroll", () => this.closeMenu());
    this.menu = element("div", "row-actions");
    this.menu.setAttribute("role", "menu");
    this.menu.hidden = true;
    const rewind = element("button", "rewind", "Rewind to here");
    rewind.type = "button";
    rewind.setAttribute("role", "menuitem");
    rewind.addEventListener("click", () => this.askRewind());
    this.menu.append(rewind);
    this.menu.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.closeMenu();
    });
    this.queueList = element("div", "queue");
    this.queueList.setAttribute("aria-label", "Queued prompts");
    this.queueList.hidden = true;
    this.dialogs = element("div", "permissions");
    this.confirmation = element("div", "confirmations");

    const composer = element("div", "composer");
    this.prompt = element("textarea", "prompt");
    this.prompt.rows = 2;
    this.prompt.placeholder = PLACEHOLDER;
    this.prompt.addEventListener("keydown", (event) => this.keydown(event));
    this.completion = new PathCompletion(this.prompt, (prefix) =>
      this.host.send({ type: "complete", pane: this.id, prefix }),
    );
    this.prompt.addEventListener("input", () => {
      this.note("");
      // An emptied box starts over: the next paste is #1 again.
      if (this.prompt.value === "") this.pastes.clear();
      this.completion.update();
    });
    this.prompt.addEventListener("blur", () => this.completion.close());
    this.prompt.addEventListener("paste", (event) => this.paste(event));
    this.noteLine = element("div", "note");
    this.modeSelect = element("select", "mode");
    this.modeSelect.title = "Mode (ask, accept edits, bypass, plan)";
    this.modeSelect.setAttribute("aria-label", "Mode");
    for (const mode of MODES) this.modeSelect.append(new Option(mode, mode));
    this.modeSelect.addEventListener("change", () =>
      this.host.send({ type: "mode", pane: this.id, mode: this.modeSelect.value }),
    );
    this.meter = element("div", "meter");
    const status = element("div", "status-line");
    status.append(this.modeSelect, this.meter);
    composer.append(this.completion.el, this.prompt, this.noteLine, status);

    this.el.append(head, this.scroller, this.menu, this.queueList, this.dialogs, this.confirmation, composer);
    this.el.addEventListener("pointerdown", () => this.host.focus(this));
    this.el.addEventListener("focusin", () => this.host.focus(this));
  }

  get working() {
    return this.busy || this.status !== "idle";
  }

  // -- frames from the server ----------------------------------------------------------

  opened(frame) {
    this.sessionId = frame.sessionId;
    this.el.dataset.session = frame.sessionId;
    this.transcript = new Transcript();
    for (const message of frame.messages) this.transcript.add(message);
    this.start = frame.start ?? 0;
    this.fetching = false;
    this.stalled = false;
    this.drawEarlier();
    this.usage = frame.usage ?? EMPTY_USAGE;
    this.busy = Boolean(frame.busy);
    // Another process writes this session: the pane follows it and cannot prompt.
    this.readOnly = Boolean(frame.readOnly);
    this.prompt.disabled = this.readOnly;
    this.prompt.placeholder = this.readOnly ? READ_ONLY_PLACEHOLDER : PLACEHOLDER;
    this.el.classList.toggle("read-only", this.readOnly);
    this.status = "idle";
    this.compacting = false;
    this.compactionText = "";
    this.permissions = [];
    this.queue = frame.queued ?? [];
    this.mode = frame.mode ?? null;
    this.rewinding = null;
    this.confirmation.replaceChildren();
    this.closeMenu();
    this.completion.close();
    this.note("");
    this.list.reset();
    this.redraw();
    this.host.guardChanged(this);
  }

  // The page just before the first message held (any other — a session this pane no
  // longer shows, or one asked for twice — is dropped).
  history(frame) {
    const { sessionId, messages, start } = frame;
    if (sessionId !== this.sessionId || !messages.length) return;
    if (start + messages.length !== this.start) return;
    this.transcript.prepend(messages);
    this.start = start;
    this.fetching = false;
    this.drawEarlier();
    this.list.changed();
  }

  // Near the top of the list with more before it: ask for the page before (the list
  // calls this after every layout, so scrolling up and a short list both lead here).
  fetchEarlier() {
    if (this.start <= 0 || this.fetching || this.stalled || this.sessionId === null) return;
    if (this.list.viewTop() > this.scroller.clientHeight * EARLIER_SCREENS) return;
    this.fetching = true;
    this.drawEarlier();
    this.host.send({ type: "history", pane: this.id, before: this.start, limit: HISTORY_LIMIT });
  }

  state(frame) {
    this.status = frame.status;
    this.busy = Boolean(frame.busy);
    if (frame.usage) this.usage = frame.usage;
    if (!this.working) {
      this.transcript.settle();
      this.permissions = [];
      this.list.changed();
    }
    this.redraw();
    this.host.guardChanged(this);
  }

  event(event) {
    const transcript = this.transcript;
    switch (event.type) {
      case "messageAdded":
        transcript.add(event.message);
        break;
      case "messageUpdated":
        transcript.streamed(event.messageId, event.content ?? "", event.reasoning ?? "");
        break;
      case "toolStarted":
        transcript.toolStarted(event.call);
        break;
      case "toolFinished":
        transcript.toolResult(event.callId, event.result);
        break;
      case "compactBlockAdded":
        transcript.add(event.block);
        break;
      case "compactionStateChange":
        this.compacting = Boolean(event.isCompacting);
        this.compactionText = "";
        break;
      case "compactionContentUpdate":
        this.compactionText = event.content ?? "";
        break;
      case "summaryPrepared":
        this.prepared = event.state ?? null;
        break;
      case "usage":
        // The meter's reading comes with the `state` frame the server sends right after.
        this.usage = { ...this.usage, ...withoutType(event) };
        break;
      case "queueChange":
        this.queue = event.prompts ?? [];
        break;
      case "modeChange":
        this.mode = event.mode;
        break;
      case "statusChange":
        this.status = event.status;
        break;
      case "notice":
        transcript.notice(event.text);
        break;
      case "error":
        transcript.error(event.code ? `${event.message} (${event.code})` : event.message);
        break;
      case "permissionRequested":
        this.permissions.push(event);
        break;
      default:
        return;
    }
    this.list.changed();
    this.redraw();
  }

  notice(text) {
    this.transcript.notice(text);
    this.list.changed();
  }

  error(text) {
    if (this.fetching) {
      // Most likely the page could not be read: asking again at once would fail again.
      this.fetching = false;
      this.stalled = true;
      this.drawEarlier();
    }
    this.transcript.error(text);
    this.list.changed();
  }

  refused(text) {
    this.note(text);
  }

  completions(frame) {
    this.completion.answered(frame.prefix, frame.paths ?? []);
  }

  // The prompts of the session, for the rewind being confirmed (`points`).
  points(frame) {
    const asked = this.rewinding;
    if (asked === null || frame.sessionId !== this.sessionId) return;
    const point = (frame.points ?? []).find((p) => p.id === asked.id);
    if (point === undefined) {
      this.rewinding = null;
      this.note("this message cannot be rewound to");
      return;
    }
    this.confirmRewind(point);
  }

  // The pane shows the branch now (`opened` came first): the prompt is back in the box.
  rewound(frame) {
    this.prompt.value = frame.prompt ?? "";
    this.pastes.clear();
    this.prompt.focus();
    const files = frame.files ?? {};
    const lines = [`rewound: a new session from ${frame.from}, which stays as it was`];
    if (files.restored?.length) lines.push(`restored: ${files.restored.join(", ")}`);
    if (files.removed?.length) lines.push(`removed: ${files.removed.join(", ")}`);
    if (files.notRestorable?.length) lines.push(`not restored: ${files.notRestorable.join("; ")}`);
    if (files.bashCommands?.length) lines.push(`commands not undone: ${files.bashCommands.join("; ")}`);
    this.notice(lines.join("\n"));
  }

  // -- what the user does ----------------------------------------------------------------

  keydown(event) {
    if (this.completion.keydown(event)) return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      this.submit();
    } else if (event.key === "Escape" && this.working) {
      event.preventDefault();
      this.cancel();
    }
  }

  // A large paste goes in as its label; its text waits in `pastes` until the prompt is sent.
  paste(event) {
    const rule = this.host.pasteRule();
    if (rule === null || this.prompt.disabled) return;
    // As the box would hold it: a textarea keeps only "\n" line breaks.
    const text = (event.clipboardData?.getData("text/plain") ?? "").replace(/\r\n?/g, "\n");
    if (!isLargePaste(text, rule)) return;
    event.preventDefault();
    const label = this.pastes.add(text, rule);
    const box = this.prompt;
    box.setRangeText(label, box.selectionStart, box.selectionEnd, "end");
    this.note("");
  }

  submit() {
    const text = this.pastes.expand(this.prompt.value);
    if (!text.trim()) return;
    if (text.trim().split(/\s+/)[0] === "/clear" && this.working) {
      this.note("/clear waits until this session is idle (Esc stops it)");
      return;
    }
    this.host.send({ type: "prompt", pane: this.id, text });
    this.prompt.value = "";
    this.pastes.clear();
    this.note("");
    this.list.scrollToEnd();
  }

  cancel() {
    this.host.send({ type: "cancel", pane: this.id });
  }

  // Edit: the line back into the box (before what it holds) and out of the queue.
  editQueued(item) {
    const box = this.prompt;
    box.value = box.value ? `${item.text}\n${box.value}` : item.text;
    box.focus();
    this.unqueue(item);
  }

  unqueue(item) {
    this.host.send({ type: "unqueue", pane: this.id, id: item.id });
  }

  openMenu(key, button) {
    const row = this.transcript.byKey.get(key);
    if (row === undefined || !row.prompt) return;
    this.menuFor = row;
    const pane = this.el.getBoundingClientRect();
    const at = button.getBoundingClientRect();
    this.menu.style.top = `${at.bottom - pane.top + 2}px`;
    this.menu.style.right = `${pane.right - at.right}px`;
    this.menu.hidden = false;
    this.menu.firstChild.focus();
  }

  closeMenu() {
    this.menu.hidden = true;
    this.menuFor = null;
  }

  // Rewind to here: which files changed after the prompt is the server's to say.
  askRewind() {
    const row = this.menuFor;
    this.closeMenu();
    if (!row) return;
    this.rewinding = { id: row.key, text: row.text };
    this.host.send({ type: "points", pane: this.id });
  }

  // The confirm step: the conversation only, or with the files when files changed after it.
  confirmRewind(point) {
    const dialog = element("div", "rewind-confirm");
    dialog.setAttribute("role", "dialog");
    dialog.dataset.point = point.id;
    dialog.append(
      element("div", "confirm-title", "Rewind to before this prompt?"),
      element("div", "confirm-prompt", oneLine(point.text, 160)),
    );
    const changed = [...(point.changedFiles ?? []), ...(point.bashCommands ?? []).map((c) => `$ ${c}`)];
    if (point.filesChanged) {
      dialog.append(element("div", "confirm-files", `changed after it: ${changed.join(", ")}`));
    }
    const buttons = element("div", "confirm-buttons");
    const choice = (className, label, action) => {
      const button = element("button", className, label);
      button.type = "button";
      button.addEventListener("click", () => {
        this.rewinding = null;
        this.confirmation.replaceChildren();
        action();
      });
      buttons.append(button);
      return button;
    };
    const rewind = (restoreFiles) =>
      this.host.send({ type: "rewind", pane: this.id, pointId: point.id, restoreFiles });
    if (point.filesChanged) {
      choice("conversation", "Conversation only", () => rewind(false));
      choice("files", "Conversation and files", () => rewind(true));
    } else {
      choice("conversation", "Rewind", () => rewind(false));
    }
    choice("cancel", "Cancel", () => this.prompt.focus());
    dialog.append(buttons);
    this.confirmation.replaceChildren(dialog);
    buttons.firstChild.focus();
  }

  answer(request, decision) {
    this.host.send({ type: "answer", pane: this.id, permissionId: request.id, decision });
    this.permissions = this.permissions.filter((other) => other !== request);
    this.redraw();
    this.prompt.focus();
  }

  // -- drawing ------------------------------------------------------------------------------

  note(text) {
    this.noteLine.textContent = text;
  }

  setTitle(text) {
    this.title.textContent = text || "New chat";
    this.title.title = this.title.textContent;
  }

  setFocused(focused) {
    this.el.classList.toggle("focused", focused);
  }

  // The line before the list while earlier messages are not here yet; as tall whatever
  // it says, so the rows in view stay put when its words change.
  drawEarlier() {
    this.el.dataset.start = String(this.start);
    this.earlier.hidden = this.start <= 0;
    if (this.fetching) this.earlier.textContent = "loading earlier messages…";
    else if (this.stalled) this.earlier.textContent = "earlier messages could not be loaded";
    else this.earlier.textContent = countLabel(this.start, "earlier message");
    this.list.schedule();
  }

  redraw() {
    this.drawTail();
    this.drawPermission();
    this.meter.textContent = meterText(this.usage, this.prepared);
    this.drawQueue();
    this.modeSelect.hidden = this.mode === null;
    if (this.mode !== null) this.modeSelect.value = this.mode;
    this.el.dataset.mode = this.mode ?? "";
    this.stop.hidden = !this.working;
    this.el.classList.toggle("busy", this.busy);
  }

  // After the list: the cursor while the session works and no response streams (a
  // streaming response ends with its own), then the hint while it compacts.
  drawTail() {
    const parts = [];
    if (this.working && this.transcript.live === null) parts.push(cursor());
    if (this.compacting) parts.push(element("span", "compaction-hint", compactionHint(this.compactionText)));
    const now = Array.from(this.tail.children, (child) => `${child.className}:${child.textContent}`);
    const wanted = parts.map((part) => `${part.className}:${part.textContent}`);
    if (now.join("\n") === wanted.join("\n")) return;
    this.tail.replaceChildren(...parts);
    this.list.schedule();
  }

  // The queued lines, under the list, each marked "queued", with Edit and Cancel.
  drawQueue() {
    const now = this.queue.map((item) => `${item.id}:${item.text}`).join("\n");
    if (this.shownQueue === now) return;
    this.shownQueue = now;
    const items = this.queue.map((item) => {
      const line = element("div", "queued");
      line.dataset.queued = item.id;
      const edit = element("button", "edit", "Edit");
      edit.type = "button";
      edit.addEventListener("click", () => this.editQueued(item));
      const cancel = element("button", "cancel", "Cancel");
      cancel.type = "button";
      cancel.addEventListener("click", () => this.unqueue(item));
      line.append(element("span", "queued-label", "queued"), element("span", "queued-text", item.text), edit, cancel);
      return line;
    });
    this.queueList.replaceChildren(...items);
    this.queueList.hidden = items.length === 0;
  }

  drawPermission() {
    const request = this.permissions[0];
    if (this.shownPermission === request) return;
    this.shownPermission = request;
    this.dialogs.replaceChildren();
    if (request === undefined) return;
    const dialog = element("div", "permission");
    dialog.setAttribute("role", "dialog");
    dialog.dataset.permission = request.id;
    dialog.append(element("div", "permission-title", `Allow ${request.tool}?`));
    if (request.summary) dialog.append(element("div", "permission-summary", request.summary));
    dialog.append(element("pre", "permission-arguments", request.arguments));
    const buttons = element("div", "permission-buttons");
    for (const decision of request.options ?? Object.keys(DECISIONS)) {
      const button = element("button", decision, DECISIONS[decision] ?? decision);
      button.type = "button";
      button.dataset.decision = decision;
      button.addEventListener("click", () => this.answer(request, decision));
      buttons.append(button);
    }
    dialog.append(buttons);
    this.dialogs.append(dialog);
    buttons.firstChild?.focus();
  }
}

function withoutType(event) {
  const { type: _type, ...rest } = event;
  return rest;
}
