"""The analysis of Flight Recorder dumps, on dumps recorded from real Gloo runs
(``data/hangs/<case>/collectives``, saved by test_hangs.py with ``JT_KEEP_DUMPS=1``)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from jupyter_trainer.supervisor import collectives

DATA = Path(__file__).parent / "data" / "hangs"


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def analysed(case: str) -> dict:
    found = collectives.analyse(
        collectives.read_dumps(DATA / case), collectives.read_stacks(DATA / case)
    )
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("case", "verdict"),
    [
        (
            "skipped",
            "rank 1 is behind: it never entered all_reduce #5 (the others wait there since "
            "09:01:36); it is in <module>() at cell line 10",
        ),
        (
            "shapes",
            "rank 1 called all_reduce #2 with shape [8] where the others used [4]; "
            "it is in <module>() at cell line 8",
        ),
        (
            "broadcast",
            "rank 0 called broadcast #2 where the others called all_reduce #2 (they wait there "
            "since 09:02:00); it is in <module>() at cell line 8",
        ),
        (
            "loading",
            "rank 2 is behind: it never entered all_reduce #4 (the others wait there since "
            "09:02:12); it is in load_batch() at cell line 6",
        ),
        (
            "straggler",
            "rank 1 is a straggler: it enters each collective 200 ms late on average "
            "(over 12 collectives)",
        ),
    ],
)
def test_each_recorded_hang_gets_its_verdict(utc, case, verdict):
    assert analysed(case)["verdict"] == verdict


def test_the_fields_run_collectives_promises(utc):
    found = analysed("loading")
    assert (found["behind"], found["op"], found["seq"]) == ([2], "all_reduce", 4)
    assert {r: (e["op"], e["seq"], e["state"]) for r, e in found["ranks"].items()} == {
        0: ("all_reduce", 4, "waiting"),
        1: ("all_reduce", 4, "waiting"),
        2: ("all_reduce", 3, "completed"),
    }
    assert found["mismatches"] == [] and found["stragglers"] == []
    assert list(found["stacks"]) == [2] and "load_batch" in found["stacks"][2]["stack"]
    assert json.loads(json.dumps(found, default=str))["verdict"] == found["verdict"]


def test_no_dumps_no_analysis(tmp_path):
    assert collectives.read_dumps(tmp_path) == {}
    assert collectives.analyse({}) is None


def test_a_rank_without_a_dump_is_behind(utc):
    dumps = collectives.read_dumps(DATA / "loading")
    del dumps[2]
    found = collectives.analyse(dumps)
    assert found is not None and found["behind"] == [2]
    assert found["ranks"][2]["state"] == "no dump"
    assert found["verdict"] == (
        "rank 2 is behind: it left no dump; the others wait in all_reduce #4 "
        "(the others wait there since 09:02:12)"
    )


def test_a_call_that_is_the_others_next_one_is_a_skip(utc):
    """Rank 1's #3 has the others' #4 shape: it skipped the others' #3."""
    dumps = copy.deepcopy(collectives.read_dumps(DATA / "skipped"))
    for rank, dump in dumps.items():
        for entry in dump["trace"]["entries"]:
            seq = entry["collective_seq_id"]
            shifted = seq + 1 if rank == 1 and seq >= 3 else seq
            entry["input_sizes"] = [[shifted]]
    found = collectives.analyse(dumps)
    assert found is not None
    [first, *_] = found["mismatches"]
    assert (first["seq"], first["kind"], first["ranks"]) == (3, "skipped", [1])
    assert found["verdict"] == "rank 1 skipped all_reduce #3: its #3 is the others' #4 (all_reduce)"


def test_a_different_dtype_is_named(utc):
    dumps = copy.deepcopy(collectives.read_dumps(DATA / "loading"))
    dumps[1]["trace"]["entries"][-1]["input_dtypes"] = ["Double"]
    found = collectives.analyse(dumps)
    assert found is not None
    assert (
        found["verdict"]
        == "rank 1 called all_reduce #4 with dtype Double where the others used Float"
    )


def test_dump_and_analysis_of_64_ranks_is_quick():
    base = collectives.read_dumps(DATA / "straggler")[0]
    dumps = {}
    for rank in range(64):
        dump = copy.deepcopy(base)
        dump["rank"], dump["world_size"] = rank, 64
        dumps[rank] = dump
    began = time.perf_counter()
    found = collectives.analyse(dumps)
    assert found is not None and found["behind"] == []
    assert time.perf_counter() - began < 2.0
