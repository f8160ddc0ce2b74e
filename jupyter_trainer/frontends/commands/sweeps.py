"""The sweep commands ``sweeps``, ``sweep show``, ``sweep resume`` and ``sweep cancel``, for
``jupyter-trainer`` and ``%train`` (``commands.COMMANDS`` holds them as ``sweep-show``...,
and ``sweep_words`` turns ``sweep show ID`` into those)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from ...api.sweeps import functions as api
from ..views.sweep_text import sweep_json, sweep_text

ACTIONS = ("show", "resume", "cancel")


def sweep_words(words: Sequence[str]) -> list[str]:
    """``["sweep", "show", ID, ...]`` as ``["sweep-show", ID, ...]``; other words unchanged."""
    words = list(words)
    if len(words) >= 2 and words[0] == "sweep" and words[1] in ACTIONS:
        return [f"sweep-{words[1]}", *words[2:]]
    return words


def _define_sweeps(sub: Any) -> None:
    sweeps = sub.add_parser("sweeps", help="list sweeps, newest first")
    sweeps.add_argument("--json", action="store_true", help="print JSON rows")


def cmd_sweeps(args: argparse.Namespace, out: TextIO) -> int:
    from ..views.sweep_text import sweeps_table

    found = api.sweeps()
    if args.json:
        rows = [
            {
                "id": s.id,
                "status": (state := s.state)["status"],
                "trials": len(state["trials"]),
                "trials_total": state.get("trials_total"),
                "best": state.get("best"),
                "created": state["created"],
            }
            for s in found
        ]
        print(json.dumps(rows, indent=1), file=out)
    else:
        print(sweeps_table(found), file=out)
    return 0


def _define_show(sub: Any) -> None:
    show = sub.add_parser("sweep-show", help="a sweep's trials (sweep show ID)")
    show.add_argument("sweep")
    show.add_argument(
        "--json",
        action="store_true",
        help="print the sweep's spec, status, best and every trial as JSON",
    )


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep)
    print(json.dumps(sweep_json(sweep), indent=1) if args.json else sweep_text(sweep), file=out)
    return 0


def _define_resume(sub: Any) -> None:
    sub.add_parser(
        "sweep-resume", help="start the driver of an interrupted sweep again (sweep resume ID)"
    ).add_argument("sweep")


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep).resume()
    print(f"sweep {sweep.id} {sweep.status}: {len(sweep.state['trials'])} trials kept", file=out)
    return 0


def _define_cancel(sub: Any) -> None:
    sub.add_parser(
        "sweep-cancel", help="cancel a sweep and its running trials (sweep cancel ID)"
    ).add_argument("sweep")


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep)
    sweep.cancel()
    print(f"sweep {sweep.id} {sweep.status}", file=out)
    return 0


SWEEP_COMMANDS = {
    "sweeps": (_define_sweeps, cmd_sweeps),
    "sweep-show": (_define_show, cmd_show),
    "sweep-resume": (_define_resume, cmd_resume),
    "sweep-cancel": (_define_cancel, cmd_cancel),
}
