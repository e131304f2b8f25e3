"""A throwaway PostgreSQL server for the PostgreSQL store's tests and benchmark.

Debian's ``postgresql`` package (``make postgresql``) provides ``initdb``,
``pg_ctl`` and ``postgres``; they are found through ``pg_config --bindir``,
``/usr/lib/postgresql/*/bin`` (newest first) or ``PATH``. The cluster lives in
a temporary folder and listens on a Unix socket in that folder only
(``listen_addresses = ''``: no TCP port, nothing another process on the
machine could reach by accident). ``initdb`` and ``pg_ctl`` refuse to run as
root, so as root they run as the ``postgres`` user (``runuser``) and the
folder is handed to it.

The server keeps PostgreSQL's durable defaults (``fsync``, synchronous
commits): the tests kill it and the benchmark measures real commits.

Use::

    from support.postgres_server import PostgresServer, postgres_server_fixture  # noqa: F401

    def test_something(postgres_url: str) -> None:  # a fresh database per test
        ...

The benchmark imports ``PostgresServer`` from here too (one copy of the code).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: The role ``initdb`` creates; local socket connections are trusted (``--auth=trust``).
SUPERUSER = "postgres"
#: How long a start or a stop may take on a loaded 2-core machine.
START_TIMEOUT_S = 120
_PROGRAMS = ("initdb", "pg_ctl", "postgres")
MISSING = (
    "PostgreSQL's server programs (initdb, pg_ctl, postgres) were not found "
    "(pg_config --bindir, /usr/lib/postgresql/*/bin, PATH): run `make postgresql` "
    "(Debian's postgresql package)"
)


class ServerMissingError(RuntimeError):
    """The server programs are not installed."""


def find_bindir() -> Path:
    """The folder with ``initdb``, ``pg_ctl`` and ``postgres``; ``ServerMissingError`` if none."""
    candidates: list[Path] = []
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=30
        )
        candidates.append(Path(out.stdout.strip()))

    def version(folder: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in folder.parent.name.split(".") if p.isdigit())

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).resolve().parent)
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in _PROGRAMS):
            return folder
    raise ServerMissingError(MISSING)


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, reached through its Unix socket."""

    bindir: Path = field(default_factory=find_bindir)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cairn-pg-")))
    _databases: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql:///{dbname}?host={self.socket_dir}&user={SUPERUSER}"

    # -- life cycle --------------------------------------------------------

    def start(self) -> PostgresServer:
        """Create the cluster on first use, then start it and wait until it accepts connections."""
        if not self.data.exists():
            self._initdb()
        self._run(
            str(self.bindir / "pg_ctl"),
            *("-D", str(self.data), "-l", str(self.log), "-w"),
            *("-t", str(START_TIMEOUT_S), "start"),
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(
                str(self.bindir / "pg_ctl"),
                *("-D", str(self.data), "-m", mode, "-w", "-t", str(START_TIMEOUT_S), "stop"),
                check=False,
            )

    def kill(self) -> None:
        """SIGKILL the postmaster, then every process it started: a crash of the whole server.

        Its children are listed before the postmaster dies (they would be
        re-parented after). A restart (``start``) then runs crash recovery.
        """
        pid = self.postmaster_pid()
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(_alive(p) for p in (pid, *children)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL server {pid} did not die after SIGKILL")
            time.sleep(0.01)

    def remove(self) -> None:
        self.stop("immediate")  # the folder goes next: nothing to shut down cleanly for
        shutil.rmtree(self.root, ignore_errors=True)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.remove()

    # -- databases ---------------------------------------------------------

    def create_database(self, prefix: str = "cairn_test") -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{next(self._databases)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    # -- helpers -----------------------------------------------------------

    def _initdb(self) -> None:
        self.data.mkdir(mode=0o700)
        if os.geteuid() == 0:
            owner = pwd.getpwnam(SUPERUSER)
            for path in (self.root, self.data):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            *("-D", str(self.data), "-U", SUPERUSER, "--auth=trust"),
            *("-E", "UTF8", "--locale=C", "--no-instructions"),
        )
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "40",
            "shared_buffers": "32MB",
            # Less output in server.log; the tests read it only when a start fails.
            "log_min_messages": "warning",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# cairn tests\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _run(self, *command: str, check: bool = True) -> None:
        if os.geteuid() == 0:
            command = ("runuser", "-u", SUPERUSER, "--", *command)
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30, cwd=self.root
        )
        if check and done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{log}"
            )


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    # A zombie counts: the postmaster of a restart would take it for a running
    # server (its lock file names that pid), so wait until it has been reaped.
    return Path(f"/proc/{pid}").exists()


def new_server() -> PostgresServer:
    """A server not yet started; without PostgreSQL's programs the test fails (never skips)."""
    try:
        return PostgresServer()
    except ServerMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session", name="postgres_server")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """One server for the whole test session (each test gets its own database)."""
    server = new_server()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(name="postgres_url")
def postgres_url_fixture(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgres_server.create_database()


#: The same fixtures under their own names, for ``from postgres_server import postgres_url``.
postgres_server = postgres_server_fixture
postgres_url = postgres_url_fixture
