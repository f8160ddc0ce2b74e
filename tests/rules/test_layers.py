"""The layers of DESIGN.md, checked on the whole import graph.

Every import of every module counts: at the top, inside functions and classes, under
``if TYPE_CHECKING:``, in packages' ``__init__``. A module imports only from layers below
its own, or from its own folder; folders of one layer never import each other; and the
graph has no cycle at all, inside a folder included.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.import_graph import private_imports, read_graph

PACKAGE = Path(__file__).resolve().parents[2] / "jupyter_trainer"
GRAPH = read_graph(PACKAGE)

# Folders of the package, lowest layer first. A module's folder is the longest prefix here.
LAYERS = {
    "rankside": 0,  # what a rank or a node runs: standard library only (test_shipped.py)
    "core": 1,  # errors, spec, typed records, small utilities
    "capture": 2,  # cell + namespace -> snapshot
    "environment": 2,  # %environment: lock, build, pre-flight
    "inputs": 2,  # --data: checked, hashed, fetched
    "launchers": 2,  # the launcher table: argv and environment of each launcher
    "nodes": 3,  # the node layer: agent client, mirror, hot-start clients
    "targets": 4,  # one folder per kind
    "store": 5,  # run folders, indexes, models, sweeps
    "supervisor": 6,  # drives one run
    "mirrors": 7,  # TensorBoard and MLflow, read from the store
    "api": 8,  # the Python API: runs, sweeps, models, diff
    "frontends.views": 9,  # pure view code every front end shares
    "azureml": 9,  # Azure ML SDK v1's names over the API; its check is a command's
    "azure": 9.5,  # Azure ML SDK v2's names, over v1's mapping, under the commands
    "frontends.widgets": 10,  # the notebook widgets
    "frontends.commands": 10,  # the command table the CLI and %train share
    "frontends.magics": 11,
    "frontends.cli": 11,
    "frontends.server": 11,
    "": 12,  # the package itself: jupyter_trainer, __main__, runtime
}
JUPYTER_ONLY = ("IPython", "ipywidgets", "anywidget", "tornado", "jupyter_server", "ipykernel")
MAY_USE_JUPYTER = ("frontends.widgets", "frontends.magics", "frontends.server", "azureml")
MAX_LINES = 500


def folder_of(module: str) -> str:
    rest = module.split(".")[1:]
    for cut in range(len(rest), 0, -1):
        name = ".".join(rest[:cut])
        if name in LAYERS:
            return name
    return ""


MODULES = sorted(GRAPH.modules)


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_down_the_layers(module):
    mine = folder_of(module)
    bad = []
    for other in sorted(GRAPH.edges[module]):
        theirs = folder_of(other)
        if theirs == mine:
            continue
        if LAYERS[theirs] >= LAYERS[mine]:
            line = GRAPH.lines[(module, other)]
            bad.append(f"line {line}: {other} ({theirs or 'the package'}, layer {LAYERS[theirs]})")
    assert not bad, (
        f"{module} ({mine}, layer {LAYERS[mine]}) imports from its own layer or "
        f"above: " + "; ".join(bad)
    )


def test_the_import_graph_has_no_cycle():
    assert GRAPH.cycles() == []


def test_no_module_imports_another_modules_private_name():
    """A ``_name`` is its module's own: another module that needs it needs a public name
    (``from x import _y`` and ``import x._y``; attribute access is not checked)."""
    assert private_imports(GRAPH) == []


def test_the_private_import_check_sees_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_hidden = 1\n__version__ = '1'\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text(
        "from ..a import _hidden, __version__\n"
        "def f():\n"
        "    import pkg.sub._c\n"
        "from os import _exit\n"
    )
    assert private_imports(read_graph(package)) == [
        "pkg.sub.b:1 imports pkg.a._hidden",
        "pkg.sub.b:3 imports pkg.sub._c",
    ]


def test_every_module_has_a_layer():
    top = {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    known = {f.split(".")[0] for f in LAYERS if f} | {"__main__", "runtime"}
    assert top <= known, top - known
    front = {m.split(".")[2] for m in MODULES if m.startswith("jupyter_trainer.frontends.")}
    assert front <= {f.split(".")[1] for f in LAYERS if f.startswith("frontends.")} | {
        "labextension"
    }, front


def test_the_layer_test_sees_imports_inside_functions():
    """The graph reads imports anywhere: the package imports its front ends lazily, inside
    ``load_ipython_extension``, and that import is an edge."""
    assert "jupyter_trainer.frontends.magics" in GRAPH.edges["jupyter_trainer"]


@pytest.mark.parametrize("module", MODULES)
def test_only_front_ends_import_jupyter(module):
    if folder_of(module) in MAY_USE_JUPYTER:
        return
    bad = GRAPH.external[module] & set(JUPYTER_ONLY)
    assert not bad, f"{module} imports {sorted(bad)}; only {MAY_USE_JUPYTER} may"


def test_import_is_cheap():
    code = (
        "import sys, jupyter_trainer, jupyter_trainer.runtime\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{JUPYTER_ONLY + ('torch', 'matplotlib', 'optuna')!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_is_too_long():
    """Split a module by its second responsibility before it grows past this."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long


