"""The browser UI: ``cairn web`` — sessions side by side, the inline compaction hint (DESIGN §8).

A starlette app on 127.0.0.1 serves a static page (plain ES modules in
``static/``, no build step) that talks to the server over one WebSocket,
which needs the random token ``cairn web`` prints in the address's fragment
(no cookie; ``server`` says why): each pane of the page is its own session,
and the sessions' events reach it in their one wire form (``event_to_wire``),
answers and summaries beside it as sanitized markdown (``markdown``). Needs the
``web`` extra (starlette, uvicorn, websockets; markdown-it-py, pygments, nh3).
"""

from typing import TYPE_CHECKING

from cairn.surfaces.web.hub import Hub
from cairn.surfaces.web.panes import WebSetup
from cairn.surfaces.web.run import WebArgs, run_web

if TYPE_CHECKING:
    from cairn.surfaces.web.server import create_app

__all__ = ["Hub", "WebArgs", "WebSetup", "create_app", "run_web"]


def __getattr__(name: str) -> object:
    # create_app needs starlette (the web extra); importing the package must not.
    if name == "create_app":
        from cairn.surfaces.web.server import create_app

        return create_app
    raise AttributeError(name)
