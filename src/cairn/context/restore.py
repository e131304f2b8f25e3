"""What is re-injected after any compaction (DESIGN §5.7).

A compaction replaces the history with the compact block; everything the
model only knew from that history is gone. Right after the block the host
adds, as synthetic user messages:

1. the environment: the working directory, every background task with its
   description and status, and the plan-mode state (plan file, whether it
   exists);
2. up to ``MAX_RESTORED_FILES`` recently read files, re-read from disk *now*,
   each message at most ``MAX_FILE_TOKENS`` tokens;
3. every invoked skill, as the model saw it;
4. last, in plan mode, the *full* plan-mode reminder, so the next request
   carries the read-only constraints again.

The agent runtime supplies the session state through ``RestorationSource``;
everything here is a function of that state and of the files on disk.

Recent files are chosen the way seed 000 insists: reads are filtered to this
session **and** this workspace, to paths inside the workspace that are no
symlink at any level and still a regular file, *before* the newest five are
taken — taking five first and filtering after starves the files that could
really be restored.
"""

from __future__ import annotations

import codecs
import itertools
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.context.front_matter import split_front_matter
from cairn.context.restoration_source import (
    BackgroundTask,
    FileRead,
    InvokedSkill,
    PlanState,
    RestorationSource,
)
from cairn.messages import (
    KIND_PLAN_REMINDER,
    KIND_RESTORATION,
    KIND_SKILL,
    JSONValue,
    Message,
    MessageMeta,
)
from cairn.prompts import load_prompt
from cairn.tokens import estimate_message_tokens

MAX_RESTORED_FILES = 5
MAX_FILE_TOKENS = 5_000
SKILL_DIR_PLACEHOLDER = "${CAIRN_SKILL_DIR}"
SKILL_BASE_PREFIX = "Base directory for this skill: "

#: How much of a file is read at most. The estimate counts at least ¼ token
#: per character and a character is at most 4 bytes in UTF-8, so 16 bytes per
#: token always covers ``MAX_FILE_TOKENS`` by the estimate.
_READ_LIMIT_BYTES = MAX_FILE_TOKENS * 16
#: A NUL byte in this head of a file marks it binary.
_BINARY_SNIFF_BYTES = 8_192


# ---------------------------------------------------------------------------
# Recent files


def select_recent_files(
    reads: Sequence[FileRead], *, session_id: str, workspace: Path
) -> list[Path]:
    """The newest ``MAX_RESTORED_FILES`` distinct restorable paths, newest first.

    A read counts only if it belongs to ``session_id`` and to ``workspace``,
    and its path lies inside the (resolved) workspace, with no symlink at any
    level below the workspace, and is still a regular file. The filter runs
    over every read before the five are taken. Paths are returned absolute,
    under the resolved workspace.
    """
    restorable = _iter_restorable(reads, session_id, workspace)
    return [path for path, _ in itertools.islice(restorable, MAX_RESTORED_FILES)]


def _iter_restorable(
    reads: Sequence[FileRead], session_id: str, workspace: Path
) -> Iterator[tuple[Path, Path]]:
    """Every restorable path as ``(absolute, relative to the workspace)``, newest first.

    Lazy, so a caller that needs five successes stops after them; each path
    is checked once, at its newest read.
    """
    root = workspace.resolve()
    prefixes = _workspace_prefixes(workspace, root)
    same_workspace: dict[Path, bool] = {}
    seen: set[Path] = set()
    order = sorted(range(len(reads)), key=lambda i: (reads[i].read_at, i), reverse=True)
    for i in order:
        read = reads[i]
        if read.session_id != session_id:
            continue
        ws = read.workspace
        if ws not in same_workspace:
            same_workspace[ws] = ws.resolve() == root
        if not same_workspace[ws]:
            continue
        relative = _relative_inside(read.path, prefixes)
        if relative is None or relative in seen:
            continue
        seen.add(relative)
        if _is_plain_file_below(root, relative):
            yield root / relative, relative


def _workspace_prefixes(workspace: Path, root: Path) -> tuple[Path, ...]:
    """The spellings of the workspace a recorded path may start with."""
    lexical = Path(os.path.normpath(workspace.absolute()))
    return (root,) if lexical == root else (root, lexical)


def _relative_inside(path: Path, prefixes: tuple[Path, ...]) -> Path | None:
    """``path`` relative to the workspace, or ``None`` when it points outside.

    Normalisation is lexical (``..`` folds into its parent): no symlink is
    followed here, and every level is checked for symlinks afterwards.
    """
    absolute = path if path.is_absolute() else prefixes[0] / path
    normalized = Path(os.path.normpath(absolute))
    for prefix in prefixes:
        if normalized.is_relative_to(prefix):
            relative = normalized.relative_to(prefix)
            return relative if relative.parts else None
    return None


