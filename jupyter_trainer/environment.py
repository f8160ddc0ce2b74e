"""Which Python runs the ranks.

A run without ``--env`` uses the kernel's own interpreter as it is (recorded in the spec
when the run is submitted). Named environments (``%environment``) resolve to a locked,
cached virtual environment.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from .errors import EnvError
from .spec import EnvSpec

if TYPE_CHECKING:
    from .targets import Target


def current() -> EnvSpec:
    """The kernel's own environment: its interpreter, packages and all."""
    return EnvSpec(name=None, python=sys.executable)


def resolve(name: str | None) -> EnvSpec:
    """The environment a new run asks for, checked before anything is created."""
    if name is None:
        return current()
    raise EnvError(
        f"unknown environment {name!r}: no environment of that name is defined; leave "
        "--env out to run with the notebook kernel's own Python"
    )


def realize(env: EnvSpec, target: "Target") -> str:
    """The interpreter path the target's ranks run, ready to use."""
    python = env.python or sys.executable
    if target.kind == "local" and not os.access(python, os.X_OK):
        raise EnvError(f"the run's interpreter {python} is missing or not executable on this machine")
    return python
