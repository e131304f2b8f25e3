// The page: the token, the one WebSocket, the sidebar of sessions and the panes side
// by side. The focused pane (the one last clicked) is where the sidebar and New chat act.
// On a narrow screen the sidebar is folded away behind a toggle (style.css decides
// when), so the panes get the width; choosing a session or New chat folds it again.

import { countLabel, oneLine } from "./labels.js";
import { element } from "./rows.js";
import { Connection } from "./ws.js";
import { Pane } from "./pane.js";

// The token comes in the address's fragment (#token=…), which no request carries. It
// leaves the address bar at once and lives on in this tab's sessionStorage, so a reload
// still works; only the socket's handshake presents it. Never a cookie: cookies are not
// bound to a port, so every other server on 127.0.0.1 would receive it.
const TOKEN_KEY = "cairn.token";
const given = new URLSearchParams(location.hash.slice(1)).get("token");
// Only a token's characters: anything else would make the WebSocket constructor throw.
if (given && /^[\w-]+$/.test(given)) sessionStorage.setItem(TOKEN_KEY, given);
history.replaceState(null, "", "/");
const token = sessionStorage.getItem(TOKEN_KEY) ?? "";
// The printed address pasted into this tab again (a restarted server's new token, say)
// only changes the fragment: load the page again with it.
window.addEventListener("hashchange", () => {
  const again = new URLSearchParams(location.hash.slice(1)).get("token");
  if (!again || !/^[\w-]+$/.test(again)) return;
  sessionStorage.setItem(TOKEN_KEY, again);
  history.replaceState(null, "", "/");
  location.reload();
});

const sidebar = document.getElementById("sessions");
const newChat = document.getElementById("new-chat");
const split = document.getElementById("split");
const main = document.getElementById("panes");
const banner = document.getElementById("connection");
const toggle = document.getElementById("sidebar-toggle");

const panes = new Map();
let focused = null;
let sessions = [];
let next = 1;
// The server's paste rule ({lines, chars, headLines}: its `config` frame); until it
// comes, a paste goes into the prompt box as it is.
let pasteRule = null;

const host = {
  send: (frame) => connection.send(frame),
  focus: (pane) => focus(pane),
  close: (pane) => closePane(pane),
  guardChanged: () => drawControls(),
  pasteRule: () => pasteRule,
};

// The sidebar shown over the panes, or folded away (only a narrow screen folds it).
function showSidebar(shown) {
  document.body.classList.toggle("sidebar-open", shown);
  toggle.setAttribute("aria-expanded", String(shown));
}

function addPane() {
  const pane = new Pane(`p${next++}`, host);
  panes.set(pane.id, pane);
  main.append(pane.el);
  if (connection.ready) connection.send({ type: "open", pane: pane.id, sessionId: null });
  focus(pane);
  drawControls();
  return pane;
}

function closePane(pane) {
  if (panes.size === 1) return;
  connection.send({ type: "close", pane: pane.id });
  panes.delete(pane.id);
  pane.el.remove();
  if (focused === pane) focus([...panes.values()].at(-1));
  drawControls();
  drawSessions();
}

function focus(pane) {
  if (focused === pane) return;
  focused = pane;
  for (const other of panes.values()) other.setFocused(other === pane);
  drawControls();
  drawSessions();
}

// A session from the sidebar, into the focused pane — unless that pane works (the
// guard), or the session is open in another pane already (then that pane is focused).
function openSession(sessionId) {
  const holder = [...panes.values()].find((pane) => pane.sessionId === sessionId);
  if (holder !== undefined) {
    focus(holder);
    return;
  }
  if (focused.working) return;
  connection.send({ type: "open", pane: focused.id, sessionId });
  showSidebar(false);
}

function drawControls() {
  newChat.disabled = focused === null || focused.working;
  for (const pane of panes.values()) pane.closer.hidden = panes.size === 1;
  sidebar.classList.toggle("locked", focused?.working ?? false);
}

function drawSessions() {
  const open = new Map([...panes.values()].map((pane) => [pane.sessionId, pane]));
  // A session nobody wrote in is listed only while one of these panes shows it.
  const items = sessions
    .filter((session) => session.messages > 0 || open.has(session.id))
    .sort((a, b) => b.lastActivity - a.lastActivity)
    .map((session) => {
      const item = element("li");
      const button = element("button", "session");
      button.type = "button";
      button.dataset.session = session.id;
      button.title = session.firstPrompt || session.id;
      button.classList.toggle("open", open.has(session.id));
      button.classList.toggle("current", open.get(session.id) === focused);
      button.append(
        element("span", "first-prompt", oneLine(session.firstPrompt, 80) || "(no prompt yet)"),
        element("span", "count", countLabel(session.messages, "message")),
      );
      button.addEventListener("click", () => openSession(session.id));
      item.append(button);
      return item;
    });
  sidebar.replaceChildren(...items);
  for (const pane of panes.values()) {
    const session = sessions.find((s) => s.id === pane.sessionId);
    pane.setTitle(session ? oneLine(session.firstPrompt, 80) : "");
  }
}

function onFrame(frame) {
  if (frame.type === "config") {
    pasteRule = frame.paste ?? null;
    return;
  }
  if (frame.type === "sessions") {
    sessions = frame.sessions;
    drawSessions();
    return;
  }
  const pane = panes.get(frame.pane) ?? (frame.pane == null ? focused : undefined);
  if (pane === undefined) return; // a pane this page closed
  switch (frame.type) {
    case "opened":
      pane.opened(frame);
      drawSessions();
      break;
    case "state":
      pane.state(frame);
      break;
    case "event":
      pane.event(frame.event);
      break;
    case "history":
      pane.history(frame);
      break;
    case "notice":
      pane.notice(frame.text);
      break;
    case "completions":
      pane.completions(frame);
      break;
    case "points":
      pane.points(frame);
      break;
    case "rewound":
      pane.rewound(frame);
      break;
    case "refused":
      pane.refused(frame.text);
      break;
    case "error":
      pane.error(frame.text);
      break;
  }
}

const scheme = location.protocol === "https:" ? "wss" : "ws";
const connection = new Connection(
  `${scheme}://${location.host}/ws`,
  ["cairn.v1", `cairn.token.${token}`],
  {
    onFrame,
    // The sessions, and every pane's session (a new one for a new pane; its own again
    // after a drop).
    onOpen() {
      banner.hidden = true;
      connection.send({ type: "list" });
      for (const pane of panes.values()) {
        connection.send({ type: "open", pane: pane.id, sessionId: pane.sessionId });
      }
    },
    onDown() {
      banner.textContent = token
        ? "Disconnected from cairn web — reconnecting…"
        : "No token in this tab: open the address `cairn web` printed";
      banner.hidden = false;
    },
  },
);

newChat.addEventListener("click", () => {
  if (focused.working) return;
  connection.send({ type: "open", pane: focused.id, sessionId: null });
  showSidebar(false);
  focused.prompt.focus();
});
split.addEventListener("click", () => {
  showSidebar(false);
  addPane().prompt.focus();
});
toggle.addEventListener("click", () => showSidebar(!document.body.classList.contains("sidebar-open")));
// A touch on the panes, or Escape, folds the sidebar away again.
main.addEventListener("pointerdown", () => showSidebar(false));
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) showSidebar(false);
});

addPane().prompt.focus();
