"""The commands of runs: ``runs`` (the list), ``show``, ``cancel`` and ``stack`` RUN."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from typing import TextIO

from ...api import runs as api
from ...store import ACTIVE, STATUSES, Store
from ...store.listing import list_runs
from ...store.liveness import stale_words
from ...store.owners import Identity
from ..views.health import stalled_of
from ..views.rate import progress_figures
from ..views.text import frames_text, runs_table, summary_text
from .parser import Subparsers, at_least, handles


def define_runs(sub: Subparsers, name: str) -> None:
    runs = sub.add_parser(name, help="list runs, newest first")
    runs.add_argument("--status", choices=STATUSES)
    runs.add_argument("--name", help="only runs whose name contains this")
    who = runs.add_mutually_exclusive_group()
    who.add_argument("--mine", action="store_true", help="only the runs you started")
    who.add_argument(
        "--everyone", action="store_true", help="everyone's runs in the workspace (the default)"
    )
    runs.add_argument("--limit", type=int, default=20, help="at most this many (at least 1)")
    runs.add_argument("--offset", type=int, default=0, help="skip this many of the newest")
    runs.add_argument("--json", action="store_true", help="print JSON rows")
    handles(runs, cmd_runs)


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    store = Store()
    rows = list_runs(
        store,
        status=args.status,
        name=args.name,
        owner=Identity.current() if args.mine else None,
        limit=args.limit,
        offset=args.offset,
    )
    if args.json:
        print(json.dumps(rows, indent=1), file=out)
    elif rows:
        print(runs_table(rows), file=out)
        for row in rows:  # a run whose state is damaged is listed as its index row has it
            if row.get("damaged"):
                print(row["damaged"], file=out)
            elif row.get("stale"):
                print(f"run {row['id']} {stale_words(row['id'], row['stale'])}", file=out)
    else:
        print(no_runs(store, args), file=out)
    return 0


def no_runs(store: Store, args: argparse.Namespace) -> str:
    """What an empty list means: an empty store, or filters that leave nothing out of it."""
    # the index's count: a look at every run folder takes seconds in a store of 100,000
    total = store.index.count() if store.index.exists() else len(store.run_ids_on_disk())
    filters = [
        f"--status {args.status}" if args.status else "",
        f"--name {shlex.quote(args.name)}" if args.name else "",
        f"--offset {args.offset}" if args.offset else "",
        "--mine" if args.mine else "",
    ]
    filters = [f for f in filters if f]
    if not total or not filters:
        return "no runs yet"
    which = "that filter" if len(filters) == 1 else "those filters"
    return (
        f"no runs match {' '.join(filters)} (the store {store.home} holds {total} "
        f"run{'s' * (total != 1)}; leave out {which} to list them)"
    )


def define_show(sub: Subparsers, name: str) -> None:
    show = sub.add_parser(name, help="a run's spec, state and summary")
    show.add_argument("run")
    show.add_argument("--json", action="store_true", help="print spec and state as JSON")
    show.add_argument(
        "--locals",
        action="store_true",
        help="the failing rank's frames with their local variables",
    )
    show.add_argument("--rank", type=int, default=None, help="with --locals: this rank's frames")
    handles(show, cmd_show)


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    state = run.state  # a damaged record says so here, naming its file
    if args.locals:
        return print_frames(run, args.rank, out)
    if args.json:
        stalled = [
            {"rank": e["rank"], "seconds": round(e["seconds"], 1), "last_step": e.get("last_step")}
            for e in stalled_of(state, time.time())
        ]
        follower = run.follower()
        follower.poll()
        figures = progress_figures(follower)  # the widget's: done, total, rate, ETA, stalled
        print(
            json.dumps(
                {
                    "id": run.id,
                    "spec": run.spec.to_dict(),
                    "state": state,
                    **({"stalled": stalled} if stalled else {}),
                    **({"progress": figures.payload()} if figures else {}),
                },
                indent=1,
            ),
            file=out,
        )
        return 0
    follower = run.follower()
    follower.poll()
    print(summary_text(follower, run.spec, run.outputs), file=out)
    if state.get("stale"):
        print(f"run {run.id} {stale_words(run.id, state['stale'])}", file=out)
    return 0


def define_cancel(sub: Subparsers, name: str) -> None:
    cancel = sub.add_parser(name, help="stop every process of a run")
    cancel.add_argument("run")
    cancel.add_argument(
        "--timeout",
        type=at_least(0),
        default=30,
        metavar="SECONDS",
        help="how long to wait for the run to end (default: 30; 0: ask and return)",
    )
    handles(cancel, cmd_cancel)


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    status = run.cancel(wait=bool(args.timeout), timeout=args.timeout)
    if status == "lost":
        print(
            f"run {run.id} lost: its supervisor was gone, and what was left of its processes "
            "was ended; `jupyter-trainer doctor --fix` records it as lost",
            file=out,
        )
    elif status in ACTIVE and not args.timeout:
        print(f"run {run.id} {status}: its cancel is asked for", file=out)
    elif status in ACTIVE:
        print(
            f"run {run.id} is still {status}: the cancel is asked for, and its supervisor has "
            f"not acted on it within {args.timeout} s; it will when it next looks "
            f"(`jupyter-trainer show {run.id}` tells when it has; `jupyter-trainer doctor` "
            "finds a supervisor that is gone)",
            file=out,
        )
        return 1
    else:
        print(f"run {run.id} {status}", file=out)
    return 0


def define_stack(sub: Subparsers, name: str) -> None:
    stack = sub.add_parser(name, help="the Python stack of each rank of a running run")
    stack.add_argument("run")
    stack.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")
    handles(stack, cmd_stack)


def cmd_stack(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    if args.rank is not None:
        run.check_rank(args.rank)
    records = run.store.rank_records(run.id)
    for rank, text in sorted(run.stacks(rank=args.rank).items()):
        record = records.get(rank, {})
        print(
            f"rank {rank} ({record.get('host', 'host unknown')}, pid "
            f"{record.get('pid', 'unknown')}):",
            file=out,
        )
        print(text.rstrip("\n"), file=out)
    return 0


def print_frames(run: api.Run, rank: int | None, out: TextIO) -> int:
    """``show RUN --locals``: each frame of the failure, innermost last, then its variables."""
    frames = run.frames(rank)
    if not frames:
        who = "the run" if rank is None else f"rank {rank}"
        print(
            f"no frames recorded: {who} did not raise an exception in its code "
            f"(status {run.status}); `jupyter-trainer logs {run.id}` shows what it printed",
            file=out,
        )
        return 1
    print(frames_text(frames), file=out)
    return 0
