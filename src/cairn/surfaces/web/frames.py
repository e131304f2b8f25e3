"""The server's frames every kind of pane sends: ``opened``, ``history``, ``state``, ``event``.

A pane that writes its session (``hub.Pane``) and one that follows a session
another process writes (``watch.Watch``) show the same page, so they build
these frames here, in one form.

A message goes out in its one wire form (``message_to_wire``) with what the
page needs to show it beside it, worked out here so that the page holds no
rule of its own:

- ``html``: an answer's or a compaction summary's text as sanitized markdown
  (``markdown.render_markdown``), the only HTML the page ever inserts;
- ``fold``: for a user message as long as a paste to fold
  (``cairn.agent.paste``, the rule every surface shares), its ``label`` and
  the ``head`` (first lines) it shows while folded;
- ``shell``: for the message a ``!command`` added (``meta.extra.shell``), its
  ``command``, ``output`` and ``ok``, which the page shows as a block of
  plain text, never as the user's bubble.

``usage_json`` carries the meter's reading (``SessionUsage.meter``), so the
page never shows a number over the budget.

``config_frame`` is the first frame on every socket: the paste rule's numbers,
which the prompt box folds a paste by.
"""

from __future__ import annotations

from cairn.agent import (
    FOLDED_HEAD_LINES,
    PASTE_CHARS,
    PASTE_LINES,
    CompactBlockAdded,
    Event,
    MessageAdded,
    QueuedPrompt,
    SessionUsage,
    event_to_wire,
    is_large_paste,
    message_to_wire,
    paste_label,
)
from cairn.messages import KIND_CHAT, KIND_COMPACT_SUMMARY, JSONObject, JSONValue, Message
from cairn.store import UiPage
from cairn.surfaces.web.markdown import render_markdown

__all__ = [
    "config_frame",
    "event_frame",
    "history_frame",
    "message_json",
    "opened_frame",
    "queued_json",
    "shell_json",
    "state_frame",
    "usage_json",
]


def config_frame() -> JSONObject:
    """What the page needs before anything else: the paste rule's numbers (never a copy
    in the page's scripts, which could drift from ``cairn.agent.paste``)."""
    return {
        "type": "config",
        "paste": {"lines": PASTE_LINES, "chars": PASTE_CHARS, "headLines": FOLDED_HEAD_LINES},
    }


def message_json(message: Message) -> JSONObject:
    """``message`` in its wire form, with its ``html`` or its ``fold`` when it has one."""
    wire = message_to_wire(message)
    kind = message.meta.kind
    text = message.text
    shell = shell_json(message)
    if shell is not None:
        wire["shell"] = shell
    elif text and (
        kind == KIND_COMPACT_SUMMARY or (kind == KIND_CHAT and message.role == "assistant")
    ):
        wire["html"] = render_markdown(text)
    elif kind == KIND_CHAT and message.role == "user" and is_large_paste(text):
        wire["fold"] = {
            "label": paste_label(1, text),
            "head": "\n".join(text.split("\n")[:FOLDED_HEAD_LINES]),
        }
    return wire


#: Around a ``!command``'s output in its message (the ``shell_command`` prompt).
_OUTPUT_OPEN = "<bash-output>\n"
_OUTPUT_CLOSE = "\n</bash-output>"


def shell_json(message: Message) -> JSONObject | None:
    """A ``!command``'s message as the page shows it: ``{command, output, ok}``; ``None``
    for any other message.

    The output is read back from between the prompt's ``<bash-output>`` tags
    (the first opening, the last closing: an output may hold the tags
    itself); a text without them is shown whole rather than lost.
    """
    extra = message.meta.extra
    command = extra.get("shell") if message.role == "user" else None
    if not isinstance(command, str):
        return None
    text = message.text
    start, end = text.find(_OUTPUT_OPEN), text.rfind(_OUTPUT_CLOSE)
    output = text[start + len(_OUTPUT_OPEN) : end] if 0 <= start <= end else text
    ok = extra.get("ok")
    return {"command": command, "output": output, "ok": ok if isinstance(ok, bool) else None}


def queued_json(queued: tuple[QueuedPrompt, ...]) -> list[JSONValue]:
    """The lines waiting for the turn to end, as ``queueChange`` carries them."""
    return [{"id": item.id, "text": item.text} for item in queued]


def event_frame(pane_id: str, event: Event) -> JSONObject:
    """One of the session's events for the pane, a message in it as ``message_json`` has it."""
    wire = event_to_wire(event)
    if isinstance(event, MessageAdded):
        wire["message"] = message_json(event.message)
    elif isinstance(event, CompactBlockAdded):
        wire["block"] = message_json(event.block)
    return {"type": "event", "pane": pane_id, "event": wire}


def usage_json(usage: SessionUsage) -> JSONObject:
    """The meter's figures; ``meter`` is what the page shows (``SessionUsage.meter``: never
    a number over the budget, ``overBudget`` instead)."""
    meter = usage.meter
    return {
        "meter": {
            "tokens": meter.tokens,
            "estimated": meter.estimated,
            "overBudget": meter.over_budget,
        },
        "latestTotalTokens": usage.latest_total_tokens,
        "window": usage.window,
        "inputBudget": usage.input_budget,
        "compactions": usage.compactions,
        "projectedTokens": usage.projected_tokens,
    }


def opened_frame(
    pane_id: str,
    session_id: str,
    page: UiPage,
    usage: SessionUsage,
    *,
    status: str,
    busy: bool,
    read_only: bool = False,
    mode: str | None = None,
    queued: tuple[QueuedPrompt, ...] = (),
) -> JSONObject:
    """The pane now shows ``session_id``: the last page of its UI view (``start`` is the
    position of its first entry, ``total`` the entries in the whole view), with the
    session's ``mode`` (none for a followed session: not this page's to change) and the
    lines ``queued`` for the end of its turn."""
    frame: JSONObject = {
        "type": "opened",
        "pane": pane_id,
        "sessionId": session_id,
        "messages": _messages(page),
        "start": page.start,
        "total": page.total,
        "usage": usage_json(usage),
        "status": status,
        "busy": busy,
        "queued": queued_json(queued),
    }
    if mode is not None:
        frame["mode"] = mode
    if read_only:
        frame["readOnly"] = True
    return frame


def state_frame(pane_id: str, usage: SessionUsage, *, status: str, busy: bool) -> JSONObject:
    """The pane's guard bit and its meter, after either changed."""
    return {
        "type": "state",
        "pane": pane_id,
        "status": status,
        "busy": busy,
        "usage": usage_json(usage),
    }


def history_frame(pane_id: str, session_id: str, page: UiPage) -> JSONObject:
    """A page before the entries the pane holds, as the user scrolled up to it."""
    return {
        "type": "history",
        "pane": pane_id,
        "sessionId": session_id,
        "messages": _messages(page),
        "start": page.start,
        "total": page.total,
    }


def _messages(page: UiPage) -> list[JSONValue]:
    return [message_json(m) for m in page.messages]
