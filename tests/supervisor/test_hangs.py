"""Why a run hangs, from every rank's Flight Recorder dump, with real torchrun and Gloo ranks:
the verdict names the rank behind, the collective and where the rank is in the cell."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import leftover, wait_for

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.views.feed import RunFeed

HEAD = """import time, torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
"""
CLOCK = r"\d\d:\d\d:\d\d"

# one rank skips one all_reduce: its last one is the others' next to last, so the others
# hang in the next one, and it is elsewhere (here: saving, line 10)
SKIPPED = (
    HEAD
    + """t = torch.ones(4)
for step in range(5):
    if not (jt.rank == 1 and step == 2):
        dist.all_reduce(t)
    jt.log(step=step)
if jt.rank == 1:
    time.sleep(600)
dist.all_reduce(t)
"""
)
SHAPES = (
    HEAD
    + """dist.all_reduce(torch.ones(2))
jt.log(step=0)
if jt.rank == 2:
    time.sleep(600)
dist.all_reduce(torch.ones(8 if jt.rank == 1 else 4))
"""
)
BROADCAST = (
    HEAD
    + """t = torch.ones(4)
dist.all_reduce(t)
jt.log(step=0)
if jt.rank == 0:
    dist.broadcast(t, src=0)
else:
    dist.all_reduce(t)
"""
)
LOADING = (
    HEAD
    + """def load_batch(step):
    if jt.rank == 2 and step == 3:
        time.sleep(600)
    return torch.ones(4)

for step in range(10):
    batch = load_batch(step)
    dist.all_reduce(batch)
    jt.log(step=step)
"""
)
STRAGGLER = (
    HEAD
    + """t = torch.ones(4)
for step in range(12):
    if jt.rank == 1:
        time.sleep(0.2)
    dist.all_reduce(t)
    jt.log(step=step)
