"""The fixed context of a replayed request: what the recorded agent really sent.

Every request carries a system prompt and tool schemas besides the
conversation. Claude Code records neither, and Codex records its base
instructions but not its tool schemas, so a replay of the bare recording
would be optimistic by thousands of tokens on every request. The replay
therefore decides, per session, how many true tokens the fixed context has,
and where that figure comes from:

- ``flag``: ``--fixed-tokens N`` (never below what the recording carries);
- ``usage``: inferred from the recorded provider usage: for the first few
  responses, prompt tokens minus the exact size of the messages sent before
  them; the smallest such figure;
- ``default``: the format records no usage, or its usage counts context the
  file does not hold (below): what it records plus the tokens its recordings
  are known to leave out (``UNRECORDED_TOKENS``);
- ``recorded``: the recording carries its whole fixed context (SWE-agent,
  tau-bench, OpenAI chat …), or the usage shows nothing more.

Usage that counts context the file does not hold cannot be inferred from. A
Claude Code compaction sub-agent's transcript (``agent-acompact-*.jsonl``)
holds the compaction instruction and the summary, but its one request also
carried the whole conversation it summarized (~168k tokens): inferred from
that usage, the "fixed context" alone fills every window. The importers mark
such a response (``meta.extra[CONTEXT_NOT_RECORDED]``, the reason): a
compaction sub-agent by its file name or ``agentId``, and any session of a
format with a documented default by ``usage_exceeds_recording`` (its first
response's prompt is over ``ELSEWHERE_RATIO`` times what the file carries).
Such a session gets the format's documented default, and
``ResolvedFixedContext.note`` says why.

When the recording carries less than that figure, host *filler* makes up the
difference: deterministic JSON function schemas with prose descriptions and
parameters, shaped like real tool schemas, so the pipeline's estimate of the
fixed context (½ token per JSON character) over-counts it the way it
over-counts real schemas.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from cairn.context.tracker import FixedContext
from cairn.errors import FormatError
from cairn.messages import JSONObject, Message
from cairn.replay.session import RecordedSession

FixedSource: TypeAlias = Literal["recorded", "usage", "default", "flag"]
MessageCount: TypeAlias = Callable[[Message], int]
FixedCount: TypeAlias = Callable[[FixedContext], int]

#: Chat templates add a few tokens to prime the reply (OpenAI's accounting).
REPLY_PRIMING_TOKENS = 3

#: Tokens of fixed context a format's recordings leave out, added to what they
#: record when they carry no usage to infer it from. Formats not listed record
#: their whole fixed context (SWE-agent, tau-bench, OpenHands, OpenAI chat) or
#: are Cairn's own.
UNRECORDED_TOKENS: Mapping[str, int] = {
    # Claude Code writes neither its system prompt nor its tool schemas. The
    # recorded usage of real Claude Code sessions (input + cache read + cache
    # creation of the first API response, before any conversation to speak
    # of) shows about 20k tokens of them (issue 9, Claude Code 2.1).
    "claude-code": 20_000,
    # Codex records its base instructions (``session_meta``) but not its tool
    # schemas (exec_command, write_stdin, apply_patch, view_image …); its
    # recorded ``token_count`` usage shows about 5.4k tokens of them (issue 9).
    "codex": 5_400,
}

#: Usage of this many responses is looked at: later ones also hold the
#: difference between the recorded model's tokenizer and ours, summed over a
#: growing history, and the thinking or reasoning the importers drop.
USAGE_SAMPLE = 5

#: A gap smaller than this between the target and the recording is left
#: open: no schema is that small, and it is noise next to any window.
MIN_FILLER_TOKENS = 32

#: ``meta.extra`` key an importer sets on a response whose recorded usage
#: counts context the file does not hold; the value is the reason, one line.
#: The replay then uses the format's documented default, not that usage.
CONTEXT_NOT_RECORDED = "context_not_recorded"

#: A first response whose recorded prompt is over this many times what the
#: file carries (the estimate of the messages before it plus the format's
#: documented default fixed context) was sent with context the file does not
#: hold. The first requests of the shipped Claude Code, Codex and OpenHands
#: recordings come to 0.7-1.7 times that figure; a compaction sub-agent's
#: carries the whole conversation it summarized (8.2x in the fixture, ~168k
#: tokens in the real file the format guide describes). With four, a session
#: whose real fixed context is up to four times the documented one (a long
#: CLAUDE.md, many MCP tools) is never taken for such a file. Applied only to
#: formats with a documented default (``UNRECORDED_TOKENS``).
ELSEWHERE_RATIO = 4


class FixedContextError(FormatError):
    """A fixed-context size that cannot work for a session (the text names both figures)."""


@dataclass(frozen=True)
class ResolvedFixedContext:
    """The fixed context one session is replayed with."""

    context: FixedContext
    #: Its exact size (what the replay counts on every request).
    tokens: int
    #: The exact size of the system prompt and tools the recording itself carries.
    recorded_tokens: int
    source: FixedSource
    #: Why the usual source was not taken, one line (``None``: nothing to say).
    note: str | None = None


def recorded_fixed(session: RecordedSession) -> FixedContext:
    return FixedContext(session.system, session.tools)


def usage_fixed_tokens(messages: Sequence[Message], count: MessageCount) -> int | None:
    """The fixed context the recorded usage implies, or ``None`` without usage.

    For each of the first ``USAGE_SAMPLE`` responses with prompt tokens: those
    prompt tokens minus the exact size of every message before the response
    (what was sent) and the reply priming; the smallest, never negative. A
    response whose prompt is smaller than the one before shows the recorded
    agent rewrote its context (it compacted): the replay does not, so from
    there on the recorded prompts no longer match the messages replayed.
    """
    sent = 0
    previous = 0
    estimates: list[int] = []
    for message in messages:
        usage = message.meta.usage
        if message.role == "assistant" and usage is not None and usage.prompt_tokens > 0:
            if usage.prompt_tokens < previous:
                break
            previous = usage.prompt_tokens
            estimates.append(usage.prompt_tokens - sent - REPLY_PRIMING_TOKENS)
            if len(estimates) == USAGE_SAMPLE:
                break
        sent += count(message)
    return max(0, min(estimates)) if estimates else None


def usage_exceeds_recording(first_prompt_tokens: int, carried_tokens: int) -> bool:
    """Whether a first response's recorded prompt is far more than the file carries.

    ``carried_tokens``: the estimate of the messages sent before that
    response plus the format's documented default fixed context. Over
    ``ELSEWHERE_RATIO`` times that, the request held context the file does
    not (a compaction sub-agent's summarized conversation), and its usage
    says nothing about the fixed context.
    """
    return first_prompt_tokens > ELSEWHERE_RATIO * max(carried_tokens, 1)


def first_response_with_usage(messages: Sequence[Message]) -> int | None:
    """The index of the first assistant message with recorded prompt tokens, if any."""
    for index, message in enumerate(messages):
        usage = message.meta.usage
        if message.role == "assistant" and usage is not None and usage.prompt_tokens > 0:
            return index
    return None


def context_not_recorded(messages: Sequence[Message]) -> str | None:
    """Why the first response's usage counts context the file lacks (importer's mark), if so."""
    index = first_response_with_usage(messages)
    if index is None:
        return None
    reason = messages[index].meta.extra.get(CONTEXT_NOT_RECORDED)
    return reason if isinstance(reason, str) and reason else None


def default_fixed_words(recorded_tokens: int, unrecorded_tokens: int, tokens: int) -> str:
    """``fixed context = the format's documented default, 20,000 tokens`` (how it adds up)."""
    if not unrecorded_tokens:
        return f"fixed context = what the file records, {tokens:,} tokens (no documented default)"
    if recorded_tokens:
        return (
            f"fixed context = the format's documented default, {tokens:,} tokens "
            f"({recorded_tokens:,} recorded + {unrecorded_tokens:,})"
        )
    return f"fixed context = the format's documented default, {tokens:,} tokens"


