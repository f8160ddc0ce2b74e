"""Resolve a cell's free names against the notebook namespace.

Every notebook name a cell reads is brought into the training processes in the most
readable form that works: a module becomes an import line, a function or class defined
in the notebook becomes its source (and its own free names are resolved in turn), an
object importable from a library becomes ``from mod import name``, a JSON value becomes a
hyperparameter, and anything else is pickled. What cannot travel (open files, locks,
sockets, objects over the size limit) is reported all at once, with a fix for each.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import os
import pickle
import pickletools
import re
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ..core.errors import CaptureError, SpecError
from ..core.spec import is_json_value
from ..core.units import format_bytes
from .names import free_names, ipython_uses, parse_source

__all__ = [
    "DEFAULT_MAX_CARRY_BYTES",
    "MAX_CARRY_ENV",
    "MAX_PARAM_JSON_BYTES",
    "CellContext",
    "resolve_cell",
]

DEFAULT_MAX_CARRY_BYTES = 8 * 1024 * 1024
MAX_CARRY_ENV = "JUPYTER_TRAINER_MAX_CARRY_BYTES"
# A JSON value larger than this is data, not a hyperparameter: it is pickled instead of
# being written into spec.json.
MAX_PARAM_JSON_BYTES = 64 * 1024

_IPYTHON_NAMES = frozenset(
    {
        "In",
        "Out",
        "get_ipython",
        "exit",
        "quit",
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_oh",
        "_ih",
        "_dh",
    }
)
_IPYTHON_NUMBERED = re.compile(r"_i?\d+")

_LOCK_TYPES = {type(threading.Lock()): "threading.Lock", type(threading.RLock()): "threading.RLock"}
_GENERATOR_TYPES = (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)

_FIX_OPEN = "open or load it inside the cell"
_FIX_BIG = "save it into the --source folder and load it inside the cell"
_FIX_RECREATE = "recreate it inside the cell"
_FIX_CREATE = "create it inside the cell"


@dataclass(frozen=True)
class CellContext:
    """What a cell needs from the notebook, in the form each piece travels in."""

    params: dict[str, Any]  # JSON values read by the cell or its helpers, then -p overrides
    imports: tuple[str, ...]  # "import numpy as np", "from sklearn.datasets import load_digits"
    definitions: tuple[tuple[str, str], ...]  # (name, source) of notebook defs, deps first
    carried: dict[str, bytes]  # name -> pickle of other small picklable objects
    carried_names: tuple[str, ...]  # every notebook name carried in any form, sorted
    # name -> (cell, line): a definition's notebook cell (its In [n]) and the line its source
    # starts on there, where the history shows it; tracebacks then cite that cell
    definition_cells: dict[str, tuple[int, int]] = field(default_factory=dict)


def resolve_cell(
    cell: str,
    namespace: Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    history: Sequence[str] = (),
    max_carry_bytes: int | None = None,
    first_line: int = 1,
) -> CellContext:
    """Work out what ``cell`` needs from ``namespace`` (IPython's ``user_ns``).

    ``cell`` is the cell as IPython transformed it (``shell.transform_cell``);
    ``history`` is the notebook's executed cells, oldest first (IPython's ``In``), used to
    find the source of notebook definitions ``inspect`` cannot; ``overrides`` are the
    ``-p`` values, which win over notebook values. ``max_carry_bytes`` defaults to
    ``$JUPYTER_TRAINER_MAX_CARRY_BYTES`` or 8 MiB. Raises ``CaptureError`` naming every
    object that cannot be carried. Line numbers in errors count ``cell``'s first line as
    line ``first_line``, as the notebook's editor does (2 under a ``%%train`` line).
    """
    tree = parse_source(cell, first_line=first_line)
    lines = ipython_uses(tree)
    if lines:
        shown = "; ".join(
            f"line {n + first_line - 1}: {cell.splitlines()[n - 1].strip()}" for n in lines[:5]
        )
        raise CaptureError(
            f"the cell uses IPython ({shown}). Magics and `!` shell commands don't run inside "
            "training processes: write the step in Python (subprocess.run([...]) for a shell "
            "command) or run it in its own cell before %%train"
        )
    fixed = _check_overrides(overrides)
    resolver = _Resolver(namespace, set(fixed), history, _carry_limit(max_carry_bytes))
    for name in free_names(cell):
        resolver.resolve(name, "the cell")
    if resolver.problems:
        raise CaptureError(_problem_message(resolver.problems))
    params = {**resolver.params, **fixed}
    return CellContext(
        params=params,
        imports=tuple(resolver.imports),
        definitions=tuple(resolver.definitions),
        carried=dict(resolver.carried),
        carried_names=tuple(sorted(resolver.names)),
        definition_cells=dict(resolver.cells),
    )


def _check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    fixed: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key.isidentifier():
            raise SpecError(f"parameter name {key!r} is not a Python identifier")
        if not is_json_value(value):
            raise SpecError(
                f"parameter {key}: a {type(value).__name__} is not a JSON value; parameters are "
                "numbers, strings, booleans, None, lists or dicts"
            )
        fixed[key] = json.loads(json.dumps(value))  # a private copy
    return fixed


def _carry_limit(explicit: int | None) -> int:
    if explicit is None:
        raw = os.environ.get(MAX_CARRY_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_CARRY_BYTES
        try:
            explicit = int(raw)
        except ValueError:
            raise CaptureError(
                f"{MAX_CARRY_ENV}={raw!r} is not a whole number of bytes; unset it or set it "
                "to, for example, 16777216 for 16 MiB"
            ) from None
    if type(explicit) is not int or explicit <= 0:
        raise CaptureError(
            f"the carry size limit must be a positive number of bytes, got {explicit!r}"
        )
    return explicit


def is_ipython_internal(name: str) -> bool:
    """Names IPython puts in ``user_ns`` for itself, and dunder names."""
    return (
        name in _IPYTHON_NAMES
        or _IPYTHON_NUMBERED.fullmatch(name) is not None
        or (name.startswith("__") and name.endswith("__"))
    )


class _Resolver:
    def __init__(
        self, namespace: Mapping[str, Any], fixed: set[str], history: Sequence[str], limit: int
    ) -> None:
        self.namespace = namespace
        self.fixed = fixed
        self.history = history
        self.limit = limit
        self.params: dict[str, Any] = {}
        self.imports: dict[str, None] = {}
        self.definitions: list[tuple[str, str]] = []
        self.carried: dict[str, bytes] = {}
        self.names: set[str] = set()
        self.problems: list[tuple[str, str, str]] = []  # (name, reader, why and fix)
        self.cells: dict[str, tuple[int, int]] = {}  # definition -> (cell, first line)
        self._visiting: set[str] = set()
        self._history_trees: list[tuple[int, str, ast.Module]] | None = None

    def resolve(self, name: str, reader: str) -> None:
        if (
            name in self.names
            or name in self._visiting
            or name in self.fixed
            or is_ipython_internal(name)
            or name not in self.namespace
        ):
            return
        value = self.namespace[name]
        if isinstance(value, types.ModuleType):
            self._import(
                name,
                f"import {value.__name__}"
                if value.__name__ == name
                else f"import {value.__name__} as {name}",
            )
        elif _is_notebook_definition(value):
            self._definition(name, value, reader)
        elif (ref := _import_reference(value)) is not None:
            module, qualname = ref
            self._import(
                name,
                f"from {module} import {qualname}"
                if qualname == name
                else f"from {module} import {qualname} as {name}",
            )
        elif is_json_value(value) and _json_size(value) <= MAX_PARAM_JSON_BYTES:
            self.params[name] = json.loads(json.dumps(value))
            self.names.add(name)
        else:
            self._carry(name, value, reader)

    def _import(self, name: str, line: str) -> None:
        self.imports.setdefault(line, None)
        self.names.add(name)

    def _definition(self, name: str, value: Any, reader: str) -> None:
        source = None
        if value.__name__ == name and "." not in value.__qualname__:
            source = _inspect_source(name, value)
            found = self._history_place(name, value, source)
            if found is not None:
                cell, first, text = found
                source = source or text
                if source == text:
                    self.cells[name] = (cell, first)
        if source is None:  # a lambda, an alias, a closure, or no source: pickle by value
            self._carry(name, value, reader, by_value=True)
            return
        self._visiting.add(name)
        try:
            for dep in free_names(source):
                self.resolve(dep, f"the notebook definition {name!r}")
        finally:
            self._visiting.discard(name)
        self.definitions.append((name, source))
        self.names.add(name)

    def _history_place(
        self, name: str, value: Any, source: str | None
    ) -> tuple[int, int, str] | None:
        """Where the notebook's executed cells define ``name``: ``(cell, first line,
        source)`` of the last top-level def/class of it (the one whose source is ``source``,
        when given, and preferably the one on the line its code says), where the history is
        IPython's ``In``, so a cell's index is its number."""
        if self._history_trees is None:
            self._history_trees = [
                (i, *p) for i, p in enumerate(map(_parse_history_cell, self.history)) if p
            ]
        kind = ast.ClassDef if isinstance(value, type) else (ast.FunctionDef, ast.AsyncFunctionDef)
        line = getattr(getattr(value, "__code__", None), "co_firstlineno", None)
        matches = []
        for cell, text, tree in reversed(self._history_trees):
            for node in reversed(tree.body):
                if isinstance(node, kind) and node.name == name:
                    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                    lines = text.splitlines()[first - 1 : node.end_lineno]
                    found = (cell, first, textwrap.dedent("\n".join(lines)) + "\n")
                    if source is None:
                        return found
                    if found[2] == source:
                        matches.append(found)
        return next((m for m in matches if m[1] == line), matches[0] if matches else None)

    def _carry(self, name: str, value: Any, reader: str, *, by_value: bool = False) -> None:
        problem = _pickle_problem(value, self.limit)
        if problem is None:
            try:
                data = cloudpickle.dumps(value) if by_value else _dumps(value)
            except Exception as exc:  # any pickling failure is reported, not raised
                problem = f"{_describe(value)} value cannot be pickled ({exc}); {_FIX_CREATE}"
            else:
                if len(data) > self.limit:
                    problem = _too_big(value, len(data), self.limit, "that pickles to ")
                else:
                    self.carried[name] = data
                    self.names.add(name)
                    return
        self.problems.append((name, reader, problem))


def _is_notebook_definition(value: Any) -> bool:
    """A function or class defined in the notebook (``__module__ == '__main__'``).

    Instances of notebook classes are excluded: they have no ``__qualname__`` of their own.
    """
    return (
        getattr(value, "__module__", None) == "__main__"
        and isinstance(getattr(value, "__qualname__", None), str)
        and isinstance(getattr(value, "__name__", None), str)
        and (inspect.isclass(value) or inspect.isfunction(inspect.unwrap(value)))
    )


def _inspect_source(name: str, value: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(value))
    except (OSError, TypeError):
        return None
    return source if _defines(source, name) else None


def _defines(source: str, name: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return (
        bool(body)
        and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and body[0].name == name
    )


def _parse_history_cell(text: Any) -> tuple[str, ast.Module] | None:
    if not isinstance(text, str) or not text.strip():
        return None
    for attempt in (text, _blank_magics(text)):
        try:
            return attempt, ast.parse(attempt)
        except (SyntaxError, ValueError):
            continue
    return None


def _blank_magics(text: str) -> str:
    """Blank out raw ``%magic`` and ``!cmd`` lines, keeping line numbers."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines()
    )


