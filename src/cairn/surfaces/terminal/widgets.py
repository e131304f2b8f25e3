"""The terminal app's widgets: the message list, one widget per entry, and the input box.

``MessageList.sync`` reconciles the mounted widgets with the entries
``transcript.window`` picks: it removes what fell out of the window, mounts what
came in (in order) and redraws an entry only when its ``version`` moved, so a
streaming response redraws one widget, not thirty. Above the entries, a line
says what comes before them; entries mounted or removed above the view leave
what is on the screen where it was, and scrolling to the top of the list
asks the app for more (``MessageList.ReachedTop``). At its end the list stays
there as entries come and grow (Textual's anchor), until the user scrolls up;
``follow`` goes back (a prompt sent, Ctrl+End).

``PromptInput`` is a multi-line box: Enter sends, Ctrl+J (or a line ending in
``\\`` then Enter, since a terminal cannot tell Shift+Enter from Enter) starts
a new line, a paste keeps its newlines, and it grows up to ``PROMPT_LINES``
lines before it scrolls. Tab completes a ``/command``, or the ``@path`` before
the cursor from the workspace (``PromptInput.paths``, the session's
``complete_path``). A large paste (``cairn.agent.paste``, the rule every
surface shares) shows in the box as its label and is sent whole; in the list,
a user message that long is folded (``PastedView``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from rich.markdown import Markdown
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message as TextualMessage
from textual.widget import Widget
from textual.widgets import Collapsible, Static, TextArea

from cairn.agent import FOLDED_HEAD_LINES, is_large_paste, paste_label
from cairn.surfaces.terminal.transcript import Entry, more_label
from cairn.surfaces.terminal.view import History, completion, mention_prefix, path_completion

#: The input box grows with its text up to this many lines, then scrolls.
PROMPT_LINES = 8
#: Keys that insert a newline in the input box (Shift+Enter only where the terminal reports it).
NEWLINE_KEYS = ("ctrl+j", "shift+enter")


def _renderable(entry: Entry) -> Markdown | Text:
    match entry.kind:
        case "user":
            return _user_text(entry.text)
        case "assistant":
            return Markdown(entry.text or " ")
        case "tool":
            return Text.assemble(("⏺ ", "bold"), entry.text)
        case "shell":
            return Text.assemble(("! ", "bold magenta"), entry.text)
        case "error":
            return Text.assemble(("✗ ", "bold red"), (entry.text, "red"))
        case _:
            return Text(entry.text, style="dim italic")


def _user_text(text: str) -> Text:
    # A multi-line prompt's later lines line up under its first.
    return Text.assemble(("› ", "bold cyan"), text.replace("\n", "\n  "))


def _result_text(entry: Entry) -> Text:
    return Text.assemble("  ⎿ ", (entry.detail, _style(entry)))


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


#: A fold under an entry (a tool's whole result, a pasted block): flush with the entry's text.
_FOLD_CSS = """
    {view} > Collapsible {{
        background: transparent;
        border-top: none;
        padding: 0 0 0 2;
    }}
    {view} > Collapsible > Contents {{ padding: 0 0 0 2; }}