def _is_plain_file_below(root: Path, relative: Path) -> bool:
    """No symlink at any level from ``root`` down, and a regular file at the end."""
    current = root
    mode = 0
    for part in relative.parts:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return False
    return stat.S_ISREG(mode)


@dataclass(frozen=True)
class _FileText:
    text: str
    size: int
    complete: bool


def _read_text(path: Path) -> _FileText | None:
    """The head of a regular text file, without following a symlink; ``None`` if unusable."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks: list[bytes] = []
        remaining = _READ_LIMIT_BYTES
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        complete = not os.read(fd, 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\0" in data[:_BINARY_SNIFF_BYTES]:
        return None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # A cut through a multi-byte character leaves it in the decoder, unshown.
    text = decoder.decode(data, final=complete)
    return _FileText(text=text, size=max(info.st_size, len(data)), complete=complete)


def _escape_attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _file_message(relative: Path, content: _FileText, count: Callable[[Message], int]) -> Message:
    shown = relative.as_posix()
    head = f'<file path="{_escape_attribute(shown)}">\n'

    def message(body: str, truncated: bool) -> Message:
        extra: dict[str, JSONValue] = {"path": shown, "truncated": truncated}
        tail = "</file>" if body.endswith("\n") or not body else "\n</file>"
        return Message(
            role="user",
            content=head + body + tail,
            meta=MessageMeta(kind=KIND_RESTORATION, synthetic=True, extra=extra),
        )

    text = content.text
    if content.complete:
        whole = message(text, truncated=False)
        if count(whole) <= MAX_FILE_TOKENS:
            return whole

    def cut(chars: int) -> Message:
        kept = text[:chars]
        if kept and not kept.endswith("\n"):
            kept += "\n"
        marker = (
            f"[… truncated by the host: only the first {kept.count(chr(10)):,} lines are "
            f"shown; the file has {content.size:,} bytes. Read the file for the rest.]"
        )
        return message(kept + marker, truncated=True)

    # The longest prefix whose message still fits, then back to a line end.
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(cut(middle)) <= MAX_FILE_TOKENS:
            low = middle
        else:
            high = middle - 1
    line_end = text.rfind("\n", 0, low)
    if line_end >= low // 2:
        low = line_end + 1
    return cut(low)


# ---------------------------------------------------------------------------
# Skills


def skill_directory(skill: InvokedSkill) -> Path:
    """The skill's absolute directory, normalised but with symlinks kept as named."""
    return Path(os.path.normpath(skill.skill_file.absolute().parent))


def render_skill(skill: InvokedSkill) -> str:
    """The skill's body as the model sees it.

    ``body_as_seen`` verbatim when the record has it (it starts with the
    ``Base directory for this skill:`` line). Otherwise the skill file is
    re-rendered exactly as at invocation: front matter parsed and dropped,
    ``${CAIRN_SKILL_DIR}`` replaced by the skill's absolute directory, and
    the ``Base directory`` line first. A record whose body lacks that line is
    re-rendered from the file too; if the file is gone, that body is
    normalised the same way. Raises ``OSError`` when there is nothing to
    render from.
    """
    seen = skill.body_as_seen
    directory = str(skill_directory(skill))
    if seen is not None and seen.startswith(SKILL_BASE_PREFIX):
        # Verbatim; a placeholder left in a faulty record is still never shown raw.
        return seen.replace(SKILL_DIR_PLACEHOLDER, directory)
    try:
        body = split_front_matter(skill.skill_file.read_text(encoding="utf-8")).body
    except (OSError, UnicodeDecodeError):
        if seen is None:
            raise
        body = split_front_matter(seen).body
    body = body.replace(SKILL_DIR_PLACEHOLDER, directory).strip("\n")
    return f"{SKILL_BASE_PREFIX}{directory}\n\n{body}"


def _skill_description(skill: InvokedSkill) -> str:
    if skill.description.strip():
        return skill.description.strip()
    try:
        fields = split_front_matter(skill.skill_file.read_text(encoding="utf-8")).fields
    except (OSError, UnicodeDecodeError):
        return ""
    return fields.get("description", "").strip()


def _skill_message(skill: InvokedSkill) -> Message:
    description = _skill_description(skill)
    lines = [f'The skill "{skill.name}" was invoked earlier in this session.']
    if description:
        lines.append(f"Description: {description}")
    try:
        body = render_skill(skill)
    except (OSError, UnicodeDecodeError):
        lines.append(
            f"Its file {skill.skill_file} can no longer be read, so its instructions "
            "cannot be restored; invoke the skill again if you need them."
        )
        restored = False
    else:
        lines.append("Its instructions, as you saw them, still apply:")
        lines.append(f'<skill name="{_escape_attribute(skill.name)}">\n{body}\n</skill>')
        restored = True
    extra: dict[str, JSONValue] = {"skill": skill.name, "restored": restored}
    return Message(
        role="user",
        content="\n".join(lines),
        meta=MessageMeta(kind=KIND_SKILL, synthetic=True, extra=extra),
    )


