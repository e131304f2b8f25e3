"""Symlink-swap races against every file tool: nothing outside the workspace is reached.

A racer in a separate process keeps swapping, inside the workspace, a folder
(``sub``) with a symlink to an outside folder, and a file (``file.txt``)
with a symlink to the outside secret file — and, for the read-only tools'
second root, a folder of the session's folder. Meanwhile each tool is called
over and over with paths through the swapped components. An escape is a
result that shows the secret's content or the name of a file only the
outside folder holds, or any change in the outside folder (a file created,
the secret modified). Escapes must be 0, and so must crashes (an exception
out of a tool's ``run``, where a result with ``is_error`` was due).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn.agent.state import SessionState
from cairn.agent.tools.base import Tool, ToolContext
from cairn.agent.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from cairn.agent.tools.search import Grep
from cairn.messages import JSONObject
from reliability.soak import count, record

#: The racer: swaps each real entry with its link (RENAME_EXCHANGE on Linux,
#: so the name always exists; three renames elsewhere) and back, until the
#: stop file appears; it leaves every pair as it found it, repairs a pair a
#: writing tool renamed over, prints how many swaps it made, and stops by
#: itself if the test process dies.
RACER = r"""
import ctypes, os, sys

stop, *pairs = sys.argv[1:]
libc = ctypes.CDLL(None, use_errno=True)
exchange = getattr(libc, "renameat2", None)

def swap(a, b):
    if exchange is not None and exchange(-100, a.encode(), -100, b.encode(), 2) == 0:
        return
    os.rename(a, a + ".mid")
    os.rename(b, a)
    os.rename(a + ".mid", b)

def repair(real, link, target):
    # A writing tool may have replaced the link (renamed over it) with a file.
    if not os.path.islink(link):
        os.symlink(target, link + ".tmp")
        os.rename(link + ".tmp", link)
    if os.path.islink(real):
        os.unlink(real)
        with open(real, "w") as handle:
            handle.write("harmless A\n")

parent = os.getppid()
triples = list(zip(pairs[::3], pairs[1::3], pairs[2::3]))
swaps = 0
while True:
    for real, link, _ in triples:
        swap(real, link)
    for real, link, _ in triples:
        swap(real, link)
    for real, link, target in triples:
        repair(real, link, target)
    swaps += 1
    if swaps == 1:
        print("ready", flush=True)
    if os.path.exists(stop) or os.getppid() != parent:
        break
