"""The frames the page sends: which exist, what each field must be, the error for others.

The hub reads every field through these, so a frame the protocol does not
allow (an unknown type, a missing field, 10,000 characters where a pane's
name goes) is a ``FrameError`` before anything touches a session or the store.
"""

from __future__ import annotations

from cairn.errors import FormatError
from cairn.messages import JSONValue

#: Frames the page may send, and the fields each needs.
CLIENT_FRAMES = (
    "list",
    "open",
    "prompt",
    "cancel",
    "answer",
    "close",
    "history",
    "complete",
    "unqueue",
    "editQueued",
    "mode",
    "points",
    "rewind",
)
#: Frames that act on a pane's session: refused for one followed read-only.
WRITING_FRAMES = frozenset(CLIENT_FRAMES) - {"list", "open", "close", "history"}
#: The longest ``@`` prefix ``complete`` takes (a path, not a document).
PREFIX_MAX = 1_024
#: The most entries one ``history`` frame may ask for, so no page can make the
#: server send a whole long session in one frame.
HISTORY_LIMIT_MAX = 1_000
#: The longest pane name: the page names its panes ``p1``, ``p2`` …, and every frame
#: about a pane carries its name back.
PANE_ID_MAX = 64


class FrameError(FormatError):
    """A frame from the page that is not one of the protocol's."""


def read_frame(frame: object) -> dict[str, JSONValue]:
    """``frame`` as a frame of one of the ``CLIENT_FRAMES`` types."""
    if not isinstance(frame, dict) or frame.get("type") not in CLIENT_FRAMES:
        kinds = ", ".join(CLIENT_FRAMES)
        raise FrameError(f"a frame is a JSON object whose type is one of {kinds}")
    return frame


def count_field(frame: dict[str, JSONValue], key: str, low: int, high: int | None = None) -> int:
    """The integer field ``key``, from ``low`` to ``high`` (``None``: no upper bound)."""
    value = frame.get(key)
    # A JSON true is a Python int too, and no count.
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise FrameError(f"{frame['type']}: {key} must be an integer {bounds}")
    return value


def prefix_field(frame: dict[str, JSONValue]) -> str:
    """What follows the ``@``: empty for a bare ``@`` (the workspace's top level)."""
    value = frame.get("prefix")
    if not isinstance(value, str) or len(value) > PREFIX_MAX:
        raise FrameError(f"complete: prefix must be a string of at most {PREFIX_MAX} characters")
    return value


def text_field(frame: dict[str, JSONValue], key: str) -> str:
    """The non-empty string field ``key`` (a pane's name no longer than ``PANE_ID_MAX``)."""
    value = frame.get(key)
    if not isinstance(value, str) or not value:
        raise FrameError(f"{frame['type']}: {key} must be a non-empty string")
    if key == "pane" and len(value) > PANE_ID_MAX:
        raise FrameError(f"{frame['type']}: pane must be at most {PANE_ID_MAX} characters")
    return value


def shown(text: str) -> str:
    """``text`` quoted for an error line, cut short: a frame may carry 10,000 characters."""
    return repr(text if len(text) <= 40 else text[:40] + "…")
