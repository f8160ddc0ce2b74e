"""``%%train --check`` in a notebook front end: one output that says what is being checked
while the check runs, then becomes its summary line with the whole table folded under it
(an HTML ``<details>``), the problems in view; its ``text/plain`` is the brief text."""

from __future__ import annotations

import html
from typing import Any

from ..views.check_text import check_brief, check_html
from .widget import display_updatable, update_displays


class FoldedCheck:
    """Shows a check before a run in one updatable output (``commands.check.CheckShown``)."""

    def __init__(self) -> None:
        self.handle: Any = None

    def started(self, plan: str) -> None:
        self.handle = display_updatable(
            {"text/plain": plan, "text/html": f"<div>{html.escape(plan)}</div>"}
        )

    def ended(self, result: Any) -> None:
        bundle = {"text/plain": check_brief(result), "text/html": check_html(result)}
        if self.handle is None:
            display_updatable(bundle)
        else:
            update_displays([self.handle], bundle)
