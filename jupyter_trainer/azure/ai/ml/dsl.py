"""``azure.ai.ml.dsl``: pipelines are refused by name (``@dsl.pipeline`` raises when the
decorator is applied), with what to do instead."""

from __future__ import annotations

from typing import Any

from .exceptions import refuse
from .refused import PIPELINE


def pipeline(*args: Any, **kwargs: Any) -> Any:
    raise refuse("azure.ai.ml.dsl.pipeline", PIPELINE)
