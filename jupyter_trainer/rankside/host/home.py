"""Where the run store lives: ``$JUPYTER_TRAINER_HOME``, else ``~/.jupyter_trainer``."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "JUPYTER_TRAINER_HOME"


def default_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".jupyter_trainer").expanduser()
