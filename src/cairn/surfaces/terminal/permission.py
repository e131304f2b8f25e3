"""The permission question as a modal screen: allow once, allow always, or deny.

It dismisses with the decision; the app answers the session with it. Esc
denies: a question left unanswered must not let the tool run. A line under
the buttons names the keys (``y allow once · a allow always · n deny · Esc
deny``): the deny keys always, an allow key only when the request offers
it (a key for an allowance not offered does nothing).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static
from textual.widgets.button import ButtonVariant

from cairn.agent import PermissionDecision, PermissionRequested
from cairn.surfaces.terminal.view import one_line

#: Button id → the decision it answers.
CHOICES: dict[str, tuple[str, PermissionDecision]] = {
    "allow-once": ("Allow once", "allow_once"),
    "allow-always": ("Allow always", "allow_always"),
    "deny": ("Deny", "reject"),
}
#: The keys the screen binds, as the hint line names them: (key, decision, what it does).
KEYS: tuple[tuple[str, PermissionDecision, str], ...] = (
    ("y", "allow_once", "allow once"),
    ("a", "allow_always", "allow always"),
    ("n", "reject", "deny"),
    ("Esc", "reject", "deny"),
)


def key_hints(options: tuple[str, ...]) -> str:
    """``y allow once · a allow always · n deny · Esc deny``: the keys that answer now.

    The deny keys are always named: a question can always be refused.
    """
    return " · ".join(
        f"{key} {what}"
        for key, decision, what in KEYS
        if decision in options or decision == "reject"
    )


class PermissionScreen(ModalScreen[PermissionDecision]):
    """``<tool> wants to run: <summary>`` and three buttons."""

    DEFAULT_CSS = """
    PermissionScreen { align: center middle; }
    PermissionScreen > Vertical {
        width: 80%; height: auto; border: thick $warning; padding: 1 2; background: $surface;
    }
    PermissionScreen Horizontal { height: auto; margin-top: 1; }
    PermissionScreen Button { margin-right: 2; }
    PermissionScreen #keys { margin-top: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "decide('reject')", "Deny"),
        Binding("y", "decide('allow_once')", "Allow once", show=False),
        Binding("a", "decide('allow_always')", "Allow always", show=False),
        Binding("n", "decide('reject')", "Deny", show=False),
    ]

    def __init__(self, request: PermissionRequested) -> None:
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        request = self.request
        with Vertical():
            yield Label(f"[b]{request.tool}[/b] needs your permission", id="question")
            yield Static(one_line(request.summary or request.arguments, 400), markup=False)
            with Horizontal():
                for button_id, (label, decision) in CHOICES.items():
                    if decision in request.options:
                        yield Button(label, id=button_id, variant=_variant(decision))
            yield Static(key_hints(request.options), id="keys", markup=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id in CHOICES:
            self.dismiss(CHOICES[event.button.id][1])

    def action_decide(self, decision: PermissionDecision) -> None:
        # A deny stands even if not offered: a refused question must not run the tool.
        if decision in self.request.options or decision == "reject":
            self.dismiss(decision)


def _variant(decision: str) -> ButtonVariant:
    variants: dict[str, ButtonVariant] = {"allow_once": "primary", "allow_always": "success"}
    return variants.get(decision, "error")
