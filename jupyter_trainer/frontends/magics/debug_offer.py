"""pdb in the cell that waits for a run, for a rank that waits in a debugger (``--debug``,
``jt.breakpoint``).

The cell that waits for its run keeps the kernel busy, so ``%train debug RUN`` typed in
another cell would only queue behind it until the rank gave up waiting. Instead the waiting
cell itself offers each rank that starts to wait, through the kernel's input box (the one
``input()`` and IPython's own debugger use), and runs pdb there for whoever says yes. Where
nobody can answer (papermill, nbconvert) nothing is asked: the cell only waits.
"""

from __future__ import annotations

from typing import Any

from ...api import runs as api
from ...api.debug import terminal
from ...core.errors import TrainerError
from ..views.health import debugging_of
from ..widgets.mode import takes_input

POLL_S = 1.0  # how often the waiting cell looks for a rank that waits in a debugger
NO = ("n", "no")


def wait_offering_debugger(run: api.Run) -> None:
    """Wait for ``run`` to end; meanwhile, where a person can answer, offer pdb here on each
    rank that starts to wait in a debugger, once each time it stops."""
    if not takes_input():
        run.wait(raise_on_failure=False)
        return
    offered: set[tuple[Any, Any]] = set()
    while True:
        try:
            run.wait(POLL_S, raise_on_failure=False)
            return
        except TimeoutError:
            pass
        for entry in debugging_of(run.state):
            key = (entry["rank"], entry["since"])
            if key not in offered and not entry["attached"]:
                offered.add(key)
                offer(run, entry)


def offer(run: api.Run, entry: dict[str, Any]) -> None:
    """Ask whether to debug the rank of ``entry`` here; if so, pdb in this cell until it
    ends (``q``, ``c``) or the person's input does."""
    rank = entry["rank"]
    print(f"DEBUGGING: {entry.get('where') or f'rank {rank}'}", flush=True)
    answer = input(
        f"Debug rank {rank} here? Enter: pdb in this cell · n: leave it waiting for "
        f"`jupyter-trainer debug {run.id} --rank {rank}` in a terminal "
    )
    if answer.strip().lower() in NO:
        print(
            f"rank {rank} waits; attach in a terminal with `jupyter-trainer debug {run.id} "
            f"--rank {rank}` (this cell goes on waiting for the run)",
            flush=True,
        )
        return
    try:
        with run.debug(rank=rank) as session:
            print(f"[attached to {session.where}]", flush=True)
            terminal(session)
    except TrainerError as exc:  # it stopped waiting meanwhile, or cannot be reached
        print(f"cannot debug rank {rank}: {exc}", flush=True)
