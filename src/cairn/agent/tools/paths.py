"""What the file tools share: workspace confinement, walking, globs and argument reading.

Confinement works on descriptors, never by checking a path and then opening
it again by name: between the two, another process could swap a folder or a
file for a symlink pointing outside. A path is walked one component at a
time from a descriptor of its root — the workspace, or for read-only tools
the session's folder — each folder opened with ``O_DIRECTORY | O_NOFOLLOW``
relative to the descriptor of the one above, the last component with
``O_NOFOLLOW``; the tool then reads, stats or lists that descriptor. A write
creates a temporary file in the verified folder's descriptor, fsyncs it and
renames it there (``write_at``). ``..`` closes the folder the walk opened
last: the kernel is never asked for a parent (above a root, ``anchor``
places the rest, which is walked again beneath a root or refused). The root
itself is opened the same way from ``/`` along its resolved path, so it too
is reached through no symlink.

Symlinks are never followed by the kernel. A link met on the way is read
(``readlinkat``) and its target walked in the same way: a link that leads
beneath a root works as it always did, one that leads elsewhere — or one
swapped in mid-walk — is refused like ``../x`` or an absolute path
elsewhere, with ``PathOutsideWorkspaceError`` naming the link and its
target. Whatever a tool opens is thus beneath a root when it is opened.
Walking a folder (``scan``) lists links but never enters them.

The session's folder lies outside the workspace; two things in it are
allowed: the plan file while plan mode is on (``is_plan_file``), because
plan mode exists to write it, and never through a symlink; and, for
read-only tools only, any file inside that folder, because the host saves
there what the model is told to read back — full tool outputs, oversized
user messages, background task logs.

The argument readers turn the model's JSON into typed values and raise
``ToolArgumentError`` (a ``ValueError``) with a message meant for the model.
They are lenient where models commonly stray — ``null`` for an omitted
optional argument, ``"10"`` for ``10``, ``"true"`` for ``true`` — and strict
about everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import stat
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

from cairn.agent.tools.base import ToolContext
from cairn.durable import write_all
from cairn.errors import CairnError
from cairn.messages import JSONObject, JSONValue

#: Folders never walked into by list_files and grep (still readable by name).
SKIPPED_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})

#: A NUL byte in this head of a file marks it binary.
BINARY_SNIFF_BYTES = 8_192

#: Symlinks one path may pass through, as the kernel allows.
MAX_SYMLINKS = 40

# Folders on the way are only passed through: O_PATH (Linux) needs no read
# permission on them, as the kernel's own path walk needs none.
_PASS_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The last component: O_NONBLOCK so a FIFO cannot hang the tool, O_NOCTTY so
#: a terminal is never adopted.
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: What open(O_NOFOLLOW) reports for a symlink: ELOOP, EMLINK (BSD), or
#: ENOTDIR with O_DIRECTORY.
_LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
#: Longest file name kept in a temporary file's name (names are limited to 255 bytes).
_TEMP_STEM = 200

T = TypeVar("T")


class PathOutsideWorkspaceError(CairnError, ValueError):
    """A tool was asked for a path that does not lie inside the workspace."""


class ToolArgumentError(CairnError, ValueError):
    """An argument is missing or has the wrong type or value; the text is for the model."""


class OutsideRootsError(CairnError, ValueError):
    """A walk left every root it may reach: by ``..``, an absolute path or a symlink."""

    def __init__(self, link: Path | None = None, target: str | None = None) -> None:
        self.link = link
        self.target = target
        super().__init__(
            f"{link} is a symbolic link to {target}" if link is not None else "it leads outside"
        )


class SymlinkRefusedError(CairnError, ValueError):
    """A path that is never used through a symlink (the plan file) is one."""


# ---------------------------------------------------------------------------
# Roots and walks


@dataclass(frozen=True)
class Root:
    """A folder a walk may reach beneath: its resolved path and the ways to spell it."""

    path: Path
    #: Absolute spellings a raw path may start with: the resolved one and the one as given.
    spellings: tuple[Path, ...]

    @classmethod
    def of(cls, folder: Path) -> Root:
        # Taken literally (no ``~`` expansion): these are the host's own paths.
        given = Path(os.path.normpath(folder.absolute()))
        resolved = Path(os.path.realpath(given))
        return cls(resolved, tuple(dict.fromkeys((resolved, given))))

    def holds(self, path: Path) -> bool:
        return path.is_relative_to(self.path)


@dataclass
class Opened:
    """What a path names, open: a file's or a folder's descriptor, and where it really is."""

    fd: int
    root: Root
    #: Components below the root, with no symlink among them.
    parts: tuple[str, ...]

    @property
    def path(self) -> Path:
        return self.root.path.joinpath(*self.parts)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Opened:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass
class Slot:
    """Where a write goes: an open folder beneath a root, and a name in it.

    ``name`` is ``None`` when the path names that folder itself.
    """

    dir_fd: int
    root: Root
    #: The folder's components below the root, with no symlink among them.
    parts: tuple[str, ...]
    name: str | None

    @property
    def path(self) -> Path:
        return self.root.path.joinpath(*self.parts, *([self.name] if self.name else []))

    def lstat(self) -> os.stat_result | None:
        """The entry at ``name``, not followed; ``None`` when there is none."""
        if self.name is None:
            return os.fstat(self.dir_fd)
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self) -> int:
        """A read descriptor of the file at ``name``; a symlink there is refused (``ELOOP``)."""
        if self.name is None:
            return os.dup(self.dir_fd)
        return os.open(self.name, OPEN_FLAGS, dir_fd=self.dir_fd)

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_beneath(
    roots: Sequence[Root], start: Root, parts: Iterable[str], *, follow_last: bool = True
) -> Opened:
    """Open what ``parts`` (below ``start``) names, following links only beneath ``roots``.

    Raises ``OutsideRootsError`` when the walk would leave them,
    ``SymlinkRefusedError`` when the last component is a link and
    ``follow_last`` is false, and ``OSError`` (``FileNotFoundError``, …) as
    ``open`` would.
    """
    walk = _Walk(roots, start)
    try:
        fd = walk.run(parts, last="open", follow_last=follow_last)
        return Opened(fd, walk.root, walk.parts())
    finally:
        walk.close()


def slot_beneath(
    roots: Sequence[Root],
    start: Root,
    parts: Iterable[str],
    *,
    create: bool,
    follow_last: bool = True,
) -> Slot:
    """The folder and name ``parts`` (below ``start``) names, for a write.

    A link as the last component is followed beneath ``roots`` (refused with
    ``SymlinkRefusedError`` unless ``follow_last``), so a write replaces the
    file it points to. Missing folders on the way are created when
    ``create``; otherwise they raise ``FileNotFoundError``.
    """
    walk = _Walk(roots, start)
    try:
        walk.run(parts, last="slot", follow_last=follow_last, missing_ok=create)
        name = walk.name
        if walk.missing:
            *folders, name = walk.missing
            walk.create(folders)
        return Slot(_readable(walk.top), walk.root, tuple(walk.names), name)
    finally:
        walk.close()


def locate_beneath(roots: Sequence[Root], start: Root, parts: Iterable[str]) -> Path:
    """Where ``parts`` (below ``start``) leads, following links beneath ``roots``; opens nothing."""
    walk = _Walk(roots, start)
    try:
        walk.run(parts, last="slot", follow_last=True, missing_ok=True)
        return walk.root.path.joinpath(*walk.names, *walk.missing, *filter(None, [walk.name]))
    finally:
        walk.close()


class _Walk:
    """One walk beneath some roots: the folders opened so far, from the current root down."""

    def __init__(self, roots: Sequence[Root], start: Root) -> None:
        # Deepest first, so a root nested in another claims its own paths.
        self._roots = sorted(roots, key=lambda root: len(root.path.parts), reverse=True)
        self._fds: list[int] = []
        self.names: list[str] = []
        self.missing: list[str] = []
        self.name: str | None = None
        self.root = start
        self._links = 0
        #: The last link followed and its target: named when the walk then leads out.
        self._via: tuple[Path, str] | None = None
        self._enter(start)

    @property
    def top(self) -> int:
        return self._fds[-1]

    def parts(self) -> tuple[str, ...]:
        return (*self.names, *filter(None, [self.name]))

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def run(
        self,
        parts: Iterable[str],
        *,
        last: Literal["open", "slot"],
        follow_last: bool,
        missing_ok: bool = False,
    ) -> int:
        """Walk ``parts``; in ``open`` mode return the descriptor of what they name.

        In ``slot`` mode return -1 and leave the last name in ``name`` (and
        any missing components in ``missing``) for the caller.
        """
        queue = deque(_clean(parts))
        while queue:
            name = queue.popleft()
            if name == "..":
                self._up(queue)
                continue
            if self.missing:
                self.missing.append(name)  # below a missing folder, only names are left
                continue
            is_last = not queue
            if is_last and last == "slot":
                if not _is_link(self.top, name):
                    self.name = name
                    return -1
                if not follow_last:
                    raise _refused(self._here(name))
                self._follow(name, queue)
                continue
            try:
                fd = os.open(name, OPEN_FLAGS if is_last else _PASS_FLAGS, dir_fd=self.top)
            except OSError as exc:
                if exc.errno in _LINK_ERRNOS and _is_link(self.top, name):
                    if is_last and not follow_last:
                        raise _refused(self._here(name)) from None
                    self._follow(name, queue)
                    continue
                if exc.errno == errno.ENOENT and missing_ok:
                    self.missing.append(name)
                    continue
                raise _at(exc, self._here(name)) from None
            if is_last:
                self.name = name
                return fd
            self._fds.append(fd)
            self.names.append(name)
        # The path names a folder the walk is in (``.``, ``a/..``).
        return _readable(self.top) if last == "open" else -1

    def create(self, folders: Sequence[str]) -> None:
        """Make the missing ``folders`` in turn, each entered without following a link."""
        for name in folders:
            # Made meanwhile, perhaps: the O_NOFOLLOW open below still checks what it is.
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.top)
            try:
                fd = os.open(name, _PASS_FLAGS, dir_fd=self.top)
            except OSError as exc:
                raise _at(exc, self._here(name)) from None
            self._fds.append(fd)
            self.names.append(name)

    def _here(self, *more: str) -> Path:
        return self.root.path.joinpath(*self.names, *more)

    def _enter(self, root: Root) -> None:
        self.close()
        self.names = []
        self.root = root
        self._fds.append(_open_root(root.path))

    def _count_link(self, where: Path) -> None:
        self._links += 1
        if self._links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(where))

    def _up(self, queue: deque[str]) -> None:
        if self.missing:
            self.missing.pop()
        elif self.names:
            os.close(self._fds.pop())
            self.names.pop()
        else:
            # Above the root: the rest may lead back beneath one (``../ws/x``).
            self._count_link(self.root.path)
            self._reanchor(self.root.path.parent.joinpath(*queue), queue, link=None)

    def _follow(self, name: str, queue: deque[str]) -> None:
        self._count_link(self._here(name))
        try:
            target = os.readlink(name, dir_fd=self.top)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                queue.appendleft(name)  # no longer a link: look again
                return
            raise _at(exc, self._here(name)) from None
        self._via = (self._here(name), target)
        if target.startswith("/"):
            self._reanchor(Path(target), queue, link=self._via)
        else:
            queue.extendleft(reversed(_clean(target.split("/"))))

    def _reanchor(self, path: Path, queue: deque[str], *, link: tuple[Path, str] | None) -> None:
        anchored = anchor(self._roots, path)
        if anchored is None:
            via = link or self._via
            raise OutsideRootsError(*via) if via else OutsideRootsError()
        root, parts = anchored
        rest = list(queue) if link else []
        queue.clear()
        queue.extend(_clean([*parts, *rest]))
        self._enter(root)


def anchor(roots: Sequence[Root], path: Path) -> tuple[Root, list[str]] | None:
    """The root an absolute ``path`` lies beneath and its components below it, or ``None``.

    First by spelling (the longest root a path starts with, its ``..`` left
    for the walk); failing that, by where the kernel resolves the path — a
    path through a symlink outside the roots that leads back beneath one.
    Either way the components are then walked beneath the root.
    """
    best: tuple[int, Root] | None = None
    for root in roots:
        for spelling in root.spellings:
            size = len(spelling.parts)
            if path.parts[:size] == spelling.parts and (best is None or size > best[0]):
                best = (size, root)
    if best is not None:
        return best[1], list(path.parts[best[0] :])
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None
    by_depth = sorted(roots, key=lambda root: len(root.path.parts), reverse=True)
    for root in by_depth:
        if root.holds(real):
            return root, list(real.relative_to(root.path).parts)
    return None


def _refused(path: Path) -> SymlinkRefusedError:
    return SymlinkRefusedError(f"{path} is a symbolic link, and it is not followed here")


def _clean(parts: Iterable[str]) -> list[str]:
    return [part for part in parts if part not in ("", ".")]


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_root(path: Path) -> int:
    """A descriptor of the resolved folder ``path``, reached from ``/`` through no symlink."""
    fd = os.open("/", _PASS_FLAGS)
    try:
        for part in path.parts[1:]:
            try:
                child = os.open(part, _PASS_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _at(exc, path) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _readable(fd: int) -> int:
    """A descriptor that can be listed and fsynced, of the folder ``fd`` (maybe O_PATH) is."""
    return os.open(".", _LIST_FLAGS, dir_fd=fd)


def _at(exc: OSError, path: Path) -> OSError:
    """``exc`` again, naming ``path`` (errors from ``dir_fd`` calls name only a component)."""
    return type(exc)(exc.errno, exc.strerror, str(path))


# ---------------------------------------------------------------------------
# Confinement for the tools


def open_readable(ctx: ToolContext, raw: str) -> Opened:
    """For read-only tools: open what ``raw`` names in the workspace or the session's folder.

    The plan file (while plan mode is on) is opened where it is, never
    through a symlink. Raises ``PathOutsideWorkspaceError`` for anything
    else outside those folders, ``ToolArgumentError`` for a path that cannot
    be a path, and ``OSError`` as ``open`` would.
    """
    plan = _plan_target(ctx, raw)
    if plan is not None:
        return open_plan(*plan)
    workspace, session = Root.of(ctx.workspace), Root.of(ctx.session_dir)
    roots = [workspace, session, *(Root.of(d) for d in ctx.lineage_dirs)]
    try:
        start, parts = _start(raw, workspace, roots)
        return open_beneath(roots, start, parts)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside(ctx, raw, exc, session=session)) from None


def writable_slot(ctx: ToolContext, raw: str, *, create: bool) -> Slot:
    """For writing tools: the folder and name ``raw`` names in the workspace, or the plan file.

    ``create`` makes missing folders on the way (inside the workspace only).
    Raises like ``open_readable``; the session's folder is refused.
    """
    plan = _plan_target(ctx, raw)
    if plan is not None:
        if create:
            _make_plan_folder(ctx, plan[0])
        return plan_slot(*plan)
    workspace = Root.of(ctx.workspace)
    try:
        start, parts = _start(raw, workspace, [workspace])
        return slot_beneath([workspace], start, parts, create=create)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside(ctx, raw, exc, session=None)) from None


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """Where ``raw`` leads inside ``workspace``, symlinks followed beneath it; opens nothing.

    For showing and comparing paths: the tools themselves open through
    ``open_readable`` / ``writable_slot``. Raises ``PathOutsideWorkspaceError``
    when the path leads outside (the workspace itself counts as inside) and
    ``ToolArgumentError`` when it cannot be resolved at all.
    """
    root = Root.of(workspace)
    try:
        start, parts = _start(raw, root, [root])
        return locate_beneath([root], start, parts)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside_message(root, raw, exc, None)) from None
    except OSError as exc:
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: {exc}") from exc


def shown_path(ctx: ToolContext, raw: str) -> str:
    """``raw`` as the tools show it, before it is opened (``display_path`` of its lexical form)."""
    try:
        return display_path(ctx.workspace, Path(os.path.normpath(_absolute(ctx.workspace, raw))))
    except (RuntimeError, ValueError):
        return raw


def display_path(workspace: Path, path: Path) -> str:
    """``path`` relative to the workspace when inside it (``.`` for the workspace), else as is."""
    absolute = path if path.is_absolute() else workspace / path
    normalized = Path(os.path.normpath(absolute))
    for root in (workspace.resolve(), Path(os.path.normpath(workspace.absolute()))):
        if normalized == root:
            return "."
        if normalized.is_relative_to(root):
            return normalized.relative_to(root).as_posix()
    return str(path)


def plan_file_path(ctx: ToolContext) -> Path | None:
    """The plan file while plan mode is on: its folder resolved, its own name kept.

    The name is not resolved, so a plan file that is a symlink is seen as
    one (and refused) rather than as wherever it points. A relative plan
    file is under the workspace.
    """
    plan = ctx.state.plan
    if plan is None:
        return None
    return _parent_resolved(_absolute(ctx.workspace.resolve(), str(plan.plan_file)))


def is_plan_file(ctx: ToolContext, raw: str) -> bool:
    """Whether ``raw`` names the plan file (plan mode must be on)."""
    plan_file = plan_file_path(ctx)
    if plan_file is None:
        return False
    try:
        return _parent_resolved(_absolute(ctx.workspace.resolve(), raw)) == plan_file
    except (OSError, RuntimeError, ValueError):
        return False


def plan_root(ctx: ToolContext) -> tuple[Root, str] | None:
    """The plan file's folder as a root and its name, while plan mode is on."""
    plan_file = plan_file_path(ctx)
    if plan_file is None:
        return None
    return Root.of(plan_file.parent), plan_file.name


