"""A ``CompactionListener`` that records what the pipeline told the surfaces, in order."""

from __future__ import annotations

from typing import Any

from cairn.messages import Message


class Events:
    """A surface listening to the pipeline (the UI side of the events)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def compaction_state_changed(self, is_compacting: bool) -> None:
        self.log.append(("state", is_compacting))

    def compaction_content_updated(self, content: str) -> None:
        self.log.append(("content", content))

    def compact_block_added(self, block: Message) -> None:
        self.log.append(("block", block.text))

    def compaction_notice(self, text: str) -> None:
        self.log.append(("notice", text))

    def summary_prepared(self, state: str | None) -> None:
        self.log.append(("prepared", state))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]