"""


class ToolView(Vertical):
    """A tool call (or a ``!command``): its arguments and a one-line result; a longer
    result expands on demand.

    The short result is one row whatever the terminal's width: a row that
    wrapped would start at the screen's edge, under nothing it belongs to.
    The whole result sits in a collapsed ``Collapsible`` under it (click its
    title, or focus it and press Enter); a result that fits the short form
    has none.
    """

    DEFAULT_CSS = """
    ToolView { height: auto; }
    ToolView > .result { text-wrap: nowrap; text-overflow: ellipsis; }
    """ + _FOLD_CSS.format(view="ToolView")

    def __init__(self, entry: Entry, *, expanded: bool = False) -> None:
        super().__init__(classes=f"entry {entry.kind}")
        self.entry_id = entry.id
        self.version = entry.version
        self.head = Static(_renderable(entry))
        self.result = Static(_result_text(entry), classes="result")
        self.full = Static(Text(entry.full, style=_style(entry)), classes="full-result")
        self.more = Collapsible(self.full, title=more_label(entry.full), collapsed=not expanded)
        self.more.display = bool(entry.full)

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.result
        yield self.more

    def redraw(self, entry: Entry) -> None:
        self.version = entry.version
        self.head.update(_renderable(entry))
        self.result.update(_result_text(entry))
        self.full.update(Text(entry.full, style=_style(entry)))
        self.more.title = more_label(entry.full)
        self.more.display = bool(entry.full)


class PastedView(Vertical):
    """A user message long enough to be a pasted block (``is_large_paste``), folded.

    Its first ``FOLDED_HEAD_LINES`` lines (one row each), then the label
    (``[Pasted text #1 · 2,000 lines]``) as the title of a collapsed
    ``Collapsible`` holding the whole message: 2,000 lines on the screen would
    push the answer out of it, and a resumed session folds the same way since
    the rule reads only the message. Expanded, the whole text replaces the
    first lines rather than repeating them.
    """

    DEFAULT_CSS = """
    PastedView { height: auto; }
    PastedView > .head { text-wrap: nowrap; text-overflow: ellipsis; }
    """ + _FOLD_CSS.format(view="PastedView")

    def __init__(self, entry: Entry) -> None:
        super().__init__(classes="entry user pasted")
        self.entry_id = entry.id
        self.version = entry.version
        head = "\n".join(entry.text.split("\n", FOLDED_HEAD_LINES)[:FOLDED_HEAD_LINES])
        self.head = Static(_user_text(head), classes="head")
        self.full = Static(_user_text(entry.text), classes="full-message")
        self.more = Collapsible(self.full, title=paste_label(1, entry.text), collapsed=True)

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.more

    def on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        event.stop()
        self.head.display = False

    def on_collapsible_collapsed(self, event: Collapsible.Collapsed) -> None:
        event.stop()
        self.head.display = True

    def redraw(self, entry: Entry) -> None:
        # A user message never changes once added: only its version is kept.
        self.version = entry.version


EntryWidget = EntryView | CompactView | ToolView | PastedView


def entry_widget(entry: Entry, *, expanded: bool = False) -> EntryWidget:
    if entry.kind == "compact":
        return CompactView(entry, expanded=expanded)
    if entry.kind == "user" and is_large_paste(entry.text):
        return PastedView(entry)
    if entry.kind in ("tool", "shell"):
        return ToolView(entry, expanded=expanded)
    return EntryView(entry)


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
        widgets = EntryView | CompactView | ToolView | PastedView
        return [w for w in self.children if isinstance(w, widgets)]

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

    def on_mount(self) -> None:
        # Textual's anchor keeps the list at its end as it is laid out: an entry whose
        # height is known only a refresh or two after it was mounted (a long answer
        # in a real terminal) still ends on the screen, where a scroll made after one
        # refresh stopped short of it and the list stopped following. Any scroll of
        # the user's releases it; back at the end, it holds again.
        self.anchor()

    def follow(self) -> None:
        """To the end of the list, held there as it grows (a prompt sent, Ctrl+End)."""
        self.scroll_end(animate=False)  # after the next refresh; it holds the anchor again

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


class Paste(NamedTuple):
    """A paste the input box shows as its label: ``#number`` in the prompt, and its text."""

    number: int
    text: str


class PromptInput(TextArea):
    """The input box: multi-line, with history on up / down at its first / last line.

    A large paste (``is_large_paste``) goes in as its label,
    ``[Pasted text #1 · 2,000 lines]``, numbered in the prompt: the box stays
    a few lines the user can still edit around, and the label is replaced by
    the whole paste when the prompt is sent. Backspace after a label (Delete
    before one) removes it whole; a label no longer in the box, however it
    went, takes its paste with it.
    """

    DEFAULT_CSS = f"""
    PromptInput {{ height: auto; max-height: {PROMPT_LINES + 2}; }}
    """

    @dataclass
    class Submitted(TextualMessage):
        """Enter was pressed: ``value`` is the whole prompt, newlines and pastes and all."""

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
        #: The workspace paths an ``@`` prefix completes to (the app sets the session's).
        self.paths: Callable[[str], Sequence[str]] = lambda prefix: ()
        #: The pastes the box holds as labels: label → its number and the pasted text.
        self.pastes: dict[str, Paste] = {}
        #: The pastes of each prompt sent (or left for the history), by its text as typed,
        #: so a prompt recalled from the history still expands its labels.
        self._recalled: dict[str, dict[str, Paste]] = {}

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        """Replace the whole prompt; the cursor goes to its end."""
        self.load_text(text)
        self.move_cursor(self.document.end)

    @property
    def expanded(self) -> str:
        """The prompt as it is sent: every label replaced by its paste."""
        text = self.text
        for label, paste in self.pastes.items():
            text = text.replace(label, paste.text)
        return text

    def remember(self) -> None:
        """Put the prompt as typed in the history, its pastes with it."""
        self.prompt_history.add(self.text)
        if self.pastes:
            self._recalled[self.text] = dict(self.pastes)

    async def _on_key(self, event: events.Key) -> None:
        key = event.key
        handled = True
        if key == "enter":
            self._enter()
        elif key in NEWLINE_KEYS:
            self.replace("\n", *self.selection, maintain_selection_offset=False)
        elif key in ("backspace", "delete") and self._delete_label(forward=key == "delete"):
            pass
        elif key == "tab" and (completed := completion(self.text)) is not None:
            self.value = completed
        elif key == "tab" and self._complete_path():
            pass
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

    def before_cursor(self) -> str:
        """The cursor's line up to the cursor: where an ``@path`` being typed ends."""
        row, column = self.cursor_location
        return self.document[row][:column]

    def _complete_path(self) -> bool:
        """Tab after ``@prefix``: the paths' common start, else the first; False if none."""
        start, end = self.selection
        prefix = mention_prefix(self.before_cursor()) if start == end else None
        if prefix is None:
            return False
        completed = path_completion(prefix, self.paths(prefix))
        if completed is None:
            return False
        row, column = end
        result = self.replace(
            completed, (row, column - len(prefix)), end, maintain_selection_offset=False
        )
        self.move_cursor(result.end_location)
        return True

    def _enter(self) -> None:
        """Send the prompt, or, right after a backslash, replace it with a newline."""
        start, end = self.selection
        row, column = end
        if start == end and column > 0 and self.document[row][column - 1] == "\\":
            self.replace("\n", (row, column - 1), end, maintain_selection_offset=False)
        else:
            self.post_message(self.Submitted(self, self.expanded))

    async def _on_paste(self, event: events.Paste) -> None:
        # A terminal sends a pasted line break as CR (tmux, xterm): the text area reads
        # CR as a break too, so the paste it would insert and the one kept here agree.
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        if self.read_only or not is_large_paste(text):
            return  # the text area inserts it as it is
        event.stop()
        event.prevent_default()  # not the text area's own insertion too
        number = max((paste.number for paste in self.pastes.values()), default=0) + 1
        label = paste_label(number, text)
        self.pastes[label] = Paste(number, text)
        result = self.replace(label, *self.selection, maintain_selection_offset=False)
        self.move_cursor(result.end_location)
        self.focus()

    def _delete_label(self, *, forward: bool) -> bool:
        """Backspace right after a label, or Delete right before one: the whole label goes."""
        start, end = self.selection
        if start != end:
            return False
        row, column = end
        line = self.document[row]
        for label in self.pastes:
            if not forward and line[:column].endswith(label):
                self.replace("", (row, column - len(label)), end, maintain_selection_offset=False)
                return True
            if forward and line[column:].startswith(label):
                self.replace("", end, (row, column + len(label)), maintain_selection_offset=False)
                return True
        return False

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        # Not stopped: the app watches the box's text too.
        text = self.text
        for label in [label for label in self.pastes if label not in text]:
            del self.pastes[label]  # the label was deleted: so is its paste

    def _recall(self, move: Callable[[str], str], *, at_end: bool) -> None:
        """Show a history entry: the cursor on its last line after down, its first after up,
        so the next press in the same direction goes on through the history."""
        if self.pastes:
            self._recalled[self.text] = dict(self.pastes)  # the draft's, for coming back to it
        self.load_text(move(self.text))
        self.pastes = dict(self._recalled.get(self.text, {}))
        first = (0, len(self.document[0]))
        self.move_cursor(self.document.end if at_end else first)
        self.post_message(self.HistoryMoved())
