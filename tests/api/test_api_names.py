"""The names ``import jupyter_trainer as jt`` and ``jupyter_trainer.api`` offer, each asked
first in a fresh interpreter: which module is imported first must not change what a name is.

``jupyter_trainer.api.runs`` is the submodule every front end imports (``from
jupyter_trainer.api import runs as api``); the function ``runs`` is ``jt.runs``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "jt.submit": (
        "import jupyter_trainer as jt; print(jt.submit.__module__)",
        "jupyter_trainer.api.runs",
    ),
    "jt.runs": ("import jupyter_trainer as jt; print(jt.runs.__qualname__)", "runs"),
    "api.runs is the module": (
        "from jupyter_trainer.api import runs; print(runs.__name__)",
        "jupyter_trainer.api.runs",
    ),
    "api.runs after api.submit": (
        "import jupyter_trainer.api as api; api.submit; "
        "from jupyter_trainer.api import runs; print(runs.__name__)",
        "jupyter_trainer.api.runs",
    ),
    "the CLI's api": (
        "from jupyter_trainer.frontends import cli; print(cli.api.submit.__name__)",
        "submit",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_name_is_the_same_whatever_was_imported_first(case):
    code, expected = CASES[case]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
