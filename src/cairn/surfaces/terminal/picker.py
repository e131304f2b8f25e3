"""The session picker: ``/resume`` with no id, and ``cairn --resume`` with no id.

A modal list of the workspace's sessions, newest first; Enter picks one, Esc
picks none. ``PickerApp`` shows the same screen on its own, for the command
line, before the main app opens on the chosen session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.driver import Driver
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from cairn.agent.session import SessionInfo
from cairn.surfaces.terminal.view import session_line


class SessionPicker(ModalScreen[str | None]):
    """Dismisses with the chosen session's id, or ``None``."""

    DEFAULT_CSS = """
    SessionPicker { align: center middle; }
    SessionPicker > Vertical {
        width: 90%; height: auto; max-height: 80%; border: thick $accent; padding: 1 2;
        background: $surface;
    }
    SessionPicker OptionList { height: auto; max-height: 20; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "pick_none", "Cancel")]

    def __init__(self, sessions: Sequence[SessionInfo], *, now: float | None = None) -> None:
        super().__init__()
        self.sessions = list(sessions)
        self._now = now if now is not None else time.time()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Resume a session (Enter to open, Esc to cancel)")
            yield OptionList(
                *(
                    Option(
                        session_line(s.first_prompt, s.messages, self._now - s.last_activity), s.id
                    )
                    for s in self.sessions
                ),
                id="sessions",
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_pick_none(self) -> None:
        self.dismiss(None)


class PickerApp(App[str | None]):
    """The picker alone: its result is the chosen id (``None``: none chosen)."""

    TITLE = "cairn"

    def __init__(
        self, sessions: Sequence[SessionInfo], *, driver_class: type[Driver] | None = None
    ) -> None:
        super().__init__(driver_class=driver_class)
        self.sessions = list(sessions)

    def on_mount(self) -> None:
        self.push_screen(SessionPicker(self.sessions), self.exit)
