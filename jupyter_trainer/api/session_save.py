"""``Session.save``: the cells a live session ran well and the values pushed to it, in
order, written as a run of their own that replays them (``session_loop.replay``) on the
same ranks, target and environment, so ``rerun`` repeats the session anywhere."""

from __future__ import annotations

import json
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.redact import holds_secret, secret_name
from ..core.spec import RunSpec
from ..store.sessions import SessionFiles
from .runs import Run, submit

SCRIPT = "_jt_session.py"  # a session's entry, and a saved one's: the package's in a stack
# The entry of a session's run and of a saved one: the cell loop, which --replay=DIR turns
# into a replay of DIR's requests.
SCRIPT_TEXT = "from jupyter_trainer.rankside.rank import session_loop\n\nsession_loop.main()\n"
# The entry of a session on this machine, whose ranks' processes are held (--hold) so that
# one can die alone (rankside/rank/session_holder.py, which nodes are not sent).
HELD_SCRIPT_TEXT = (
    "from jupyter_trainer.rankside.rank import session_holder\n\nsession_holder.main()\n"
)
KEPT = ("run", "push")  # pulls only read, and are left out


def placement(spec: RunSpec) -> dict[str, Any]:
    """Where and how ``spec``'s ranks ran, as ``submit`` and ``start_session`` take it."""
    launch = spec.launch
    return {
        "target": spec.target.name,
        "nodes": launch.nodes,
        "procs": launch.procs,
        "launcher": launch.launcher,
        "backend": launch.backend,
        "env": spec.env.name,
    }


def secret_values(folder: Path, request: dict[str, Any]) -> list[str]:
    """The names of what request ``request`` (its files in ``folder``) sent the ranks that
    is a secret, by its name or its shape: parameters, carried objects, pushed values."""
    params = request.get("params") or {}
    found = [name for name, value in params.items() if holds_secret(value, name)]
    for pickled in ("carried.pkl", "values.pkl"):
        try:
            names = pickle.loads((folder / pickled).read_bytes())
        except FileNotFoundError:
            continue
        found += [name for name in names if secret_name(name)]
    return found


def save_session(
    session: Run, files: SessionFiles, name: str | None = None, *, wait: bool = False
) -> Run:
    """Start the run that replays the session whose run is ``session`` and whose folder is
    ``files`` (see the module's docstring)."""
    world = session.spec.launch.world_size
    folder = Path(tempfile.mkdtemp(prefix="jt-session-save-"))
    try:
        requests = folder / "cells" / "requests"
        requests.mkdir(parents=True)
        kept, secrets = 0, []
        for n in range(1, files.count() + 1):
            request = files.request(n)
            if request is None or request.get("op") not in KEPT:
                continue
            results = [files.result(n, r) for r in range(world)]
            if not all(res is not None and res.get("ok") for res in results):
                continue  # a cell that failed or was interrupted is not replayed
            secrets += secret_values(files.requests / str(n), request)
            kept += 1
            shutil.copytree(files.requests / str(n), requests / str(kept))
            request.pop("client", None)
            (requests / f"{kept}.json").write_text(json.dumps(request))
        if secrets:
            raise SpecError(
                f"session {session.name!r} is not saved: its cells read secrets "
                f"({', '.join(sorted(set(secrets)))}), and a saved run's snapshot keeps what the "
                "cells read for anyone who can read the run; let the ranks read them from "
                "the environment (an %environment's variables) instead"
            )
        if not kept:
            raise SpecError(
                f"session {session.name!r} has run no cell that ended well on every rank: "
                "there is nothing to save"
            )
        script = folder / SCRIPT
        script.write_text(SCRIPT_TEXT)
        spec = session.spec
        run = submit(
            script=str(script),
            args=["--replay=cells"],
            source=str(folder),
            name=name or f"{session.name}-saved",
            **placement(spec),
            home=session.store.home,
            origin={**spec.origin, "session": session.id},
            wait=wait,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert isinstance(run, Run)
    return run
