"""Which names a piece of notebook code reads from the notebook's namespace.

A cell runs in a fresh process, so every name it reads but does not bind itself must be
brought along. ``free_names`` answers that question statically, with Python's own
scoping rules: function parameters and locals, comprehension variables and class-body
names are not free; a module-level name is free when it is read before the code binds
it (``lr = lr * 2``), or read inside a function body when the code never binds it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from ..core.errors import CaptureError

__all__ = ["bound_names", "free_names", "ipython_uses", "parse_source"]

_DEF_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def parse_source(source: str, filename: str = "<cell>", first_line: int = 1) -> ast.Module:
    """Parse ``source``, turning a syntax error into a ``CaptureError`` with its line, counted
    as the editor counts it: ``source``'s first line is line ``first_line`` there."""
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as exc:
        text = (exc.text or "").strip()
        where = f"{filename}, line {exc.lineno + first_line - 1}" if exc.lineno else filename
        raise CaptureError(
            f"{where}: {exc.msg}" + (f": {text}" if text else "") + "; fix the code and run again"
        ) from exc
    except ValueError as exc:  # for example a NUL byte in the source
        raise CaptureError(f"{filename}: cannot parse the code: {exc}") from exc


def free_names(source: str, first_line: int = 1) -> list[str]:
    """Names ``source`` reads without binding them first, in first-seen order.

    Builtins are returned too; the resolver skips names the namespace does not have.
    """
    visitor = _FreeNameVisitor()
    visitor.visit(parse_source(source, first_line=first_line))
    bound_anywhere = visitor.module.names
    seen: dict[str, None] = {}
    for name, deferred in visitor.reads:
        if deferred and name in bound_anywhere:
            continue
        seen.setdefault(name, None)
    return list(seen)


def bound_names(source: str, first_line: int = 1) -> set[str]:
    """The names ``source`` binds at its top level (assignments, ``def``, ``class``,
    imports, loop and ``with`` targets), as a module's code binds its globals."""
    names: set[str] = set()
    _collect_bindings(parse_source(source, first_line=first_line).body, names, set())
    return names


def ipython_uses(tree: ast.AST) -> list[int]:
    """Line numbers where the (already transformed) code calls ``get_ipython``."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Name)
            and node.id == "get_ipython"
            and isinstance(node.ctx, ast.Load)
        }
    )


class _Scope:
    """One scope. Function and comprehension scopes know their locals up front (as
    Python decides them at compile time); module and class scopes grow as code runs."""

    __slots__ = ("deferred", "globals", "kind", "names", "parent")

    def __init__(
        self,
        kind: str,
        parent: _Scope | None,
        names: Iterable[str] = (),
        globals_: Iterable[str] = (),
    ) -> None:
        self.kind = kind
        self.parent = parent
        self.names = set(names)
        self.globals = set(globals_)
        # Code in a function body runs later, after the whole cell has bound its names.
        self.deferred: bool = kind == "function" or (parent is not None and parent.deferred)


class _FreeNameVisitor(ast.NodeVisitor):
    """Walks code in evaluation order, recording reads that reach module scope."""

    def __init__(self) -> None:
        self.module = _Scope("module", None)
        self.scope = self.module
        self.reads: list[tuple[str, bool]] = []  # (name, read from deferred code)

    # -- reads and bindings -------------------------------------------------------------
    def _load(self, name: str) -> None:
        scope = self.scope
        while scope.kind != "module":
            if scope.kind == "function":
                if name in scope.globals:
                    break
                if name in scope.names:
                    return
            elif scope.kind == "comprehension":
                if name in scope.names:
                    return
            elif scope is self.scope and name in scope.names:  # class body, seen directly only
                return
            scope = scope.parent  # type: ignore[assignment]
        if self.scope.deferred:
            self.reads.append((name, True))
        elif name not in self.module.names:
            self.reads.append((name, False))

    def _store(self, name: str, scope: _Scope | None = None) -> None:
        scope = scope or self.scope
        if scope.kind == "module" or (scope.kind == "function" and name in scope.globals):
            self.module.names.add(name)
        elif scope.kind == "class":
            scope.names.add(name)
        # function and comprehension locals were collected when the scope was entered

    def _in_scope(self, scope: _Scope, nodes: Iterable[ast.AST]) -> None:
        outer, self.scope = self.scope, scope
        try:
            for node in nodes:
                self.visit(node)
        finally:
            self.scope = outer

    def _visit_all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    # -- expressions --------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._load(node.id)
        elif isinstance(node.ctx, ast.Store):
            self._store(node.id)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        scope = self.scope
        while scope.kind == "comprehension":  # a walrus binds in the enclosing scope
            scope = scope.parent  # type: ignore[assignment]
        self._store(node.target.id, scope)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_all([*node.args.defaults, *node.args.kw_defaults])
        self._in_scope(_function_scope(node, self.scope), [node.body])

    def _comprehension(self, node: ast.AST, results: list[ast.AST]) -> None:
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        targets = {n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        body: list[ast.AST] = []
        for i, gen in enumerate(generators):
            body.extend(([gen.iter] if i else []) + [gen.target, *gen.ifs])
        self._in_scope(_Scope("comprehension", self.scope, targets), body + results)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp  # type: ignore[assignment]

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    # -- statements ---------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        self._visit_all(node.targets)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._load(node.target.id)
            self.visit(node.value)
            self._store(node.target.id)
        else:
            self.visit(node.target)
            self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._visit_all([node.annotation, node.value])
        if node.value is not None or not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_For(self, node: ast.For) -> None:
        self._visit_all([node.iter, node.target, *node.body, *node.orelse])

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._store(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._store(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._visit_all([node.type])
        if node.name:
            self._store(node.name)
        self._visit_all(node.body)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._visit_all([node.pattern])
        if node.name:
            self._store(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._store(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._visit_all([*node.keys, *node.patterns])
        if node.rest:
            self._store(node.rest)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        args = node.args
        annotations = [a.annotation for a in _all_args(args)]
        self._visit_all(
            [*node.decorator_list, *args.defaults, *args.kw_defaults, *annotations, node.returns]
        )
        self._store(node.name)
        self._in_scope(_function_scope(node, self.scope), node.body)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_all([*node.decorator_list, *node.bases, *node.keywords])
        self._in_scope(_Scope("class", self.scope), node.body)
        self._store(node.name)


def _all_args(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def _function_scope(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, parent: _Scope
) -> _Scope:
    names = {a.arg for a in _all_args(node.args)}
    globals_: set[str] = set()
    body = node.body if isinstance(node.body, list) else [node.body]
    _collect_bindings(body, names, globals_)
    return _Scope("function", parent, names - globals_, globals_)


def _collect_bindings(nodes: Sequence[ast.AST], names: set[str], globals_: set[str]) -> None:
    """Every name a function body binds (so it is local), without entering nested scopes."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, _DEF_NODES):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, _COMPREHENSIONS):  # only a walrus leaks out of a comprehension
            names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        elif isinstance(node, ast.Global):
            globals_.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            names.update(node.names)  # bound in an enclosing function, so not free
        stack.extend(ast.iter_child_nodes(node))
