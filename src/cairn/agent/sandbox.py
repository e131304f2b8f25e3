"""Confinement: opening paths beneath a few root folders and nowhere else.

Confinement works on descriptors, never by checking a path and then opening
it again by name: between the two, another process could swap a folder or a
file for a symlink pointing outside. A path is walked one component at a
time from a descriptor of its root — the workspace, or for read-only tools
the session's folder — each folder opened with ``O_DIRECTORY | O_NOFOLLOW``
relative to the descriptor of the one above, the last component with
``O_NOFOLLOW``; the caller then reads, stats or lists that descriptor
(``cairn.agent.fd_io``). A write goes to a ``Slot``: the verified folder's
descriptor and a name in it. ``..`` closes the folder the walk opened
last: the kernel is never asked for a parent (above a root, ``anchor``
places the rest, which is walked again beneath a root or refused). The root
itself is opened the same way from ``/`` along its resolved path, so it too
is reached through no symlink.

Symlinks are never followed by the kernel. A link met on the way is read
(``readlinkat``) and its target walked in the same way: a link that leads
beneath a root works as it always did, one that leads elsewhere — or one
swapped in mid-walk — is refused like ``../x`` or an absolute path
elsewhere, with ``OutsideRootsError`` naming the link and its target.
Whatever is opened is thus beneath a root when it is opened.

The file tools (``cairn.agent.tools.workspace``), skills and instruction
files all read through these walks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from cairn.errors import ToolError

#: Symlinks one path may pass through, as the kernel allows.
MAX_SYMLINKS = 40

# Folders on the way are only passed through: O_PATH (Linux) needs no read
# permission on them, as the kernel's own path walk needs none.
_PASS_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A folder opened to be listed or fsynced, never through a link.
LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The last component: O_NONBLOCK so a FIFO cannot hang the tool, O_NOCTTY so
#: a terminal is never adopted.
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: What open(O_NOFOLLOW) reports for a symlink: ELOOP, EMLINK (BSD), or
#: ENOTDIR with O_DIRECTORY.
_LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})


class OutsideRootsError(ToolError):
    """A walk left every root it may reach: by ``..``, an absolute path or a symlink."""

    def __init__(self, link: Path | None = None, target: str | None = None) -> None:
        self.link = link
        self.target = target
        super().__init__(
            f"{link} is a symbolic link to {target}" if link is not None else "it leads outside"
        )


class SymlinkRefusedError(ToolError):
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
    return os.open(".", LIST_FLAGS, dir_fd=fd)


def _at(exc: OSError, path: Path) -> OSError:
    """``exc`` again, naming ``path`` (errors from ``dir_fd`` calls name only a component)."""
    return type(exc)(exc.errno, exc.strerror, str(path))


def absolute_path(root: Path, raw: str) -> Path:
    """``raw`` (``~`` expanded) as an absolute path, relative ones taken below ``root``."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else root / path