print(swaps, flush=True)
"""


@dataclass
class Tally:
    attempts: int = 0
    escapes: int = 0
    errors: int = 0
    crashes: int = 0
    examples: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scene:
    workspace: Path
    session: Path
    outside: Path
    secret: str
    outside_only: str

    def outside_state(self) -> tuple[list[str], str]:
        return sorted(p.name for p in self.outside.iterdir()), (
            self.outside / "secret.txt"
        ).read_text()

    def reset_outside(self) -> None:
        shutil.rmtree(self.outside)
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(self.secret)
        (self.outside / self.outside_only).write_text(self.secret)


def build_scene(tmp_path: Path) -> Scene:
    token = uuid.uuid4().hex
    scene = Scene(
        workspace=tmp_path / "ws",
        session=tmp_path / "session",
        outside=tmp_path / "outside",
        # "A" and "B" occur once, so an edit through a link would change it.
        secret=f"SECRET-{token} A B\n",
        outside_only=f"outside-only-{token}.txt",
    )
    scene.outside.mkdir()
    scene.reset_outside()
    for folder in (scene.workspace / "sub", scene.session / "saved"):
        folder.mkdir(parents=True)
        (folder / "secret.txt").write_text("harmless A\n")
        (folder / "edit.txt").write_text("harmless A\n")
        folder.with_name(f".{folder.name}-link").symlink_to(scene.outside)
    (scene.workspace / "file.txt").write_text("harmless A\n")
    (scene.workspace / ".file-link").symlink_to(scene.outside / "secret.txt")
    return scene


def calls(scene: Scene) -> dict[str, list[JSONObject]]:
    """Per tool, the argument sets tried in turn: every one goes through a swapped name."""
    saved = str(scene.session / "saved")
    edits: list[JSONObject] = [
        {"path": path, "old_string": old, "new_string": new}
        for path in ("sub/edit.txt", "file.txt")
        for old, new in (("A", "B"), ("B", "A"))
    ]
    return {
        "read_file": [
            {"path": "sub/secret.txt"},
            {"path": "file.txt"},
            {"path": f"{saved}/secret.txt"},
            {"path": str(scene.workspace / "sub" / "secret.txt")},
        ],
        "write_file": [
            {"path": "sub/new.txt", "content": "written\n"},
            {"path": "sub/deeper/new.txt", "content": "written\n"},
            {"path": "file.txt", "content": "harmless A\n"},
        ],
        "edit_file": edits,
        "list_files": [{"path": "sub"}, {"path": "file.txt"}, {"path": saved}, {"path": "."}],
        "glob": [
            {"path": ".", "pattern": "**/*"},
            {"path": "sub", "pattern": "*.txt"},
            {"path": saved, "pattern": "**/*"},
        ],
        "grep": [
            {"pattern": "SECRET|harmless", "path": "sub"},
            {"pattern": "SECRET|harmless"},
            {"pattern": "SECRET|harmless", "path": "file.txt"},
            {"pattern": "SECRET|harmless", "path": saved},
            {"pattern": "SECRET", "path": ".", "glob": "*.txt"},
        ],
    }


TOOLS: dict[str, Tool] = {
    "read_file": ReadFile(),
    "write_file": WriteFile(),
    "edit_file": EditFile(),
    "list_files": ListFiles(),
    "glob": ListFiles(),
    "grep": Grep(),
}


def context(scene: Scene) -> ToolContext:
    return ToolContext(
        workspace=scene.workspace,
        state=SessionState("race", scene.workspace),
        session_dir=scene.session,
        permission_mode="bypass",
    )


def racer(scene: Scene, stop: Path) -> subprocess.Popen[str]:
    triples = [
        (scene.workspace / "sub", scene.workspace / ".sub-link", scene.outside),
        (scene.session / "saved", scene.session / ".saved-link", scene.outside),
        (
            scene.workspace / "file.txt",
            scene.workspace / ".file-link",
            scene.outside / "secret.txt",
        ),
    ]
    process = subprocess.Popen(
        [sys.executable, "-c", RACER, str(stop), *(str(p) for t in triples for p in t)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


async def hammer(scene: Scene, attempts: int) -> dict[str, Tally]:
    ctx = context(scene)
    tallies: dict[str, Tally] = {}
    for name, variants in calls(scene).items():
        tally = tallies[name] = Tally()
        for attempt in range(attempts):
            args = variants[attempt % len(variants)]
            tally.attempts += 1
            try:
                result = await TOOLS[name].run(args, ctx)
            except Exception as exc:
                tally.crashes += 1
                tally.examples.append(f"{name} {args}: {type(exc).__name__}: {exc}")
                continue
            tally.errors += result.is_error
            leaked = scene.secret.split()[0] in result.content
            listed = scene.outside_only in result.content
            changed = scene.outside_state() != (
                sorted(["secret.txt", scene.outside_only]),
                scene.secret,
            )
            if leaked or listed or changed:
                tally.escapes += 1
                tally.examples.append(f"{name} {args}: {result.content[:200]!r}")
                scene.reset_outside()
    return tallies


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    yield build_scene(tmp_path)


def test_no_file_tool_escapes_the_workspace_under_symlink_swaps(
    scene: Scene, tmp_path: Path
) -> None:
    attempts = count(100, 3_000)
    stop = tmp_path / "stop"
    process = racer(scene, stop)
    try:
        tallies = asyncio.run(hammer(scene, attempts))
    finally:
        stop.touch()
        output, _ = process.communicate(timeout=60)
    swaps = int(output.strip())
    escapes = sum(t.escapes for t in tallies.values())
    crashes = sum(t.crashes for t in tallies.values())
    record(
        "symlink_race",
        attempts_per_tool=attempts,
        tools=len(tallies),
        escapes=escapes,
        crashes=crashes,
        swaps=swaps,
        **{f"escapes_{name}": t.escapes for name, t in tallies.items()},
        **{f"error_results_{name}": t.errors for name, t in tallies.items()},
    )
    assert process.returncode == 0
    assert swaps >= 1
    assert all(t.attempts == attempts for t in tallies.values())
    examples = [e for t in tallies.values() for e in t.examples[:3]]
    assert escapes == 0 and crashes == 0, examples
    # Nor was anything outside touched by the last call.
    assert scene.outside_state() == (sorted(["secret.txt", scene.outside_only]), scene.secret)