def check_requested(name: str, requested: int, recorded_tokens: int) -> None:
    """``--fixed-tokens`` may not ask for less than the recording itself carries."""
    if requested < recorded_tokens:
        raise FixedContextError(
            f"--fixed-tokens {requested:,} is smaller than what the recording itself "
            f"carries: session {name!r} records {recorded_tokens:,} tokens of "
            "system prompt and tool schemas"
        )


def resolve_fixed_context(
    session: RecordedSession,
    requested: int | None,
    count: MessageCount,
    count_fixed: FixedCount,
) -> ResolvedFixedContext:
    """The fixed context to replay ``session`` with (``requested``: ``--fixed-tokens``).

    ``None`` is ``auto``: usage, else the format's default, else what is
    recorded; the format's default also when an importer marked the usage as
    counting context the file does not hold (``CONTEXT_NOT_RECORDED``), and
    then ``note`` says so. A requested size below what the recording carries
    is a ``FixedContextError``.
    """
    recorded = recorded_fixed(session)
    recorded_tokens = count_fixed(recorded)
    unrecorded = UNRECORDED_TOKENS.get(session.format, 0)
    source: FixedSource
    elsewhere: str | None = None
    if requested is not None:
        check_requested(session.name, requested, recorded_tokens)
        target, source = requested, "flag"
    else:
        elsewhere = context_not_recorded(session.messages)
        inferred = None if elsewhere else usage_fixed_tokens(session.messages, count)
        if inferred is not None:
            target, source = inferred, "usage"
        else:
            target, source = recorded_tokens + unrecorded, "default"
        if target - recorded_tokens < MIN_FILLER_TOKENS:
            target, source = recorded_tokens, "recorded"
    if target - recorded_tokens < MIN_FILLER_TOKENS:
        context, tokens = recorded, recorded_tokens
    else:
        context = with_filler(recorded, target, count_fixed)
        tokens = count_fixed(context)
    note = None
    if elsewhere:
        note = f"{elsewhere}; {default_fixed_words(recorded_tokens, unrecorded, tokens)}"
    return ResolvedFixedContext(context, tokens, recorded_tokens, source, note)


