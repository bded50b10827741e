"""The package keeps the layers of docs/design.md: data flows top to bottom and no module imports
one in a layer above its own; the edges (cli, mcp, ui, agents) stand side by side and none imports
another, but to start it through its entry point, lazily. Every import counts: module level,
inside functions (lazy) and under TYPE_CHECKING, read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "memsafe"

# Top to bottom. A module may import its own layer's modules and any layer below it. A module
# belongs to the layer of the longest name here that is it or contains it; every module must have one.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("launcher", ("memsafe.__main__",)),  # `memsafe` / `python -m memsafe`: hands each command line to one edge
    ("edges", ("memsafe.cli", "memsafe.mcp", "memsafe.ui", "memsafe.agents")),  # agents/: reserved
    ("tools", ("memsafe.bench",)),  # `memsafe bench`: measures the handlers, started by the CLI
    ("presentation", ("memsafe.render",)),  # how results look, shared by the edges
    ("api", ("memsafe.api",)),
    ("domain", ("memsafe.recall", "memsafe.graph", "memsafe.decay", "memsafe.history", "memsafe.transfer",
                "memsafe.conflicts", "memsafe.safety", "memsafe.framing", "memsafe.hooks", "memsafe.capture")),
    ("store", ("memsafe.store",)),
    ("base", ("memsafe", "memsafe.embed", "memsafe.tokens", "memsafe.when", "memsafe.clock", "memsafe.models",
              "memsafe.errors", "memsafe.settings", "memsafe.plural", "memsafe.caches", "memsafe.textform")),
]
EDGES = LAYERS[1][1]

# The one way an edge reaches another: `memsafe serve` and `memsafe ui` start the MCP server and
# the page through their entry points (memsafe/mcp/__init__.py, memsafe/ui/start.py), imported
# inside the command's function so the CLI loads neither until then.
ENTRY_POINTS = {
    ("memsafe.cli.serve", "memsafe.mcp.stdio"),
    ("memsafe.cli.serve", "memsafe.mcp.http"),
    ("memsafe.cli.ui", "memsafe.ui.start"),
    ("memsafe.cli.agent", "memsafe.agents.protocol"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, int, bool]]:
    """[(imported memsafe module, line, at module level)] of one module. `from X import Y` counts
    as X.Y when that is a module, else X."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == "memsafe" or target.startswith("memsafe."):
                found.append((target, node.lineno, id(node) in top))
    return found


def _layer(module: str) -> tuple[int, str]:
    """(depth of its layer, top to bottom, the layer's name entry that holds it)."""
    best = None
    for depth, (_, names) in enumerate(LAYERS):
        for owner in names:
            if (module == owner or module.startswith(owner + ".")) and (best is None or len(owner) > len(best[1])):
                best = (depth, owner)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py; add it where docs/design.md puts it")
    return best


def _edge(module: str) -> str | None:
    return next((e for e in EDGES if module == e or module.startswith(e + ".")), None)


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_upward_or_across_edges(module):
    depth, _ = _layer(module)
    wrong = []
    for target, line, at_top in _imports(module, MODULES[module]):
        target_depth, _ = _layer(target)
        if target_depth < depth:
            wrong.append(f"line {line}: imports {target} ({LAYERS[target_depth][0]}) from {LAYERS[depth][0]}")
        here, there = _edge(module), _edge(target)
        if here and there and here != there and ((module, target) not in ENTRY_POINTS or at_top):
            wrong.append(f"line {line}: edge {here} imports edge {there}"
                         + ("" if (module, target) not in ENTRY_POINTS else " at module level (entry points: lazily)"))
    assert not wrong, f"{module}:\n" + "\n".join(wrong)


def test_the_check_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """The reader itself: an import inside a function, a relative one and one under TYPE_CHECKING
    are all found, so an upward import cannot hide in any of them."""
    example = tmp_path / "example.py"
    example.write_text("from typing import TYPE_CHECKING\n\nfrom ..api import core\n\n"
                       "if TYPE_CHECKING:\n    from memsafe.ui import start\n\n"
                       "def f():\n    from memsafe.cli import full\n    import memsafe.render\n")
    found = {(target, at_top) for target, _, at_top in _imports("memsafe.store.example", example)}
    assert found == {("memsafe.api.core", True), ("memsafe.ui.start", False), ("memsafe.cli.full", False),
                     ("memsafe.render", False)}
