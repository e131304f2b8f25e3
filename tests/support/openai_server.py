"""A real OpenAI-compatible chat-completions server for tests (DESIGN §9).

It listens on 127.0.0.1 (random port) in a background thread, speaks HTTP/1.1
with keep-alive, and answers ``POST /v1/chat/completions`` from a queue of
scripted ``Reply`` objects: Server-Sent Events in the exact OpenAI chunk
format when the request streams, a ``chat.completion`` JSON object when it
does not. Nothing in the client is mocked: the ``openai`` SDK talks to it
over a socket exactly as it would to a provider.

Use::

    from support.openai_server import OpenAIServer, Reply  # tests/conftest.py registers the fixture

    def test_something(openai_server: OpenAIServer) -> None:
        openai_server.script(Reply(text="Hello there"))
        ...  # point the client at openai_server.base_url
        assert openai_server.requests[0].body["model"] == "test-model"

A reply can stream text, reasoning and tool calls, carry a usage override,
answer with an HTTP error, fail after some chunks (an SSE error event or a
dropped connection), or stall on a ``threading.Event`` until the test
releases it. With an empty queue the server answers ``DEFAULT_TEXT``.

Fault modes, for the provider's deadlines and error paths (all off by
default): never answer (``stall_before_headers``), go silent after some
chunks (``stall_after``), send only SSE keep-alive comments
(``keepalive_after``), reset the connection (``reset_before_headers``,
``reset_after``), slip raw bytes into the body (``inject``) and pace the
chunks (``chunk_interval``). A stalled reply ends when the client goes away.

Three wire APIs, routed by the path's end: ``…/chat/completions`` (OpenAI
chat completions), ``…/messages`` (Anthropic Messages, ``wire_anthropic``)
and ``…/responses`` (the OpenAI Responses API, ``wire_responses``). A native
request is validated as the real API validates it (a refusal is recorded and
answered with HTTP 400 without taking a scripted reply), then normalized to
the chat-completions body a chat client would have sent: ``requests[i].body``
and what responders see always have that one shape, and ``native`` keeps the
body as received. The same ``Reply`` plays in every API, fault modes
included; its counts (``error_after``, ``abort_after``, …) count chat chunks,
which the native renderings group their events by, so a fault cuts every
API's answer at the same point. The prompt count is the chat one, computed
from the normalized body, so every API reports the same total; Anthropic's
prompt caching (``cache_control`` breakpoints) and the Responses API's
automatic caching split it as the providers document, and ``cache_stats``
records each answered request's split.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import select
import socket
import socketserver
import struct
import sys
import termios
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cairn.wire_apis import WIRE_APIS, WireAPI
from support import wire_anthropic, wire_responses

DEFAULT_TEXT = "Hello from the test server."

#: Proxy variables cleared by the fixture so the client never leaves 127.0.0.1.
PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the scripted model makes; ``id`` defaults to a fresh ``call_…``."""

    name: str
    arguments: str = "{}"
    id: str | None = None


