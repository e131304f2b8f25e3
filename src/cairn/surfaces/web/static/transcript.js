// A pane's rows: every message and compact block of its session, in order, across any
// number of compactions (old rows are never removed; a block is appended and new
// messages follow). Events are folded in here, and earlier pages of the history put
// before every row; nothing here touches the DOM.
//
// A row is {key, kind, text, version, …}: kind is user | shell | assistant | tool |
// notice | error | compact (shell: a !command and its output; a user row's `prompt`
// says the user typed it, so it can be rewound to). `version` grows with every change so the list redraws a row once.
// An answer or a compact block may carry `html`, its text as the server rendered and
// sanitized it (markdown); a long user message carries `fold` ({label, head}), how the
// server's paste rule folds it. The page works out neither itself.

import { compactLabel, messageText, oneLine } from "./labels.js";

let counter = 0;

// A message comes in the transcript's form in `opened` (tool_call_id, tool_calls,
// meta.tool_error) and in the events' camelCase form (toolCallId, toolCalls, toolError).
function toolCallId(message) {
  return message.tool_call_id ?? message.toolCallId ?? "";
}

export class Transcript {
  constructor() {
    this.rows = [];
    this.byKey = new Map();
    this.live = null; // the response streaming now, whose text ends with the cursor
  }

  has(key) {
    return this.byKey.has(key);
  }

  append(row) {
    row.version = 0;
    this.rows.push(row);
    this.byKey.set(row.key, row);
    return row;
  }

  change(row, fields) {
    Object.assign(row, fields);
    row.version += 1;
    return row;
  }

  remove(row) {
    const index = this.rows.lastIndexOf(row);
    if (index >= 0) this.rows.splice(index, 1);
    this.byKey.delete(row.key);
  }

  notice(text) {
    return this.append({ key: `notice-${++counter}`, kind: "notice", text });
  }

  error(text) {
    return this.append({ key: `error-${++counter}`, kind: "error", text });
  }

  // A message the session added (in the history, or live); a repeat updates its row.
  add(message) {
    const meta = message.meta ?? {};
    if (meta.hidden) return;
    const kind = meta.kind ?? "chat";
    const text = messageText(message.content);
    if (kind === "compact_summary") {
      if (!this.has(message.id)) {
        const label = compactLabel(message);
        this.append({ key: message.id, kind: "compact", text, label, html: message.html ?? null });
      }
      return;
    }
    if (kind === "error") {
      if (!this.has(message.id)) this.append({ key: message.id, kind: "error", text });
      return;
    }
    if (message.role === "tool") {
      this.toolResult(toolCallId(message), message);
      return;
    }
    if (message.role === "assistant") this.assistant(message, text);
    else if (message.role === "user" && message.shell && !this.has(message.id)) {
      // A !command's message: the server split it into command and output.
      const { command, output, ok } = message.shell;
      this.append({ key: message.id, kind: "shell", command, text: output, ok });
    } else if (message.role === "user" && !this.has(message.id)) {
      // A prompt the user typed (not one the host wrote) can be rewound to.
      const prompt = !meta.synthetic;
      this.append({ key: message.id, kind: "user", text, fold: message.fold ?? null, open: false, prompt });
    }
    for (const call of message.tool_calls ?? message.toolCalls ?? []) this.toolStarted(call);
  }

  // An earlier page of the history (the messages just before the first one shown):
  // folded on its own, then put before every row. The one row both can hold is a tool
  // call whose result began the later page: it stays where it is and takes the call's
  // name and arguments, which only the earlier page knew.
  prepend(messages) {
    const earlier = new Transcript();
    for (const message of messages) earlier.add(message);
    const rows = [];
    for (const row of earlier.rows) {
      const shown = this.byKey.get(row.key);
      if (shown === undefined) {
        rows.push(row);
        this.byKey.set(row.key, row);
      } else if (row.kind === "tool" && !shown.text) {
        this.change(shown, { name: row.name, text: row.text });
      }
    }
    this.rows = rows.concat(this.rows);
  }

  // A streaming response so far (accumulated): one row per message id, updated in place.
  streamed(messageId, content, reasoning = "") {
    const row = this.byKey.get(messageId);
    if (row === undefined) {
      if (content || reasoning) {
        const fields = { kind: "assistant", text: content, reasoning, streaming: true };
        this.live = this.append({ key: messageId, ...fields });
      }
    } else if (row.text !== content || row.reasoning !== reasoning) {
      this.change(row, { text: content, reasoning });
    }
  }

  assistant(message, text) {
    const reasoning = message.reasoning ?? "";
    const html = message.html ?? null;
    const row = this.byKey.get(message.id);
    if (row === this.live) this.live = null;
    if (row !== undefined) {
      // The final text replaces what streamed; an answer of only tool calls goes.
      if (text || reasoning) this.change(row, { text, reasoning, html, streaming: false });
      else this.remove(row);
    } else if (text || reasoning) {
      this.append({ key: message.id, kind: "assistant", text, reasoning, html, streaming: false });
    }
  }

  toolStarted(call) {
    const key = `tool-${call.id}`;
    if (!this.has(key)) {
      this.append({
        key,
        kind: "tool",
        name: call.name,
        text: oneLine(call.arguments ?? "", 200),
        result: null,
        failed: false,
        open: false,
      });
    }
  }

  toolResult(callId, result) {
    const key = `tool-${callId}`;
    let row = this.byKey.get(key);
    if (row === undefined) {
      row = this.append({ key, kind: "tool", name: result.name ?? "tool", text: "", open: false });
    }
    const text = messageText(result.content);
    const failed = Boolean(result.meta?.tool_error ?? result.meta?.toolError);
    if (row.result !== text || row.failed !== failed) this.change(row, { result: text, failed });
  }

  // The session went idle: nothing streams any more (a cancel may end a response unsent).
  settle() {
    if (this.live !== null) this.change(this.live, { streaming: false });
    this.live = null;
  }
}