def _latest_per_skill(skills: Sequence[InvokedSkill]) -> list[InvokedSkill]:
    """One record per skill name: the latest invocation, in order of last use."""
    latest: dict[str, InvokedSkill] = {}
    for skill in skills:
        latest.pop(skill.name, None)
        latest[skill.name] = skill
    return list(latest.values())


# ---------------------------------------------------------------------------
# Plan mode and the environment


def _shown_path(path: Path, workspace: Path | None) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    if workspace is None:
        return str(path)
    absolute = path if path.is_absolute() else workspace / path
    for root in (Path(os.path.normpath(workspace.absolute())), workspace.resolve()):
        normalized = Path(os.path.normpath(absolute))
        if normalized.is_relative_to(root) and normalized != root:
            return normalized.relative_to(root).as_posix()
    return str(absolute)


def _plan_file(plan: PlanState, workspace: Path | None) -> Path:
    path = plan.plan_file
    if not path.is_absolute() and workspace is not None:
        return workspace / path
    return path


def plan_mode_reminder(plan: PlanState, *, workspace: Path | None = None) -> Message:
    """The full plan-mode ``<system-reminder>`` as a synthetic user message.

    Full, never the sparse form: after a compaction every earlier reminder is
    gone. A relative plan file is taken relative to ``workspace``, and shown
    relative to it when inside it.
    """
    path = _plan_file(plan, workspace)
    exists = path.is_file()
    shown = _shown_path(path, workspace)
    status = (
        "The plan file already exists: read it first and improve it with edit_file."
        if exists
        else "The plan file does not exist yet: create it with write_file."
    )
    text = (
        load_prompt("plan_mode").replace("{plan_file}", shown).replace("{plan_file_status}", status)
    )
    extra: dict[str, JSONValue] = {"plan_file": shown, "exists": exists}
    return Message(
        role="user",
        content=text,
        meta=MessageMeta(kind=KIND_PLAN_REMINDER, synthetic=True, extra=extra),
    )


def _environment_message(
    cwd: Path,
    workspace: Path,
    tasks: Sequence[BackgroundTask],
    plan: PlanState | None,
) -> Message:
    lines = [
        "<system-reminder>",
        "The conversation was compacted. The host restored this context:",
        f"Working directory: {cwd}",
    ]
    if os.path.normpath(workspace.absolute()) != os.path.normpath(cwd.absolute()):
        lines.append(f"Workspace: {workspace}")
    if tasks:
        lines.append("Background tasks:")
        lines.extend(f"- {task.id} [{task.status}]: {task.description}" for task in tasks)
    if plan is not None:
        path = _plan_file(plan, workspace)
        exists = "exists" if path.is_file() else "does not exist yet"
        lines.append(f"Plan mode is active. Plan file: {_shown_path(path, workspace)} ({exists})")
    lines.append("</system-reminder>")
    return Message(
        role="user",
        content="\n".join(lines),
        meta=MessageMeta(kind=KIND_RESTORATION, synthetic=True, extra={"section": "environment"}),
    )


# ---------------------------------------------------------------------------
# Everything, in order


def build_restoration(
    source: RestorationSource,
    *,
    session_id: str,
    workspace: Path,
    count: Callable[[Message], int] = estimate_message_tokens,
) -> list[Message]:
    """The messages that follow the compact block, in order.

    The environment (always); one message per restored file (newest first,
    re-read now, each at most ``MAX_FILE_TOKENS`` by ``count``; a file that
    turns out unreadable or binary is skipped and the next candidate taken);
    one message per invoked skill; and last, in plan mode, the full
    plan-mode reminder. Every message is a synthetic user message.
    """
    plan = source.plan_state()
    messages = [_environment_message(source.cwd(), workspace, source.background_tasks(), plan)]

    restored = 0
    for absolute, relative in _iter_restorable(source.file_reads(), session_id, workspace):
        if restored >= MAX_RESTORED_FILES:
            break
        content = _read_text(absolute)
        if content is None:
            continue
        messages.append(_file_message(relative, content, count))
        restored += 1

    messages.extend(_skill_message(skill) for skill in _latest_per_skill(source.invoked_skills()))

    if plan is not None:
        messages.append(plan_mode_reminder(plan, workspace=workspace))
    return messages