def open_plan(root: Root, name: str) -> Opened:
    """The plan file, open for reading; a symlink there is refused (``SymlinkRefusedError``)."""
    try:
        return open_beneath([root], root, [name], follow_last=False)
    except SymlinkRefusedError:
        raise _plan_link(root, name) from None


def plan_slot(root: Root, name: str) -> Slot:
    """Where the plan file is written; a symlink there is refused (``SymlinkRefusedError``)."""
    try:
        return slot_beneath([root], root, [name], create=False, follow_last=False)
    except SymlinkRefusedError:
        raise _plan_link(root, name) from None


def _plan_link(root: Root, name: str) -> SymlinkRefusedError:
    return SymlinkRefusedError(
        f"the plan file {root.path / name} is a symbolic link; the plan is never read or "
        "written through a link (remove it, then write the plan again)"
    )


def _make_plan_folder(ctx: ToolContext, root: Root) -> None:
    # The session's folder is the host's, outside the workspace, and made on first use.
    if root.path == Root.of(ctx.session_dir).path:
        ctx.session_dir.mkdir(parents=True, exist_ok=True)


def _plan_target(ctx: ToolContext, raw: str) -> tuple[Root, str] | None:
    return plan_root(ctx) if is_plan_file(ctx, raw) else None


def _parent_resolved(path: Path) -> Path:
    normalized = Path(os.path.normpath(path))
    return normalized.parent.resolve() / normalized.name