def test_the_top_of_the_package_stays_small():
    entries = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.name not in ("__pycache__",) and not p.name.endswith(".pyc")
    )
    # the layers' folders, __init__, __main__, runtime.py (``jt`` in a rank), azureml and
    # azure (Azure ML SDK v1's and v2's import paths, kept one to one under jupyter_trainer)
    assert len(entries) <= 18, entries


@pytest.mark.parametrize("folder", sorted({p.parent for p in PACKAGE.rglob("__init__.py")}))
def test_every_folder_says_what_it_is(folder):
    text = (folder / "__init__.py").read_text()
    assert text.lstrip().startswith('"""') and "TODO" not in text.split('"""')[1], folder


def test_api_runs_is_the_module_whichever_import_comes_first():
    """``jupyter_trainer.api`` exports ``submit`` and the rest lazily; ``runs`` there is the
    module, also when it is the first name a fresh interpreter imports from the package."""
    code = (
        "import types\n"
        "from jupyter_trainer.api import runs\n"
        "from jupyter_trainer.api import submit\n"
        "assert isinstance(runs, types.ModuleType), runs\n"
        "assert submit is runs.submit\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


_TS_IMPORT = re.compile(r"""^(?:import|export)\b[^;]*?\bfrom\s+'(\.{1,2}/[^']+)'""", re.M | re.S)


def ts_import_cycles(src: Path) -> list[list[str]]:
    """The cycles among ``src``'s TypeScript modules (type-only imports count: a reader
    follows them the same way), each as the modules around it."""
    modules = {p.relative_to(src).with_suffix("").as_posix(): p for p in src.rglob("*.ts")}
    edges = {}
    for name, path in modules.items():
        here = Path(name).parent
        found = set()
        for target in _TS_IMPORT.findall(path.read_text()):
            resolved = os.path.normpath((here / target).as_posix()).removesuffix(".js")
            if resolved in modules:
                found.add(resolved)
        edges[name] = found
    cycles, done, stack = [], set(), []

    def visit(node: str) -> None:
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt in stack:
                cycles.append(stack[stack.index(nxt) :])
            elif nxt not in done:
                visit(nxt)
        stack.pop()
        done.add(node)

    for name in sorted(edges):
        if name not in done:
            visit(name)
    return cycles


def test_typescript_modules_import_no_cycle():
    src = Path(__file__).resolve().parents[2] / "labextension" / "src"
    assert ts_import_cycles(src) == []


def test_the_typescript_cycle_check_sees_type_imports(tmp_path):
    (tmp_path / "view").mkdir()
    (tmp_path / "view" / "a.ts").write_text("import type { B } from './b';\nexport type A = 1;\n")
    (tmp_path / "view" / "b.ts").write_text(
        "import {\n  x,\n} from './c.js';\nexport type B = 2;\n"
    )
    (tmp_path / "view" / "c.ts").write_text("import type { A } from '../view/a';\n")
    assert ts_import_cycles(tmp_path) == [["view/a", "view/b", "view/c"]]
