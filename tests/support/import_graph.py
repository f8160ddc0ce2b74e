"""The package's import graph, read from the source: every ``import`` and ``from ... import``
of every module, at the top or inside functions, classes and ``if`` blocks alike.

A module is named by its dotted path (``jupyter_trainer.store.runs``); a package by its
``__init__``'s (``jupyter_trainer.store``). An edge A -> B means A imports B, or imports a
name from B. ``from pkg import name`` where ``name`` is a submodule of ``pkg`` is an edge to
the submodule too, as Python loads it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Graph:
    root: Path  # the package's folder
    package: str  # its name
    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, set[str]] = field(default_factory=dict)
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # first line of each edge
    external: dict[str, set[str]] = field(default_factory=dict)  # module -> top-level names

    def cycles(self) -> list[list[str]]:
        """Every strongly connected component of more than one module (Tarjan's algorithm),
        and every module that imports itself."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []
        counter = [0]

        def visit(start: str) -> None:
            work = [(start, iter(sorted(self.edges.get(start, ()))))]
            index[start] = low[start] = counter[0]
            counter[0] += 1
            stack.append(start)
            on_stack.add(start)
            while work:
                node, children = work[-1]
                advanced = False
                for child in children:
                    if child not in index:
                        index[child] = low[child] = counter[0]
                        counter[0] += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(sorted(self.edges.get(child, ())))))
                        advanced = True
                        break
                    if child in on_stack:
                        low[node] = min(low[node], index[child])
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in self.edges.get(node, ()):
                        found.append(sorted(component))

        for module in sorted(self.modules):
            if module not in index:
                visit(module)
        return found


def read_graph(root: Path) -> Graph:
    """The import graph of the package in folder ``root``."""
    package = root.name
    graph = Graph(root=root, package=package)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        graph.modules[".".join(parts)] = path
    for name, path in graph.modules.items():
        is_package = path.name == "__init__.py"
        graph.edges[name] = set()
        graph.external[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _targets(graph, name, is_package, node):
                if target.split(".")[0] != package:
                    graph.external[name].add(target.split(".")[0])
                    continue
                resolved = _known(graph, target)
                if resolved is not None and resolved != name:
                    graph.edges[name].add(resolved)
                    graph.lines.setdefault((name, resolved), node.lineno)
    return graph


def _targets(graph: Graph, name: str, is_package: bool, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    subs = [
        f"{module}.{alias.name}"
        for alias in node.names
        if f"{module}.{alias.name}" in graph.modules
    ]
    # ``from pkg import sub`` imports the submodule; ``pkg`` counts only for other names.
    return subs if len(subs) == len(node.names) else [module, *subs]


def _known(graph: Graph, target: str) -> str | None:
    """``target``, or the nearest enclosing module the package has."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in graph.modules:
            return candidate
        parts.pop()
    return None


def private_imports(graph: Graph) -> list[str]:
    """Every import of a private name (``_name``, not ``__dunder__``) of another module of
    the package, as "module:line imports source._name": ``from source import _name`` and
    ``import source._name``. A module's private names are its own; another module that needs
    one needs a public name."""
    found = []
    for name, path in sorted(graph.modules.items()):
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                source = _source(name, is_package, node)
                if source.split(".")[0] != graph.package:
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{name}:{node.lineno} imports {source}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == graph.package and any(_private(p) for p in parts[1:]):
                        found.append(f"{name}:{node.lineno} imports {alias.name}")
    return found


def _source(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
