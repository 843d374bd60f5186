"""The package's layers: no import cycle, and every import points down the layer stack.

The import graph is read from the source with :mod:`ast` (nothing is imported), so the check
sees every ``import`` statement, including lazy ones inside functions and ``TYPE_CHECKING`` ones.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "backpressure"

LAYERS: dict[str, int] = {
    "backpressure.core": 0,
    "backpressure.adapters": 1,
    "backpressure.switch": 2,
    "backpressure": 2,  # the package root re-exports the public API of the switch and the core
    "backpressure.metrics": 3,
    "backpressure.testing": 4,
    "backpressure.workload": 5,
    "backpressure.sim": 6,  # the simulator may use the workload, never the benchmark
    "backpressure.bench": 7,
    "backpressure.demo": 7,
}
"""Layer of each top-level part; a module may import only from its own layer or lower ones."""

LAZY_ATTRIBUTES: dict[str, frozenset[str]] = {
    "backpressure": frozenset({"backpressure.metrics", "backpressure.sim", "backpressure.testing"}),
}
"""The one sanctioned upward edge: the package root serves these subpackages as attributes on
first access (its module ``__getattr__``) and names them under ``TYPE_CHECKING`` for type
checkers.  Nothing is imported before the attribute is used, so neither the layers nor the cycle
check count those edges; any other import of them from the root still fails."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


MODULES = _modules()


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> Iterator[str]:
    """Yield the package modules ``module`` imports (``from X import y`` names ``X.y`` if a module).

    Every import counts: module-level, lazy (inside a function) and ``TYPE_CHECKING``-only ones,
    since each is a dependency a reader has to follow.
    """
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and not _lazy_type_only(module, name, node, tree):
                yield name


def _lazy_type_only(module: str, name: str, node: ast.stmt, tree: ast.Module) -> bool:
    """Whether ``node`` (importing ``name``) is a ``TYPE_CHECKING`` import of a lazy attribute."""
    if name not in LAZY_ATTRIBUTES.get(module, frozenset()):
        return False
    return any(
        isinstance(block, ast.If)
        and isinstance(block.test, ast.Name)
        and block.test.id == "TYPE_CHECKING"
        and node in block.body
        for block in tree.body
    )


def _layer(module: str) -> tuple[str, int]:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, LAYERS[prefix]
    raise AssertionError(f"{module} belongs to no layer: add its folder to LAYERS")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    """Every module of the package sits in one of the declared layers."""
    for module in MODULES:
        _layer(module)


@pytest.mark.slow
def test_no_import_cycle() -> None:
    """No chain of imports (lazy and type-only ones included) leads from a module back to it."""
    graph = {module: set(_imports(module)) for module in MODULES}
    assert _cycles(graph) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module: str) -> None:
    """A module imports only from its own layer or lower ones, lazy imports included."""
    own_prefix, own_layer = _layer(module)
    upward = sorted(name for name in set(_imports(module)) if _layer(name)[1] > own_layer)
    assert upward == [], f"{module} ({own_prefix}) imports from a higher layer: {upward}"


def test_the_checker_sees_a_cycle() -> None:
    """The cycle finder reports a two-module loop (so a silent pass means no cycle)."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
