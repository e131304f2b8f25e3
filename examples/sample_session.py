"""Write a realistic sample session transcript with Cairn's public store API.

    python examples/sample_session.py OUT.jsonl

The session is a coding agent fixing a small bug in a ``textkit`` project
(``slugify()`` drops Chinese characters) on a local model with an 8K window:
a system prompt, the user's task (partly in Chinese), a provider error block,
tool rounds (read_file, grep, edit_file, bash running the tests, one parallel
pair of calls), a hidden handoff reminder, a context edit that snips an old
tool result, an automatic fallback compaction whose checkpoint keeps the last
two complete API rounds, and a short exchange after it. Inspect it with
``cairn inspect OUT.jsonl``. Runs offline in well under a second; an existing
OUT is replaced.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    group_rounds,
    new_id,
)
from cairn.store import (
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    SessionRecord,
    new_session_id,
)
from cairn.tokens import estimate_message_tokens, estimate_messages_tokens

WORKSPACE = "/home/dev/projects/textkit"
MODEL = "qwen2.5-coder:7b"
#: Ollama's default ``num_ctx``: a small window, so a short session fills it.
CONTEXT_WINDOW = 4_096
OUTPUT_RESERVE = 1_024
INPUT_BUDGET = CONTEXT_WINDOW - OUTPUT_RESERVE
#: What the four tool schemas add to every request (not part of the messages).
#: With these figures the story is consistent with DESIGN §5: every request of
#: turn 1 stays under the handoff line (70 % of the input budget), the
#: follow-up crosses it, and the context after turn 2 is over the compaction
#: line (80 %), so the next request compacts; the result lands under half the
#: input budget.
TOOL_SCHEMA_TOKENS = 570
KEEP_ROUNDS = 2

SYSTEM_PROMPT = f"""\
You are Cairn, a coding agent working in {WORKSPACE} (a Python 3.11 project).
Use the tools to read, search and edit files and to run commands. Make the
smallest change that solves the task, keep the public API stable unless asked,
and run the relevant tests before you say you are done. Answer in the user's
language when they write in it."""

USER_TASK = """\
slugify() drops Chinese characters: `slugify("你好 world")` returns "world" \
instead of "你好-world". 请修复这个问题：保持现有测试通过，不要改动公共 API。 \
Please add a regression test too."""

SLUG_PY_BEFORE = '''\
     1\t"""URL slugs for titles and headings."""
     2\t
     3\tfrom __future__ import annotations
     4\t
     5\timport re
     6\timport unicodedata
     7\t
     8\t_SEPARATORS = re.compile(r"[^a-z0-9]+")
     9\t
    10\t
    11\tdef slugify(title: str, *, max_length: int = 64) -> str:
    12\t    """Lower-case ``title`` and join its words with hyphens.
    13\t
    14\t    >>> slugify("Hello, World!")
    15\t    'hello-world'
    16\t    """
    17\t    text = unicodedata.normalize("NFKD", title)
    18\t    text = text.encode("ascii", "ignore").decode("ascii")
    19\t    text = _SEPARATORS.sub("-", text.lower()).strip("-")
    20\t    return text[:max_length].rstrip("-")
'''

GREP_SLUGIFY = """\
src/textkit/__init__.py:3:from textkit.slug import slugify
src/textkit/__init__.py:5:__all__ = ["slugify", "wrap", "dedent_block"]
src/textkit/headings.py:7:from textkit.slug import slugify
src/textkit/headings.py:31:        anchor = slugify(heading.text, max_length=48)
src/textkit/headings.py:33:            anchor = f"{anchor}-{seen[anchor]}"
src/textkit/slug.py:11:def slugify(title: str, *, max_length: int = 64) -> str:
src/textkit/slug.py:14:    >>> slugify("Hello, World!")
tests/test_headings.py:4:from textkit.headings import anchors
tests/test_slug.py:1:from textkit.slug import slugify
tests/test_slug.py:5:    assert slugify("Hello, World!") == "hello-world"
tests/test_slug.py:9:    assert slugify("Crème brûlée") == "creme-brulee"
tests/test_slug.py:13:    assert slugify("a" * 10 + " " + "b" * 10, max_length=11) == "a" * 10
"""

TEST_SLUG_PY = """\
     1\tfrom textkit.slug import slugify
     2\t
     3\t
     4\tdef test_ascii_title():
     5\t    assert slugify("Hello, World!") == "hello-world"
     6\t
     7\t
     8\tdef test_accents_are_stripped():
     9\t    assert slugify("Crème brûlée") == "creme-brulee"
    10\t
    11\t
    12\tdef test_max_length_does_not_end_with_a_hyphen():
    13\t    assert slugify("a" * 10 + " " + "b" * 10, max_length=11) == "a" * 10
