"""The server's frames every kind of pane sends: ``opened``, ``history`` and ``state``.

A pane that writes its session (``hub.Pane``) and one that follows a session
another process writes (``watch.Watch``) show the same page, so they build
these frames here, in one form.
"""

from __future__ import annotations

from cairn.agent.agent_session import SessionUsage
from cairn.agent.events import message_to_wire
from cairn.messages import JSONObject, JSONValue
from cairn.store import UiPage

__all__ = ["history_frame", "opened_frame", "state_frame", "usage_json"]


def usage_json(usage: SessionUsage) -> JSONObject:
    return {
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
) -> JSONObject:
    """The pane now shows ``session_id``: the last page of its UI view (``start`` is the
    position of its first entry, ``total`` the entries in the whole view)."""
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
    }
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
    return [message_to_wire(m) for m in page.messages]
