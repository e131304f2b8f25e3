"""The layer rule of DESIGN §2: a module never imports a higher layer.

Every import counts, wherever it is written: at the top, inside a function,
under ``if TYPE_CHECKING`` (a type-only import still ties the lower layer to
the higher one's names). The source is read with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: The layers, lowest first; a module may import its own layer and the ones below.
#: DESIGN §2 lists ``replay/`` after ``surfaces/``, but the tree has it the
#: other way round, on purpose: ``cairn replay`` (``cairn.surfaces.replay``)
#: is the surface of the replay engine, which needs no terminal, and no
#: module of ``cairn.replay`` imports a surface. ``cairn`` itself (the library
#: entry point) re-exports the agent runtime, so it sits at the top with the
#: command line.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cairn.errors", "cairn.codec", "cairn.wire_apis", "cairn.lazy"),
    ("cairn.messages", "cairn.durable", "cairn.prompts"),
    ("cairn.tokens",),
    ("cairn.store",),
    ("cairn.provider", "cairn.testing"),
    ("cairn.context",),
    ("cairn.agent",),
    ("cairn.replay",),
    ("cairn.surfaces",),
    ("cairn.cli", "cairn.__main__", "cairn"),
)
RANK: Mapping[str, int] = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> int | None:
    """The rank of the longest layer name that is ``module`` or a package holding it."""
    if module == "cairn":
        return RANK["cairn"]
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        rank = RANK.get(".".join(parts[:end]))
        if rank is not None:
            return rank
    return None


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, *, is_package: bool) -> set[str]:
    """Every ``cairn`` module ``source`` imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            # ``from cairn.x import y`` may import the module ``cairn.x.y``.
            found |= {f"{target}.{alias.name}" for alias in node.names if alias.name != "*"}
    return {name for name in found if name == "cairn" or name.startswith("cairn.")}


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module → the Cairn modules it imports (only names that are modules of the tree)."""
    files = {module_name(p, root): p for p in sorted((root / "cairn").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        found = imports_of(
            path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
        )
        graph[module] = {name for name in found if name in files} - {module}
    return graph


def violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = layer_of(module), layer_of(target)
            if low is not None and high is not None and high > low:
                out.append(f"{module} (layer {low}) imports {target} (layer {high})")
    return out


def reaches(graph: Mapping[str, Iterable[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    stack = [start]
    while stack:
        module = stack.pop()
        for target in graph.get(module, ()):
            if target == goal:
                return True
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return False


# ---------------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the walk found the tree
    assert [m for m in graph if layer_of(m) is None] == []


def test_no_module_imports_a_higher_layer() -> None:
    assert violations(import_graph()) == []


def test_the_rule_sees_imports_in_functions_type_checking_blocks_and_relative_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import cairn.messages\n"
        "if TYPE_CHECKING:\n    from cairn.agent.session import Runtime\n"
        "def later() -> None:\n    from ..provider import errors\n"
        "class Holder:\n    def method(self) -> None:\n        import cairn.surfaces.inspect\n"
    )
    found = imports_of(source, "cairn.store.jsonl", is_package=False)
    assert found == {
        "cairn.messages",
        "cairn.agent.session",
        "cairn.agent.session.Runtime",
        "cairn.provider",
        "cairn.provider.errors",
        "cairn.surfaces.inspect",
    }
    graph = {"cairn.store.jsonl": {"cairn.messages", "cairn.agent.session", "cairn.provider"}}
    assert violations(graph) == [
        "cairn.store.jsonl (layer 3) imports cairn.agent.session (layer 6)",
        "cairn.store.jsonl (layer 3) imports cairn.provider (layer 4)",
    ]


def test_a_package_init_resolves_relative_imports_from_itself() -> None:
    found = imports_of("from .base import X\n", "cairn.store", is_package=True)
    assert found == {"cairn.store.base", "cairn.store.base.X"}


def test_the_layer_table_is_one_order_with_each_name_once() -> None:
    names = [name for layer in LAYERS for name in layer]
    assert len(names) == len(set(names))
    # DESIGN §2's order of the library layers (replay aside, see LAYERS).
    design = ["messages", "tokens", "store", "provider", "context", "agent", "surfaces"]
    ranks = [RANK[f"cairn.{name}"] for name in design]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert RANK["cairn.errors"] == 0  # the root of the exceptions: anything may import it


def test_the_session_and_the_task_tools_do_not_import_each_other() -> None:
    # Issue 13 item 2: the task tools imported the session module (under
    # TYPE_CHECKING) while the session imported the task tools.
    graph = import_graph()
    session, task = "cairn.agent.runtime", "cairn.agent.tools.task"
    assert not (reaches(graph, session, task) and reaches(graph, task, session))