@dataclass(frozen=True)
class UsageSpec:
    """The usage the server reports; ``extra`` adds raw fields (``prompt_cache_hit_tokens``)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int | None = None
    cached_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        total = self.total_tokens
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total
            if total is not None
            else self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens, "audio_tokens": 0}
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class ErrorSpec:
    """An OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""

    message: str
    code: str | None = None
    type: str = "invalid_request_error"
    param: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class Reply:
    """One scripted response.

    Streaming order: a ``role`` chunk, reasoning deltas, content deltas,
    tool-call deltas, a finish chunk, a usage chunk (when the request asked
    for ``stream_options.include_usage``), then ``[DONE]``. The counts in
    ``error_after``, ``abort_after`` and ``hold_after`` are numbers of SSE
    chunks sent before the event, role chunk included.
    """

    text: str | None = None
    reasoning: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    #: Send the argument pieces of several calls interleaved (assembly by index).
    interleave_tool_calls: bool = False
    usage: UsageSpec | None = None
    #: Default: ``tool_calls`` when there are calls, else ``stop``.
    finish_reason: str | None = None
    #: Leave out the finish chunk (a truncated stream that still ends cleanly).
    omit_finish: bool = False
    #: Send no usage chunk even when asked (llama.cpp's server never sends one).
    omit_usage: bool = False
    #: Characters per content / reasoning / arguments delta.
    delta_chars: int = 4
    #: An HTTP error status; ``error`` (or a generic one) is the JSON body.
    status: int = 200
    error: ErrorSpec | None = None
    #: Send this many chunks, then an SSE ``error`` event carrying ``error``.
    error_after: int | None = None
    #: Send this many chunks, then drop the connection mid-body.
    abort_after: int | None = None
    #: Send this many chunks, then end the body cleanly with no ``[DONE]``: what
    #: llama-cpp-python's server does with a stream it cannot serve (0: empty).
    end_after: int | None = None
    #: Stall until the test sets it: before the response starts
    #: (``hold_after=None``) or after ``hold_after`` chunks.
    hold: threading.Event | None = None
    hold_after: int | None = None
    #: Read the request and never answer (no status line) until the client goes away.
    stall_before_headers: bool = False
    #: Send the headers and this many chunks, then nothing until the client goes away.
    stall_after: int | None = None
    #: Send the headers and this many chunks, then only SSE keep-alive comments
    #: (``: ping``), one per ``keepalive_interval`` seconds, until the client goes away.
    keepalive_after: int | None = None
    keepalive_interval: float = 0.02
    #: Read the request, then reset the connection (TCP RST) without answering.
    reset_before_headers: bool = False
    #: Send this many chunks, then reset the connection (TCP RST, not a clean close).
    reset_after: int | None = None
    #: Raw bytes sent after ``inject_after`` chunks, as one piece of the chunked
    #: body (an SSE-level fault: invalid UTF-8, a data line that is not JSON) or,
    #: with ``inject_unframed``, straight onto the socket (a broken HTTP body).
    #: The stream then goes on as scripted.
    inject: bytes | None = None
    inject_after: int = 1
    inject_unframed: bool = False
    #: Seconds to wait before each chunk after the first (a slow model, a trickle).
    chunk_interval: float = 0.0
    #: Sent with error statuses so the SDK's retries are immediate (0 < ms).
    retry_after_ms: int | None = 1
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Set by the server when it starts playing this reply.
    started: threading.Event = field(default_factory=threading.Event)
    #: Set when a stalled reply (``stall_before_headers``, ``stall_after``) ends
    #: because the client closed its connection.
    client_left: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def http_error(
        cls,
        status: int,
        message: str = "The server had an error while processing your request.",
        *,
        code: str | None = None,
        type: str | None = None,
        **kwargs: Any,
    ) -> Reply:
        """An HTTP error answer; ``type`` defaults to what OpenAI sends for ``status``."""
        if type is None:
            type = (
                "server_error"
                if status >= 500
                else "rate_limit_exceeded"
                if status == 429
                else "invalid_request_error"
            )
        return cls(status=status, error=ErrorSpec(message, code=code, type=type), **kwargs)

    def resolved_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def resolved_text(self) -> str | None:
        if self.text is None and self.reasoning is None and not self.tool_calls:
            return DEFAULT_TEXT
        return self.text


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it (header names lower-cased)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: dict[str, Any]
    raw: bytes
    #: The client's port: two requests with the same port shared one connection.
    client_port: int = 0
    #: The wire API: ``chat`` (chat completions), ``anthropic`` (Messages) or ``responses``.
    api: str = "chat"
    #: The body as received, for the native APIs (``body`` is its chat-completions form).
    native: dict[str, Any] | None = None
    #: The refusal's message when the server answered with a validation error (400/404)
    #: instead of playing a reply.
    rejected: str | None = None


