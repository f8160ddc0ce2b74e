"""The suite's own top-level modules and packages never take the name of a module installed
beside them.

pytest puts ``tests/`` first on ``sys.path``, so a top-level name of the suite (``support``,
a folder of tests such as ``targets``) named like a library replaces that library in every
worker: a ``tests/kernels.py`` made transformers import it in place of Hugging Face's
``kernels`` and fail. The helpers are inside ``support/``, where their names are the
suite's own.
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def helper_names() -> list[str]:
    """The modules and packages at the top of tests/, which are importable by name."""
    modules = [p.stem for p in TESTS.glob("*.py") if not p.stem.startswith("test_")]
    packages = [p.parent.name for p in TESTS.glob("*/__init__.py")]
    return sorted(set(modules + packages) - {"conftest"})


def installed_elsewhere(name: str) -> str | None:
    """Where ``name`` would be imported from if tests/ were not on the path, or None."""
    if name in sys.builtin_module_names or name in sys.stdlib_module_names:
        return "the standard library"
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != TESTS]
    spec = PathFinder.find_spec(name, elsewhere)
    return spec.origin or str(list(spec.submodule_search_locations or [])) if spec else None


def test_the_suite_has_helper_modules_to_check():
    assert {"support", "rankside", "targets", "frontends"} <= set(helper_names())


def test_no_helper_module_shadows_an_installed_one():
    shadowed = {n: where for n in helper_names() if (where := installed_elsewhere(n))}
    assert not shadowed, (
        f"rename these helpers under tests/; they hide installed modules: {shadowed}"
    )


def test_a_helper_named_like_an_installed_module_is_caught():
    assert "site-packages" in (installed_elsewhere("pytest") or "")
    assert installed_elsewhere("json") == "the standard library"
