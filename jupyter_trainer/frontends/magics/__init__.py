"""IPython magics. Each only parses its line, calls the Python API and displays."""

from __future__ import annotations

from typing import Any


def register(ipython: Any) -> None:
    from .environment import EnvironmentMagics
    from .train import TrainMagics

    ipython.register_magics(TrainMagics)
    ipython.register_magics(EnvironmentMagics)
