"""The terminal app's widgets: the message list, one widget per entry, and the input box.

``MessageList.sync`` reconciles the mounted widgets with the entries
``view.window`` picks: it removes what fell out of the window, mounts what
came in (in order) and redraws an entry only when its ``version`` moved, so a
streaming response redraws one widget, not thirty. Above the entries, a line
says what comes before them; entries mounted or removed above the view leave
what is on the screen where it was, and scrolling to the top of the list
asks the app for more (``MessageList.ReachedTop``).

``PromptInput`` is a multi-line box: Enter sends, Ctrl+J (or a line ending in
``\\`` then Enter, since a terminal cannot tell Shift+Enter from Enter) starts
a new line, a paste keeps its newlines, and it grows up to ``PROMPT_LINES``
lines before it scrolls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.markdown import Markdown
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message as TextualMessage
from textual.widget import Widget
from textual.widgets import Collapsible, Static, TextArea

from cairn.surfaces.terminal.view import Entry, History, completion, more_label

#: The input box grows with its text up to this many lines, then scrolls.
PROMPT_LINES = 8
#: Keys that insert a newline in the input box (Shift+Enter only where the terminal reports it).
NEWLINE_KEYS = ("ctrl+j", "shift+enter")


def _renderable(entry: Entry) -> Markdown | Text:
    match entry.kind:
        case "user":
            # A multi-line prompt's later lines line up under its first.
            return Text.assemble(("› ", "bold cyan"), entry.text.replace("\n", "\n  "))
        case "assistant":
            return Markdown(entry.text or " ")
        case "tool":
            result = (entry.detail, _style(entry))
            return Text.assemble(("⏺ ", "bold"), entry.text, "\n  ⎿ ", result)
        case "error":
            return Text.assemble(("✗ ", "bold red"), (entry.text, "red"))
        case _:
            return Text(entry.text, style="dim italic")


def _style(entry: Entry) -> str:
    return "red" if entry.failed else "dim"


class EntryView(Static):
    """One message: user, assistant (Markdown), tool call, notice or error."""

    def __init__(self, entry: Entry) -> None:
        super().__init__(_renderable(entry), classes=f"entry {entry.kind}")
        self.entry_id = entry.id
        self.version = entry.version

    def redraw(self, entry: Entry) -> None:
        self.version = entry.version
        self.update(_renderable(entry))


class CompactView(Collapsible):
    """A compact block: its label, expandable to the summary the model continues from."""

    def __init__(self, entry: Entry, *, expanded: bool = False) -> None:
        super().__init__(
            Static(Markdown(entry.text or " ")),
            title=entry.detail,
            collapsed=not expanded,
            classes="entry",
        )
        self.entry_id = entry.id
        self.version = entry.version

    def redraw(self, entry: Entry) -> None:
        self.version = entry.version
        self.title = entry.detail


class ToolView(Vertical):
    """A tool call: its arguments and a one-line result; a longer result expands on demand.

    The whole result sits in a collapsed ``Collapsible`` under the short one
    (click its title, or focus it and press Enter); a result that fits the
    short form has none.
    """

    DEFAULT_CSS = """
    ToolView { height: auto; }
    ToolView > Collapsible {
        background: transparent;
        border-top: none;
        padding: 0 0 0 2;
    }
    ToolView > Collapsible > Contents { padding: 0 0 0 2; }
    """

    def __init__(self, entry: Entry, *, expanded: bool = False) -> None:
        super().__init__(classes="entry tool")
        self.entry_id = entry.id
        self.version = entry.version
        self.head = Static(_renderable(entry))
        self.full = Static(Text(entry.full, style=_style(entry)), classes="full-result")
        self.more = Collapsible(self.full, title=more_label(entry.full), collapsed=not expanded)
        self.more.display = bool(entry.full)

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.more

    def redraw(self, entry: Entry) -> None:
        self.version = entry.version
        self.head.update(_renderable(entry))
        self.full.update(Text(entry.full, style=_style(entry)))
        self.more.title = more_label(entry.full)
        self.more.display = bool(entry.full)


EntryWidget = EntryView | CompactView | ToolView


def entry_widget(entry: Entry, *, expanded: bool = False) -> EntryWidget:
    if entry.kind == "compact":
        return CompactView(entry, expanded=expanded)
    return ToolView(entry, expanded=expanded) if entry.kind == "tool" else EntryView(entry)


class MessageList(VerticalScroll):
    """The scrollable message list; it shows the entries it is given, nothing else."""

    DEFAULT_CSS = """
    MessageList > #earlier { margin-bottom: 1; color: $text-muted; text-style: italic; }
    """

    #: The expanded view (Ctrl+O): compact blocks and tool results open, as in
    #: Claude Code's transcript view; a toggle sets every one, a new one follows.
    expanded = False

    class ReachedTop(TextualMessage):
        """The user scrolled to the top of the list (or up while there)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.earlier = Static("", id="earlier", markup=False)
        self.earlier.display = False
        #: A scroll to the end is scheduled (after the next refresh) and not yet made.
        self._ending = False

    def compose(self) -> ComposeResult:
        yield self.earlier

    def mounted(self) -> list[EntryWidget]:
        return [w for w in self.children if isinstance(w, EntryView | CompactView | ToolView)]

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Only a scroll can reach the top from below while the list is taller than the
        # view: a list that shrank to fit is clamped to 0 with nothing left to scroll.
        if new_value <= 0 < old_value and self.max_scroll_y > 0:
            self.post_message(self.ReachedTop())

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        # At the top already (or too short to scroll) the wheel moves nothing: the
        # watch above sees no change, so say it here.
        if self.scroll_y <= 0:
            self.post_message(self.ReachedTop())

    def expand_all(self, expanded: bool) -> None:
        self.expanded = expanded
        for widget in self.mounted():
            if isinstance(widget, CompactView):
                widget.collapsed = not expanded
            elif isinstance(widget, ToolView):
                widget.more.collapsed = not expanded

    def sync(self, shown: Sequence[Entry], earlier: str | None = None) -> None:
        """Mount ``shown``, in order, under the line ``earlier`` (``None``: no such line)."""
        wanted = {entry.id for entry in shown}
        widgets: dict[str, EntryWidget] = {}
        for widget in self.mounted():
            if widget.entry_id in wanted:
                widgets[widget.entry_id] = widget
        # Following the end while a scroll to it is still on its way: entries that
        # grew since are not "scrolled up from", and anchoring on them would
        # stop the list from following (and leave new messages below the screen).
        at_end = self._ending or self.is_vertical_scroll_end or self.max_scroll_y == 0
        anchor = None if at_end else self._first_in_view(widgets.values())
        changed = False
        for widget in self.mounted():
            if widget.entry_id not in widgets:
                widget.remove()
                changed = True
        text = earlier or ""
        if (text, bool(earlier)) != (str(self.earlier.content), self.earlier.display):
            self.earlier.update(text)
            self.earlier.display = bool(earlier)
            changed = True
        # Mount missing entries before the next one already there, so order holds.
        following: Widget | None = None
        for entry in reversed(shown):
            existing = widgets.get(entry.id)
            if existing is None:
                existing = entry_widget(entry, expanded=self.expanded)
                if following is None:
                    self.mount(existing)
                else:
                    self.mount(existing, before=following)
                changed = True
            elif existing.version != entry.version:
                existing.redraw(entry)
            following = existing
        if at_end:
            # After the refresh: the new entries' heights are known only then, and a
            # scroll made before it stops short of the end (so the next sync would
            # no longer follow, and a compact block could stay below the screen).
            self._ending = True
            self.call_after_refresh(self._to_end)
        elif anchor is not None and changed:
            # Likewise, where the anchor went is known only after the refresh.
            self.call_after_refresh(self._keep, *anchor)

    def _to_end(self) -> None:
        self._ending = False
        self.scroll_end(animate=False, immediate=True)

    def _first_in_view(self, widgets: Iterable[EntryWidget]) -> tuple[EntryWidget, float] | None:
        """The first widget the view shows, and how far below the view's top it starts."""
        top = self.scroll_y
        for widget in widgets:
            region = widget.virtual_region
            if region.y + region.height > top:
                return widget, region.y - top
        return None

    def _keep(self, widget: EntryWidget, offset: float) -> None:
        """Scroll so that ``widget`` starts ``offset`` below the view's top again."""
        if widget.is_attached:
            with self.prevent(self.ReachedTop):  # a move to keep the screen is no scroll up
                self.scroll_to(y=widget.virtual_region.y - offset, animate=False, immediate=True)


