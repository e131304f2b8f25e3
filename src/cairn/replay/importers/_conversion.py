"""Foreign message shapes as Cairn's: content blocks, chat messages, usage, exit codes.

The shapes several formats share: OpenAI chat-completions messages (openai,
tau-bench, SWE-agent, OpenHands responses), content blocks of the OpenAI,
Responses-API and Anthropic kinds, the text a host injects into user turns,
OpenAI-style usage, and the exit code in a tool's output (Codex, OpenHands).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from cairn.messages import (
    Content,
    ContentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
    Usage,
)
from cairn.replay.importers._source import (
    IdMaker,
    RecordError,
    Warn,
    describe,
    dump_json,
    expect_dict,
    kind_of,
    opt_dict,
    opt_str,
)

#: Token counts above this are not counts (no context is a trillion tokens);
#: sums of a few stay far inside the 64 bits JSON writers accept.
MAX_COUNT = 2**40


# ---------------------------------------------------------------------------
# Content


def make_content(parts: Sequence[ContentPart]) -> Content:
    """``None`` for no parts, a plain string for one text part, else the parts."""
    if not parts:
        return None
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def content_parts(raw: object, where: str, warn: Warn) -> list[ContentPart]:
    """Parts of a string or a list of OpenAI, Responses-API or Anthropic content blocks.

    Text blocks become ``TextPart``, image blocks ``ImagePart`` (Anthropic base64
    sources as ``data:`` URLs); any other block is skipped with a warning.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        return [TextPart(raw)] if raw else []
    if not isinstance(raw, list):
        raise RecordError(f"{where}: content must be a string or a list, found {kind_of(raw)}")
    parts: list[ContentPart] = []
    for index, block in enumerate(raw):
        if isinstance(block, str):
            parts.append(TextPart(block))
            continue
        if not isinstance(block, dict):
            raise RecordError(f"{where}.content[{index}]: expected an object")
        part = content_part(block)
        if part is None:
            kind = describe(block.get("type"))
            warn(f"{where}: content block of type {kind} not replayed; skipped")
        else:
            parts.append(part)
    return parts


def content_part(block: Mapping[str, object]) -> ContentPart | None:
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        text = block.get("text")
        return TextPart(text) if isinstance(text, str) else None
    if kind == "refusal":
        text = block.get("refusal")
        return TextPart(text) if isinstance(text, str) else None
    if kind in ("image_url", "input_image"):
        image = block.get("image_url")
        if isinstance(image, dict):
            url, detail = image.get("url"), image.get("detail")
        else:
            url, detail = image, block.get("detail")
        if isinstance(url, str):
            return ImagePart(url, detail if isinstance(detail, str) else None)
        return None
    if kind == "image":  # Anthropic
        source = opt_dict(block, "source")
        if source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                return ImagePart(f"data:{media};base64,{data}")
        url = source.get("url")
        return ImagePart(url) if isinstance(url, str) else None
    return None


# ---------------------------------------------------------------------------
# Content the host injected into user turns


@dataclass(frozen=True)
class Injected:
    """How a format's host marks what it writes into user turns.

    ``tags``: elements ``<tag …>…</tag>`` the host wraps its text in (an IDE
    selection, a reminder, the environment); ``markers``: whole texts the
    host writes in the user's place; ``prefixes``: texts the host starts with
    (a heading it puts before injected instructions).
    """

    tags: tuple[str, ...] = ()
    markers: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @cached_property
    def pattern(self) -> re.Pattern[str] | None:
        if not self.tags:
            return None
        names = "|".join(re.escape(tag) for tag in self.tags)
        return re.compile(rf"<({names})(?:\s[^>]*)?>.*?</\1>", re.S)

    def whole(self, text: str) -> bool:
        """Is all of ``text`` written by the host?"""
        stripped = text.strip()
        return stripped in self.markers or stripped.startswith(self.prefixes)

    def split(self, text: str) -> list[tuple[str, bool]]:
        """``text`` as ``(segment, injected)`` pairs in order.

        Each injected element is a segment of its own; what lies between
        them is the user's, trimmed (the host joins its blocks with blank
        lines), and dropped when blank. A text with no injected element comes
        back whole and unchanged.
        """
        if self.whole(text):
            return [(text, True)]
        pattern = self.pattern
        if pattern is None or pattern.search(text) is None:
            return [(text, False)]
        segments: list[tuple[str, bool]] = []
        position = 0
        for match in pattern.finditer(text):
            typed = text[position : match.start()].strip()
            if typed:
                segments.append((typed, self.whole(typed)))
            segments.append((match.group(0), True))
            position = match.end()
        rest = text[position:].strip()
        if rest:
            segments.append((rest, self.whole(rest)))
        return segments


