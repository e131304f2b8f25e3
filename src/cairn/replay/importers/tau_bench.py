"""``tau-bench``: a JSON array of ``{task_id, trial, reward, info, traj}`` results.

Each element is one session named ``task <task_id> trial <trial>``; ``traj``
holds OpenAI chat messages (system, user, assistant with ``tool_calls``,
``tool``). The recordings carry no tool schemas and no token usage.
"""

from __future__ import annotations

from collections.abc import Mapping

from cairn.replay.importers._conversion import chat_message
from cairn.replay.importers._session_builder import Loaded, SessionBuilder
from cairn.replay.importers._source import (
    IdMaker,
    RecordError,
    Source,
    expect_dict,
    expect_list,
    kind_of,
    label_of,
    pick_sessions,
)
from cairn.replay.session import RecordedSession, SessionImportError

FORMAT = "tau-bench"


def load(source: Source, session: int | None) -> Loaded:
    document = source.document(FORMAT)
    if not isinstance(document, list):
        raise SessionImportError(
            f"{FORMAT}: expected a JSON array of task results, found {kind_of(document)}"
        )
    sessions: list[RecordedSession] = []
    warnings: list[str] = []
    for index in pick_sessions(FORMAT, len(document), session):
        try:
            result = expect_dict(document[index], f"[{index}]")
            name = _name(result, index)
            builder = SessionBuilder(name, IdMaker(source.digest, index), label=name)
            for position, raw in enumerate(expect_list(result, "traj", f"[{index}]")):
                where = f"[{index}].traj[{position}]"
                builder.add(chat_message(raw, where, builder.ids, builder.warn), where)
        except RecordError as exc:
            raise SessionImportError(f"{FORMAT}: {exc}") from None
        sessions.append(builder.build())
        warnings.extend(builder.warnings)
    return Loaded(tuple(sessions), tuple(warnings))


def _name(result: Mapping[str, object], index: int) -> str:
    task, trial = label_of(result.get("task_id")), label_of(result.get("trial"))
    if task is None:
        return f"session {index}"
    return f"task {task} trial {trial}" if trial is not None else f"task {task}"