def _import_reference(value: Any) -> tuple[str, str] | None:
    """``(module, name)`` when ``from module import name`` gives back this very object."""
    module_name = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if (
        not isinstance(module_name, str)
        or not isinstance(qualname, str)
        or module_name == "__main__"
        or not qualname.isidentifier()
    ):
        return None
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # an unimportable module: fall back to pickling
            return None
    try:
        found = getattr(module, qualname, None)
    except Exception:
        return None
    return (module_name, qualname) if found is value else None


def _json_size(value: Any) -> int:
    return len(json.dumps(value))


def _dumps(value: Any) -> bytes:
    """Plain pickle when the result loads anywhere, else cloudpickle (by value).

    Plain pickle stores notebook classes and functions by reference to ``__main__``, which
    does not exist yet in the training process when carried objects are loaded.
    """
    try:
        data = pickle.dumps(value, protocol=pickle.DEFAULT_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value)
    return cloudpickle.dumps(value) if _refers_to_main(data) else data


def _refers_to_main(data: bytes) -> bool:
    try:
        for _op, arg, _pos in pickletools.genops(data):
            if isinstance(arg, str) and (arg == "__main__" or arg.startswith("__main__ ")):
                return True
    except Exception:
        return True
    return False


def _pickle_problem(value: Any, limit: int) -> str | None:
    """Why ``value`` cannot travel, found without pickling it, or None."""
    if isinstance(value, io.IOBase):
        path = getattr(value, "name", None)
        if isinstance(path, (str, bytes)):
            return f"an open file {os.fsdecode(path)!r}; {_FIX_OPEN}"
        return f"an open {type(value).__name__} stream; {_FIX_OPEN}"
    if isinstance(value, socket.socket):
        return f"a network socket; {_FIX_RECREATE}"
    if isinstance(value, sqlite3.Connection | sqlite3.Cursor):
        return f"an sqlite3 {type(value).__name__.lower()} cannot be pickled; {_FIX_RECREATE}"
    if isinstance(value, subprocess.Popen):
        return f"a running subprocess cannot be pickled; {_FIX_RECREATE}"
    if isinstance(value, threading.Thread):
        return f"a running thread cannot be pickled; {_FIX_CREATE}"
    lock = _LOCK_TYPES.get(type(value))
    if lock:
        return f"a {lock} cannot be pickled; {_FIX_CREATE}"
    if isinstance(value, _GENERATOR_TYPES):
        return f"a {type(value).__name__} cannot be pickled (its paused state cannot be copied); {_FIX_CREATE}"
    size = _cheap_size(value)
    if size is not None and size > limit:
        return _too_big(value, size, limit, "of ")
    return None


def _cheap_size(value: Any) -> int | None:
    """Size of big buffers (bytes, arrays, tensors) without pickling them."""
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    nbytes = getattr(type(value), "nbytes", None) is not None and getattr(value, "nbytes", None)
    return nbytes if type(nbytes) is int else None


def _too_big(value: Any, size: int, limit: int, verb: str) -> str:
    return (
        f"{_describe(value)} value {verb}{format_bytes(size)}, over the {format_bytes(limit)} "
        f"carry limit (${MAX_CARRY_ENV}); {_FIX_BIG}"
    )


def _describe(value: Any) -> str:
    kind = type(value)
    return (
        kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    )


def _problem_message(problems: list[tuple[str, str, str]]) -> str:
    count = len(problems)
    head = (
        f"cannot carry {count} notebook object{'s' if count > 1 else ''} into the training "
        "processes (nothing was started):"
    )
    items = [f"  - {name} (read by {reader}): {why}" for name, reader, why in problems]
    return "\n".join([head, *items])