class PromptInput(TextArea):
    """The input box: multi-line, with history on up / down at its first / last line."""

    DEFAULT_CSS = f"""
    PromptInput {{ height: auto; max-height: {PROMPT_LINES + 2}; }}
    """

    @dataclass
    class Submitted(TextualMessage):
        """Enter was pressed: ``value`` is the whole prompt, newlines and all."""

        prompt: PromptInput
        value: str

    class HistoryMoved(TextualMessage):
        """Posted after up / down replaced the value (tests wait on it)."""

    def __init__(self) -> None:
        super().__init__(
            placeholder="Ask Cairn, or /help",
            id="prompt",
            soft_wrap=True,
            tab_behavior="focus",
            highlight_cursor_line=False,
        )
        self.prompt_history = History()

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        """Replace the whole prompt; the cursor goes to its end."""
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        key = event.key
        handled = True
        if key == "enter":
            self._enter()
        elif key in NEWLINE_KEYS:
            self.replace("\n", *self.selection, maintain_selection_offset=False)
        elif key == "tab" and (completed := completion(self.text)) is not None:
            self.value = completed
        elif key == "up" and self.navigator.is_first_wrapped_line(self.cursor_location):
            self._recall(self.prompt_history.back, at_end=False)
        elif key == "down" and self.navigator.is_last_wrapped_line(self.cursor_location):
            self._recall(self.prompt_history.forward, at_end=True)
        else:
            handled = False
        if handled:
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)

    def _enter(self) -> None:
        """Send the prompt, or, right after a backslash, replace it with a newline."""
        start, end = self.selection
        row, column = end
        if start == end and column > 0 and self.document[row][column - 1] == "\\":
            self.replace("\n", (row, column - 1), end, maintain_selection_offset=False)
        else:
            self.post_message(self.Submitted(self, self.text))

    def _recall(self, move: Callable[[str], str], *, at_end: bool) -> None:
        """Show a history entry: the cursor on its last line after down, its first after up,
        so the next press in the same direction goes on through the history."""
        self.load_text(move(self.text))
        first = (0, len(self.document[0]))
        self.move_cursor(self.document.end if at_end else first)
        self.post_message(self.HistoryMoved())
