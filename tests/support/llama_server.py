"""A real model behind a real server: llama.cpp's OpenAI-compatible server on 127.0.0.1.

``python -m llama_cpp.server`` (the ``cairn[e2e]`` extra) serves
SmolLM2-135M-Instruct (``make test`` fetches it; see ``tests/real_model/``)
with a real chat template, real tokenization, real streaming and usage, and
its own context-length errors. The server is started once per test session
on a free port and stopped by its pid.

``RecordingProxy`` sits in front of it on another loopback port and keeps
every request body and every raw response byte, so a test can compare what
Cairn sent and read with what the server said — without touching either.

Use::

    from support.llama_server import LlamaServer, llama_server_fixture  # noqa: F401
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from support.openai_server import PROXY_VARS

#: Set by ``make test``: the GGUF file the server loads.
MODEL_ENV = "CAIRN_TEST_MODEL"
N_CTX = 8_192
#: The first start loads the model (about a second); a cold machine needs more.
START_TIMEOUT_S = 120.0
#: The slowest ``cairn -p`` turn measured on a busy 2-core machine: 109 s (six CPU
#: hogs; a compaction's fork and the turn after it, the server on two threads),
#: 49 s on one thread beside twelve hogs; 8-34 s on an idle machine.
SLOWEST_TURN_S = 110.0
#: The longest wait for a first byte there: 31 s evaluating a 2,600-token prompt
#: (two threads, six hogs); 46 s for one thread that shares its CPU fairly with six
#: hogs (17 ms a token).
SLOWEST_FIRST_BYTE_S = 60.0
#: Cairn's first-byte deadline against the real model: an order of magnitude above
#: ``SLOWEST_FIRST_BYTE_S`` (its default, 120 s, is twice it).
FIRST_BYTE_TIMEOUT_S = 10 * SLOWEST_FIRST_BYTE_S
#: The guard around a turn and the proxy's wait for its upstream: an order of
#: magnitude above ``SLOWEST_TURN_S``, so that only a hang reaches them (and Cairn's
#: own deadlines, below them, report it first).
DEADLINE_S = 10 * SLOWEST_TURN_S


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """One running ``llama_cpp.server`` process."""

    model: Path
    n_ctx: int = N_CTX
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, log: Path) -> LlamaServer:
        self.log = log
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            # One thread for both phases: llama.cpp's threads meet at a barrier after
            # every operation, and on a busy machine the one descheduled stalls the
            # other. With two threads on two busy cores a token took 0.2-3.6 s (six
            # to twelve CPU hogs) against 0.04-0.07 s with one; idle, one thread is
            # 10% slower at tokens, twice as slow at prompts (4.4 ms a token).
            "--n_threads",
            "1",
            "--n_threads_batch",
            "1",
            "--seed",
            "7",
        ]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2_000:]}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                connection.request("GET", "/v1/models")
                if connection.getresponse().status == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer /v1/models in {START_TIMEOUT_S} s")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@dataclass
class Exchange:
    """One request through the proxy: what was sent and what came back, raw."""

    path: str
    body: dict[str, Any]
    status: int = 0
    response: bytes = b""

    def sse_chunks(self) -> list[dict[str, Any]]:
        """The JSON chunks of a streamed response, in order."""
        chunks = []
        for line in self.response.decode("utf-8", "replace").splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
        return chunks

    def usage(self) -> dict[str, Any] | None:
        """The server's usage: the last chunk that carried one."""
        found = [c["usage"] for c in self.sse_chunks() if c.get("usage")]
        return found[-1] if found else None


class RecordingProxy:
    """Forwards every request to ``upstream`` unchanged and records the exchange."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._forward(self.rfile.read(length))

            def _forward(self, raw: bytes) -> None:
                body = json.loads(raw) if raw else {}
                exchange = Exchange(self.path, body)
                with proxy._lock:
                    proxy.exchanges.append(exchange)
                upstream = http.client.HTTPConnection(
                    "127.0.0.1", proxy.upstream_port, timeout=DEADLINE_S
                )
                headers = {"Content-Type": "application/json"} if raw else {}
                upstream.request(self.command, self.path, body=raw or None, headers=headers)
                response = upstream.getresponse()
                exchange.status = response.status
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    piece = response.read1(65_536)
                    if not piece:
                        break
                    exchange.response += piece
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                upstream.close()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def chats(self) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.path.endswith("/chat/completions")]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def model_path() -> Path:
    raw = os.environ.get(MODEL_ENV, "")
    path = Path(raw) if raw else Path(__file__).resolve().parents[2] / ".cache" / "models"
    if path.is_dir():
        path = path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        # Never a silent skip: the real-model tests are part of the suite.
        pytest.fail(
            f"the test model is missing ({path}); run `make test`, which installs "
            "cairn[e2e] and fetches it (scripts/fetch_test_model.py)"
        )
    return path


@pytest.fixture(scope="session", name="llama_server")
def llama_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The real server, once per test session, with ``n_ctx`` 8,192."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"llama-cpp-python[server] is not installed ({exc}); run `make test`")
    server = LlamaServer(model_path())
    server.start(tmp_path_factory.mktemp("llama") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="proxy")
def proxy_fixture(
    llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RecordingProxy]:
    """A fresh recording proxy in front of the session's real server, for one test."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    proxy = RecordingProxy(llama_server.port)
    try:
        yield proxy
    finally:
        proxy.close()
