"""A run's processes on this node: every process with its ``JT_RUN_ID`` (``procs.py``), and
a hot run's pool-forked ranks, which keep the pool's environment (their record, read by the
pool's own package ``_jt_node_pool`` from the run folder)."""

import json
import os
import sys

from ..host import procs
from ..host.atomic import write_atomic


def run_pids(run_id, run_dir=None):
    """With ``JT_RUN_ID``, a hot run's pool-forked ranks (their record, read by ``pool/``),
    and what its keepers hold (``kept``)."""
    return sorted(marked_pids(run_id, run_dir) | kept(run_dir))


def marked_pids(run_id, run_dir=None):
    """With ``JT_RUN_ID``, and a hot run's pool-forked ranks."""
    found = procs.pids_with_env("JT_RUN_ID", run_id)
    if run_dir and os.path.isfile(os.path.join(run_dir, "pool-ranks.json")):
        sys.path[:0] = [p for p in [os.path.join(run_dir, "pool")] if p not in sys.path]
        found += __import__("_jt_node_pool.hotstart.records").hotstart.records.recorded_pids(
            run_dir
        )
    return set(found)


def kept(run_dir):
    """The run's processes below its launchers' keepers on this node, those that left the
    run's session and environment (``setsid env -i ...``) included: while a keeper lives,
    every process below it (it is their subreaper, so orphans stay below it); after, the
    ones it wrote down as it ended (``node-N.orphans.json``), while they are the same."""
    if not run_dir or not os.path.isdir(run_dir):
        return set()
    table = procs.process_table()
    found = set()
    for name in os.listdir(run_dir):
        path = os.path.join(run_dir, name)
        if not _mine(path):  # only a record this user wrote names what it signals
            continue
        if name.startswith("node-") and name.endswith(".orphans.json"):
            for entry in _read_list(path):
                if table.get(entry.get("pid"), (0, None))[1] == entry.get("ticks"):
                    found.add(entry["pid"])
        elif name.startswith("node-") and name.endswith(".json"):
            ids = _read_dict(path)
            keeper = ids.get("keeper")
            if keeper in table and table[keeper][1] == ids.get("keeper_ticks"):
                found |= procs.descendants({keeper}, table)
    found.discard(os.getpid())
    return found


def record_orphans(run_dir, node, keeper):
    """Write down what is left below ``keeper`` (the calling process, whose launcher has
    ended) on this node, for ``kept`` to find once the keeper is gone."""
    table = procs.process_table()
    left = [{"pid": p, "ticks": table[p][1]} for p in sorted(procs.descendants({keeper}, table))]
    if left:
        write_atomic(os.path.join(run_dir, "node-%d.orphans.json" % node), json.dumps(left))


def _mine(path):
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def _read_dict(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_list(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def leftovers(run_id, run_dir=None):
    """The run's processes still alive here, one line each (pid and command line)."""
    return [procs.describe(p) for p in run_pids(run_id, run_dir)]


def killpg(pgid, ticks, sig):
    """Signal the launcher's group, if its leader is still the process we started."""
    if pgid and procs.is_alive(pgid, ticks):
        procs.signal_group(pgid, sig)
