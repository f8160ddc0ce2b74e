"""A run's processes on this node: every process with its ``JT_RUN_ID`` (``procs.py``), and
a hot run's pool-forked ranks, which keep the pool's environment (their record, read by the
pool's own package ``_jt_node_pool`` from the run folder)."""

import os
import sys

from .. import procs


def run_pids(run_id, run_dir=None):
    """With ``JT_RUN_ID``, and a hot run's pool-forked ranks (their record, read by ``pool/``)."""
    found = procs.pids_with_env("JT_RUN_ID", run_id)
    if run_dir and os.path.isfile(os.path.join(run_dir, "pool-ranks.json")):
        sys.path[:0] = [p for p in [os.path.join(run_dir, "pool")] if p not in sys.path]
        found += __import__("_jt_node_pool.hotstart.records").hotstart.records.recorded_pids(
            run_dir
        )
    return sorted(set(found))


def leftovers(run_id, run_dir=None):
    """The run's processes still alive here, one line each (pid and command line)."""
    return [procs.describe(p) for p in run_pids(run_id, run_dir)]


def killpg(pgid, ticks, sig):
    """Signal the launcher's group, if its leader is still the process we started."""
    if pgid and procs.is_alive(pgid, ticks):
        procs.signal_group(pgid, sig)
