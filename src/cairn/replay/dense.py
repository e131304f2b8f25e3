"""Dense tool results: the same sessions, every tool result as content that costs more tokens.

The seeds' estimate (DESIGN §4) counts ¼ token per character (½ for a
tool result that is a JSON document, 1 for CJK). Hashes, base64, numbers and
CJK mixed with code cost more per character than that under a real
tokenizer, so a session whose tool results are such content is where an
uncalibrated projection under-counts and a request can go over the budget.
``densify_session`` replaces the text of every tool result of a recorded
session with dense content of the same length in characters, and leaves
everything else as recorded: user and assistant text, tool-call arguments,
ids, names, the call/result pairing, the fixed context.

The content is a pure function of the session's name and the message's
index and id (a SHA-256 of them seeds it), so a replay of a densified
session gives the same figures every run. The kind cycles over the tool
results of a session (``DENSE_KINDS``), so every kind occurs in any session
with four results or more:

- ``sha256``: ``sha256sum`` lines (64 hex digits, two spaces, a short path);
- ``base64``: base64 of random bytes in 76-character lines;
- ``json``: JSON records with hex ids, large integers and floats; every
  other one a bare JSON array (which the estimate counts at ½ per
  character, close to a real count), the others after an HTTP status line
  as ``curl -i`` prints them (counted as text, ¼ per character);
- ``cjk-code``: Python lines with Chinese identifiers, strings and comments
  around hex constants.

``DenseColumn`` is the dense variant's column of the replay benchmark: one
window under ``cairn``, over every session file, with the failed sessions
counted and named.
"""

from __future__ import annotations

import base64
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from cairn.messages import ContentPart, JSONObject, JSONValue, Message, TextPart
from cairn.replay.metrics import SessionReport, UnderEstimate
from cairn.replay.session import RecordedSession

DenseKind: TypeAlias = Literal["sha256", "base64", "json", "cjk-code"]
DENSE_KINDS: tuple[DenseKind, ...] = ("sha256", "base64", "json", "cjk-code")

# Common characters: most are one or two cl100k tokens each.
_HANZI = (
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学"
    "对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面"
    "公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部"
    "正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关"
    "并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安"
    "表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共"
    "风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管"
    "缓存连接超时失败错误数据处理配置文件读取写入检查校验日志记录重试队列任务线程锁定释放资源索引"
)
_PATH_PARTS = ("build", "dist", "objects", "cache", "vendor", "assets", "lib", "pkgs")
_EXTENSIONS = (".o", ".so", ".whl", ".tar.gz", ".bin", ".pack", ".idx", ".jar")
_HTTP_STATUS = (
    "HTTP/1.1 200 OK",
    "HTTP/2 200",
    "HTTP/1.1 201 Created",
    "HTTP/1.1 206 Partial Content",
)


