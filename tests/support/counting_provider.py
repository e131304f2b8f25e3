"""A model for ``OpenAIServer`` that counts every request exactly and refuses, like a
provider, any request that does not fit its window (issue 25).

``CountingModel`` is a responder for ``OpenAIServer.respond_with``. For every
chat-completions request it:

- counts the prompt with a real tokenizer (cl100k, offline): each message's
  text content, plus its tool calls' names and arguments, plus
  ``MESSAGE_OVERHEAD`` tokens; plus the ``tools`` array's JSON;
- reads the response cap from ``max_completion_tokens`` / ``max_tokens`` (Cairn
  sends ``max_tokens`` only when the model configuration sets
  ``max_output_tokens``); when none is sent, the cap is the model's configured
  output reserve (``cairn.context.budget.output_reserve``);
- refuses, as OpenAI does (HTTP 400, ``code: context_length_exceeded``, the
  same message), any request whose prompt + cap exceeds the window;
- otherwise answers from its script and reports ``prompt_tokens`` = the exact
  count, so the usage Cairn anchors on is the truth.

It records each request (``Counted``): whether it is a compaction fork or a
main request, the exact prompt size, the cap, the wire messages as sent and
what it answered. It can also inject a context-limit error before any output
at the k-th main request, and make a fork answer with a tool call, an HTTP
500, a broken stream, an empty answer or a context-limit error.

``dense_text`` writes deterministic content of a chosen density — prose,
Python, JSON with numbers, sha256 hashes, base64, CJK mixed with code — to
about a chosen number of cl100k tokens.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from cairn.context.budget import output_reserve
from cairn.tokens import get_tokenizer
from support.openai_server import Reply, ToolCallSpec, UsageSpec

#: Tokens every message costs besides its text (role markers, separators).
MESSAGE_OVERHEAD = 4
#: What only the compaction fork's instruction says (``prompts/compact_instruction.txt``).
FORK_MARK = "Respond with TEXT ONLY"
#: The opening tag of the hidden handoff reminder (DESIGN §5.2).
HANDOFF_MARK = "<token-budget-handoff"

Kind: TypeAlias = Literal["main", "fork"]
#: How a fork request is answered: ``summary`` (the seven headings), ``tool_call``
#: (a call instead of text), ``http500``, ``garbage`` (a stream whose second chunk
#: is not JSON), ``empty`` (no text, no call), ``context_limit`` (HTTP 400).
ForkMode: TypeAlias = Literal[
    "summary", "tool_call", "http500", "garbage", "empty", "context_limit"
]
FORK_MODES: tuple[ForkMode, ...] = (
    "summary",
    "tool_call",
    "http500",
    "garbage",
    "empty",
    "context_limit",
)
#: Fork modes that make one fork request fail (the summarizer may retry).
FORK_FAILURES: frozenset[str] = frozenset({"http500", "garbage", "empty", "context_limit"})

SUMMARY = """<analysis>
The user asked for a survey of the workspace files; I read them in turn.
</analysis>
<summary>
## Objective and constraints
Survey the generated workspace files and report what they hold.
## Decisions and rationale
Read each file once, in the order the user named them.
## Workspace mutations
None: only reads.
## Verification evidence
Every read returned the file's content.
## Active tasks and background work
None.
## Open risks or blockers
None known.
## Exact next action
Answer the user's latest request.
</summary>"""


# ---------------------------------------------------------------------------
# Counting


def count_text(text: str) -> int:
    """Exact cl100k tokens of ``text`` (special-token text is counted as ordinary text)."""
    return get_tokenizer("cl100k").count(text)


def content_text(content: Any) -> str:
    """The text of a wire ``content``: a string, ``None``, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def message_tokens(message: Mapping[str, Any]) -> int:
    """One wire message: text + tool-call names and arguments + ``MESSAGE_OVERHEAD``."""
    total = MESSAGE_OVERHEAD + count_text(content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += count_text(str(function.get("name", "")))
        total += count_text(str(function.get("arguments", "")))
    return total


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The whole prompt of a request: every message, plus the tools array's JSON."""
    total = sum(message_tokens(m) for m in body.get("messages") or ())
    tools = body.get("tools")
    if tools:
        total += count_text(json.dumps(tools))
    return total


def is_fork(body: Mapping[str, Any]) -> bool:
    """A compaction fork: a user message carries the compaction instruction.

    Not only the last message: after a fork's tool call is rejected, the
    request ends with the rejection, and the instruction comes before it.
    """
    return any(
        m.get("role") == "user" and FORK_MARK in content_text(m.get("content"))
        for m in body.get("messages") or ()
    )


def is_handoff(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "user" and content_text(message.get("content")).startswith(
        HANDOFF_MARK
    )


def context_length_message(window: int, prompt: int, completion: int) -> str:
    """OpenAI's own wording of a context-length refusal."""
    return (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )


# ---------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class Counted:
    """One request as the counting model saw it."""

    #: Arrival order among every request (0-based).
    index: int
    kind: Kind
    #: 1-based order among the requests of its kind.
    ordinal: int
    prompt_tokens: int
    #: The response cap: as sent, else the configured output reserve.
    max_tokens: int
    max_tokens_sent: bool
    window: int
    #: The wire messages exactly as sent.
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    #: ``answered``, ``rejected`` (over the window), ``injected`` (a context-limit
    #: error injected before output), or ``failed`` (a fork failure injected).
    outcome: str
    #: What was answered: ``text``, ``tool_calls``, or the fork mode.
    reply: str

    @property
    def budget(self) -> int:
        """What the prompt may hold: the window minus the response cap."""
        return self.window - self.max_tokens

    @property
    def over_window(self) -> bool:
        return self.prompt_tokens + self.max_tokens > self.window

    def wire(self, n: int | None = None) -> str:
        """The first ``n`` messages (all by default) as canonical JSON, for byte comparisons."""
        messages = self.messages if n is None else self.messages[:n]
        return json.dumps(messages, ensure_ascii=False)

    def handoff_tokens(self) -> int:
        return sum(message_tokens(m) for m in self.messages if is_handoff(m))


class CountingModel:
    """A responder that counts, refuses what does not fit, and plays a script.

    ``plan`` holds the main model's next answers (a reply with tool calls, then
    text); when it is empty the model answers ``done_text``. ``fork_plan``
    holds the next fork requests' modes (default ``summary``).
    ``context_limit_at`` names main-request ordinals (1-based, counting every
    main request that arrived) answered with a context-limit error before any
    output. A refused or injected request does not consume the plan, so the
    replay gets the answer the refused request would have had.
    """

    def __init__(
        self,
        window: int,
        *,
        reserve: int | None = None,
        done_text: str = "Done.",
        summary: str = SUMMARY,
    ) -> None:
        self.window = window
        #: The cap assumed when a request sends none: the model's configured reserve.
        self.reserve = reserve if reserve is not None else output_reserve(window)
        self.done_text = done_text
        self.summary = summary
        self.plan: deque[Reply] = deque()
        self.fork_plan: deque[ForkMode] = deque()
        self.context_limit_at: set[int] = set()
        self.log: list[Counted] = []
        #: Called with each ``Counted`` before it is answered (tests stamp events with it).
        self.on_request: Callable[[Counted], None] | None = None
        self._lock = threading.Lock()
        self._ordinals = {"main": 0, "fork": 0}

    # -- views -----------------------------------------------------------

    @property
    def main(self) -> list[Counted]:
        return [c for c in self.log if c.kind == "main"]

    @property
    def forks(self) -> list[Counted]:
        return [c for c in self.log if c.kind == "fork"]

    def __len__(self) -> int:
        return len(self.log)

    # -- answering -------------------------------------------------------

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            return self._answer(body)

    def _answer(self, body: dict[str, Any]) -> Reply:
        kind: Kind = "fork" if is_fork(body) else "main"
        self._ordinals[kind] += 1
        ordinal = self._ordinals[kind]
        prompt = prompt_tokens(body)
        sent = body.get("max_completion_tokens", body.get("max_tokens"))
        cap = int(sent) if isinstance(sent, int) else self.reserve

        def log(outcome: str, reply: str) -> None:
            counted = Counted(
                index=len(self.log),
                kind=kind,
                ordinal=ordinal,
                prompt_tokens=prompt,
                max_tokens=cap,
                max_tokens_sent=isinstance(sent, int),
                window=self.window,
                messages=list(body.get("messages") or ()),
                body=body,
                outcome=outcome,
                reply=reply,
            )
            self.log.append(counted)
            if self.on_request is not None:
                self.on_request(counted)

        if prompt + cap > self.window:
            log("rejected", "context_length_exceeded")
            return self.context_limit(prompt, cap)
        if kind == "main" and ordinal in self.context_limit_at:
            log("injected", "context_length_exceeded")
            return self.context_limit(prompt, cap)
        if kind == "fork":
            mode = self.fork_plan.popleft() if self.fork_plan else "summary"
            log("failed" if mode in FORK_FAILURES else "answered", mode)
            return self._fork_reply(mode, prompt, cap)
        reply = self.plan.popleft() if self.plan else Reply(text=self.done_text)
        log("answered", "tool_calls" if reply.tool_calls else "text")
        return _with_usage(reply, prompt)

    def context_limit(self, prompt: int, cap: int) -> Reply:
        return Reply.http_error(
            400,
            context_length_message(self.window, prompt, cap),
            code="context_length_exceeded",
        )

    def _fork_reply(self, mode: ForkMode, prompt: int, cap: int) -> Reply:
        if mode == "summary":
            return _with_usage(Reply(text=self.summary), prompt)
        if mode == "tool_call":
            call = ToolCallSpec("read_file", json.dumps({"path": "NOTES.md"}))
            return _with_usage(Reply(tool_calls=[call]), prompt)
        if mode == "http500":
            return Reply.http_error(500)
        if mode == "garbage":
            # The role chunk, then a data line that is not JSON: a broken stream.
            return Reply(text=self.summary, inject=b"data: {not json at all\n\n", inject_after=1)
        if mode == "empty":
            return _with_usage(Reply(text=""), prompt)
        return self.context_limit(prompt, cap)


def _with_usage(reply: Reply, prompt: int) -> Reply:
    produced = (reply.text or "") + "".join(c.name + c.arguments for c in reply.tool_calls)
    completion = max(1, count_text(produced))
    return Reply(
        text=reply.text,
        tool_calls=reply.tool_calls,
        usage=UsageSpec(prompt, completion),
        inject=reply.inject,
        inject_after=reply.inject_after,
    )


# ---------------------------------------------------------------------------
# Wire-level checks


def split_calls(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a request separates a tool call from its results (``None``: it does not).

    Every assistant tool call must be answered by the tool messages right
    after it, and every tool message must answer a call of the assistant
    message right before its run of results.
    """
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.get("role") == "tool":
            return f"message {i}: a tool result ({message.get('tool_call_id')}) without its call"
        calls = [c.get("id") for c in message.get("tool_calls") or ()]
        i += 1
        if message.get("role") != "assistant" or not calls:
            continue
        pending = set(calls)
        while i < len(messages) and messages[i].get("role") == "tool":
            call_id = messages[i].get("tool_call_id")
            if call_id not in pending:
                return f"message {i}: a tool result ({call_id}) that answers no pending call"
            pending.discard(call_id)
            i += 1
        if pending:
            return f"message {i}: tool call(s) {sorted(map(str, pending))} without their results"
    return None


# ---------------------------------------------------------------------------
# Dense content

Density: TypeAlias = Literal["prose", "code", "json", "hashes", "base64", "cjk"]
DENSITIES: tuple[Density, ...] = ("prose", "code", "json", "hashes", "base64", "cjk")

_PHRASES = (
    "the export drops rows with unicode names when the batch size exceeds the page limit",
    "so we retry each request after a short delay and log what the server answered",
    "before we give up on the connection and report the failure to the user",
    "configuration files are read once at startup and cached until the process restarts",
)
_WORDS = tuple(word for phrase in _PHRASES for word in phrase.split())
_IDENTS = (
    "parse_config",
    "load_rows",
    "retry_after",
    "batch_size",
    "page_limit",
    "user_id",
    "session_token",
    "flush_buffer",
    "compute_digest",
    "render_table",
    "merge_ranges",
    "cache_key",
    "row_count",
    "offset",
)
#: Common ideographs and kana: what Chinese and Japanese prose is made of.
_CJK = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可"
    "她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三"
    "修复错误配置文件读取写入数据库连接超时重试日志输出函数参数返回值测试通过失败缓存用户会话请求响应"
    "ありがとうございますこれはテストですデータベースの接続がタイムアウトしました"
)


def dense_text(kind: Density, tokens: int, seed: int | str = 0, *, max_chars: int = 0) -> str:
    """About ``tokens`` cl100k tokens of ``kind`` content, the same for the same arguments.

    Built line by line until the count reaches ``tokens`` (or the text reaches
    ``max_chars`` characters, when given). Lines are short, so a file of it
    stays within ``read_file``'s per-line cap.
    """
    rng = random.Random(f"{kind}:{seed}")
    lines: list[str] = []
    counted = chars = 0
    for line in _LINES[kind](rng):
        lines.append(line)
        counted += count_text(line + "\n")
        chars += len(line) + 1
        if counted >= tokens or (max_chars and chars >= max_chars):
            break
    return "\n".join(lines) + "\n"


def _prose(rng: random.Random) -> Iterator[str]:
    while True:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
        yield " ".join(words).capitalize() + "."


def _code(rng: random.Random) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        name, arg = rng.choice(_IDENTS), rng.choice(_IDENTS)
        yield f"def {name}_{n}({arg}: int, limit: int = {rng.randint(1, 9999)}) -> list[int]:"
        yield f"    values = [{arg} * {rng.randint(2, 97)} + i for i in range(limit)]"
        yield f"    if len(values) > {rng.randint(10, 5000)}:"
        yield f'        raise ValueError(f"{name} overflow: {{len(values)}} > {{limit}}")'
        yield f"    return sorted(values, key=lambda v: (v % {rng.randint(3, 31)}, -v))"
        yield ""


def _json(rng: random.Random) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        record = {
            "id": rng.randint(10_000, 99_999_999),
            "price": round(rng.uniform(0, 100_000), 4),
            "ratio": round(rng.random(), 6),
            "ts": 1_700_000_000 + rng.randint(0, 99_999_999),
            "values": [rng.randint(-99_999, 99_999) for _ in range(4)],
        }
        yield json.dumps(record) + ("," if n % 50 else "")


def _hashes(rng: random.Random) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        digest = hashlib.sha256(f"{rng.random()}:{n}".encode()).hexdigest()
        yield f"{digest}  build/objects/{rng.choice(_IDENTS)}_{n}.o"


def _base64(rng: random.Random) -> Iterator[str]:
    while True:
        yield base64.b64encode(rng.randbytes(57)).decode()


def _cjk(rng: random.Random) -> Iterator[str]:
    while True:
        text = "".join(rng.choice(_CJK) for _ in range(rng.randint(12, 30)))
        code = f"`{rng.choice(_IDENTS)}({rng.randint(0, 999)})`"
        yield f"{text[:8]}{code}{text[8:]}。"


_LINES: dict[str, Callable[[random.Random], Iterator[str]]] = {
    "prose": _prose,
    "code": _code,
    "json": _json,
    "hashes": _hashes,
    "base64": _base64,
    "cjk": _cjk,
}


@dataclass
class DensityTable:
    """Tokens per character of each density, measured once (for sizing and reports)."""

    ratios: dict[str, float] = field(default_factory=dict)

    def ratio(self, kind: Density) -> float:
        if kind not in self.ratios:
            sample = dense_text(kind, 2_000, "ratio")
            self.ratios[kind] = count_text(sample) / len(sample)
        return self.ratios[kind]
