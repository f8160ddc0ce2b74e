"""The layering rules of DESIGN.md, checked on the real import graph."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_trainer"
FRONT_END_ONLY = ("IPython", "ipywidgets", "anywidget", "tornado", "jupyter_server")
FRONT_ENDS = {"magics", "monitor", "server"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        yield str(rel), rel.parts[0].removesuffix(".py"), path


@pytest.mark.parametrize("rel, top, path", list(modules()), ids=lambda v: str(v))
def test_only_front_ends_import_jupyter(rel, top, path):
    if top in FRONT_ENDS:
        return
    bad = {m for m in imported_modules(path) if m.split(".")[0] in FRONT_END_ONLY}
    assert not bad, f"{rel} imports {bad}; only {sorted(FRONT_ENDS)} may"


@pytest.mark.parametrize("name", ["runtime.py", "rank_env.py", "rank_files.py", "rank_onnx.py", "rank_data.py",
                                  "rank_workdir.py", "rank_death.py",
                                  "_boot.py",
                                  "nodes/agent.py"])
def test_runtime_uses_the_standard_library_only(name):
    stdlib = sys.stdlib_module_names
    imported = imported_modules(PACKAGE / name)
    siblings = {"_boot.py": {"jupyter_trainer", "jupyter_trainer.rankside.death_watch"},
                "rank_env.py": {"torch.distributed.constants"},
                "runtime.py": {"jupyter_trainer.rankside.launcher_env", "jupyter_trainer.rankside.rank_files",
                               "jupyter_trainer.rankside.onnx_export", "jupyter_trainer.rankside.data"}}
    allowed = {"torch.distributed"} | siblings.get(name, set())
    assert {m for m in imported if m.split(".")[0] not in stdlib} - allowed == set()
    assert "from ." not in (PACKAGE / name).read_text()


def test_import_is_cheap():
    code = ("import sys, jupyter_trainer, jupyter_trainer.runtime\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRONT_END_ONLY + ('torch',)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_is_too_long():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long


LAYERS = {
    "errors": 0, "lazy": 0, "rank_env": 0, "rank_files": 0, "rank_onnx": 0, "rank_data": 0, "rank_workdir": 0,
    "rank_death": 0,
    "urls": 0,  # credentials in URLs, redacted: the spec redacts a data input's source
    "spec": 1, "home": 1, "files": 1, "procs": 1, "units": 1, "printable": 1, "waker": 1,
    "capture": 2, "environment": 2, "launch": 2, "attribution": 2,
    "nodes": 3, "datasets": 3.2,  # data inputs: checked, fetched, staged through a node shell
    "pool": 3.4,  # the warm rank pool that the local target forks --hot ranks from
    "targets": 3.5,  # targets stand on the node layer, never the reverse
    "store": 4,
    "verdict": 4.6,  # how a run ended, from the evidence the supervisor gathers
    "launcher_exit": 4.7, "state_writer": 4.7, "snapshot_check": 4.7,  # the supervisor's parts
    "supervisor": 5, "follow": 5, "doctor": 5, "watch": 4.5, "stacks": 5,
    "monitor": 6,
    "starter": 6,
    "tensorboard": 6,  # event files from the store, and a TensorBoard over them
    "mlflow_mirror": 6,  # a run into an MLflow run, read from the store after the fact
    "start": 6.5, "compare": 6.5,  # start runs and compare them: above starter and monitor
    "dry_run": 6.5,  # a run checked and shown as it would start, never started
    "model_registry": 6.5,  # registers a run's outputs with its lineage (store + follow)
    "api": 7, "options": 7,
    "tuning": 7.5,  # sweeps: a client of the run API, as the magics are
    "model_commands": 7.8,  # files, download, register, models: gathered by commands
    "pool_commands": 7.8,  # pools: list or stop the warm rank pools
    "commands": 8, "server": 8,
    "magics": 9, "cli": 9,
}


def package_imports(path: Path) -> set[str]:
    """Top-level package modules imported by ``path``, ignoring ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
    rel = path.relative_to(PACKAGE)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = list(rel.parts[:-1])[: len(rel.parts) - node.level]
        target = (base + (node.module.split(".") if node.module else []))
        if target:
            found.add(target[0].removesuffix(".py"))
        else:
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("rel, top, path", [m for m in modules() if m[1] in LAYERS],
                         ids=lambda v: str(v))
def test_modules_import_only_from_lower_layers(rel, top, path):
    upward = {m for m in package_imports(path) - {top}
              if m in LAYERS and LAYERS[m] >= LAYERS[top]}
    assert not upward, f"{rel} (layer {LAYERS[top]}) imports {upward} from its own layer or above"


def test_every_module_has_a_layer():
    tops = {top for _, top, _ in modules()} - {"__init__", "runtime", "_boot"}
    assert tops <= set(LAYERS), tops - set(LAYERS)
