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


@pytest.mark.parametrize("name", ["runtime.py", "_boot.py"])
def test_runtime_uses_the_standard_library_only(name):
    stdlib = sys.stdlib_module_names
    imported = imported_modules(PACKAGE / name)
    allowed = {"torch.distributed"} | ({"jupyter_trainer"} if name == "_boot.py" else set())
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
