"""``jupyter-trainer azureml check PATH``: every Azure ML SDK v1 call of a notebook or of a
folder of scripts and notebooks, and what it will do here, before anything runs.

The code is read, never run: its ``azureml`` imports (or already ``jupyter_trainer.azureml``
ones) say which names are v1's, assignments from known calls say what a variable holds (a
workspace, a submitted run, the script's ``Run.get_context()``...), and every call on those is
looked up. A name works when this package has it, works differently when ``names.DIFFERS``
says so, and is refused when ``names.REFUSED`` says so or this package lacks it. In a
training script (a Python file that calls ``Run.get_context()``), the notebook's names
(``Workspace``, ``Dataset``...) are refused: inside a run there is no workspace.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import names

WORKS, DIFFERS, REFUSED = "works", "works differently", "refused"
_PREFIXES = ("azureml.", "jupyter_trainer.azureml.")
_SKIP_DIRS = {".git", ".ipynb_checkpoints", "__pycache__", ".venv", "venv", "node_modules"}
# A variable's type -> where its class is (module under jupyter_trainer.azureml, class)
_CLASSES = {
    "Workspace": ("core.workspace", "Workspace"),
    "Experiment": ("core.experiment", "Experiment"),
    "Run": ("core.run", "Run"),
    "ComputeTarget": ("core.compute", "ComputeTarget"),
    "Model": ("core.model", "Model"),
    "Environment": ("core.environment", "Environment"),
    "FileDataset": ("core.dataset", "FileDataset"),
    "Datastore": ("core.dataset", "Datastore"),
    "ScriptRunConfig": ("core.script_run_config", "ScriptRunConfig"),
    "HyperDriveConfig": ("train.hyperdrive.runconfig", "HyperDriveConfig"),
    "HyperDriveRun": ("train.hyperdrive.run", "HyperDriveRun"),
    "CondaDependencies": ("core.conda_dependencies", "CondaDependencies"),
}
_SCRIPT_RUN = ("rankside.azureml_v1.azureml.core.run", "Run")  # inside a run


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    name: str
    verdict: str
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "name": self.name,
            "verdict": self.verdict,
            "note": self.note,
        }


def check_path(path: Path) -> list[Finding]:
    """The findings of a notebook, a Python file, or every one of them under a folder."""
    if path.is_dir():
        found: list[Finding] = []
        for file in sorted(path.rglob("*")):
            if _SKIP_DIRS & set(file.relative_to(path).parts):
                continue
            if file.suffix in (".py", ".ipynb") and file.is_file():
                found += check_file(file, str(file.relative_to(path)))
        return found
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return check_file(path, str(path))


class _Unreadable(Exception):
    """A file that cannot be checked as code; the message says why."""


def check_file(path: Path, shown: str) -> list[Finding]:
    """The findings of one notebook or Python file. One that cannot be read as either (not
    a regular file, not a notebook, not text) is one refused finding that says why, so the
    check of a folder goes on with its other files."""
    try:
        if not path.is_file():  # a FIFO would block the read
            raise _Unreadable("is not a regular file")
        if path.suffix == ".ipynb":
            return check_source(_notebook_source(path), shown, cells=True)
        return check_source(path.read_text(errors="replace"), shown)
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc}); make it readable"
    except _Unreadable as exc:
        why = f"cannot be read: it {exc}"
    return [Finding(shown, 0, "(unreadable)", REFUSED, why)]


def _notebook_source(path: Path) -> list[tuple[int, str]]:
    """Each code cell's source, numbered from 1 in the notebook's order; IPython's magics
    and shell lines are blanked, so the rest parses as Python and keeps its line numbers."""
    try:
        notebook = json.loads(path.read_text(errors="replace"))
    except (ValueError, RecursionError) as exc:
        raise _Unreadable(f"is not a notebook: not JSON ({str(exc)[:200]})") from None
    cells = notebook.get("cells", []) if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise _Unreadable('is not a notebook: a notebook is a JSON object with a list of "cells"')
    out = []
    for number, cell in enumerate(cells, 1):  # numbered as the notebook shows them
        if not isinstance(cell, dict):
            raise _Unreadable(f"is not a notebook: its cell {number} is not a JSON object")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            text = "".join(source)
        elif isinstance(source, str):
            text = source
        else:
            raise _Unreadable(f"is not a notebook: the source of its cell {number} is not text")
        python = _python_of_cell(text)
        if python is not None:
            out.append((number, python))
    return out


# Cell magics whose body is not Python: the body is another language, or a file's text
_NOT_PYTHON = re.compile(
    r"%%(bash|sh|script|html|javascript|js|latex|markdown|svg|perl|ruby|writefile|file)\b"
)


def _python_of_cell(text: str) -> str | None:
    """The Python of a code cell, its line numbers kept: IPython's magics and shell lines
    blanked; None for a cell whose body is not Python (``%%bash``, a ``%%writefile`` of a
    YAML file). A ``%%writefile train.py`` cell is Python: the training script it writes."""
    first = text.lstrip().split("\n", 1)[0]
    magic = _NOT_PYTHON.match(first)
    if magic and not (magic.group(1) in ("writefile", "file") and first.rstrip().endswith(".py")):
        return None
    lines = text.split("\n")
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def check_source(
    source: str | list[tuple[int, str]], shown: str, cells: bool = False
) -> list[Finding]:
    checker = _Checker(shown)
    parts = source if isinstance(source, list) else [(0, source)]
    for number, text in parts:
        checker.cell = number if cells else None
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            where = f"cell {number}, line {exc.lineno}" if cells else f"line {exc.lineno}"
            at = f" at {where}" if exc.lineno else ""  # a NUL byte is at no line
            checker.add(exc.lineno or 0, "(syntax)", REFUSED, f"cannot be read: {exc.msg}{at}")
            continue
        except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; too deep
            checker.add(0, "(syntax)", REFUSED, f"cannot be read: {_unparsable(exc)}")
            continue
        # a script, or a notebook's %%writefile train.py cell: it runs inside a run
        checker.script = _calls_get_context(tree)
        try:
            checker.visit(tree)
        except RecursionError:  # what was found before the deep part stays
            checker.add(0, "(syntax)", REFUSED, f"cannot be checked: {_unparsable(None)}")
    return checker.findings


def _unparsable(exc: BaseException | None) -> str:
    if isinstance(exc, ValueError):
        return f"{exc}; remove them"
    return (
        "an expression is nested too deeply to read; split it into smaller ones, "
        "or check this code by hand"
    )


class _Checker(ast.NodeVisitor):
    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.cell: int | None = None
        self.bound: dict[str, str] = {}  # local name -> v1 name ("Workspace", "Dataset.File")
        self.types: dict[str, str] = {}  # variable -> type ("Workspace", "ScriptRun", ...)
        self.findings: list[Finding] = []
        self.script = False  # a training script: it runs inside a run
        self.fallback = False  # in v1's "except ComputeTargetException:" provisioning branch

    def visit_Try(self, node: ast.Try) -> None:
        """v1's samples find their compute target, and provision one in ``except
        ComputeTargetException:``. Here the target is added once beforehand, so that branch
        is not reached: its calls work differently rather than being refused."""
        for part in (*node.body, *node.orelse, *node.finalbody):
            self.visit(part)
        for handler in node.handlers:
            if handler.type is not None:
                self.visit(handler.type)
            was = self.fallback
            self.fallback = was or _catches_missing_target(handler.type)
            for part in handler.body:
                self.visit(part)
            self.fallback = was

    visit_TryStar = visit_Try

    def add(self, line: int, name: str, verdict: str, note: str) -> None:
        where = f"{self.shown}" + (f" (cell {self.cell})" if self.cell is not None else "")
        self.findings.append(Finding(where, line, name, verdict, note))

    # -- imports -----------------------------------------------------------------------
    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        plugin = _plugin(node.module or "")
        if plugin:
            imported = ", ".join(a.name for a in node.names)
            self.add(node.lineno, f"from {node.module} import {imported}", REFUSED, plugin)
            return
        module = _v1_module(node.module or "")
        if module is None:
            return
        if self.script:
            self._script_import(node, module)
            return
        mine = names.MODULES.get(module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if mine is None or not _has(mine, alias.name):
                if full in names.MODULES:  # a submodule: from azureml.core import runconfig
                    self.bound[alias.asname or alias.name] = ""
                    continue
                self.add(
                    node.lineno,
                    f"from {module} import {alias.name}",
                    REFUSED,
                    _missing(module, alias.name),
                )
                continue
            self.bound[alias.asname or alias.name] = alias.name
            self.add(
                node.lineno,
                f"from {module} import {alias.name}",
                WORKS,
                f"from jupyter_trainer.{module} import {alias.name}",
            )

    def _script_import(self, node: ast.ImportFrom, module: str) -> None:
        """An import of a training script: inside a run, ``azureml`` is the script side
        (``rankside/azureml_v1``), so the line stays as it is, or names what to do."""
        for alias in node.names:
            shown = f"from {module} import {alias.name}"
            if module in names.SCRIPT_MODULES and _script_has(module, alias.name):
                self.bound[alias.asname or alias.name] = alias.name
                self.add(node.lineno, shown, WORKS, "unchanged: inside a run it is this run's")
            else:
                self.add(
                    node.lineno,
                    shown,
                    REFUSED,
                    f"inside a run, {module}.{alias.name} does not exist: only azureml.core's "
                    "script side does (Run, and Model.register); do this in the notebook",
                )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            plugin = _plugin(alias.name)
            if plugin:
                self.add(node.lineno, f"import {alias.name}", REFUSED, plugin)
                continue
            module = _v1_module(alias.name)
            if module is None:
                continue
            if module not in names.MODULES and module != "azureml":
                self.add(node.lineno, f"import {module}", REFUSED, _missing(module, None))
                continue
            self.add(node.lineno, f"import {module}", WORKS, f"import jupyter_trainer.{module}")

    # -- what variables hold -----------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        kind = self._returns(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if kind:
                    self.types[target.id] = kind
                else:
                    self.types.pop(target.id, None)

    def _returns(self, value: ast.AST) -> str | None:
        if not isinstance(value, ast.Call):
            return None
        name = self._call_name(value.func)
        given = (
            value.args[0]
            if value.args
            else next((k.value for k in value.keywords if k.arg == "config"), None)
        )
        if name == "Experiment.submit" and given is not None:  # it gives what it got
            if self._returns(given) == "HyperDriveConfig" or (
                isinstance(given, ast.Name) and self.types.get(given.id) == "HyperDriveConfig"
            ):
                return "HyperDriveRun"
        return names.RETURNS.get(name) if name else None

    def _call_name(self, func: ast.AST) -> str | None:
        """``Workspace.from_config`` for a call of it, ``Run.wait_for_completion`` for a call
        on a variable holding a submitted run; None for anything else."""
        chain: list[str] = []
        while isinstance(func, ast.Attribute):
            chain.append(func.attr)
            func = func.value
        chain.reverse()
        if isinstance(func, ast.Call) and chain:  # Experiment(ws, "x").submit(src)
            kind = self._returns(func)
            return ".".join([kind, *chain]) if kind else None
        if not isinstance(func, ast.Name):
            return None
        if self.bound.get(func.id):
            return ".".join([self.bound[func.id], *chain])
        if func.id in self.types and chain:
            return ".".join([self.types[func.id], *chain])
        return None

    # -- calls -------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        name = self._call_name(node.func)
        if name is None:
            return
        first = name.split(".")[0]
        if self.script and name in names.SCRIPT_DIFFERS:
            verdict, note = DIFFERS, "inside a run: " + names.SCRIPT_DIFFERS[name]
        elif self.script and first in names.SCRIPT_REFUSED:
            verdict, note = REFUSED, "inside a run: " + names.SCRIPT_REFUSED[first]
        else:
            verdict, note = judge(name)
        refused = _refused_value(name, node)
        if refused:
            verdict, note = REFUSED, refused
        elif verdict != REFUSED and _nodes_note(name, node):
            verdict, note = DIFFERS, "; ".join(filter(None, [note, _nodes_note(name, node)]))
        if verdict == REFUSED and self.fallback:
            verdict, note = DIFFERS, f"{FALLBACK}; reached, it is refused: {note}"
        self.add(node.lineno, name + "()", verdict, note)
        owner = name.split(".")[0] if "." not in name else name
        for keyword in node.keywords:
            rule = names.KEYWORDS.get(owner, {}).get(keyword.arg or "")
            if rule:
                self.add(
                    node.lineno,
                    f"{name}({keyword.arg}=...)",
                    REFUSED if rule[0] == "refused" else DIFFERS,
                    rule[1],
                )


FALLBACK = (
    "only reached when the compute target is missing: add it once with `jupyter-trainer "
    "target add NAME --kind ...` and this branch never runs"
)


def _catches_missing_target(caught: ast.AST | None) -> bool:
    """Whether an ``except`` catches v1's missing compute target (``ComputeTargetException``,
    alone or in a tuple, by name or as ``module.ComputeTargetException``)."""
    kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    for kind in kinds:
        name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", None)
        if name == "ComputeTargetException":
            return True
    return False


def _calls_get_context(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Attribute) and node.attr == "get_context" for node in ast.walk(tree)
    )


def judge(name: str) -> tuple[str, str]:
    """The verdict on the v1 name ``name`` (``Model.deploy``, ``ScriptRun.log``...) and its note."""
    if name in names.REFUSED:
        return REFUSED, names.REFUSED[name]
    if not _exists(name):
        return REFUSED, "not offered by jupyter_trainer.azureml"
    if name in names.DIFFERS:
        return DIFFERS, names.DIFFERS[name]
    return WORKS, ""


def _exists(name: str) -> bool:
    first, *rest = name.split(".")
    if first == "ScriptRun":
        obj: Any = _class(*_SCRIPT_RUN)
    elif first in _CLASSES:
        obj = _class(*_CLASSES[first])
    else:
        obj = next((getattr(_module(m), first) for m in _all_modules() if _has(m, first)), None)
    for part in rest:
        if obj is None:
            return False
        obj = getattr(obj, part, None)
    return obj is not None


def _plugin(module: str) -> str:
    """Why ``module``, an Azure plugin of another package, is not there (or "")."""
    for name, why in names.PLUGINS.items():
        if module == name or module.startswith(name + "."):
            return why
    return ""


def _v1_module(module: str) -> str | None:
    for prefix in _PREFIXES:
        if module == prefix[:-1] or module.startswith(prefix):
            return "azureml" + module[len(prefix) - 1 :] if prefix != "azureml." else module
    return None


def _module(relative: str) -> Any:
    return importlib.import_module(f"jupyter_trainer.azureml.{relative}")


def _all_modules() -> list[str]:
    return list(dict.fromkeys(names.MODULES.values()))


def _has(relative: str, name: str) -> bool:
    return hasattr(_module(relative), name)


def _literals(node: ast.Call, position: int, keyword: str) -> list[str]:
    """The literal strings given as argument ``position`` or ``keyword`` (a list of them
    counts too); nothing for an argument that is not written out."""
    given = node.args[position] if len(node.args) > position else None
    given = next((k.value for k in node.keywords if k.arg == keyword), given)
    items = given.elts if isinstance(given, (ast.List, ast.Tuple)) else [given]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _refused_value(name: str, node: ast.Call) -> str | None:
    """Why a call that exists is refused for the value it is given, where the value is
    written out: an Azure storage URL as a dataset, a TensorFlow curated environment."""
    from .core.dataset import AZURE_URL, CREDENTIALS_FIX
    from .core.environment import CURATED_PREFIXES, CURATED_REFUSED

    if name == "Dataset.File.from_files":
        azure = [p for p in _literals(node, 0, "path") if AZURE_URL.match(p)]
        if azure:
            return f"the Azure storage path {azure[0].split('?', 1)[0]!r}: {CREDENTIALS_FIX}"
    if name == "Environment.get":
        for value in _literals(node, 1, "name"):
            if value.lower().startswith(CURATED_PREFIXES) and CURATED_REFUSED.search(value):
                return f"the curated environment {value!r}: this project runs PyTorch"
    return None


def _nodes_note(name: str, node: ast.Call) -> str:
    """What a distributed configuration asking for several nodes needs of its target, where
    the count is written out: v1's clusters had the nodes, the local target has one."""
    if name not in ("PyTorchConfiguration", "MpiConfiguration"):
        return ""
    given = node.args[1] if len(node.args) > 1 else None
    given = next((k.value for k in node.keywords if k.arg == "node_count"), given)
    count = given.value if isinstance(given, ast.Constant) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        return ""
    return (
        f"node_count={count} needs a target with {count} nodes (ssh, slurm, kubernetes or "
        "ray) under the compute target's name; the local target runs one node and refuses it "
        "at submit"
    )


def _script_has(module: str, name: str) -> bool:
    shim = importlib.import_module(f"jupyter_trainer.rankside.azureml_v1.{module}")
    return hasattr(shim, name) or importlib.util.find_spec(f"{shim.__name__}.{name}") is not None


def _class(relative: str, name: str) -> Any:
    if relative.startswith("rankside."):
        return getattr(importlib.import_module(f"jupyter_trainer.{relative}"), name)
    return getattr(_module(relative), name)


def _missing(module: str, name: str | None) -> str:
    what = f"{module}.{name}" if name else module
    note = names.REFUSED.get(name or "", "")
    return f"{what} has no counterpart in jupyter_trainer.azureml" + (f": {note}" if note else "")


def summary(findings: list[Finding]) -> dict[str, int]:
    counts = {WORKS: 0, DIFFERS: 0, REFUSED: 0}
    for finding in findings:
        counts[finding.verdict] += 1
    return counts