def _start(raw: str, workspace: Root, roots: Sequence[Root]) -> tuple[Root, list[str]]:
    """The root a raw path starts from, and its components below it (``..`` kept)."""
    if "\0" in raw:
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: it contains a NUL byte")
    try:
        path = Path(raw).expanduser()
    except RuntimeError as exc:  # ``~user`` that does not exist
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: {exc}") from exc
    if not path.is_absolute():
        return workspace, list(path.parts)
    anchored = anchor(roots, path)
    if anchored is None:
        raise OutsideRootsError()
    return anchored


def _outside(ctx: ToolContext, raw: str, exc: OutsideRootsError, *, session: Root | None) -> str:
    return _outside_message(Root.of(ctx.workspace), raw, exc, session)


def _outside_message(
    workspace: Root, raw: str, exc: OutsideRootsError, session: Root | None
) -> str:
    if exc.link is not None:
        how = f" ({display_path(workspace.path, exc.link)} is a symbolic link to {exc.target})"
    else:
        lexical = Path(os.path.normpath(_absolute(workspace.path, raw)))
        try:
            real = Path(os.path.realpath(lexical))
        except (OSError, ValueError):
            real = lexical
        how = "" if real == lexical else f" (it resolves to {real})"
    if session is not None:
        return (
            f"the path {raw!r} is outside the workspace {workspace.path} and this session's "
            f"folder {session.path}{how}; read-only tools may read only inside those"
        )
    return (
        f"the path {raw!r} is outside the workspace {workspace.path}{how}; "
        "tools may only touch files inside the workspace"
    )


