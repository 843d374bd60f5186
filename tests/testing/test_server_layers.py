"""The embedded server's packages import one way only, and no module is part of an import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import backpressure.testing.server as server_package

ROOT = Path(server_package.__file__).parent
PREFIX = "backpressure.testing.server"

LAYERS = (
    "errors",
    "wire",
    "control",
    "engine",
    "cluster",
    "transport",
    "embedded",
    "cli",
    "__main__",
)
"""Top-level parts of the server package, lowest first; each imports only from earlier ones."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PREFIX, *parts])


def _imports() -> dict[str, set[str]]:
    """Map each server module to the server modules it imports (TYPE_CHECKING and lazy included)."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    targets.add(candidate if candidate in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _layer(module: str) -> str:
    return module[len(PREFIX) + 1 :].split(".")[0]


def test_no_import_cycle() -> None:
    """A depth-first search over every import edge finds no cycle."""
    graph = _imports()
    assert f"{PREFIX}.engine.request" in graph  # the walk sees the package
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            cycle = [*stack[stack.index(module) :], module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_layers_import_downward() -> None:
    """errors <- wire <- control <- engine <- cluster <- transport <- embedded <- cli."""
    graph = _imports()
    wrong = [
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source != PREFIX
        for target in targets
        if target != PREFIX and LAYERS.index(_layer(target)) > LAYERS.index(_layer(source))
    ]
    assert wrong == []
