"""Where the app draws: Textual writes to stderr; with stderr redirected, stdout instead.

``cairn 2>cairn.log`` must still show the app on the terminal (and keep the
log for what goes wrong), so when stderr is not a terminal but stdout is,
the app uses a driver that draws on stdout. Everything else is Textual's
own choice.
"""

from __future__ import annotations

import sys
from typing import Any

from textual.app import App
from textual.driver import Driver


def driver_class() -> type[Driver] | None:
    """A driver that draws on stdout when only stdout is a terminal; ``None``: Textual's."""
    err, out = sys.__stderr__, sys.__stdout__
    if sys.platform == "win32" or out is None or not out.isatty():
        return None
    if err is not None and err.isatty():
        return None
    from textual.drivers.linux_driver import LinuxDriver

    class StdoutDriver(LinuxDriver):
        def __init__(
            self,
            app: App[Any],
            *,
            debug: bool = False,
            mouse: bool = True,
            size: tuple[int, int] | None = None,
        ) -> None:
            super().__init__(app, debug=debug, mouse=mouse, size=size)
            self._file = out

    return StdoutDriver
