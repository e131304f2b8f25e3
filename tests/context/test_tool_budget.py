"""The tool-result budget: scaling, previews, durable saving, the round pass (DESIGN §5.4)."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.context import tool_budget as tb
from cairn.context.tool_budget import (
    ToolBudget,
    ToolBudgetError,
    apply_tool_budget,
    tool_budget_for,
)
from cairn.durable import write_durably
from cairn.messages import ImagePart, Message, MessageMeta, TextPart, assistant, tool_result, user

MARKER = re.compile(r"\[… (\d+) characters omitted; the full output \((\d+) characters, .*? …\]")


def saved_path(message: Message) -> Path:
    value = message.meta.extra["full_output_path"]
    assert isinstance(value, str)
    return Path(value)


def lines_text(n: int, width: int = 40) -> str:
    return "".join(f"line {i:05d} ".ljust(width - 1, "x") + "\n" for i in range(n))


# ---------------------------------------------------------------------------
# Scaling


@pytest.mark.parametrize(
    ("window", "result_tokens", "round_tokens"),
    [
        (None, 6_400, 19_200),  # unknown: a 128k window
        (128_000, 6_400, 19_200),
        (8_192, 1_000, 3_000),  # both clamped up
        (20_000, 1_000, 3_000),  # exactly at the lower clamps
        (32_000, 1_600, 4_800),
        (200_000, 10_000, 30_000),
        (500_000, 25_000, 75_000),  # exactly at the upper clamps
        (1_000_000, 25_000, 75_000),  # both clamped down
        (1, 1_000, 3_000),
    ],
)
def test_budget_scales_with_the_window(
    window: int | None, result_tokens: int, round_tokens: int
) -> None:
    assert tool_budget_for(window) == ToolBudget(result_tokens * 4, round_tokens * 4)


def test_budget_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="window"):
        tool_budget_for(0)
    with pytest.raises(ValueError, match="result_chars"):
        ToolBudget(999, 10_000)
    with pytest.raises(ValueError, match="round_chars"):
        ToolBudget(1_000, 10)


# ---------------------------------------------------------------------------
# Per result


def test_small_results_are_the_same_objects(tmp_path: Path) -> None:
    results = [tool_result("call_1", "short"), tool_result("call_2", "x" * 4_000)]
    out = apply_tool_budget(results, ToolBudget(4_000, 12_000), tmp_path)
    assert out == results
    assert all(a is b for a, b in zip(out, results, strict=True))
    assert not (tmp_path / "tool-results").exists()  # nothing saved


def test_oversized_result_is_saved_and_previewed(tmp_path: Path) -> None:
    text = "HEAD-START " + "".join(f"{i:06d}|" for i in range(3_000)) + " TAIL-END"
    original = replace(
        tool_result("call_abc", text, name="grep"),
        meta=MessageMeta(tool_error=True, extra={"tool": "grep"}),
    )
    (out,) = apply_tool_budget([original], ToolBudget(2_000, 6_000), tmp_path)

    preview = out.content
    assert isinstance(preview, str)
    assert len(preview) <= 2_000
    assert preview.startswith("HEAD-START ")
    assert preview.endswith(" TAIL-END")
    path = tmp_path.absolute() / "tool-results" / "call_abc.txt"
    assert str(path) in preview
    assert "read_file" in preview and "offset/limit" in preview
    assert path.read_bytes() == text.encode("utf-8")
    # Identity and metadata kept; the extra merged, not replaced.
    assert (out.id, out.role, out.tool_call_id, out.name) == (
        original.id,
        "tool",
        "call_abc",
        "grep",
    )
    assert out.meta.tool_error is True
    assert out.meta.extra == {
        "tool": "grep",
        "full_output_path": str(path),
        "full_output_chars": len(text),
    }
    # The marker's numbers add up: omitted + shown = the full length.
    match = MARKER.search(preview)
    assert match is not None
    omitted, total = int(match.group(1)), int(match.group(2))
    assert total == len(text)
    head, tail = preview[: match.start()], preview[match.end() :]
    assert omitted == len(text) - len(head.rstrip("\n")) - len(tail.lstrip("\n"))
    # About two thirds head, one third tail.
    assert len(head) > len(tail) > 0
    assert not list((tmp_path / "tool-results").glob("*.tmp"))


def test_cuts_fall_on_line_boundaries(tmp_path: Path) -> None:
    text = lines_text(500)
    original_lines = set(text.splitlines())
    (out,) = apply_tool_budget([tool_result("c", text)], ToolBudget(3_000, 9_000), tmp_path)
    preview = out.text
    assert len(preview) <= 3_000
    shown = [line for line in preview.splitlines() if not MARKER.fullmatch(line)]
    assert len(shown) > 10
    # Every line shown is a whole original line: nothing starts or ends mid-line.
    assert all(line in original_lines for line in shown)
    assert sum(1 for line in preview.splitlines() if MARKER.fullmatch(line)) == 1


def test_without_newlines_the_cut_is_exact(tmp_path: Path) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    (out,) = apply_tool_budget([tool_result("c", text)], ToolBudget(1_500, 9_000), tmp_path)
    head, _, rest = out.text.partition("\n")
    tail = rest.partition("\n")[2]
    assert text.startswith(head) and text.endswith(tail)
    # No line to move to: the whole budget is used, less a digit (the marker was
    # sized for 10,000 omitted characters; 8,5xx are).
    assert len(out.text) == 1_499


def test_cjk_result_is_budgeted_in_characters(tmp_path: Path) -> None:
    text = "漢字かなカナ한국어\n" * 1_000
    (out,) = apply_tool_budget([tool_result("c", text)], ToolBudget(1_000, 3_000), tmp_path)
    assert len(out.text) <= 1_000
    assert saved_path(out).read_text(encoding="utf-8") == text


def test_image_and_part_content_is_left_alone(tmp_path: Path) -> None:
    parts = (TextPart("y" * 50_000), ImagePart("data:image/png;base64,AAAA"))
    with_image = Message(role="tool", content=parts, tool_call_id="img")
    small = tool_result("c", "ok")
    out = apply_tool_budget([with_image, small], ToolBudget(1_000, 3_000), tmp_path)
    assert out[0] is with_image and out[1] is small


def test_other_roles_pass_through(tmp_path: Path) -> None:
    messages = [assistant("z" * 10_000), user("u" * 10_000)]
    out = apply_tool_budget(messages, ToolBudget(1_000, 3_000), tmp_path)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_a_preview_is_not_shortened_again(tmp_path: Path) -> None:
    budget = ToolBudget(1_000, 3_000)
    (first,) = apply_tool_budget([tool_result("c", "q" * 5_000)], budget, tmp_path)
    (second,) = apply_tool_budget([first], budget, tmp_path)
    assert second is first
    assert len(list((tmp_path / "tool-results").iterdir())) == 1


# ---------------------------------------------------------------------------
# Per round


def test_round_shrinks_three_large_parallel_results(tmp_path: Path) -> None:
    texts = [lines_text(600, width=50 + i) for i in range(3)]  # ~30k chars each
    results = [tool_result(f"call_{i}", t) for i, t in enumerate(texts)]
    out = apply_tool_budget(results, ToolBudget(10_000, 15_000), tmp_path)
    assert sum(len(m.text) for m in out) <= 15_000
    for message, text in zip(out, texts, strict=True):
        assert len(message.text) <= 5_000  # an equal share: all three are largest
        assert len(message.text) > 4_000  # line cuts cost little
        assert saved_path(message).read_text(encoding="utf-8") == text


def test_round_shrinks_the_largest_first(tmp_path: Path) -> None:
    big, mid, small = "a" * 50_000, "b" * 9_000, "c" * 3_000
    results = [tool_result("big", big), tool_result("mid", mid), tool_result("small", small)]
    out = apply_tool_budget(results, ToolBudget(10_000, 15_000), tmp_path)
    # After the per-result pass: 10,000 + 9,000 + 3,000 = 22,000; the two largest
    # are brought down to a common cap of 6,000 and the smallest stays as it is.
    assert out[2] is results[2]
    assert len(out[0].text) == len(out[1].text) == 6_000
    assert sum(len(m.text) for m in out) == 15_000
    assert saved_path(out[1]).read_text(encoding="utf-8") == mid


def test_round_counts_unbudgetable_results(tmp_path: Path) -> None:
    image = Message(role="tool", content=(TextPart("i" * 8_000),), tool_call_id="img")
    text = "t" * 8_000
    out = apply_tool_budget([image, tool_result("t", text)], ToolBudget(10_000, 12_000), tmp_path)
    assert out[0] is image
    assert len(out[1].text) == 4_000


def test_round_pass_is_deterministic(tmp_path: Path) -> None:
    results = [tool_result(f"c{i}", lines_text(300 + 7 * i, 30 + i)) for i in range(5)]
    budget = ToolBudget(4_000, 9_000)
    first = apply_tool_budget(results, budget, tmp_path / "one")
    second = apply_tool_budget(results, budget, tmp_path / "two")
    assert [m.text.replace("/one/", "/") for m in first] == [
        m.text.replace("/two/", "/") for m in second
    ]


def test_a_round_of_many_results_keeps_a_useful_floor(tmp_path: Path) -> None:
    results = [tool_result(f"c{i}", "w" * 3_000) for i in range(40)]
    out = apply_tool_budget(results, ToolBudget(1_000, 3_000), tmp_path)
    for message in out:
        # Infeasible round: each result goes down to marker + excerpt, never below.
        marker = MARKER.search(message.text)
        assert marker is not None
        assert len(message.text) - len(marker[0]) >= tb.MIN_EXCERPT_CHARS
        assert len(message.text) <= 1_000
        assert saved_path(message).read_text(encoding="utf-8") == "w" * 3_000


# ---------------------------------------------------------------------------
# Files


def test_file_names_are_unique(tmp_path: Path) -> None:
    folder = tmp_path / "tool-results"
    folder.mkdir()
    (folder / "call_1.txt").write_text("older output", encoding="utf-8")
    first, second = "1" * 5_000, "2" * 5_000
    out = apply_tool_budget(
        [tool_result("call_1", first), tool_result("call_1", second)],
        ToolBudget(1_000, 10_000),
        tmp_path,
    )
    assert (folder / "call_1.txt").read_text(encoding="utf-8") == "older output"
    assert saved_path(out[0]).name == "call_1-2.txt"
    assert saved_path(out[1]).name == "call_1-3.txt"
    assert saved_path(out[0]).read_text(encoding="utf-8") == first
    assert saved_path(out[1]).read_text(encoding="utf-8") == second


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("../../etc/passwd", "_.._etc_passwd.txt"),
        ("/abs/path", "_abs_path.txt"),
        ("..", "result.txt"),
        ("", "msg_fixed.txt"),  # no call id: the message id names the file
        ("call 1:ü", "call_1__.txt"),
        ("-rf", "rf.txt"),
    ],
)
def test_unsafe_call_ids_stay_inside(tmp_path: Path, call_id: str, name: str) -> None:
    message = replace(tool_result(call_id, "p" * 5_000), id="msg_fixed")
    artifacts = tmp_path / "session"
    (out,) = apply_tool_budget([message], ToolBudget(1_000, 3_000), artifacts)
    path = saved_path(out)
    assert path.name == name
    assert path.parent == (artifacts / "tool-results").absolute()
    assert path.resolve().is_relative_to(artifacts.resolve())
    assert out.tool_call_id == call_id
    assert not (tmp_path / "etc").exists()


def test_long_call_id_is_truncated(tmp_path: Path) -> None:
    (out,) = apply_tool_budget(
        [tool_result("c" * 1_000, "p" * 5_000)], ToolBudget(1_000, 3_000), tmp_path
    )
    assert len(saved_path(out).name) <= 104


def test_unwritable_folder_raises_and_shortens_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("a regular file", encoding="utf-8")
    artifacts = blocker / "x"
    results = [tool_result("call_9", "z" * 5_000)]
    with pytest.raises(ToolBudgetError) as caught:
        apply_tool_budget(results, ToolBudget(1_000, 3_000), artifacts)
    error = caught.value
    assert isinstance(error, OSError)
    assert error.filename == str(artifacts.absolute() / "tool-results" / "call_9.txt")
    assert "call_9.txt" in str(error)
    assert blocker.read_text(encoding="utf-8") == "a regular file"


def test_failed_rename_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", broken)
    with pytest.raises(ToolBudgetError, match="No space left"):
        apply_tool_budget([tool_result("c", "z" * 5_000)], ToolBudget(1_000, 3_000), tmp_path)
    assert list((tmp_path / "tool-results").iterdir()) == []


def test_lone_surrogates_are_scrubbed_once_and_the_saved_output_is_utf8(tmp_path: Path) -> None:
    """Undecodable bytes smuggled into tool output become U+FFFD when the result message
    is built (one scrub at ingress, issue 12); the saved full output is that same text,
    plain UTF-8, so read_file and every other reader can open it."""
    text = "bytes \udcff\udc80 " * 500
    (out,) = apply_tool_budget([tool_result("c", text)], ToolBudget(1_000, 3_000), tmp_path)
    assert saved_path(out).read_bytes().decode("utf-8") == "bytes \ufffd\ufffd " * 500


def test_write_durably_creates_nested_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.txt"
    write_durably(target, b"data")
    assert target.read_bytes() == b"data"
    write_durably(target, b"new")  # replaces atomically
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["c.txt"]


# ---------------------------------------------------------------------------
# Properties

texts = st.text(
    alphabet=st.one_of(
        st.sampled_from("\n\n\nab xyz{}[]"),
        st.characters(min_codepoint=0x4E00, max_codepoint=0x4E80),  # CJK
        st.characters(codec="utf-8"),
    ),
    max_size=6_000,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(texts, min_size=1, max_size=4),
    result_chars=st.integers(1_000, 5_000),
    round_chars=st.integers(1_000, 12_000),
)
def test_previews_fit_and_files_hold_the_original(
    bodies: list[str], result_chars: int, round_chars: int
) -> None:
    budget = ToolBudget(result_chars, round_chars)
    results = [tool_result(f"call_{i}", body) for i, body in enumerate(bodies)]
    with tempfile.TemporaryDirectory() as folder:
        out = apply_tool_budget(results, budget, Path(folder))
        assert len(out) == len(results)
        for before, after in zip(results, out, strict=True):
            assert len(after.text) <= result_chars
            assert after.id == before.id and after.tool_call_id == before.tool_call_id
            if after is before:
                assert "full_output_path" not in after.meta.extra
                continue
            assert len(after.text) < len(before.text)
            path = saved_path(after)
            assert str(path) in after.text
            assert path.read_bytes() == before.text.encode("utf-8")
            assert after.meta.extra["full_output_chars"] == len(before.text)
        # The round fits whenever there is room for one floor-sized preview each.
        if round_chars >= 1_000 * len(bodies):
            assert sum(len(m.text) for m in out) <= round_chars


def test_file_and_folders_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    artifacts = tmp_path / "session"
    (out,) = apply_tool_budget([tool_result("c", "s" * 5_000)], ToolBudget(1_000, 3_000), artifacts)
    folder = artifacts / "tool-results"
    # The file's data (through its temporary name), then the new folders' parents,
    # then the folder holding the renamed file.
    assert synced[0] == str(tmp_path)
    assert synced[1] == str(artifacts)
    assert Path(synced[2]).parent == folder and Path(synced[2]).name.startswith(".c.txt.")
    assert synced[3] == str(folder)
    assert saved_path(out) == folder / "c.txt"
