"""The command line as a user runs it: ``python -m jupyter_trainer.frontends.cli`` in a child
process of this interpreter, its output captured as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "jupyter_trainer.frontends.cli"]


def cli(
    *args: str,
    home: Path | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Run ``jupyter-trainer ARGS``; ``home`` sets ``JUPYTER_TRAINER_HOME`` for this call only."""
    env = {**os.environ, "JUPYTER_TRAINER_HOME": str(home)} if home else None
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )
