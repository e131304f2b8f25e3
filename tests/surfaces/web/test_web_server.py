"""``cairn web``'s server alone, without a browser (starlette's test client against the
local OpenAI server): the token, the Host and the Origin, and the WebSocket protocol —
panes, prompts, commands, events, the guard, a long session's history a page at a time,
bad frames."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from cairn.agent.facade import SessionUsage
from cairn.agent.settings import Settings
from cairn.agent.tools.base import PermissionMode
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.web import WebSetup, create_app
from cairn.surfaces.web.frames import usage_json
from cairn.surfaces.web.hub import HISTORY_PAGE
from cairn.surfaces.web.page_frames import HISTORY_LIMIT_MAX
from support.long_session import LONG, write_long_session
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

TOKEN = "test-token-123"
#: The test client's requests say they reach this address (``Host``, the server's port).
PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
SOCKET = f"ws://127.0.0.1:{PORT}/ws"
ORIGIN = {"origin": BASE}
#: The subprotocols the page offers: the protocol, and the token.
PROTOCOLS = ["cairn.v1", f"cairn.token.{TOKEN}"]
SUMMARY = "<summary>\n## Objective and constraints\nExplain calc.py.\n</summary>"
ANSWER = "calc.py defines add(), which subtracts where it should add. " * 30


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def answering(server: OpenAIServer, *, hold: threading.Event | None = None) -> None:
    server.respond_with(
        lambda body: (
            Reply(text=SUMMARY, hold=hold, hold_after=4 if hold else None)
            if is_fork(body)
            else Reply(text=ANSWER)
        )
    )


def make_client(
    tmp_path: Path,
    server: OpenAIServer,
    mode: PermissionMode = "bypass",
    settings: Settings | None = None,
) -> TestClient:
    """One ``cairn web`` app; every app of a test shares its workspace and its store."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=32_768)
    setup = WebSetup(
        model,
        OpenAIProvider(model),
        workspace,
        home=tmp_path / "home",
        permission_mode=mode,
        settings=settings or Settings(),
    )
    return TestClient(create_app(setup, TOKEN), base_url=BASE)


class Page:
    """One WebSocket, as the page uses it: send frames, read until a frame matches."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.seen: list[dict[str, Any]] = []

    def send(self, **frame: Any) -> None:
        self.socket.send_text(json.dumps(frame))

    def until(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for _ in range(5_000):
            frame: dict[str, Any] = json.loads(self.socket.receive_text())
            self.seen.append(frame)
            if match(frame):
                return frame
            if frame["type"] == "error":  # a frame that fails the test, not one to wait past
                raise AssertionError(f"the server answered an error: {frame}")
        raise AssertionError("the frame never came")

    def event(self, pane: str, kind: str) -> dict[str, Any]:
        frame = self.until(
            lambda f: f["type"] == "event" and f["pane"] == pane and f["event"]["type"] == kind
        )
        event: dict[str, Any] = frame["event"]
        return event

    def idle(self, pane: str) -> dict[str, Any]:
        return self.until(lambda f: f["type"] == "state" and f["pane"] == pane and not f["busy"])

    def open(self, pane: str, session_id: str | None = None) -> dict[str, Any]:
        self.send(type="open", pane=pane, sessionId=session_id)
        return self.until(lambda f: f["type"] in ("opened", "refused") and f["pane"] == pane)

    def ask(self, pane: str, text: str) -> None:
        self.send(type="prompt", pane=pane, text=text)
        self.until(lambda f: f["type"] == "state" and f["pane"] == pane and f["busy"])
        self.idle(pane)


@contextmanager
def page(client: TestClient) -> Iterator[Page]:
    with client.websocket_connect(SOCKET, PROTOCOLS, headers=dict(ORIGIN)) as socket:
        assert socket.accepted_subprotocol == "cairn.v1"  # never the token's
        yield Page(socket)


def test_the_page_is_served_without_the_token_and_no_response_sets_a_cookie(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The page and its files reveal nothing; no credential is ever a cookie (a cookie is
    not bound to a port: every other server on 127.0.0.1 would receive it)."""
    with make_client(tmp_path, openai_server) as client:
        for url in ("/", f"/?token={TOKEN}", "/static/app.js", "/static/ws.js"):
            response = client.get(url)
            assert response.status_code == 200, url
            assert "set-cookie" not in response.headers, url
            assert TOKEN not in response.text
            assert response.headers["referrer-policy"] == "no-referrer"
            policy = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy and "connect-src 'self';" in policy
        assert client.get("/ws").status_code == 404  # no session data over plain HTTP
        assert not client.cookies


