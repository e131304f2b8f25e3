"""Realistic text pools shared by the benchmarks' synthetic sessions."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

PROSE = [
    "The failing test only shows up when the cache is cold, so I suspect the loader.",
    "Please keep the public API unchanged and add a regression test for this case.",
    "Can you also check whether the retry logic handles a 429 with a Retry-After header?",
    "I'd rather not add a new dependency for this; the standard library should be enough.",
    "Run the whole suite before you finish, and tell me if anything is flaky.",
    "The CI log says the migration timed out after 300 seconds on the staging database.",
    "Let's rename the helper to something that says what it returns, not how.",
]
PROSE_CJK = [
    "这个函数在处理空列表时会抛出异常，请修复并补充测试。",
    "请不要修改公共接口，保持向后兼容。",
    "日志里显示连接池耗尽了，可能是某个地方没有释放连接。",
    "テストが時々失敗します。タイムアウトの設定を確認してください。",
    "배포 스크립트가 환경 변수를 읽지 못합니다.",
]
ASSISTANT = [
    "Let me look at the implementation first.",
    "The stack trace points at the parser; I'll read that module and its tests.",
    "That explains it: the loop exits before the last chunk is flushed. Fixing it now.",
    "I'll run the focused tests, then the whole suite.",
    "Both call sites pass a list, so changing the default is safe.",
    "The change is in; the regression test failed before and passes now.",
]
CODE = [
    "def load(path: Path) -> list[Record]:",
    '    """Read every record of ``path`` in file order."""',
    "    records: list[Record] = []",
    "    with path.open('rb') as handle:",
    "        for number, line in enumerate(handle, start=1):",
    "            if not line.strip():",
    "                continue",
    "            records.append(parse(line, number))",
    "    return records",
    "class RetryPolicy:",
    "    max_attempts: int = 3",
    "    backoff: float = 0.5",
    "    def delay(self, attempt: int) -> float:",
    "        return self.backoff * (2 ** attempt)",
    "import asyncio",
    "from dataclasses import dataclass, field",
    "    # 兼容旧版本的配置格式",
    "    if config.get('timeout') is None:",
    "        raise ConfigError(f'missing timeout in {source}')",
]
LOG = [
    "tests/test_loader.py::test_empty_file PASSED",
    "tests/test_loader.py::test_torn_line PASSED",
    "tests/test_retry.py::test_retry_after_header FAILED",
    "E       AssertionError: assert 0.5 == 2.0",
    "E        +  where 0.5 = RetryPolicy().delay(0)",
    "src/app/retry.py:41: AssertionError",
    "============ 1 failed, 212 passed, 3 skipped in 14.02s ============",
    "WARNING  urllib3.connectionpool: Retrying (Retry(total=2)) after connection broken",
    "2025-06-03 09:14:02,117 INFO  migrate: applying 0042_add_index ... OK",
]
GREP = [
    "src/app/loader.py:17:def load(path: Path) -> list[Record]:",
    "src/app/cli.py:88:    records = load(args.path)",
    "tests/test_loader.py:12:    assert load(tmp_path / 'empty.jsonl') == []",
    "src/app/retry.py:41:        return self.backoff * (2 ** attempt)",
    "docs/usage.md:54:The loader reads every record in file order.",
]
TOOLS = ("read_file", "grep", "bash", "edit_file")


def text_lines(
    rng: random.Random, pool: Sequence[str], size: int, numbers: itertools.count[int]
) -> str:
    """About ``size`` characters of lines from ``pool``; a fifth carry a unique number."""
    out: list[str] = []
    total = 0
    while total < size:
        number = next(numbers)
        line = f"{rng.choice(pool)}  # {number}" if rng.random() < 0.2 else rng.choice(pool)
        out.append(line)
        total += len(line) + 1
    return "\n".join(out)


def user_prompt(rng: random.Random) -> str:
    """A user message: a few sentences, sometimes in Chinese, Japanese or Korean."""
    parts = rng.choices(PROSE, k=rng.randint(1, 4))
    if rng.random() < 0.3:
        parts += rng.choices(PROSE_CJK, k=rng.randint(1, 2))
    return " ".join(parts)


def tool_arguments(name: str, rng: random.Random) -> dict[str, object]:
    """Plausible arguments for one of ``TOOLS``."""
    path = f"src/app/{rng.choice(('loader', 'retry', 'cli', 'config'))}.py"
    if name == "read_file":
        return {"path": path}
    if name == "grep":
        return {"pattern": rng.choice(("load(", "RetryPolicy", "timeout")), "path": "."}
    if name == "bash":
        return {"command": f"python -m pytest tests -q -k {rng.choice(('loader', 'retry'))}"}
    return {"path": path, "old": rng.choice(CODE), "new": rng.choice(CODE)}
