"""What the pipeline tells the surfaces about a compaction while it runs.

Every compaction, manual or automatic, successful or not, is bracketed by
``compaction_state_changed(True)`` … ``(False)``; streamed summary text is
published as it accumulates; the block is announced once it is durable.
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeAlias

from cairn.messages import Message

#: The summary prepared in the background (DESIGN §5.5a); ``None``: none is held.
PreparedState: TypeAlias = Literal["preparing", "ready"]


class CompactionListener(Protocol):
    def compaction_state_changed(self, is_compacting: bool) -> None: ...

    def compaction_content_updated(self, content: str) -> None: ...

    def compact_block_added(self, block: Message) -> None: ...

    def compaction_notice(self, text: str) -> None:
        """Something the user must see about a manual compaction (a hook's stderr …)."""
        ...

    def summary_prepared(self, state: PreparedState | None) -> None:
        """The summary prepared in the background: a quiet indicator, not "compacting"."""
        ...


class NoListener:
    def compaction_state_changed(self, is_compacting: bool) -> None:
        return None

    def compaction_content_updated(self, content: str) -> None:
        return None

    def compact_block_added(self, block: Message) -> None:
        return None

    def compaction_notice(self, text: str) -> None:
        return None

    def summary_prepared(self, state: PreparedState | None) -> None:
        return None