def injected_runs(
    parts: Sequence[ContentPart], injected: Injected
) -> list[tuple[list[ContentPart], bool]]:
    """The parts of one user turn, grouped into runs that are all typed or all injected.

    Text parts are split at injected elements; an image goes with the text
    around it as the user's. The runs keep the recorded order.
    """
    runs: list[tuple[list[ContentPart], bool]] = []
    for part in parts:
        pieces: list[tuple[ContentPart, bool]] = (
            [(TextPart(text), flag) for text, flag in injected.split(part.text)]
            if isinstance(part, TextPart)
            else [(part, False)]
        )
        for piece, flag in pieces:
            if runs and runs[-1][1] == flag:
                runs[-1][0].append(piece)
            else:
                runs.append(([piece], flag))
    return runs


# ---------------------------------------------------------------------------
# OpenAI chat messages (openai, tau-bench, SWE-agent, OpenHands responses)

_ROLE_ALIASES: Mapping[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def chat_message(raw: object, where: str, ids: IdMaker, warn: Warn) -> Message:
    """One OpenAI chat-completions message; ``developer`` counts as ``system``."""
    data = expect_dict(raw, where)
    role_raw = data.get("role")
    if role_raw is None:
        raise RecordError(f"{where}: key 'role' missing")
    role = _ROLE_ALIASES.get(role_raw) if isinstance(role_raw, str) else None
    if role is None:
        raise RecordError(f"{where}: unknown role {describe(role_raw)}")
    calls: tuple[ToolCall, ...] = ()
    if role == "assistant":
        calls_raw = data.get("tool_calls") or []
        if not isinstance(calls_raw, list):
            raise RecordError(f"{where}: key 'tool_calls' must be a list")
        calls = tuple(
            chat_tool_call(c, f"{where}.tool_calls[{i}]", ids, warn)
            for i, c in enumerate(calls_raw)
        )
    reasoning = data.get("reasoning_content", data.get("reasoning"))
    return Message(
        role=role,
        content=make_content(content_parts(data.get("content"), where, warn)),
        id=opt_str(data, "id") or ids.next("msg"),
        tool_calls=calls,
        tool_call_id=opt_str(data, "tool_call_id") if role == "tool" else None,
        name=opt_str(data, "name"),
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
    )


def chat_tool_call(raw: object, where: str, ids: IdMaker, warn: Warn) -> ToolCall:
    data = expect_dict(raw, where)
    function = data.get("function")
    if not isinstance(function, dict):
        raise RecordError(f"{where}: key 'function' missing")
    name = function.get("name")
    if not isinstance(name, str):
        raise RecordError(f"{where}: key 'function.name' missing")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = dump_json(arguments, f"{where}.function.arguments")
    call_id = data.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = ids.next("call")
        warn(f"{where}: tool call {describe(name)} has no id; gave it {call_id}")
    return ToolCall(call_id, name, arguments)


def openai_usage(raw: object) -> Usage | None:
    """Usage from an OpenAI-style ``usage`` object (``prompt_tokens`` …), if any."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = count(raw.get("prompt_tokens")), count(raw.get("completion_tokens"))
    total = count(raw.get("total_tokens")) or prompt + completion
    if not (prompt or completion or total):
        return None
    details = raw.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(prompt, completion, total, cached_tokens=cached or None)


def count(value: object) -> int:
    """A positive token count (at most ``MAX_COUNT``), or 0 for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT:
        return value
    return 0


# ---------------------------------------------------------------------------
# Exit codes in tool output (Codex, OpenHands)

_EXIT_CODE = re.compile(r"^Process exited with code (-?\d+)$", re.M)


def nonzero_exit(text: str) -> bool:
    """``Process exited with code N`` with N ≠ 0 in the header of a Codex exec output."""
    match = _EXIT_CODE.search(text[:400])
    return match is not None and int(match.group(1)) != 0