def _rng(seed: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big"))


def _hanzi(rng: random.Random, n: int) -> str:
    # Mostly common characters, with a rarer one from the whole block now and then.
    return "".join(
        rng.choice(_HANZI) if rng.random() < 0.8 else chr(rng.randrange(0x4E00, 0xA000))
        for _ in range(n)
    )


def _sha256_lines(rng: random.Random) -> Callable[[], str]:
    def line() -> str:
        digest = hashlib.sha256(rng.randbytes(16)).hexdigest()
        path = f"{rng.choice(_PATH_PARTS)}/{rng.getrandbits(24):06x}{rng.choice(_EXTENSIONS)}"
        return f"{digest}  {path}"

    return line


def _base64_lines(rng: random.Random) -> Callable[[], str]:
    def line() -> str:
        return base64.b64encode(rng.randbytes(57)).decode("ascii")  # 76 characters

    return line


def _json_record(rng: random.Random) -> str:
    weights = ",".join(f"{rng.uniform(-1_000, 1_000):.6f}" for _ in range(rng.randint(2, 6)))
    digest = base64.b64encode(rng.randbytes(32)).decode("ascii")
    return (
        f'{{"id":"{rng.getrandbits(64):016x}","sha256":"{digest}","size":{rng.getrandbits(34)},'
        f'"mtime":{rng.randrange(1_600_000_000_000, 1_800_000_000_000)},"w":[{weights}]}}'
    )


def _json_lines(rng: random.Random) -> Callable[[], str]:
    status = rng.random() < 0.5
    started = False

    def line() -> str:
        nonlocal started
        if not started:
            started = True
            if status:
                size = rng.getrandbits(20)
                return (
                    f"{rng.choice(_HTTP_STATUS)}\ncontent-type: application/json\n"
                    f"content-length: {size}\nx-request-id: {rng.getrandbits(128):032x}\n\n"
                    f"[{_json_record(rng)},"
                )
            return f"[{_json_record(rng)},"
        return f"{_json_record(rng)},"

    return line


def _cjk_code_lines(rng: random.Random) -> Callable[[], str]:
    def line() -> str:
        shape = rng.randrange(4)
        if shape == 0:
            name = f"{_hanzi(rng, 3)}_{rng.getrandbits(12):03x}"
            return f"def {name}(数据, 配置=None):  # {_hanzi(rng, 6)}"
        if shape == 1:
            return (
                f"    {_hanzi(rng, 2)} = 读取(缓冲[0x{rng.getrandbits(32):08x}], "
                f'"{_hanzi(rng, rng.randint(4, 10))}")'
            )
        if shape == 2:
            return f'        raise 错误("{_hanzi(rng, 8)}: 0x{rng.getrandbits(16):04x}")'
        return f"    # {_hanzi(rng, rng.randint(6, 16))} ({rng.getrandbits(20)})"

    return line


_LINES: dict[DenseKind, Callable[[random.Random], Callable[[], str]]] = {
    "sha256": _sha256_lines,
    "base64": _base64_lines,
    "json": _json_lines,
    "cjk-code": _cjk_code_lines,
}


def dense_text(length: int, kind: DenseKind, seed: str) -> str:
    """Exactly ``length`` characters of dense content of ``kind``, a pure function of ``seed``."""
    if length <= 0:
        return ""
    line = _LINES[kind](_rng(f"{kind}\0{seed}"))
    parts: list[str] = []
    size = -1  # the joined length: one newline fewer than lines
    while size < length:
        text = line()
        parts.append(text)
        size += len(text) + 1
    return "\n".join(parts)[:length]


def dense_kind(ordinal: int) -> DenseKind:
    """The kind of a session's ``ordinal``-th tool result (0-based): the kinds in turn."""
    return DENSE_KINDS[ordinal % len(DENSE_KINDS)]


def densify_message(message: Message, kind: DenseKind, seed: str) -> Message:
    """``message`` with each text of its content replaced by dense text of the same length.

    Image parts stay; so do the id, the tool-call id, the name and the metadata.
    """
    content = message.content
    if content is None:
        return message
    if isinstance(content, str):
        return message.with_content(dense_text(len(content), kind, seed))
    parts: list[ContentPart] = []
    for n, part in enumerate(content):
        if isinstance(part, TextPart):
            part = replace(part, text=dense_text(len(part.text), kind, f"{seed}\0{n}"))
        parts.append(part)
    return message.with_content(tuple(parts))


def densify_session(session: RecordedSession) -> RecordedSession:
    """``session`` with every tool result's text replaced by dense content of the same length."""
    messages: list[Message] = []
    ordinal = 0
    for index, message in enumerate(session.messages):
        if message.role == "tool":
            seed = f"{session.name}\0{index}\0{message.id}"
            message = densify_message(message, dense_kind(ordinal), seed)
            ordinal += 1
        messages.append(message)
    return replace(session, messages=tuple(messages))


def densify_sessions(sessions: Sequence[RecordedSession]) -> tuple[RecordedSession, ...]:
    return tuple(densify_session(s) for s in sessions)


def tool_result_chars(sessions: Sequence[RecordedSession]) -> tuple[int, int]:
    """How many tool results the sessions hold, and their characters (what densify replaces)."""
    results = [m for s in sessions for m in s.messages if m.role == "tool"]
    return len(results), sum(len(m.text) for m in results)


# ---------------------------------------------------------------------------
# The benchmark's column


@dataclass(frozen=True)
class DenseColumn:
    """The dense variant at one window under ``cairn``, over every session file replayed.

    ``overflows`` counts the requests sent over the input budget; a session
    that failed (the window cannot hold its fixed context, or the pipeline
    refused a request it could not bring under the budget) is in ``failures``
    with its reason, so "0 over the budget" is only ever claimed when every
    session ran to its end (``over_budget_cell``).
    """

    window: int
    sessions: int = 0
    requests: int = 0
    overflows: int = 0
    compactions: int = 0
    #: ``(session, reason)`` of each failed session; the session is ``source: name``.
    failures: tuple[tuple[str, str], ...] = ()
    worst_under_estimate: UnderEstimate | None = None

    @classmethod
    def of(cls, window: int, runs: Sequence[tuple[str, Sequence[SessionReport]]]) -> DenseColumn:
        """``runs``: per session file, its name and the reports of its sessions at ``window``."""
        worst = [
            w for source, reports in runs if (w := UnderEstimate.worst(reports, f"{source}: "))
        ]
        reports = [r for _, rs in runs for r in rs]
        return cls(
            window,
            sessions=len(reports),
            requests=sum(len(r.requests) for r in reports),
            overflows=sum(r.overflows for r in reports),
            compactions=sum(r.compactions for r in reports),
            failures=tuple(
                (f"{source}: {r.name}", r.failure)
                for source, rs in runs
                for r in rs
                if r.failure is not None
            ),
            worst_under_estimate=max(worst, key=lambda w: w.ratio, default=None),
        )

    @property
    def failed_sessions(self) -> int:
        return len(self.failures)

    @property
    def over_budget_cell(self) -> str:
        """``0`` only when every session ran to its end; else ``N + K failed``."""
        if self.failures:
            return f"{self.overflows} + {self.failed_sessions} failed"
        return str(self.overflows)

    def to_dict(self) -> JSONObject:
        worst = self.worst_under_estimate
        failures: list[JSONValue] = [{"session": s, "reason": r} for s, r in self.failures]
        return {
            "window": self.window,
            "policy": "cairn",
            "sessions": self.sessions,
            "failed_sessions": self.failed_sessions,
            "failures": failures,
            "requests": self.requests,
            "overflows": self.overflows,
            "over_budget": self.over_budget_cell,
            "compactions": self.compactions,
            "worst_under_estimate": None if worst is None else worst.to_dict(),
        }
