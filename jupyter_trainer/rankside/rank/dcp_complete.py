"""Which sharded checkpoints (``jt.checkpoint.save``) are complete, read from their folders
alone: a step folder is complete once its ``.metadata`` exists and a ``done.<r>`` for every
rank ``r`` of the world that saved it. The rank side loads the newest one; the supervisor
reads the step a preempted attempt left. Standard library only, no import of the runtime.
"""

from __future__ import annotations

import json
import os
import re

FOLDER = "dcp"  # under the run's checkpoints/
STEP = re.compile(r"step-(\d+)")
METADATA = ".metadata"  # what DCP's FileSystemWriter writes last, on its coordinator rank
DONE = "done.{rank}"


def saved_world(folder: str) -> int | None:
    """The world size whose every rank finished this step folder, or None when it is not
    complete (no metadata, a rank's done file missing, or done files that disagree)."""
    if not os.path.isfile(os.path.join(folder, METADATA)):
        return None
    try:
        with open(os.path.join(folder, DONE.format(rank=0)), encoding="utf-8") as fh:
            world = int(json.loads(fh.read())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for rank in range(1, world):
        try:
            with open(os.path.join(folder, DONE.format(rank=rank)), encoding="utf-8") as fh:
                if int(json.loads(fh.read())["world_size"]) != world:
                    return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return world


def complete(base: str) -> list[tuple[int, str]]:
    """The complete step folders under ``base``, oldest step first."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = []
    for name in names:
        match = STEP.fullmatch(name)
        path = os.path.join(base, name)
        if match and not os.path.islink(path) and saved_world(path) is not None:
            found.append((int(match.group(1)), path))
    return sorted(found)


def newest_in(run_dir: str) -> tuple[int, str] | None:
    """The newest complete checkpoint in a run's folder (``checkpoints/dcp``), or None."""
    found = complete(os.path.join(run_dir, "checkpoints", FOLDER))
    return found[-1] if found else None