def _absolute(root: Path, raw: str) -> Path:
    path = Path(raw).expanduser()
    return path if path.is_absolute() else root / path


# ---------------------------------------------------------------------------
# Files and folders, by descriptor


async def in_thread(fd: int, work: Callable[[int], T]) -> T:
    """``work`` in a worker thread, given a duplicate of ``fd`` that only that thread closes.

    A cancelled call leaves its thread running; with the caller's own
    descriptor it could go on reading a number the caller has closed and the
    process has reused (a socket, say). If the thread never started, the
    duplicate is closed here.
    """
    dup = os.dup(fd)
    lock = threading.Lock()
    started = abandoned = False

    def job() -> T:
        nonlocal started
        with lock:
            if abandoned:
                raise asyncio.CancelledError
            started = True
        try:
            return work(dup)
        finally:
            os.close(dup)

    try:
        return await asyncio.to_thread(job)
    except asyncio.CancelledError:
        with lock:
            if not started:
                abandoned = True
                os.close(dup)
        raise


def is_binary(fd: int) -> bool:
    """Whether the head of the open file holds a NUL byte (the usual text/binary test)."""
    return b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0)


def read_all(fd: int) -> bytes:
    """Every byte of the open file, from its start."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def write_at(dir_fd: int, name: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``name`` in the open folder ``dir_fd`` with ``data``, in one step, durably.

    A temporary file is created in that folder (``O_EXCL | O_NOFOLLOW``),
    written, fsynced and renamed over ``name`` there, then the folder is
    fsynced. The file keeps ``mode``, or the existing file's mode; a new file
    gets the default (0666 less the umask). A symlink at ``name`` is replaced,
    never written through.
    """
    if mode is None:
        try:
            existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            mode = stat.S_IMODE(existing.st_mode) if stat.S_ISREG(existing.st_mode) else None
    temp = f".{name[:_TEMP_STEM]}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666,
        dir_fd=dir_fd,
    )
    try:
        try:
            write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