def refused_code(client: TestClient, protocols: list[str] | None, headers: dict[str, str]) -> int:
    with (
        pytest.raises(WebSocketDisconnect) as closed,
        client.websocket_connect(SOCKET, protocols, headers=headers),
    ):
        pass
    return closed.value.code


def test_the_websocket_needs_the_token_in_its_handshake_and_this_servers_origin(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    with make_client(tmp_path, openai_server) as client:
        refused: list[tuple[str, list[str] | None, dict[str, str]]] = [
            ("no token", None, ORIGIN),
            ("no token, the protocol", ["cairn.v1"], ORIGIN),
            ("a wrong token", ["cairn.v1", "cairn.token.wrong"], ORIGIN),
            ("a token of another length", ["cairn.v1", f"cairn.token.{TOKEN}x"], ORIGIN),
            ("the token without the protocol", [f"cairn.token.{TOKEN}"], ORIGIN),
            ("no Origin", PROTOCOLS, {}),
            ("another site's Origin", PROTOCOLS, {"origin": "http://evil.example"}),
            ("another port's Origin", PROTOCOLS, {"origin": "http://127.0.0.1:9999"}),
        ]
        for what, protocols, headers in refused:
            assert refused_code(client, protocols, dict(headers)) == 4403, what
        # A token in the query is no credential.
        with (
            pytest.raises(WebSocketDisconnect) as closed,
            client.websocket_connect(f"{SOCKET}?token={TOKEN}", headers=dict(ORIGIN)),
        ):
            pass
        assert closed.value.code == 4403
        with page(client) as p:
            p.send(type="list")
            assert p.until(lambda f: f["type"] == "sessions")["sessions"] == []


def test_a_request_for_another_host_is_refused_even_with_the_token(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """DNS rebinding: a site whose name now points at 127.0.0.1 reaches this port, but
    its requests name its own host, and that alone refuses them."""
    with make_client(tmp_path, openai_server) as client:
        for host in ("evil.example:8765", "evil.example", "127.0.0.1:9999", "127.0.0.1"):
            for url in ("/", "/static/app.js"):
                response = client.get(url, headers={"host": host})
                assert response.status_code == 403, (host, url)
                assert "answers only to" in response.text
            origin = {"origin": f"http://{host}", "host": host}
            assert refused_code(client, PROTOCOLS, origin) == 4403, host
        for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST:8765"):
            assert client.get("/", headers={"host": host}).status_code == 200, host
            headers = {"origin": f"http://{host}", "host": host}
            with client.websocket_connect(SOCKET, PROTOCOLS, headers=headers) as socket:
                assert socket.receive_json()["type"] == "config"  # the first frame, always
                socket.send_text(json.dumps({"type": "list"}))
                assert socket.receive_json()["type"] == "sessions"


def test_a_pane_opens_a_session_streams_a_prompt_and_lists_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(Reply(text="calc.py subtracts."))
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        opened = p.open("p1")
        assert opened["type"] == "opened" and opened["messages"] == []
        assert opened["usage"]["window"] == 32_768
        p.send(type="prompt", pane="p1", text="What does calc.py do?")
        updated = p.event("p1", "messageUpdated")
        assert "calc.py subtracts.".startswith(updated["content"])
        added = p.until(
            lambda f: (
                f["type"] == "event"
                and f["event"]["type"] == "messageAdded"
                and f["event"]["message"]["role"] == "assistant"
            )
        )
        assert added["event"]["message"]["content"] == "calc.py subtracts."
        p.idle("p1")
        sessions = p.until(lambda f: f["type"] == "sessions" and f["sessions"])["sessions"]
        assert sessions[0]["id"] == opened["sessionId"]
        assert sessions[0]["firstPrompt"] == "What does calc.py do?"


def test_compact_sends_the_state_the_content_and_the_block_to_that_pane_only(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        p.open("left")
        p.open("right")
        for n in range(3):
            p.ask("left", f"question {n}")
        p.ask("right", "one question")
        p.seen.clear()
        p.send(type="prompt", pane="left", text="/compact keep the questions")
        block = p.event("left", "compactBlockAdded")["block"]
        assert block["meta"]["kind"] == "compact_summary"
        p.event("left", "compactionStateChange")
        p.idle("left")
        kinds = [
            (f["pane"], f["event"]["type"])
            for f in p.seen
            if f["type"] == "event" and f["event"]["type"].startswith("compact")
        ]
        assert kinds[0] == ("left", "compactionStateChange")
        assert kinds[-1] == ("left", "compactionStateChange")
        assert ("left", "compactionContentUpdate") in kinds
        assert all(pane == "left" for pane, _ in kinds)
        # No notice for a compaction that happened: its block says it.
        assert not [f for f in p.seen if f["type"] == "notice"]
    fork = next(b for b in openai_server.bodies if is_fork(b))
    assert "keep the questions" in str(fork["messages"][-1]["content"])


def is_added(frame: dict[str, Any], role: str, content: str | None = None) -> bool:
    """Whether ``frame`` is the ``messageAdded`` of a ``role`` message (with ``content``)."""
    if frame["type"] != "event" or frame["event"]["type"] != "messageAdded":
        return False
    message = frame["event"]["message"]
    return bool(message["role"] == role and content in (None, message.get("content")))


def test_the_guard_refuses_a_switch_and_a_clear_and_queues_a_prompt_while_the_pane_compacts(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    answering(openai_server)
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            first = p.open("p1")["sessionId"]
            for n in range(3):
                p.ask("p1", f"question {n}")
            other = p.open("p2")["sessionId"]
            p.send(type="close", pane="p2")
            answering(openai_server, hold=gate)
            p.send(type="prompt", pane="p1", text="/compact")
            p.until(lambda f: f["type"] == "state" and f["pane"] == "p1" and f["busy"])
            assert p.open("p1", other)["type"] == "refused"
            p.send(type="prompt", pane="p1", text="/clear")
            assert "/clear refused" in p.until(lambda f: f["type"] == "refused")["text"]
            # A prompt is not refused: it waits in the queue for the compaction to end.
            p.send(type="prompt", pane="p1", text="a prompt now")
            queued = p.event("p1", "queueChange")["prompts"]
            assert [q["text"] for q in queued] == ["a prompt now"]
            gate.set()
            p.until(lambda f: is_added(f, "user", "a prompt now"))
            p.idle("p1")
            # The guard is lifted: the pane switches.
            opened = p.open("p1", other)
            assert opened["type"] == "opened" and opened["sessionId"] == other
            assert first != other
    finally:
        gate.set()
    assert sum(is_fork(b) for b in openai_server.bodies) == 1


def test_a_session_is_open_in_one_pane_at_a_time(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    with make_client(tmp_path, openai_server) as client, page(client) as p, page(client) as tab:
        sid = p.open("p1")["sessionId"]
        p.ask("p1", "hello")
        refused = p.open("p2", sid)
        assert refused["type"] == "refused" and "another pane" in refused["text"]
        assert tab.open("x", sid)["type"] == "refused"  # another page, too
        p.send(type="close", pane="p1")
        assert p.open("p2", sid)["type"] == "opened"


def test_a_resumed_session_opens_with_its_whole_history(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    with make_client(tmp_path, openai_server) as client:
        with page(client) as p:
            sid = p.open("p1")["sessionId"]
            for n in range(3):
                p.ask("p1", f"question {n}")
            p.ask("p1", "/compact")
            p.ask("p1", "after")
        with page(client) as p:
            history = p.open("p1", sid)["messages"]
    kinds = [(m["role"], m.get("meta", {}).get("kind", "chat")) for m in history]
    assert kinds.count(("user", "compact_summary")) == 1
    users = [m["content"] for m in history if m["role"] == "user" and "meta" not in m]
    assert users == ["question 0", "question 1", "question 2", "after"]
    block_at = kinds.index(("user", "compact_summary"))
    assert [m["content"] for m in history[block_at + 1 :] if m["role"] == "user"] == ["after"]


def long_session(tmp_path: Path, pairs: int = 5_000) -> list[str]:
    """The long past session in the workspace ``make_client`` serves; its UI entries' ids."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return write_long_session(tmp_path / "home", workspace, pairs)


def ids_of(frame: dict[str, Any]) -> list[str]:
    return [m["id"] for m in frame["messages"]]


def test_a_10000_message_session_opens_with_its_last_page_and_pages_back_to_the_first(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    ids = long_session(tmp_path)
    assert len(ids) == 10_001
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        opened = p.open("p1", LONG)
        assert opened["type"] == "opened"
        assert (opened["start"], opened["total"]) == (10_001 - HISTORY_PAGE, 10_001)
        assert ids_of(opened) == ids[-HISTORY_PAGE:]
        shown, start, pages = ids_of(opened), opened["start"], 0
        while start > 0:
            p.send(type="history", pane="p1", before=start, limit=HISTORY_LIMIT_MAX)
            frame = p.until(lambda f: f["type"] == "history")
            assert frame["pane"] == "p1" and frame["sessionId"] == LONG
            assert frame["total"] == 10_001
            assert frame["start"] + len(frame["messages"]) == start  # just before the last
            assert 0 < len(frame["messages"]) <= HISTORY_LIMIT_MAX
            shown, start, pages = ids_of(frame) + shown, frame["start"], pages + 1
        assert shown == ids  # every entry once, in order
        assert pages == 10  # 9,701 before the first page: ten of at most 1,000
        # A page asked for again is the same page (positions are stable).
        p.send(type="history", pane="p1", before=5_000, limit=3)
        again = p.until(lambda f: f["type"] == "history")
        assert (again["start"], ids_of(again)) == (4_997, ids[4_997:5_000])


def answer_to(p: Page) -> dict[str, Any]:
    """The next ``history`` or ``error`` frame (the sidebar's ``sessions`` may come between)."""
    for _ in range(100):
        frame: dict[str, Any] = p.socket.receive_json()
        if frame["type"] in ("history", "error"):
            return frame
    raise AssertionError("neither a history page nor an error came")


def test_bad_history_frames_are_one_line_errors_and_the_socket_stays_open(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    long_session(tmp_path, pairs=50)  # 101 entries
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        p.open("p1", LONG)
        bad: list[dict[str, Any]] = [
            {"pane": "p1", "limit": 10},  # no before
            {"pane": "p1", "before": -1, "limit": 10},
            {"pane": "p1", "before": "50", "limit": 10},
            {"pane": "p1", "before": 5.0, "limit": 10},
            {"pane": "p1", "before": True, "limit": 10},
            {"pane": "p1", "before": None, "limit": 10},
            {"pane": "p1", "before": 50},  # no limit
            {"pane": "p1", "before": 50, "limit": 0},
            {"pane": "p1", "before": 50, "limit": -3},
            {"pane": "p1", "before": 50, "limit": HISTORY_LIMIT_MAX + 1},
            {"pane": "p1", "before": 50, "limit": [10]},
            {"pane": "p1", "before": 102, "limit": 10},  # past the session's 101 entries
            {"pane": "p9", "before": 50, "limit": 10},  # no such pane
            {"before": 50, "limit": 10},  # no pane at all
        ]
        for frame in bad:
            p.send(type="history", **frame)
            error = answer_to(p)
            assert error["type"] == "error" and error["pane"] is None, (frame, error)
            assert error["text"].startswith("history: ") or "no pane" in error["text"], error
            assert "\n" not in error["text"] and "Traceback" not in error["text"]
        # The socket is still open, and a good frame is answered.
        p.send(type="history", pane="p1", before=101, limit=HISTORY_LIMIT_MAX)
        frame = p.until(lambda f: f["type"] == "history")
        assert (frame["start"], len(frame["messages"]), frame["total"]) == (0, 101, 101)


def test_a_history_page_is_answered_while_the_pane_streams_and_the_stream_goes_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    ids = long_session(tmp_path, pairs=200)  # 401 entries: opened holds the last 300
    gate = threading.Event()
    openai_server.respond_with(lambda body: Reply(text=ANSWER, hold=gate, hold_after=3))
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            opened = p.open("p1", LONG)
            assert opened["start"] == 101
            p.send(type="prompt", pane="p1", text="a question while I scroll up")
            p.event("p1", "messageUpdated")  # the answer streams, held after a few pieces
            p.send(type="history", pane="p1", before=101, limit=HISTORY_PAGE)
            frame = p.until(lambda f: f["type"] == "history")
            assert (frame["start"], ids_of(frame)) == (0, ids[:101])
            gate.set()
            added = p.until(
                lambda f: (
                    f["type"] == "event"
                    and f["event"]["type"] == "messageAdded"
                    and f["event"]["message"]["role"] == "assistant"
                )
            )
            assert added["event"]["message"]["content"] == ANSWER
            p.idle("p1")
            # The turn's two messages came after the 401, at positions 401 and 402.
            p.send(type="history", pane="p1", before=403, limit=2)
            last = p.until(lambda f: f["type"] == "history")
            assert last["start"] == 401 and last["total"] == 403
            assert [m["content"] for m in last["messages"]] == [
                "a question while I scroll up",
                ANSWER,
            ]
    finally:
        gate.set()


def test_a_permission_request_is_answered_by_the_page(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    arguments = json.dumps({"path": "a.txt", "content": "A"})
    openai_server.script(
        Reply(tool_calls=[ToolCallSpec("write_file", arguments)]), Reply(text="ok")
    )
    with make_client(tmp_path, openai_server, mode="ask") as client, page(client) as p:
        p.open("p1")
        p.send(type="prompt", pane="p1", text="write a.txt")
        request = p.event("p1", "permissionRequested")
        assert request["tool"] == "write_file" and "a.txt" in request["summary"]
        p.send(type="answer", pane="p1", permissionId=request["id"], decision="allow_once")
        p.idle("p1")
    assert (tmp_path / "ws" / "a.txt").read_text() == "A"


def test_bad_frames_are_one_line_errors_and_the_socket_stays_open(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        p.socket.send_text("not json")
        assert p.until(lambda f: f["type"] == "error")["text"] == "a frame is JSON"
        for frame in ({"type": "dance"}, {"type": "prompt", "pane": "p9", "text": "hi"}):
            p.send(**frame)
            error = p.until(lambda f: f["type"] == "error")["text"]
            assert "\n" not in error and error
        p.send(type="open", pane="p1", sessionId="no-such-session")
        assert "no session" in p.until(lambda f: f["type"] == "refused")["text"]
        assert p.open("p1")["type"] == "opened"


def test_the_guard_holds_while_a_background_task_runs_and_lifts_when_it_ends(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    arguments = json.dumps({"command": "sleep 5", "run_in_background": True})
    openai_server.script(Reply(tool_calls=[ToolCallSpec("bash", arguments)]), Reply(text="started"))
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        other = p.open("p2")["sessionId"]
        p.send(type="close", pane="p2")
        p.open("p1")
        p.send(type="prompt", pane="p1", text="start the build in the background")
        p.until(
            lambda f: (
                f["type"] == "event"
                and f["event"]["type"] == "messageAdded"
                and f["event"]["message"].get("content") == "started"
            )
        )
        ended = p.until(
            lambda f: f["type"] == "state" and f["pane"] == "p1" and f["status"] == "idle"
        )
        assert ended["busy"]  # the turn is over, the task is not
        assert p.open("p1", other)["type"] == "refused"
        p.send(type="prompt", pane="p1", text="/clear")
        assert "running a background task" in p.until(lambda f: f["type"] == "refused")["text"]
        p.idle("p1")  # the poll sees the task end
        assert p.open("p1", other)["type"] == "opened"


def test_a_bad_frame_is_an_error_frame_and_the_running_turn_goes_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Binary, too deep, too big, a path or an empty or huge id as a session: each is
    answered with one error frame while another pane's answer streams, and the socket
    and that turn go on as if it had not come."""
    gate = threading.Event()
    openai_server.respond_with(lambda body: Reply(text=ANSWER, hold=gate, hold_after=3))
    deep = "[" * 100_000 + "]" * 100_000
    not_an_id = "is not a session id"

    def opening(pane: str, session_id: str | None) -> str:
        return json.dumps({"type": "open", "pane": pane, "sessionId": session_id})

    bad: list[tuple[str, str | bytes, str]] = [
        ("binary", b'{"type": "list"}', "not binary"),
        ("binary garbage", bytes(range(256)), "not binary"),
        ("100,000-deep JSON", deep, "nested too deeply"),
        ("100,000-deep object", '{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
        ("over a MiB", json.dumps({"type": "list", "pad": "x" * (1 << 20)}), "at most"),
        ("a path", opening("p2", "../../../../etc/passwd"), not_an_id),
        ("an empty id", opening("p2", ""), not_an_id),
        ("a 10,000-character id", opening("p2", "a" * 10_000), not_an_id),
        ("a slash", opening("p2", "a/b"), not_an_id),
        ("a 10,000-character pane", opening("p" * 10_000, None), "pane must be at most"),
    ]
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            p.open("p1")
            p.send(type="prompt", pane="p1", text="a question that streams")
            p.event("p1", "messageUpdated")  # held after a few pieces
            for what, frame, says in bad:
                if isinstance(frame, bytes):
                    p.socket.send_bytes(frame)
                else:
                    p.socket.send_text(frame)
                error = p.until(lambda f: f["type"] in ("error", "refused", "opened"))
                assert error["type"] == "error" and error["pane"] is None, (what, error)
                text = error["text"]
                assert says in text and "\n" not in text and len(text) < 300, (what, text)
            # Nothing was opened, nothing stopped: the turn ends with its whole answer.
            gate.set()
            added = p.until(
                lambda f: (
                    f["type"] == "event"
                    and f["event"]["type"] == "messageAdded"
                    and f["event"]["message"]["role"] == "assistant"
                )
            )
            assert added["pane"] == "p1" and added["event"]["message"]["content"] == ANSWER
            p.idle("p1")
            assert p.open("p2")["type"] == "opened"  # and the socket still serves
    finally:
        gate.set()
    assert not (tmp_path / "etc").exists()


def test_context_cost_and_model_answer_in_the_pane_with_the_same_words(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 26 item 4: the browser runs the three reports as commands, never the model."""
    answering(openai_server)
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        p.open("left")
        p.ask("left", "one question")
        sent = len(openai_server.bodies)
        for name, first in (("/context", "context "), ("/cost", "cost "), ("/model", "model ")):
            p.send(type="prompt", pane="left", text=name)

            def answered(f: dict[str, Any], first: str = first) -> bool:
                return f["type"] == "notice" and str(f["text"]).startswith(first)

            frame = p.until(answered)
            assert frame["pane"] == "left"
            if name == "/cost":
                assert "output       " in frame["text"]
    assert len(openai_server.bodies) == sent


# -- issue 29: the everyday gestures through AgentSession ---------------------------------


def slow_answers(server: OpenAIServer, gate: threading.Event) -> None:
    """Prompts holding ``slow`` stream a few pieces of ``ANSWER`` and wait for ``gate``."""
    server.respond_with(
        lambda body: (
            Reply(text=ANSWER, hold=gate, hold_after=3)
            if "slow" in str(body["messages"][-1].get("content"))
            else Reply(text=f"answer to {body['messages'][-1].get('content')}")
        )
    )


def sent_prompts(server: OpenAIServer) -> list[str]:
    """The last user message of every request the model got, in order."""
    return [str(b["messages"][-1].get("content")) for b in server.bodies]


def test_a_line_sent_while_the_pane_works_is_queued_edited_withdrawn_and_sent_after_the_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    slow_answers(openai_server, gate)
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            sid = p.open("p1")["sessionId"]
            p.send(type="prompt", pane="p1", text="a slow question")
            p.event("p1", "messageUpdated")
            for text in ("second", "third", "fourth"):
                p.send(type="prompt", pane="p1", text=text)
                p.event("p1", "queueChange")
            # The page that opens the pane again (a reload) gets the queue in `opened`.
            reopened = p.open("p1", sid)
            assert [q["text"] for q in reopened["queued"]] == ["second", "third", "fourth"]
            ids = {q["text"]: q["id"] for q in reopened["queued"]}
            p.send(type="editQueued", pane="p1", id=ids["second"], text="second, edited")
            assert [q["text"] for q in p.event("p1", "queueChange")["prompts"]] == [
                "second, edited",
                "third",
                "fourth",
            ]
            p.send(type="unqueue", pane="p1", id=ids["third"])
            assert [q["text"] for q in p.event("p1", "queueChange")["prompts"]] == [
                "second, edited",
                "fourth",
            ]
            p.send(type="unqueue", pane="p1", id="no-such-line")
            assert "sent already" in p.until(lambda f: f["type"] == "notice")["text"]
            gate.set()
            p.until(lambda f: is_added(f, "assistant", "answer to fourth"))
            p.idle("p1")
    finally:
        gate.set()
    assert sent_prompts(openai_server) == ["a slow question", "second, edited", "fourth"]


def test_stop_keeps_the_queue_and_nothing_queued_is_sent(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    slow_answers(openai_server, gate)
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            sid = p.open("p1")["sessionId"]
            p.send(type="prompt", pane="p1", text="a slow question")
            p.event("p1", "messageUpdated")
            p.send(type="prompt", pane="p1", text="later")
            p.event("p1", "queueChange")
            p.send(type="cancel", pane="p1")
            gate.set()
            p.idle("p1")
            assert [q["text"] for q in p.open("p1", sid)["queued"]] == ["later"]
    finally:
        gate.set()
    assert sent_prompts(openai_server) == ["a slow question"]


def test_a_shell_command_is_a_block_live_and_when_the_session_is_opened_again(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    with make_client(tmp_path, openai_server) as client:
        with page(client) as p:
            sid = p.open("p1")["sessionId"]
            p.send(type="prompt", pane="p1", text="!echo '<b>hi</b>'")
            live = p.until(lambda f: is_added(f, "user"))["event"]["message"]["shell"]
            p.idle("p1")
            p.send(type="prompt", pane="p1", text="!")
            assert "usage: !command" in p.until(lambda f: f["type"] == "notice")["text"]
        with page(client) as p:
            messages = p.open("p1", sid)["messages"]
    # The command and its output apart (the page shows them as plain text), as bash ran it.
    assert live["command"] == "echo '<b>hi</b>'" and live["ok"] is True
    assert live["output"].startswith("<b>hi</b>\n") and "bash-output" not in live["output"]
    assert [m["shell"] for m in messages if "shell" in m] == [live]
    assert openai_server.bodies == []  # the model was never asked


def test_at_completion_offers_workspace_paths_and_bad_prefixes_are_errors(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src" / "cairn").mkdir(parents=True)
    (workspace / "src" / "calc.py").write_text("x = 1\n")
    (workspace / "README.md").write_text("hi\n")
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        p.open("p1")
        p.send(type="complete", pane="p1", prefix="src/ca")
        frame = p.until(lambda f: f["type"] == "completions")
        assert frame == {
            "type": "completions",
            "pane": "p1",
            "prefix": "src/ca",
            "paths": ["src/cairn/", "src/calc.py"],
        }
        p.send(type="complete", pane="p1", prefix="")
        assert p.until(lambda f: f["type"] == "completions")["paths"] == ["src/", "README.md"]
        p.send(type="complete", pane="p1", prefix="../")
        assert p.until(lambda f: f["type"] == "completions")["paths"] == []
        for bad in (None, 3, "x" * 2_000):
            p.send(type="complete", pane="p1", prefix=bad)
            error = p.socket.receive_json()
            while error["type"] == "sessions":
                error = p.socket.receive_json()
            assert error["type"] == "error" and "prefix must be" in error["text"], error


def test_the_mode_is_in_opened_and_a_mode_frame_changes_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    with make_client(tmp_path, openai_server, mode="ask") as client, page(client) as p:
        assert p.open("p1")["mode"] == "ask"
        p.send(type="mode", pane="p1", mode="plan")
        assert p.event("p1", "modeChange")["mode"] == "plan"
        p.send(type="mode", pane="p1", mode="bypass")
        assert p.event("p1", "modeChange")["mode"] == "bypass"
        p.send(type="mode", pane="p1", mode="yolo")
        assert "mode must be one of" in p.until(lambda f: f["type"] == "error")["text"]
        assert p.open("p1", None)["mode"] == "ask"  # a new session: the server's mode


def test_rewind_branches_before_a_prompt_and_gives_its_text_back(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    arguments = json.dumps({"path": "notes.txt", "content": "written after"})
    openai_server.script(
        Reply(text="first answer"),
        Reply(tool_calls=[ToolCallSpec("write_file", arguments)]),
        Reply(text="wrote it"),
    )
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        original = p.open("p1")["sessionId"]
        p.ask("p1", "first question")
        p.ask("p1", "write the notes")
        assert (tmp_path / "ws" / "notes.txt").exists()
        p.send(type="points", pane="p1")
        points = p.until(lambda f: f["type"] == "points")["points"]
        assert [(q["text"], q["filesChanged"]) for q in points] == [
            ("first question", True),
            ("write the notes", True),
        ]
        assert points[1]["changedFiles"] == [str(tmp_path / "ws" / "notes.txt")] or points[1][
            "changedFiles"
        ] == ["notes.txt"]
        p.send(type="rewind", pane="p1", pointId=points[1]["id"], restoreFiles=True)
        opened = p.until(lambda f: f["type"] == "opened")
        branch = opened["sessionId"]
        assert branch != original
        assert [m["content"] for m in opened["messages"]] == ["first question", "first answer"]
        rewound = p.until(lambda f: f["type"] == "rewound")
        assert (rewound["from"], rewound["sessionId"]) == (original, branch)
        assert rewound["prompt"] == "write the notes"
        assert len(rewound["files"]["removed"]) == 1
        assert not (tmp_path / "ws" / "notes.txt").exists()
        listed = p.until(
            lambda f: (
                f["type"] == "sessions" and {original, branch} <= {s["id"] for s in f["sessions"]}
            )
        )
        assert listed
        p.send(type="rewind", pane="p1", pointId="no-such-point")
        assert p.until(lambda f: f["type"] in ("refused", "notice"))["type"] == "refused"


def test_fork_opens_a_copy_and_both_gestures_are_refused_while_the_pane_works(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    slow_answers(openai_server, gate)
    try:
        with make_client(tmp_path, openai_server) as client, page(client) as p:
            original = p.open("p1")["sessionId"]
            p.ask("p1", "first question")
            p.send(type="prompt", pane="p1", text="/fork")
            opened = p.until(lambda f: f["type"] == "opened")
            copy = opened["sessionId"]
            assert copy != original
            assert [m["content"] for m in opened["messages"]] == [
                "first question",
                "answer to first question",
            ]
            assert "forked" in p.until(lambda f: f["type"] == "notice")["text"]
            p.send(type="points", pane="p1")
            point = p.until(lambda f: f["type"] == "points")["points"][0]["id"]
            p.send(type="prompt", pane="p1", text="a slow question")
            p.event("p1", "messageUpdated")
            p.seen.clear()
            p.send(type="prompt", pane="p1", text="/fork")
            assert "cannot fork" in p.until(lambda f: f["type"] == "notice")["text"]
            p.send(type="rewind", pane="p1", pointId=point, restoreFiles=False)
            assert "cannot rewind" in p.until(lambda f: f["type"] == "notice")["text"]
            p.send(type="prompt", pane="p1", text="/rewind 1")
            assert "cannot rewind" in p.until(lambda f: f["type"] == "notice")["text"]
            gate.set()
            p.idle("p1")
            assert not [f for f in p.seen if f["type"] in ("opened", "queueChange")]
    finally:
        gate.set()


def test_the_meter_never_shows_a_number_over_the_budget() -> None:
    over = usage_json(SessionUsage(None, 4_096, 3_000, 0, 36_401))
    assert over["meter"] == {"tokens": None, "estimated": True, "overBudget": True}
    under = usage_json(SessionUsage(1_200, 4_096, 3_000, 0, 1_500))
    assert under["meter"] == {"tokens": 1_200, "estimated": False, "overBudget": False}
