"""``azure.ai.ml.automl``: AutoML is refused by name when a task is made, with what to do
instead."""

from __future__ import annotations

from typing import Any

from .refused import RefusedModule


def __getattr__(name: str) -> Any:
    return getattr(RefusedModule("azure.ai.ml.automl"), name)