"""

PYTEST_FAILURE = """\
$ python -m pytest tests/test_slug.py -q
...F                                                                     [100%]
=================================== FAILURES ===================================
______________________________ test_cjk_is_kept _______________________________

    def test_cjk_is_kept():
>       assert slugify("你好 world") == "你好-world"
E       AssertionError: assert 'world' == '你好-world'
E
E         - 你好-world
E         + world

tests/test_slug.py:17: AssertionError
=========================== short test summary info ============================
FAILED tests/test_slug.py::test_cjk_is_kept - AssertionError: assert 'world' == '你好-world'
1 failed, 3 passed in 0.09s
exit status 1"""

SLUG_EDIT = {
    "path": "src/textkit/slug.py",
    "old": (
        '_SEPARATORS = re.compile(r"[^a-z0-9]+")\n…\n'
        '    text = text.encode("ascii", "ignore").decode("ascii")\n'
    ),
    "new": (
        '_SEPARATORS = re.compile(r"[\\W_]+")\n…\n'
        '    text = "".join(ch for ch in text if not unicodedata.combining(ch))\n'
        '    text = unicodedata.normalize("NFKC", text)\n'
    ),
}

LEDGER = """\
## Objective and constraints
- Make `slugify()` in src/textkit/slug.py keep CJK and other non-Latin letters: \
`slugify("你好 world")` must return `"你好-world"`.
- User constraints: keep the existing tests passing; do not change the public API \
(`slugify(title, *, max_length=64)`); add a regression test.

## Decisions and rationale
- Replaced the ASCII round-trip (`encode("ascii", "ignore")`) with NFKD, dropping \
combining marks, then NFKC: accents are still stripped from Latin text, letters of \
every script survive.
- Separator pattern `[^a-z0-9]+` → `[\\W_]+`, so any non-word character (full-width \
`，` and `。` included) becomes one hyphen.

## Workspace mutations
- src/textkit/slug.py: new normalization and separator pattern (lines 8-22).
- tests/test_slug.py: added test_cjk_is_kept and test_full_width_punctuation.

## Verification evidence
- Before the fix: `AssertionError: assert 'world' == '你好-world'` (1 failed, 3 passed).
- After both edits: `python -m pytest -q` → 14 passed in 0.21s.

## Active tasks and background work
- None running; both user requests are done.

## Open risks or blockers
- `max_length` counts characters, not URL-encoded bytes; a CJK slug of 64 characters \
is 576 bytes once percent-encoded (unchanged behaviour, not raised by the user).

## Exact next action
- Wait for the user's next request; mention the max_length caveat if slugs come up again."""

CONTINUATION_PREFACE = """\
This session is being continued from an earlier conversation that was compacted \
to fit the context window. The ledger below is the continuation record of \
everything before this point; the most recent messages follow it verbatim.

"""