# ---------------------------------------------------------------------------
# Host filler: tool schemas that make up what the recording left out


def with_filler(fixed: FixedContext, target: int, count_fixed: FixedCount) -> FixedContext:
    """``fixed`` plus filler tool schemas, so that its exact size is ``target`` or just under.

    Whole schemas of varied, realistic sizes are added while they fit; the
    last one's description is then sized by bisection on the exact count, so
    the result is within a word or two of ``target``.
    """
    tools = list(fixed.tools)
    taken = frozenset(_tool_name(t) for t in fixed.tools)

    def schema(index: int, words: int) -> JSONObject:
        return filler_schema(index, words, taken)

    def size(*extra: JSONObject) -> int:
        return count_fixed(FixedContext(fixed.system, (*tools, *extra)))

    # Cheap first: schemas counted one at a time (the sum over-counts the
    # joins a little), well short of the target; exact counts from there on.
    approx = size()
    index = 0
    while True:
        whole = schema(index, _natural_words(index))
        tokens = count_fixed(FixedContext((), (whole,)))
        if approx + tokens > target - _EXACT_MARGIN:
            break
        tools.append(whole)
        approx += tokens
        index += 1
    while size(schema(index, _natural_words(index))) <= target:
        tools.append(schema(index, _natural_words(index)))
        index += 1
    if size(schema(index, 0)) > target and len(tools) > len(fixed.tools):
        # Too little room for even a short schema: resize the previous one instead.
        tools.pop()
        index -= 1
    if size(schema(index, 0)) > target:
        return FixedContext(fixed.system, tuple(tools))
    high = _natural_words(index)
    while size(schema(index, high)) <= target:
        high *= 2
    low = 0
    while low < high - 1:  # invariant: ``low`` words fit, ``high`` do not
        middle = (low + high) // 2
        if size(schema(index, middle)) <= target:
            low = middle
        else:
            high = middle
    tools.append(schema(index, low))
    return FixedContext(fixed.system, tuple(tools))


#: Where the one-schema-at-a-time count stops and exact counting takes over.
_EXACT_MARGIN = 400


def _tool_name(tool: JSONObject) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""


def _natural_words(index: int) -> int:
    # Real schemas range from a one-line description to a page of usage notes.
    return 120 + (index * 197) % 640