dist.destroy_process_group()
"""
)
DATA = Path(__file__).parent / "data" / "hangs"


def hung_verdict(run: api.Run, stacks: bool = True) -> dict:
    """The analysis once every rank has dumped (and, with ``stacks``, the named rank's stack
    is saved); the run is canceled after."""
    try:
        return wait_for(
            lambda: (
                (found := run.collectives())
                and found["verdict"]
                and (found["stacks"] or not stacks)
                and found
            ),
            timeout=60,
            what="the ranks' dumps and the analysis",
        )
    finally:
        run.cancel()
        run.wait(timeout=60, raise_on_failure=False)


def keep(run: api.Run, name: str) -> None:
    """Save the run's dumps as test data for the analysis' unit tests (``JT_KEEP_DUMPS``)."""
    if os.environ.get("JT_KEEP_DUMPS"):
        target = DATA / name / "collectives"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(run.path / "collectives", target)


@pytest.mark.timeout(120)
def test_a_skipped_all_reduce_names_the_rank_behind(home):
    run = api.submit(SKIPPED, procs=3, stall_timeout=2, name="skipped")
    found = hung_verdict(run)
    keep(run, "skipped")
    assert re.fullmatch(
        rf"rank 1 is behind: it never entered all_reduce #5 \(the others wait there since "
        rf"{CLOCK}\); it is in <module>\(\) at cell line 10",
        found["verdict"],
    ), found["verdict"]
    assert (found["behind"], found["op"], found["seq"]) == ([1], "all_reduce", 5)
    assert found["ranks"][1] == {**found["ranks"][1], "op": "all_reduce", "seq": 4}
    assert "time.sleep" in found["stacks"][1]["stack"] or "<module>" in found["stacks"][1]["stack"]


@pytest.mark.timeout(120)
def test_different_shapes_in_one_all_reduce_are_named(home):
    run = api.submit(SHAPES, procs=3, stall_timeout=2, name="shapes")
    found = hung_verdict(run)
    keep(run, "shapes")
    assert re.fullmatch(
        r"rank 1 called all_reduce #2 with shape \[8\] where the others used \[4\]; "
        r"it is in <module>\(\) at cell line 8",
        found["verdict"],
    ), found["verdict"]
    [mismatch] = found["mismatches"]
    assert (mismatch["seq"], mismatch["kind"], mismatch["ranks"]) == (2, "shape", [1])
    assert found["behind"] == [2]


@pytest.mark.timeout(120)
def test_a_broadcast_among_all_reduces_is_named(home):
    run = api.submit(BROADCAST, procs=3, stall_timeout=2, name="broadcast")
    found = hung_verdict(run)
    keep(run, "broadcast")
    assert re.fullmatch(
        rf"rank 0 called broadcast #2 where the others called all_reduce #2 \(they wait "
        rf"there since {CLOCK}\); it is in <module>\(\) at cell line 8",
        found["verdict"],
    ), found["verdict"]
    assert {r: found["ranks"][r]["op"] for r in (0, 1, 2)} == {
        0: "broadcast",
        1: "all_reduce",
        2: "all_reduce",
    }


@pytest.mark.timeout(120)
def test_a_rank_asleep_in_data_loading_is_behind_with_its_stack(home):
    run = api.submit(LOADING, procs=3, stall_timeout=2, name="loading")
    found = hung_verdict(run)
    keep(run, "loading")
    assert re.fullmatch(
        rf"rank 2 is behind: it never entered all_reduce #4 \(the others wait there since "
        rf"{CLOCK}\); it is in load_batch\(\) at cell line 6",
        found["verdict"],
    ), found["verdict"]
    assert "load_batch" in found["stacks"][2]["stack"]
    shown_in_view = RunFeed(run).state_payload()["collectives"]  # the widget's and the panel's
    assert shown_in_view["verdict"] == found["verdict"] and shown_in_view["behind"] == [2]
    assert [found["ranks"][r]["state"] for r in (0, 1, 2)] == ["waiting", "waiting", "completed"]
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("jupyter-trainer")), "show", run.id, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr


@pytest.mark.timeout(120)
def test_a_rank_late_to_every_step_is_a_straggler(home):
    run = api.submit(STRAGGLER, procs=2, name="straggler")
    run.wait(timeout=90)
    keep(run, "straggler")
    found = run.collectives()
    assert found is not None and found["behind"] == []
    match = re.fullmatch(
        r"rank 1 is a straggler: it enters each collective (\d+) ms late on average "
        r"\(over 12 collectives\)",
        found["verdict"],
    )
    assert match, found["verdict"]
    assert 150 <= int(match.group(1)) <= 400
    [straggler] = found["stragglers"]
    assert straggler["rank"] == 1


def test_a_run_without_dumps_has_no_analysis(home):
    run = api.submit("print('alone')", name="alone")
    run.wait(timeout=60)
    assert run.collectives() is None
    assert not (run.path / "collectives").exists()
    assert json.loads((run.path / "spec.json").read_text())["launch"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        (
            LOADING,
            rf"rank 2 is behind: it never entered all_reduce #4 \(the others wait there since "
            rf"{CLOCK}\); it is in load_batch\(\) at cell line 6",
        ),
        (
            SHAPES,
            r"rank 1 called all_reduce #2 with shape \[8\] where the others used \[4\]; "
            r"it is in <module>\(\) at cell line 8",
        ),
    ],
    ids=["loading", "shapes"],
)
def test_the_ranks_on_two_ssh_hosts_dump_and_get_the_same_verdict(pair, home, code, verdict):
    run = api.submit(code, target="pair", nodes=2, procs=2, stall_timeout=3, name="ssh-hang")
    found = hung_verdict(run)
    assert re.fullmatch(verdict, found["verdict"]), found["verdict"]
    assert sorted(found["ranks"]) == [0, 1, 2, 3]  # each node's dumps came back
    assert all(e["state"] != "no dump" for e in found["ranks"].values()), found["ranks"]
    assert leftover(run.id) == []


@pytest.mark.timeout(120)
def test_hang_asks_every_rank_for_a_dump_and_prints_the_verdict(home):
    run = api.submit(LOADING, procs=3, stall_timeout=0, name="hang")  # no stall watch
    try:
        wait_for(
            lambda: (
                len(run.store.rank_records(run.id)) == 3
                and "load_batch" in run.stacks(2).get(2, "")
            ),
            timeout=60,
            what="rank 2 in load_batch",
        )
        shown = subprocess.run(
            [str(Path(sys.executable).with_name("jupyter-trainer")), "hang", run.id],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        first, *rest = shown.stdout.splitlines()
        assert re.fullmatch(
            rf"rank 2 is behind: it never entered all_reduce #4 \(the others wait there since "
            rf"{CLOCK}\); it is in load_batch\(\) at cell line 6",
            first,
        ), shown.stdout
        assert any(line.startswith("  rank 2: all_reduce #3, completed") for line in rest)
        assert "rank 2's stack:" in rest and any("load_batch" in line for line in rest)
        assert all(d.get("why", "").startswith("hang-") for d in _dumps(run).values())
    finally:
        run.cancel()
        run.wait(timeout=60, raise_on_failure=False)


def _dumps(run: api.Run) -> dict:
    from jupyter_trainer.supervisor.collectives import read_dumps

    return read_dumps(run.path)


@pytest.mark.timeout(120)
def test_the_recorder_can_be_turned_off(home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_FLIGHT_RECORDER", "0")
    run = api.submit(STRAGGLER, procs=2, name="recorder-off")
    run.wait(timeout=90)
    assert run.collectives() is None
    assert not (run.path / "collectives").exists()