class Clock:
    """Record timestamps of a session that took a few minutes."""

    def __init__(self) -> None:
        self._now = datetime(2025, 6, 3, 9, 14, 2, 117000, tzinfo=UTC)

    def tick(self, seconds: float = 2.0) -> str:
        self._now += timedelta(seconds=seconds)
        return self._now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SessionWriter:
    """Appends conversation turns the way the agent loop would."""

    def __init__(self, store: JsonlTranscriptStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def add(self, message: Message, seconds: float = 2.0) -> Message:
        self.store.append(MessageRecord(message, ts=self.clock.tick(seconds)))
        return message

    def reply(self, text: str | None, *calls: tuple[str, Mapping[str, object], str]) -> None:
        """An assistant message with usage, then one result per tool call."""
        tool_calls = tuple(
            ToolCall(new_id("call"), name, orjson.dumps(args).decode()) for name, args, _ in calls
        )
        draft = Message(role="assistant", content=text, tool_calls=tool_calls)
        prompt = TOOL_SCHEMA_TOKENS + estimate_messages_tokens(self.store.api_view.messages)
        completion = estimate_message_tokens(draft)
        usage = Usage(prompt, completion, prompt + completion, cached_tokens=prompt // 2)
        self.add(
            Message(
                role="assistant",
                content=text,
                id=draft.id,
                tool_calls=tool_calls,
                meta=MessageMeta(usage=usage),
            ),
            seconds=6.5,
        )
        for call, (_, _, result) in zip(tool_calls, calls, strict=True):
            self.add(
                Message(role="tool", content=result, tool_call_id=call.id, name=call.name),
                seconds=1.2,
            )

    def api_tokens(self) -> int:
        return estimate_messages_tokens(self.store.api_view.messages)


def kept_tail(messages: list[Message], keep_rounds: int) -> list[Message]:
    """The last ``keep_rounds`` complete API rounds, handoff reminders left out."""
    rounds = [
        r
        for r in group_rounds(messages)
        if r.complete and messages[r.start].meta.kind != KIND_HANDOFF
    ]
    return [m for r in rounds[-keep_rounds:] for m in messages[r.start : r.end]]


def write_session(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        path.unlink()
    clock = Clock()
    header = SessionRecord(
        session_id=new_session_id(), workspace=WORKSPACE, model=MODEL, ts=clock.tick(0)
    )
    store = JsonlTranscriptStore.create(path, header)
    try:
        _converse(SessionWriter(store, clock))
    finally:
        store.close()
    return path


def _converse(w: SessionWriter) -> None:
    store, clock = w.store, w.clock

    # -- turn 1: the task -------------------------------------------------
    w.add(Message(role="system", content=SYSTEM_PROMPT, meta=MessageMeta(synthetic=True)), 0.0)
    w.add(Message(role="user", content=USER_TASK), 9.0)
    store.append(
        ErrorRecord(
            "The provider returned 503 Service Unavailable (model is loading); "
            "retried after 2.0 s and the request went through.",
            source="provider",
            ts=clock.tick(3.1),
        )
    )
    w.reply(
        "I'll start with the implementation.",
        ("read_file", {"path": "src/textkit/slug.py"}, SLUG_PY_BEFORE),
    )
    first_read_result = store.api_view.messages[-1]
    w.reply(
        'Line 18 round-trips the text through ASCII with errors="ignore", which deletes '
        "every character that has no ASCII decomposition, so CJK disappears. "
        "Let me check the callers and the existing tests before changing it.",
        ("grep", {"pattern": "slugify", "path": "."}, GREP_SLUGIFY),
        ("read_file", {"path": "tests/test_slug.py"}, TEST_SLUG_PY),
    )
    w.reply(
        "First a regression test that reproduces the report.",
        (
            "edit_file",
            {
                "path": "tests/test_slug.py",
                "old": '    assert slugify("a" * 10 + " " + "b" * 10, max_length=11) == "a" * 10\n',
                "new": (
                    '    assert slugify("a" * 10 + " " + "b" * 10, max_length=11) == "a" * 10\n'
                    "\n\ndef test_cjk_is_kept():\n"
                    '    assert slugify("你好 world") == "你好-world"\n'
                ),
            },
            "Edited tests/test_slug.py: 1 replacement (lines 13-17).",
        ),
    )
    w.reply(
        None,
        ("bash", {"command": "python -m pytest tests/test_slug.py -q"}, PYTEST_FAILURE),
    )
    w.reply(
        "Reproduced. Instead of the ASCII round-trip I'll drop only combining marks after "
        "NFKD (so accents still go) and split on non-word characters of any script.",
        (
            "edit_file",
            SLUG_EDIT,
            "Edited src/textkit/slug.py: 2 replacements (lines 8, 18-19).",
        ),
    )
    w.reply(
        None,
        (
            "bash",
            {"command": "python -m pytest tests/test_slug.py -q"},
            "$ python -m pytest tests/test_slug.py -q\n....                                "
            "                                     [100%]\n4 passed in 0.06s\nexit status 0",
        ),
    )
    w.reply(
        "Fixed. `slugify()` no longer round-trips through ASCII: it strips combining marks "
        'after NFKD and then recomposes with NFKC, so `slugify("你好 world")` now returns '
        '`"你好-world"` while `"Crème brûlée"` still becomes `"creme-brulee"`. The '
        "signature is unchanged, and tests/test_slug.py has a new `test_cjk_is_kept`. "
        "All 4 slug tests pass."
    )
    store.sync()  # end of turn

    # -- turn 2: a follow-up; the budget crosses the handoff line -----------
    w.add(
        Message(
            role="user",
            content="Nice. Are full-width punctuation marks like '，' and '。' treated as "
            "separators too? e.g. slugify('标题，副标题')",
        ),
        40.0,
    )
    used = TOOL_SCHEMA_TOKENS + w.api_tokens()
    store.append(
        HandoffRecord(
            Message(
                role="user",
                content=(
                    "<system-reminder>Context budget: this conversation uses "
                    f"{used / INPUT_BUDGET:.0%} of the input budget ({used:,} of "
                    f"{INPUT_BUDGET:,} tokens). Finish the current step and keep replies "
                    "short; older history will be compacted soon.</system-reminder>"
                ),
                meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
            ),
            epoch=0,
            ts=clock.tick(0.01),
        )
    )
    # Snip the first read of slug.py: the file has changed since.
    store.append(
        ContextEditRecord(
            (
                ContentEdit(
                    first_read_result.id,
                    "[snipped: read_file src/textkit/slug.py, 20 lines; the file has been "
                    "edited since, read it again if needed]",
                    reason="snip",
                ),
            ),
            ts=clock.tick(0.01),
        )
    )
    w.reply(
        None,
        (
            "bash",
            {
                "command": 'python -c "from textkit.slug import slugify; '
                "print(slugify('标题，副标题'), slugify('完成。Done'))\""
            },
            "标题-副标题 完成-done\nexit status 0",
        ),
    )
    w.reply(
        "They are: both are non-word characters, so each becomes a separator. I'll pin "
        "that down with a test.",
        (
            "edit_file",
            {
                "path": "tests/test_slug.py",
                "old": '    assert slugify("你好 world") == "你好-world"\n',
                "new": (
                    '    assert slugify("你好 world") == "你好-world"\n'
                    "\n\ndef test_full_width_punctuation():\n"
                    '    assert slugify("标题，副标题。") == "标题-副标题"\n'
                ),
            },
            "Edited tests/test_slug.py: 1 replacement (lines 17-21).",
        ),
    )
    w.reply(
        None,
        (
            "bash",
            {"command": "python -m pytest -q"},
            "$ python -m pytest -q\n..............                              "
            "                             [100%]\n14 passed in 0.21s\nexit status 0",
        ),
    )
    w.reply(
        "Yes. '，' and '。' are not word characters, so each run of them turns into a single "
        "hyphen and trailing ones are stripped: `slugify('标题，副标题')` → `'标题-副标题'`. "
        "I added `test_full_width_punctuation`; the whole suite passes (14 tests)."
    )
    store.sync()

    # -- automatic compaction before the next request (fallback strategy) --
    context = list(store.api_view.messages)
    tail = kept_tail(context, KEEP_ROUNDS)
    block = Message(
        role="user",
        content=CONTINUATION_PREFACE + LEDGER,
        meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True),
    )
    replacement = (block, *tail)
    store.save_compaction(
        CompactionRecord(
            trigger="auto",
            strategy="fallback",
            pre_tokens=TOOL_SCHEMA_TOKENS + estimate_messages_tokens(context),
            post_tokens=TOOL_SCHEMA_TOKENS + estimate_messages_tokens(replacement),
            summary=LEDGER,
            replacement_messages=replacement,
            files=("src/textkit/slug.py", "tests/test_slug.py"),
            ts=clock.tick(1.5),
        )
    )

    # -- turn 3, after the compaction ---------------------------------------
    w.add(
        Message(
            role="user",
            content="One more thing: add a doctest with a Chinese title to the docstring.",
        ),
        55.0,
    )
    w.reply(
        None,
        (
            "edit_file",
            {
                "path": "src/textkit/slug.py",
                "old": "    >>> slugify(\"Hello, World!\")\n    'hello-world'\n",
                "new": (
                    "    >>> slugify(\"Hello, World!\")\n    'hello-world'\n"
                    "    >>> slugify(\"你好 world\")\n    '你好-world'\n"
                ),
            },
            "Edited src/textkit/slug.py: 1 replacement (lines 14-17).",
        ),
    )
    w.reply(
        None,
        (
            "bash",
            {"command": "python -m pytest --doctest-modules src/textkit/slug.py -q"},
            "$ python -m pytest --doctest-modules src/textkit/slug.py -q\n.  "
            "                                                                      "
            "[100%]\n1 passed in 0.03s\nexit status 0",
        ),
    )
    w.reply(
        'Done: the docstring of `slugify()` now shows `slugify("你好 world")` → '
        "`'你好-world'`, and the doctest passes."
    )
    store.sync()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python examples/sample_session.py OUT.jsonl", file=sys.stderr)
        return 2
    out = Path(args[0])
    if out.is_dir():
        print(f"sample_session.py: {out} is a directory", file=sys.stderr)
        return 2
    print(write_session(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