_TOOLS = (
    ("read_file", "Reads a file from the local filesystem"),
    ("write_file", "Writes a file to the local filesystem, replacing any existing content"),
    ("edit_file", "Performs exact string replacements in a file"),
    ("search_code", "Searches file contents with a regular expression"),
    ("find_files", "Finds files whose path matches a glob pattern"),
    ("run_command", "Runs a shell command in a persistent session with an optional timeout"),
    ("read_output", "Reads the output of a command that runs in the background"),
    ("stop_command", "Stops a background command by its id"),
    ("fetch_page", "Fetches a web page and returns its content as markdown"),
    ("web_search", "Searches the web and returns the results with their links"),
    ("update_todos", "Creates and updates the structured task list of the session"),
    ("start_task", "Starts a sub-agent that works on a task on its own and reports back"),
    ("edit_notebook", "Replaces, inserts or deletes a cell of a Jupyter notebook"),
    ("ask_question", "Asks the user a multiple-choice question while working"),
    ("enter_plan_mode", "Switches to plan mode: nothing changes until the plan is approved"),
    ("apply_patch", "Applies a patch in the structured patch format to files of the workspace"),
    ("view_image", "Attaches a local image file to the conversation"),
    ("list_directory", "Lists the files and folders of a directory"),
)

_SENTENCES = (
    "The path must be absolute, not relative, and it must stay inside the workspace.",
    "Use this tool instead of running the equivalent shell command, which is slower.",
    "By default it reads up to 2000 lines from the beginning of the file.",
    "Results are sorted by modification time, newest first.",
    "Always prefer editing an existing file to creating a new one.",
    "When several independent calls are needed, make them in one response so they run in parallel.",
    "The command runs in the working directory of the session and keeps its state between calls.",
    "Quote paths that contain spaces with double quotes.",
    "Output longer than 30000 characters is truncated before it is returned.",
    "Never use it to commit, push or change the git configuration unless the user asks for it.",
    "If the old string is not unique in the file the edit fails; add context to make it unique.",
    "Lines in the output are numbered starting at 1, followed by a tab and the line content.",
    "It can read images, PDF files and notebooks as well as plain text.",
    "Mark each task as completed as soon as it is done; do not batch several completions.",
    "Only one task may be in progress at any time.",
    "The pattern uses full regular expression syntax; literal braces must be escaped.",
    "Filter the files searched with the glob or type parameter.",
    "The timeout is given in milliseconds and may not exceed ten minutes.",
    "Explain what the command does in five to ten words in the description field.",
    "Domain filters restrict the search to the listed sites or exclude them.",
    "The sub-agent cannot see this conversation, so describe the task completely.",
    "Return the answer as plain text; the user does not see the raw tool output.",
    "Large results are saved to a file and only their first and last lines are shown.",
    "Do not call this tool repeatedly for the same input; reuse the earlier result.",
)

_PARAMETERS = (
    ("path", "string", "The absolute path of the file or folder to work on."),
    ("pattern", "string", "The regular expression or glob pattern to match."),
    ("command", "string", "The command to run."),
    ("timeout", "number", "Optional timeout in milliseconds."),
    ("offset", "integer", "The line number to start reading from."),
    ("limit", "integer", "The number of lines to read."),
    ("old_string", "string", "The text to replace."),
    ("new_string", "string", "The text to replace it with; it must differ from old_string."),
    ("replace_all", "boolean", "Replace every occurrence instead of the first one."),
    ("description", "string", "A short description of what this call does and why."),
    ("url", "string", "The fully-formed URL to fetch."),
    ("query", "string", "The search query."),
    ("run_in_background", "boolean", "Run the command in the background and return at once."),
    ("content", "string", "The full content to write."),
)


def filler_schema(index: int, words: int, taken: frozenset[str] = frozenset()) -> JSONObject:
    """The ``index``-th filler tool schema, its description ``words`` words long.

    Deterministic: the same index and length give the same schema, so a
    replay is repeatable and its requests share their cached prefix. Its name
    avoids the ``taken`` names of the recorded tools.
    """
    name, purpose = _TOOLS[index % len(_TOOLS)]
    if index >= len(_TOOLS):
        name = f"{name}_{index // len(_TOOLS) + 1}"
    while name in taken:
        name = f"host_{name}"
    lines: list[str] = []
    left = words
    step = 0
    while left > 0:
        sentence = _SENTENCES[(index * 7 + step * 5) % len(_SENTENCES)].split()[:left]
        lines.append("- " + " ".join(sentence))
        left -= len(sentence)
        step += 1
    description = f"{purpose}.\n\nUsage:\n" + "\n".join(lines) if lines else f"{purpose}."
    picked = [_PARAMETERS[(index * 3 + k * 5) % len(_PARAMETERS)] for k in range(2 + index % 4)]
    properties: JSONObject = {
        key: {"type": kind, "description": text} for key, kind, text in picked
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [next(iter(properties))],
                "additionalProperties": False,
            },
        },
    }
