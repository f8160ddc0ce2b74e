"""One call per node, on every node at once, and one message naming every node that failed.

The ssh target (and the ray target, which runs the ssh target's node lifecycle) asks each
step of all its nodes together: a pre-flight, a staging, a start or a stop costs the time
of the slowest node, not the sum of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ...core.errors import TargetError, TrainerError

T = TypeVar("T")
Item = TypeVar("Item")


def parallel(fn: Callable[[Item], T], items: Sequence[Item]) -> list[T | TrainerError]:
    """``fn`` on every item at once (one ssh call per node); errors are returned, not raised,
    so one message can name every node that failed."""

    def call(item: Item) -> T | TrainerError:
        try:
            return fn(item)
        except TrainerError as exc:
            return exc

    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(call, items))


def raise_any(results: Sequence[T | TrainerError], what: str) -> list[T]:
    """``parallel``'s ``results``, once none of them is an error; else one TargetError
    naming every failure among them."""
    errors = [str(r) for r in results if isinstance(r, TrainerError)]
    if errors:
        raise TargetError(
            f"{what}; nothing was launched:\n  " + "\n  ".join(errors)
            if len(errors) > 1
            else f"{errors[0]}; nothing was launched"
        )
    return [r for r in results if not isinstance(r, TrainerError)]
