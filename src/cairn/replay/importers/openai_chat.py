"""``openai``: a JSON array of chat messages, or ``{"messages": [...], "tools": [...]}``.

One session, named after the file. ``system`` (and ``developer``) messages go
to ``RecordedSession.system`` wherever they stand; ``tools`` entries are kept
as given. Message ids are kept when the messages carry an ``id``.
"""

from __future__ import annotations

from typing import cast

from cairn.messages import JSONObject
from cairn.replay.importers._conversion import chat_message
from cairn.replay.importers._session_builder import Loaded, SessionBuilder
from cairn.replay.importers._source import (
    TOOL_ROOM,
    IdMaker,
    RecordError,
    Source,
    expect_list,
    json_problem,
    kind_of,
    pick_sessions,
)
from cairn.replay.session import SessionImportError

FORMAT = "openai"


def load(source: Source, session: int | None) -> Loaded:
    document = source.document(FORMAT)
    pick_sessions(FORMAT, 1, session)
    builder = SessionBuilder(source.path.stem, IdMaker(source.digest, 0))
    try:
        if isinstance(document, list):
            messages, tools, prefix = document, [], ""
        elif isinstance(document, dict):
            messages = expect_list(document, "messages")
            tools = expect_list(document, "tools") if document.get("tools") is not None else []
            prefix = "messages"
        else:
            raise RecordError(
                f"expected an array of messages or an object with 'messages', "
                f"found {kind_of(document)}"
            )
        for index, raw in enumerate(messages):
            where = f"{prefix}[{index}]"
            builder.add(chat_message(raw, where, builder.ids, builder.warn), where)
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise RecordError(f"tools[{index}]: expected an object, found {kind_of(tool)}")
            problem = json_problem(tool, TOOL_ROOM)
            if problem is not None:
                raise RecordError(f"tools[{index}]: cannot be written as JSON ({problem})")
            builder.tools.append(cast(JSONObject, tool))
    except RecordError as exc:
        raise SessionImportError(f"{FORMAT}: {exc}") from None
    return Loaded((builder.build(),), tuple(builder.warnings))
