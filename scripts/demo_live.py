"""Watch a real model compact: Cairn against SmolLM2-135M behind llama.cpp's server.

``make demo-live`` runs it. It starts ``python -m llama_cpp.server`` on a free
loopback port with an 8,192-token context, then feeds ``cairn -p`` turns
(``--resume``) that each add a long report, until the context crosses the
compaction line and the model writes the summary in a compaction fork. The
session's transcript is left in a temporary CAIRN_HOME and summarized with
``cairn inspect``.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

N_CTX = 8_192
REPORT = (
    "The nightly build of the invoice service ran the full test matrix again. Every "
    "worker reported its timings, the cache hit rate and the slowest steps. "
) * 22


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, server: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit("demo-live: llama_cpp.server exited; is cairn[e2e] installed?")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.3)
    sys.exit("demo-live: the server did not start in time")


def main(model: Path) -> int:
    if not model.is_file():
        sys.exit(f"demo-live: no model at {model}; run `make demo-live`")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
         "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--model_alias", "smollm2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_ready(port, server)
        with tempfile.TemporaryDirectory(prefix="cairn-demo-live-") as tmp:
            home, workspace = Path(tmp) / "home", Path(tmp) / "ws"
            workspace.mkdir()
            env = {
                **os.environ,
                "CAIRN_HOME": str(home),
                "CAIRN_MODEL": "smollm2",
                "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
                "OPENAI_API_KEY": "local",
                "CAIRN_CONTEXT_WINDOW": str(N_CTX),
                "CAIRN_MAX_OUTPUT_TOKENS": "192",
            }
            session: list[str] = []
            for part in range(1, 8):
                prompt = (
                    f"Part {part} of the build report:\n{REPORT}\nSummarize it in one sentence."
                )
                command = [sys.executable, "-m", "cairn", "-p", prompt, "--output-format", "json"]
                done = subprocess.run(
                    command + (["--resume", session[0]] if session else []),
                    env=env, cwd=workspace, capture_output=True, text=True, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    print(done.stderr, file=sys.stderr)
                    return done.returncode
                result = json.loads(done.stdout)
                session[:] = [result["session_id"]]
                print(f"turn {part}: {result['result'][:100]!r}")
            (transcript,) = home.glob(f"projects/*/{session[0]}.jsonl")
            subprocess.run([sys.executable, "-m", "cairn", "inspect", str(transcript)], check=False)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/models/x.gguf")))