@dataclass(frozen=True)
class Entry:
    """One entry found by ``scan``."""

    #: Components below the folder scanned.
    parts: tuple[str, ...]
    #: A folder, or a link to one (listed as a folder, never entered).
    is_dir: bool
    is_link: bool
    #: The open folder holding the entry; valid until the scan moves on.
    dir_fd: int

    @property
    def name(self) -> str:
        return self.parts[-1]

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


def scan(dir_fd: int, *, max_depth: int | None = None) -> Iterator[Entry]:
    """The entries below the open folder ``dir_fd``, depth first, each folder's sorted by name.

    That is the order of their sorted relative paths. Folders in
    ``SKIPPED_DIRS`` are neither listed nor entered, links are listed but
    never entered, and each folder is entered by ``O_NOFOLLOW`` relative to
    its parent's descriptor, so a folder swapped for a link is skipped, not
    followed. ``max_depth`` (1 = the direct children) bounds the descent;
    unreadable folders are skipped silently.
    """
    # An explicit stack: a deep tree cannot exhaust Python's recursion limit.
    stack: list[tuple[int, bool, tuple[str, ...], Iterator[os.DirEntry[str]]]] = [
        (dir_fd, False, (), _entries(dir_fd))
    ]
    try:
        while stack:
            fd, _, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                fd, owned, _, _ = stack.pop()
                if owned:
                    os.close(fd)
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir and entry.name in SKIPPED_DIRS:
                continue
            parts = (*prefix, entry.name)
            yield Entry(parts, is_dir, is_link, fd)
            if not is_dir or is_link or (max_depth is not None and len(parts) >= max_depth):
                continue
            try:
                child = os.open(entry.name, _LIST_FLAGS, dir_fd=fd)
            except OSError:
                continue  # swapped for a link, or unreadable
            stack.append((child, True, parts, _entries(child)))
    finally:
        for fd, owned, _, _ in stack:
            if owned:
                os.close(fd)


