"""The pickers: sessions (``/resume``, ``cairn --resume`` with no id) and rewind points.

``SessionPicker`` is a modal list of the workspace's sessions, newest first;
Enter picks one, Esc picks none. ``PickerApp`` shows the same screen on its
own, for the command line, before the main app opens on the chosen session.

``RewindPicker`` (Esc Esc on an empty idle prompt, ``/rewind``) lists the
prompts the user typed, the latest first, each with whether files changed
since; ``RestoreChoice`` then asks, for a prompt after which files changed,
whether to put them back too (``conversation only`` or ``conversation and
files``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.driver import Driver
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from cairn.agent import PromptPoint, SessionInfo
from cairn.surfaces.terminal.view import point_line, session_line


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


class RewindPicker(ModalScreen[PromptPoint | None]):
    """Dismisses with the prompt to go back to (the branch starts just before it), or ``None``."""

    DEFAULT_CSS = SessionPicker.DEFAULT_CSS.replace("SessionPicker", "RewindPicker")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "pick_none", "Cancel")]

    def __init__(self, points: Sequence[PromptPoint], *, now: float | None = None) -> None:
        super().__init__()
        self.points = list(points)
        self._now = now if now is not None else time.time()

    def compose(self) -> ComposeResult:
        # The latest first, as the sessions are: the prompt a person rewinds to is
        # most often one of the last few. The numbers are /rewind's (oldest is 1).
        options = [
            Option(point_line(n, point, self._now - _seconds(point.ts)), point.id)
            for n, point in reversed(list(enumerate(self.points, 1)))
        ]
        with Vertical():
            yield Label("Rewind to before a prompt (Enter to choose, Esc to cancel)")
            yield OptionList(*options, id="points")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(next(p for p in self.points if p.id == event.option.id))

    def action_pick_none(self) -> None:
        self.dismiss(None)


def _seconds(ts: str) -> float:
    """An ISO 8601 time as seconds since the epoch (now, if it cannot be read)."""
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return time.time()


#: ``RestoreChoice``'s options: id → (what it says, whether the files are put back).
RESTORE_OPTIONS: dict[str, tuple[str, bool]] = {
    "conversation": ("conversation only", False),
    "files": ("conversation and files", True),
}


class RestoreChoice(ModalScreen[bool | None]):
    """Files changed after the prompt: dismisses with whether to put them back, or ``None``."""

    DEFAULT_CSS = SessionPicker.DEFAULT_CSS.replace("SessionPicker", "RestoreChoice")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "pick_none", "Cancel")]

    def __init__(self, point: PromptPoint) -> None:
        super().__init__()
        self.point = point

    def compose(self) -> ComposeResult:
        point = self.point
        changed = [str(path) for path in point.changed_files]
        changed += [f"ran by bash (not restorable): {c}" for c in point.bash_commands]
        with Vertical():
            yield Label("Files changed after this prompt: rewind the conversation only, or both?")
            yield Label("\n".join(changed), id="changed", markup=False)
            yield OptionList(
                *(Option(label, key) for key, (label, _) in RESTORE_OPTIONS.items()),
                id="restore",
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(RESTORE_OPTIONS[event.option.id or "conversation"][1])

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
