"""The end of a run on this node: ``stop`` (its processes, gently then not) and ``discard``
(its working directories)."""

import os
import signal

from ..host import procs
from .processes import killpg, marked_pids, run_pids
from .snapshot import make_writable


def stop(args):
    """SIGTERM to the launcher's group and every process of the run, SIGKILL after grace."""
    run_id, run_dir = args["run_id"], args.get("run_dir")
    pgid, ticks = args.get("pgid"), args.get("start_ticks")
    found = run_pids(run_id, run_dir)
    group = procs.pids_in_group(pgid) if pgid and procs.is_alive(pgid, ticks) else []
    escaped = set(found) - marked_pids(run_id, run_dir) - set(group)
    stragglers = [procs.describe(p) for p in sorted(escaped)]  # outside group and environment
    killpg(pgid, ticks, signal.SIGTERM)
    procs.signal_pids(found, signal.SIGTERM)
    signalled = set(found)

    def alive():
        now = run_pids(run_id, run_dir)
        procs.signal_pids(sorted(set(now) - signalled), signal.SIGTERM)  # orphaned meanwhile
        signalled.update(now)
        return now

    left = procs.wait_gone(alive, float(args.get("grace", 3.0)))
    killed = [procs.describe(p) for p in left]
    if left or procs.is_alive(pgid, ticks):
        killpg(pgid, ticks, signal.SIGKILL)
        procs.signal_pids(left, signal.SIGKILL)
        procs.wait_gone(lambda: run_pids(run_id, run_dir), 5)
    return {"sigterm": len(found), "sigkilled": killed, "stragglers": stragglers}


def discard(run_dir):
    """Remove the run's working directories here (the rest stays); returns what was removed."""
    import shutil

    path = os.path.join(run_dir, "work")
    gone = "%s.discarded-%s" % (path, os.urandom(6).hex())
    try:  # nodes that share a filesystem share the folder: one of them takes it
        os.rename(path, gone)
    except FileNotFoundError:
        return []
    shutil.rmtree(gone, onerror=make_writable)
    return [path]