def _entries(fd: int) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as found:
            return iter(sorted(found, key=lambda entry: entry.name))
    except OSError:
        return iter(())


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over ``/``-separated relative paths.

    ``*`` and ``?`` never cross a ``/``; ``**`` does (``**/`` also matches no
    folder at all, so ``**/*.py`` matches ``a.py``); ``[abc]``, ``[!abc]``
    and ``{py,pyi}`` work as in shells.
    """
    return re.compile(rf"\A{_translate(pattern)}\Z")


def glob_depth(pattern: str) -> int | None:
    """How many path levels a glob can match (``None``: any, because of ``**``)."""
    if "**" in pattern:
        return None
    return pattern.strip("/").count("/") + 1


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            else:
                out.append(".*")
                i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        elif c == "{" and (end := pattern.find("}", i)) != -1:
            choices = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(choice) for choice in choices) + ")")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# ---------------------------------------------------------------------------
# Arguments


def str_arg(args: JSONObject, name: str, *, default: str | None = None) -> str:
    """A string argument; required unless ``default`` is given."""
    value = args.get(name)
    if value is None:
        if default is None:
            raise ToolArgumentError(f"missing required argument {name!r}")
        return default
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def opt_str_arg(args: JSONObject, name: str) -> str | None:
    """An optional string argument; ``None`` (or an empty string) when omitted."""
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def number_arg(
    args: JSONObject,
    name: str,
    *,
    default: float,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
) -> float:
    """A number argument (``integer`` refuses fractions); numeric strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    number: float
    if isinstance(value, bool):
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ToolArgumentError(
                f"argument {name!r} must be a number, got {_shown(value)}"
            ) from None
    else:
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if number != number or number in (float("inf"), float("-inf")):
        raise ToolArgumentError(f"argument {name!r} must be a finite number")
    if integer and number != int(number):
        raise ToolArgumentError(f"argument {name!r} must be a whole number, got {number:g}")
    if minimum is not None and number < minimum:
        raise ToolArgumentError(f"argument {name!r} must be at least {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ToolArgumentError(f"argument {name!r} must be at most {maximum:g}, got {number:g}")
    return number


def int_arg(args: JSONObject, name: str, *, default: int, minimum: int | None = None) -> int:
    return int(number_arg(args, name, default=default, minimum=minimum, integer=True))


def bool_arg(args: JSONObject, name: str, *, default: bool = False) -> bool:
    """A boolean argument; ``"true"`` / ``"false"`` strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolArgumentError(f"argument {name!r} must be true or false, got {_shown(value)}")


def _shown(value: JSONValue) -> str:
    kind = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:60]}{'…' if len(text) > 60 else ''}"
