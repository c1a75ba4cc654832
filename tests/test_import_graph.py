"""The host package's modules import one way (docs/ARCHITECTURE.md, section 1): no cycle, lazy
imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cute_conv"


def _imports(path: Path) -> set[str]:
    """The sibling modules a module of ``cute_conv`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.update(name.split(".")[0] for name in names)
    return {name for name in found if (PACKAGE / f"{name}.py").exists()}


def test_no_import_cycle():
    graph = {path.stem: _imports(path) for path in PACKAGE.glob("*.py")}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(graph[module]):
            assert state.get(dep) != "open", "import cycle: " + " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
