"""The public surface: one exception root, and ``__all__`` lists that say exactly what is exported.

Every exception Cairn defines derives from ``cairn.errors.CairnError`` and
keeps its standard base, so ``except CairnError`` catches all of them and
``except ValueError`` (…) still catches what it caught before. Each
package's ``__all__`` names what it exports, no more (every name resolves)
and no less (every public name it binds from Cairn is listed).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import cairn
import cairn.errors
from cairn.errors import CairnError, ContextError, FormatError, ToolError

#: Importing it runs the command line (``raise SystemExit(main())``).
NOT_IMPORTABLE = frozenset({"cairn.__main__"})

#: Exceptions outside the root on purpose: control flow that never leaves the
#: module raising it, so an ``except CairnError`` must not catch it in between.
INTERNAL_EXCEPTIONS = {
    # run_turn's own abort signal, caught in run_turn, which returns aborted=True.
    "cairn.agent.loop._AbortedError",
    # One bad part of a state snapshot, caught where it is read and turned into a warning.
    "cairn.agent.state._BadPartError",
    # A persisted calibration or active-task entry of the wrong shape: read as "none".
    "cairn.context.calibration._MalformedError",
    "cairn.context.checkpoint._MalformedEntryError",
    # The compaction's summary wait lost the race to cancel_compaction; turned into a notice.
    "cairn.context.compactor._CancelledError",
    # The host switched while the line waited for a background summary; caught in run().
    "cairn.context.compactor._SessionChangedError",
    # One of the provider's timers fired; the stream turns it into a ProviderTimeoutError.
    "cairn.provider.streaming._ExpiredError",
    # Bytes the SDK cannot parse; the stream turns them into a ProviderError.
    "cairn.provider.streaming._MalformedError",
}

#: Each error's standard base, kept so handlers of that base still catch it.
STANDARD_BASES = {
    "cairn.agent.events.EventFormatError": ValueError,
    "cairn.agent.facade.SessionBusyError": RuntimeError,
    "cairn.agent.loop.TurnError": RuntimeError,
    "cairn.agent.settings.SettingsError": ValueError,
    "cairn.agent.sandbox.OutsideRootsError": ValueError,
    "cairn.agent.sandbox.SymlinkRefusedError": ValueError,
    "cairn.agent.tools.args.ToolArgumentError": ValueError,
    "cairn.agent.tools.host_io.HostIOError": OSError,
    "cairn.agent.tools.task.SubagentError": RuntimeError,
    "cairn.agent.tools.workspace.PathOutsideWorkspaceError": ValueError,
    "cairn.context.hooks.CompactionBlockedError": RuntimeError,
    "cairn.context.compactor.CheckpointWriteError": RuntimeError,
    "cairn.context.compactor.CompactionFailedError": RuntimeError,
    "cairn.context.pipeline.ContextWindowExceededError": RuntimeError,
    "cairn.context.pipeline.RequestTooLargeError": RuntimeError,
    "cairn.context.summarizer.SummarizerError": RuntimeError,
    "cairn.context.tool_budget.ToolBudgetError": OSError,
    "cairn.messages.MessageFormatError": ValueError,
    "cairn.provider.config.ModelConfigError": ValueError,
    "cairn.provider.errors.ProviderError": RuntimeError,
    "cairn.provider.streaming.StreamReportedError": RuntimeError,
    "cairn.provider.anthropic_stream.AnthropicStreamError": RuntimeError,
    "cairn.replay.fixed_context.FixedContextError": ValueError,
    "cairn.replay.importers._source.RecordError": ValueError,
    "cairn.replay.plot.PlotUnavailableError": RuntimeError,
    "cairn.replay.session.SessionImportError": ValueError,
    "cairn.store.base.StoreError": RuntimeError,
    "cairn.store.records.CheckpointFormatError": ValueError,
    "cairn.store.records.RecordFormatError": ValueError,
    "cairn.surfaces.replay.ReplayUsageError": ValueError,
    "cairn.surfaces.setup.SetupError": ValueError,
    "cairn.surfaces.web.page_frames.FrameError": ValueError,
    "cairn.tokens.TokenizerError": RuntimeError,
}

#: What a library user reaches from ``import cairn`` alone (the README's example uses these).
LIBRARY_NAMES = {
    *("Runtime", "run_turn", "ContextPipeline", "CompactionConfig", "FixedContext"),
    *("ModelConfig", "OpenAIProvider", "JsonlTranscriptStore", "TranscriptStore"),
    *("read_transcript", "Message", "ToolCall", "Usage"),
    *("user", "assistant", "system", "tool_result"),
    *("CairnError", "StoreError", "ProviderError", "ContextLimitError", "RequestTooLargeError"),
    *("CompactionFailedError", "SettingsError", "ModelConfigError", "TurnError"),
}


def all_modules() -> Iterator[ModuleType]:
    yield cairn
    for info in pkgutil.walk_packages(cairn.__path__, "cairn."):
        if info.name not in NOT_IMPORTABLE:
            yield importlib.import_module(info.name)


def defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in all_modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


# ---------------------------------------------------------------------------
# One exception root


def test_every_project_exception_derives_from_cairn_error() -> None:
    exceptions = defined_exceptions()
    assert len(exceptions) > 30  # the walk reached the whole package
    outside = sorted(
        name
        for name, cls in exceptions.items()
        if not issubclass(cls, CairnError) and name not in INTERNAL_EXCEPTIONS
    )
    assert outside == [], f"not a CairnError: {outside}"


def test_the_internal_exceptions_exist_are_private_and_stay_outside_the_root() -> None:
    exceptions = defined_exceptions()
    for name in INTERNAL_EXCEPTIONS:
        assert name in exceptions, f"{name} is gone: drop it from INTERNAL_EXCEPTIONS"
        assert name.rpartition(".")[2].startswith("_"), f"{name} is public, so users can meet it"
        assert not issubclass(exceptions[name], CairnError), name


def test_each_error_keeps_its_standard_base() -> None:
    exceptions = defined_exceptions()
    for name, base in STANDARD_BASES.items():
        assert issubclass(exceptions[name], base), f"{name} is no longer a {base.__name__}"


#: Each family of ``cairn.errors`` and the leaves its docstring names in it.
FAMILIES = {
    FormatError: {
        *("MessageFormatError", "RecordFormatError", "CheckpointFormatError"),
        *("EventFormatError", "FrameError", "RecordError", "SessionImportError"),
        *("FixedContextError", "JSONDepthError", "SetupError"),
    },
    ContextError: {
        *("RequestTooLargeError", "ContextWindowExceededError", "CompactionFailedError"),
        *("NothingToCompactError", "CompactionBlockedError", "CompactionCancelledError"),
        "SummarizerError",
    },
    ToolError: {
        *("ToolArgumentError", "PathOutsideWorkspaceError", "OutsideRootsError"),
        "SymlinkRefusedError",
    },
}


def test_the_error_families_hold_what_errors_py_lists_and_nothing_else() -> None:
    by_name = {name.rpartition(".")[2]: cls for name, cls in defined_exceptions().items()}
    tree = cairn.errors.__doc__ or ""
    for family, members in FAMILIES.items():
        assert {
            n for n, cls in by_name.items() if issubclass(cls, family) and cls is not family
        } == (members), family.__name__
        for name in members:
            assert f"``{name}``" in tree, f"cairn/errors.py does not list {name}"
    assert "``CheckpointWriteError``" in tree


def test_each_context_error_carries_its_own_stable_code() -> None:
    codes = {
        cls.__name__: cls.code
        for cls in defined_exceptions().values()
        if issubclass(cls, ContextError) and cls is not ContextError
    }
    assert len(codes) == len(FAMILIES[ContextError])
    assert all(code != ContextError.code for code in codes.values()), codes
    assert len(set(codes.values())) == len(codes), codes


def test_the_root_is_neither_a_value_error_nor_a_runtime_error() -> None:
    # Catching CairnError must not swallow a bug: TypeError, KeyError … stay outside.
    assert CairnError.__bases__ == (Exception,)
    assert not issubclass(TypeError, CairnError) and not issubclass(KeyError, CairnError)


# ---------------------------------------------------------------------------
# __all__ says exactly what a package exports


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that bind module names: inside ``if``/``try``/``with``, not functions."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)


def _is_private_module(name: str) -> bool:
    return any(part.startswith("_") for part in name.split("."))


def public_bindings(source: str) -> set[str]:
    """Public names a package ``__init__`` defines, or imports from a public Cairn module.

    What it imports from the standard library or a third party, or from one of
    its own private modules, is for its own use, not an export.
    """
    names: set[str] = set()
    for node in _module_level(ast.parse(source).body):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            ours = node.level == 0 and module.split(".")[0] == "cairn"
            if ours and not _is_private_module(module):
                names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def packages_with_all() -> list[ModuleType]:
    return [m for m in all_modules() if hasattr(m, "__path__") and hasattr(m, "__all__")]


def all_problems(package: ModuleType) -> list[str]:
    listed: list[str] = list(package.__all__)
    problems = [f"{name} is listed twice" for name in sorted(set(listed)) if listed.count(name) > 1]
    problems += [
        f"{name} is listed but does not resolve" for name in listed if not hasattr(package, name)
    ]
    source = Path(package.__file__ or "").read_text(encoding="utf-8")
    for name in sorted(public_bindings(source) - set(listed)):
        if not inspect.ismodule(getattr(package, name, None)):
            problems.append(f"{name} is public but not in __all__")
    return problems


@pytest.mark.parametrize("package", packages_with_all(), ids=lambda m: m.__name__)
def test_all_lists_exactly_the_public_names(package: ModuleType) -> None:
    assert all_problems(package) == []


def test_the_packages_with_an_all_include_the_main_ones() -> None:
    names = {m.__name__ for m in packages_with_all()}
    assert {"cairn", "cairn.context", "cairn.store", "cairn.provider"} <= names


def test_the_all_check_sees_a_missing_and_a_stale_name(tmp_path: Path) -> None:
    package = tmp_path / "demo_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from pathlib import Path\n"
        "from cairn.messages import Message, user\n"
        "from cairn.replay.importers._session_builder import Loaded\n"
        "if True:\n    LIMIT = 3\n"
        "def helper() -> None: ...\n"
        "__all__ = ['Message', 'gone', 'Message']\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        demo = importlib.import_module("demo_pkg")
        problems = all_problems(demo)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("demo_pkg", None)
    assert problems == [
        "Message is listed twice",
        "gone is listed but does not resolve",
        "LIMIT is public but not in __all__",
        "helper is public but not in __all__",
        "user is public but not in __all__",
    ]


def test_import_cairn_gives_a_library_user_everything() -> None:
    assert set(cairn.__all__) >= LIBRARY_NAMES
    from cairn.agent.loop import run_turn
    from cairn.agent.runtime import Runtime
    from cairn.context import ContextPipeline

    assert cairn.Runtime is Runtime and cairn.run_turn is run_turn
    assert cairn.ContextPipeline is ContextPipeline
    for name in ("StoreError", "ProviderError", "ContextLimitError", "RequestTooLargeError"):
        assert issubclass(getattr(cairn, name), cairn.CairnError), name


def test_cairn_has_no_public_attribute_outside_all() -> None:
    stray = [
        name
        for name in dir(cairn)
        if not name.startswith("_")
        and not inspect.ismodule(getattr(cairn, name))
        and name not in cairn.__all__
    ]
    assert stray == []
    assert set(cairn.__all__) <= set(dir(cairn))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = cairn.Nope  # type: ignore[attr-defined]


def test_import_cairn_does_not_load_the_sdk_or_the_runtime() -> None:
    # The cairn command imports cairn: the agent, the pipeline and the SDK load on first use.
    # (pydantic does load: it is how messages and records are read and written.)
    heavy = ("openai", "cairn.context", "cairn.provider", "cairn.agent")
    code = f"import sys, cairn; print([m for m in {heavy!r} if m in sys.modules])"
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert cold.stdout.strip() == "[]"
    first_use = "import sys, cairn; cairn.Runtime; print('cairn.agent' in sys.modules)"
    warm = subprocess.run(
        [sys.executable, "-c", first_use], capture_output=True, text=True, check=True
    )
    assert warm.stdout.strip() == "True"