@dataclass(frozen=True)
class CacheStat:
    """How the server counted one answered request's prompt (``OpenAIServer.cache_stats``).

    ``prompt_tokens`` is the chat count of the normalized body (or the
    scripted ``UsageSpec.prompt_tokens``), the same for every API;
    ``cache_read`` and ``cache_creation`` are the tokens read from and written
    to the prompt cache, ``input_tokens`` the rest. In the Responses API's
    own usage, ``input_tokens`` is ``prompt_tokens`` and ``cached_tokens`` is
    ``cache_read``.
    """

    #: Index of the request in ``OpenAIServer.requests``.
    request: int
    api: str
    prompt_tokens: int
    cache_read: int
    cache_creation: int
    input_tokens: int
    output_tokens: int


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class _StopError(Exception):
    """The server is stopping (or the client went away): end this response."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, owner: OpenAIServer) -> None:
        self.owner = owner
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (a DNS lookup); skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout, a reset) is a fault being tested, not news.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- routing ---------------------------------------------------------

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]}
            )
        else:
            self._send_json(404, ErrorSpec("not found", type="not_found").to_json())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = self.path.split("?", 1)[0].rstrip("/")
        if route.endswith("/chat/completions"):
            api = "chat"
        elif route.endswith("/messages"):
            api = "anthropic"
        elif route.endswith("/responses"):
            api = "responses"
        else:
            self._send_json(404, ErrorSpec(f"no route {self.path}", type="not_found").to_json())
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            self._refuse(api, wire_anthropic.Rejection("request body is not JSON"))
            return
        if api == "chat":
            self._answer_chat(body, raw)
        else:
            self._answer_native(api, body, raw)

    def _recorded(
        self,
        body: dict[str, Any],
        raw: bytes,
        api: str = "chat",
        native: dict[str, Any] | None = None,
        rejected: str | None = None,
    ) -> RecordedRequest:
        return RecordedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
            client_port=int(self.client_address[1]),
            api=api,
            native=native,
            rejected=rejected,
        )

    def _answer_chat(self, body: dict[str, Any], raw: bytes) -> None:
        owner = self.server.owner
        index, reply = owner._record(self._recorded(body, raw), take_reply=True)
        assert reply is not None
        reply.started.set()
        self._run(reply, _ChatAnswer(owner, index, reply, body))

    def _answer_native(self, api: str, native: dict[str, Any], raw: bytes) -> None:
        owner = self.server.owner
        wire = wire_anthropic if api == "anthropic" else wire_responses
        rejection = wire.validate(native, owner._secret)
        try:
            body = wire.normalize(native)
        except (AttributeError, TypeError, ValueError):  # a body too malformed to read
            body = {}
            rejection = rejection or wire_anthropic.Rejection("the request could not be read")
        if rejection is not None:
            owner._record(
                self._recorded(body, raw, api, native, rejection.message), take_reply=False
            )
            self._refuse(api, rejection)
            return
        index, reply = owner._record(self._recorded(body, raw, api, native), take_reply=True)
        assert reply is not None
        reply.started.set()
        answer_type = _AnthropicAnswer if api == "anthropic" else _ResponsesAnswer
        self._run(reply, answer_type(owner, index, reply, body, native))

    def _refuse(self, api: str, rejection: wire_anthropic.Rejection) -> None:
        """Answer a request the API refuses, in that API's error format."""
        if api == "anthropic":
            request_id = _anthropic_request_id()
            kind = wire_anthropic.error_type(rejection.status, None)
            payload = wire_anthropic.error_body(kind, rejection.message, request_id)
            self._send_json(rejection.status, payload, {"request-id": request_id})
            return
        error = ErrorSpec(rejection.message, code=rejection.code, param=rejection.param)
        self._send_json(rejection.status, error.to_json())

    def _run(self, reply: Reply, answer: _Answer) -> None:
        try:
            self._play(reply, answer)
        except (_StopError, BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    # -- playing a reply -------------------------------------------------

    def _wait(self, hold: threading.Event) -> None:
        while not hold.wait(0.02):
            if self.server.stopping.is_set():
                raise _StopError

    def _until_client_leaves(self) -> bool:
        """Block, sending nothing, until the client closes its end (true) or the
        server stops (false)."""
        self.close_connection = True
        while not self.server.stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.02)
            if not readable:
                continue
            try:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    return True
            except OSError:
                return True
            time.sleep(0.02)  # the client sent more bytes: not gone, keep waiting
        return False

    def _keepalive(self, interval: float) -> None:
        """Only SSE comments, until a write fails because the client went away."""
        self.close_connection = True
        while not self.server.stopping.wait(interval):
            self._write_chunk(b": ping\n\n")

    def _reset(self) -> None:
        """Close with SO_LINGER 0: the client sees a TCP reset, not an orderly close.

        A linger-0 close discards whatever the kernel has not sent yet, and Nagle
        may still hold the last chunks: the reset would then come "after" chunks
        the client never got (6 of 800 resets on a quiet machine). So it waits
        until the client's kernel has acknowledged every byte sent.
        """
        self.close_connection = True
        with contextlib.suppress(OSError):
            self._until_acknowledged()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def _until_acknowledged(self, limit_s: float = 10.0) -> None:
        """Wait until the send queue is empty (``TIOCOUTQ``: bytes sent but not acked)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and not self.server.stopping.is_set():
            queued = fcntl.ioctl(self.connection, termios.TIOCOUTQ, b"\0\0\0\0")
            if struct.unpack("i", queued)[0] == 0:
                return
            time.sleep(0.001)

    def _fault(self, reply: Reply, sent: int, answer: _Answer) -> bool:
        """Play the fault mode due after ``sent`` chunks; whether the response is over."""
        if reply.inject is not None and reply.inject_after == sent:
            if reply.inject_unframed:
                self.wfile.write(reply.inject)
            else:
                self._write_chunk(answer.injected(reply.inject))
        if reply.stall_after == sent:
            if self._until_client_leaves():
                reply.client_left.set()
            return True
        if reply.keepalive_after == sent:
            self._keepalive(reply.keepalive_interval)
            return True
        if reply.reset_after == sent:
            self._reset()
            return True
        if sent and reply.chunk_interval and self.server.stopping.wait(reply.chunk_interval):
            raise _StopError
        return False

    def _play(self, reply: Reply, answer: _Answer) -> None:
        if reply.hold is not None and reply.hold_after is None:
            self._wait(reply.hold)
        if reply.stall_before_headers:
            if self._until_client_leaves():
                reply.client_left.set()
            return
        if reply.reset_before_headers:
            self._reset()
            return
        if reply.status >= 400:
            error = reply.error or ErrorSpec("error", type="server_error")
            payload, extra = answer.http_error(reply.status, error)
            headers = {**extra, **reply.headers}
            if reply.retry_after_ms is not None:
                headers.setdefault("retry-after-ms", str(reply.retry_after_ms))
            self._send_json(reply.status, payload, headers)
            return
        answer.prepare()
        if answer.streams():
            self._stream(reply, answer)
        else:
            self._send_json(reply.status, answer.complete(), {**answer.headers(), **reply.headers})

    def _send_json(
        self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:12]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def _stream(self, reply: Reply, answer: _Answer) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:12]}")
        for name, value in {**answer.headers(), **reply.headers}.items():
            self.send_header(name, value)
        self.end_headers()
        sent_all = 0
        for sent, frame in enumerate(answer.frames()):
            if reply.hold is not None and reply.hold_after == sent:
                self._wait(reply.hold)
            if reply.abort_after == sent:
                self._abort()
                return
            if reply.end_after == sent:
                self._write_chunk(b"")
                return
            if reply.error_after == sent:
                error = reply.error or ErrorSpec("stream failed", type="server_error")
                self._write_chunk(answer.error_frame(sent, error))
                self._write_chunk(b"")
                return
            if self._fault(reply, sent, answer):
                return
            self._write_chunk(frame)
            sent_all = sent + 1
        if self._fault(reply, sent_all, answer):
            return
        if answer.trailer:
            self._write_chunk(answer.trailer)
        self._write_chunk(b"")  # the terminating zero-length chunk

    def _abort(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _chunks(reply: Reply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply, in order."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    chunk_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    model = body.get("model", "test-model")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    if reply.reasoning:
        for piece in _pieces(reply.reasoning, reply.delta_chars):
            yield chunk({"reasoning_content": piece})
    text = reply.resolved_text()
    if text:
        for piece in _pieces(text, reply.delta_chars):
            yield chunk({"content": piece})
    yield from (chunk({"tool_calls": [d]}) for d in _tool_call_deltas(reply))
    if not reply.omit_finish:
        yield chunk({}, reply.resolved_finish_reason())
    if include_usage and not reply.omit_usage:
        yield {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_test",
            "choices": [],
            "usage": _usage(reply, body),
        }


def _tool_call_deltas(reply: Reply) -> list[dict[str, Any]]:
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(reply.tool_calls):
        call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        deltas: list[dict[str, Any]] = [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
        ]
        for piece in _pieces(call.arguments, reply.delta_chars):
            deltas.append({"index": index, "function": {"arguments": piece}})
        per_call.append(deltas)
    if not reply.interleave_tool_calls:
        return [d for deltas in per_call for d in deltas]
    out: list[dict[str, Any]] = []
    for step in range(max((len(d) for d in per_call), default=0)):
        out.extend(deltas[step] for deltas in per_call if step < len(deltas))
    return out


def _usage(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    if reply.usage is not None:
        return reply.usage.to_json()
    # Like a provider, count everything the request carries: messages and tool schemas.
    prompt = max(1, len(json.dumps([body.get("messages", []), body.get("tools", [])])) // 4)
    produced = (reply.resolved_text() or "") + (reply.reasoning or "")
    produced += "".join(c.name + c.arguments for c in reply.tool_calls)
    completion = max(1, (len(produced) + 3) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _completion(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.resolved_text()}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.resolved_finish_reason(),
            }
        ],
        "usage": _usage(reply, body),
    }


def _anthropic_request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def _is_context_limit(error: ErrorSpec) -> bool:
    text = error.message.lower()
    return error.code == "context_length_exceeded" or any(
        phrase in text
        for phrase in ("prompt is too long", "maximum context length", "context window")
    )


class _Answer:
    """How one reply is answered in one wire API; the handler plays it, fault modes included.

    ``prepare`` runs once a response is certain (not for HTTP errors, stalls
    or resets before the headers): it counts the prompt, splits it by cache
    use and notes the split in ``OpenAIServer.cache_stats``.
    """

    #: Sent after the last frame, before the body ends.
    trailer = b""
    api = "chat"

    def __init__(
        self,
        owner: OpenAIServer,
        index: int,
        reply: Reply,
        body: dict[str, Any],
        native: dict[str, Any] | None = None,
    ) -> None:
        self.owner = owner
        self.index = index
        self.reply = reply
        self.body = body
        self.native = native
        self.usage: dict[str, Any] = {}

    def streams(self) -> bool:
        return bool(self.body.get("stream"))

    def prepare(self) -> None:
        self.usage = _usage(self.reply, self.body)
        read, creation = self.split()
        prompt = int(self.usage["prompt_tokens"])
        self.owner._note(
            CacheStat(
                request=self.index,
                api=self.api,
                prompt_tokens=prompt,
                cache_read=read,
                cache_creation=creation,
                input_tokens=prompt - read - creation,
                output_tokens=int(self.usage["completion_tokens"]),
            )
        )

    def split(self) -> tuple[int, int]:
        """Tokens of the prompt read from and written to the cache (after ``self.usage``)."""
        details = self.usage.get("prompt_tokens_details") or {}
        return int(details.get("cached_tokens") or 0), 0

    def scripted_cached_tokens(self) -> int | None:
        usage = self.reply.usage
        return None if usage is None else usage.cached_tokens

    def headers(self) -> dict[str, str]:
        return {}

    def http_error(self, status: int, error: ErrorSpec) -> tuple[dict[str, Any], dict[str, str]]:
        return error.to_json(), {}

    def frames(self) -> Iterator[bytes]:
        raise NotImplementedError

    def error_frame(self, sent: int, error: ErrorSpec) -> bytes:
        raise NotImplementedError

    def injected(self, raw: bytes) -> bytes:
        """The bytes a reply slips into the stream (``Reply.inject``), as this API frames them."""
        return raw

    def complete(self) -> dict[str, Any]:
        raise NotImplementedError


class _ChatAnswer(_Answer):
    """Chat completions: ``data:`` chunks, then ``[DONE]`` (the server's original format)."""

    trailer = b"data: [DONE]\n\n"

    def frames(self) -> Iterator[bytes]:
        for chunk in _chunks(self.reply, self.body):
            yield b"data: %s\n\n" % json.dumps(chunk).encode()

    def error_frame(self, sent: int, error: ErrorSpec) -> bytes:
        return b"event: error\ndata: %s\n\n" % json.dumps(error.to_json()).encode()

    def complete(self) -> dict[str, Any]:
        return _completion(self.reply, self.body)


class _AnthropicAnswer(_Answer):
    """Anthropic Messages: typed SSE events, prompt caching by ``cache_control`` breakpoints."""

    api = "anthropic"
    #: Set by ``split``, once the response is certain.
    turn: wire_anthropic.Turn | None = None

    @functools.cached_property
    def request_id(self) -> str:
        return _anthropic_request_id()

    def split(self) -> tuple[int, int]:
        assert self.native is not None
        prompt = int(self.usage["prompt_tokens"])
        layout = wire_anthropic.cache_layout(self.native)
        split = self.owner._anthropic_cache.account(layout, prompt, self.owner.cache_min_tokens)
        scripted = self.scripted_cached_tokens()
        if scripted is not None:  # the reply scripts the cache read
            split = wire_anthropic.CacheSplit(scripted, 0, prompt - scripted)
        self.turn = wire_anthropic.Turn(
            model=str(self.native.get("model", "test-model")),
            message_id=wire_anthropic.new_message_id(),
            split=split,
            output_tokens=int(self.usage["completion_tokens"]),
            secret=self.owner._secret,
        )
        return split.read, split.creation

    def headers(self) -> dict[str, str]:
        return {"request-id": self.request_id}

    def http_error(self, status: int, error: ErrorSpec) -> tuple[dict[str, Any], dict[str, str]]:
        return self._error_body(status, error), self.headers()

    def _error_body(self, status: int, error: ErrorSpec) -> dict[str, Any]:
        kind = wire_anthropic.error_type(status, error.type)
        message = wire_anthropic.error_message(error.message, error.code)
        return wire_anthropic.error_body(kind, message, self.request_id)

    def frames(self) -> Iterator[bytes]:
        assert self.turn is not None
        for group in wire_anthropic.stream_events(self.reply, self.turn):
            yield b"".join(wire_anthropic.sse(event) for event in group)

    def error_frame(self, sent: int, error: ErrorSpec) -> bytes:
        # A stream that already started reports its error as an SSE ``error`` event.
        return wire_anthropic.sse(self._error_body(200, error))

    def injected(self, raw: bytes) -> bytes:
        # Every Anthropic event is named, and clients skip a data line whose event they
        # do not know: a bare one goes out as the content delta a broken proxy would mangle.
        return b"event: content_block_delta\n" + raw if raw.startswith(b"data:") else raw

    def complete(self) -> dict[str, Any]:
        assert self.turn is not None
        return wire_anthropic.message(self.reply, self.turn)


class _ResponsesAnswer(_Answer):
    """The Responses API: semantic SSE events with sequence numbers, automatic caching."""

    api = "responses"
    #: Set by ``split``, once the response is certain; ``groups`` by ``frames``.
    turn: wire_responses.Turn | None = None
    groups: Sequence[Sequence[dict[str, Any]]] = ()

    def split(self) -> tuple[int, int]:
        assert self.native is not None
        prompt = int(self.usage["prompt_tokens"])
        cached = self.owner._responses_cache.account(
            self.native, prompt, self.owner.cache_min_tokens
        )
        scripted = self.scripted_cached_tokens()
        if scripted is not None:
            cached = scripted
        completion = int(self.usage["completion_tokens"])
        reasoning = min(completion, (len(self.reply.reasoning or "") + 3) // 4)
        usage = None
        if not self.reply.omit_usage:
            total = int(self.usage.get("total_tokens", prompt + completion))
            usage = wire_responses.usage_json(prompt, cached, completion, reasoning, total)
        self.turn = wire_responses.new_turn(self.native, usage, self.owner._secret)
        return cached, 0

    def frames(self) -> Iterator[bytes]:
        assert self.turn is not None
        self.groups = wire_responses.stream_events(self.reply, self.turn)
        for group in self.groups:
            yield b"".join(wire_responses.sse(event) for event in group)

    def error_frame(self, sent: int, error: ErrorSpec) -> bytes:
        assert self.turn is not None
        number = sum(len(group) for group in self.groups[:sent])
        if _is_context_limit(error):
            code = "context_length_exceeded"
        elif error.code:
            code = error.code
        elif error.type == "rate_limit_exceeded":
            code = "rate_limit_exceeded"
        else:
            code = "server_error"
        event = wire_responses.failed_event(self.turn, code, error.message, number)
        return wire_responses.sse(event)

    def complete(self) -> dict[str, Any]:
        assert self.turn is not None
        return wire_responses.response_object(self.reply, self.turn)


class OpenAIServer:
    """The scripted server. ``start()``/``stop()``, or use it as a context manager."""

    def __init__(self, api: WireAPI = "chat") -> None:
        #: The wire API the client under test is configured with (``ModelConfig.api``).
        #: The server answers all three whatever it says; tests build their config from it.
        self.api: WireAPI = api
        self._lock = threading.Condition()
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._responder: Callable[[dict[str, Any]], Reply | None] | None = None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stats: list[CacheStat] = []
        #: Signs thinking blocks and seals reasoning items, so forged ones are refused.
        self._secret = os.urandom(32)
        self._anthropic_cache = wire_anthropic.PromptCache()
        self._responses_cache = wire_responses.PrefixCache()
        #: The fewest tokens a cached prefix may have (Anthropic's breakpoints, the
        #: Responses API's automatic cache): 1024, as both providers document.
        self.cache_min_tokens = 1024

    # -- lifecycle -------------------------------------------------------

    def start(self) -> OpenAIServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="openai-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopping.set()
        httpd.shutdown()
        httpd.drop_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return self._httpd.server_port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` — what the client's ``base_url`` should be."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script and record -----------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (``DEFAULT_TEXT`` when empty)."""
        with self._lock:
            self._queue.extend(replies)

    def respond_with(self, responder: Callable[[dict[str, Any]], Reply | None]) -> None:
        """Answer from ``responder(body)`` (a model that reacts to what it is sent).

        Queued replies still go first; a responder returning ``None`` falls back
        to ``DEFAULT_TEXT``.
        """
        with self._lock:
            self._responder = responder

    @property
    def pending(self) -> int:
        """Scripted replies not yet played."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (all three APIs, refused ones too), in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of ``requests`` in chat-completions form (native ones normalized)."""
        return [r.body for r in self.requests]

    @property
    def cache_stats(self) -> list[CacheStat]:
        """How each answered request's prompt was counted and split by cache use, in order."""
        with self._lock:
            return list(self._stats)

    def clear_caches(self) -> None:
        """Forget every cached prompt prefix (Anthropic's and the Responses API's)."""
        self._anthropic_cache.clear()
        self._responses_cache.clear()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived; ``TimeoutError`` otherwise."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"{len(self._requests)} of {count} requests arrived")
            return list(self._requests)

    def _record_and_next(self, request: RecordedRequest) -> Reply:
        _, reply = self._record(request, take_reply=True)
        assert reply is not None
        return reply

    def _record(self, request: RecordedRequest, *, take_reply: bool) -> tuple[int, Reply | None]:
        """Record ``request``; its index and, with ``take_reply``, the reply it gets."""
        with self._lock:
            self._requests.append(request)
            index = len(self._requests) - 1
            self._lock.notify_all()
            if not take_reply:
                return index, None
            if self._queue:
                return index, self._queue.popleft()
            responder = self._responder
        if responder is not None:
            return index, responder(request.body) or Reply()
        return index, Reply()

    def _note(self, stat: CacheStat) -> None:
        with self._lock:
            self._stats.append(stat)


def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear the proxy variables so every client stays on 127.0.0.1."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(name="openai_server")
def openai_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    """The ``openai_server`` fixture: a running ``OpenAIServer`` for one test, stopped after it.

    ``tests/conftest.py`` imports it under this name, so every test folder has it
    and a test parameter called ``openai_server`` does not shadow the import.
    """
    loopback_only(monkeypatch)
    with OpenAIServer() as server:
        yield server


@pytest.fixture(name="openai_server", params=WIRE_APIS)
def every_api_server_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OpenAIServer]:
    """The ``openai_server`` fixture once per wire API (``server.api``): a module that
    imports this one (overriding the conftest's ``openai_server_fixture``) runs each test that takes
    the server three times, its body unchanged, with the client built for ``server.api``.
    """
    loopback_only(monkeypatch)
    with OpenAIServer(request.param) as server:
        yield server
