"""Restarts, stalled ranks and NaN/inf as the views show them, from real run records.

Each test makes a run in a temporary store and writes its state as the supervisor does
(``Store.write_state``), with this test process standing in as its live supervisor; the
feed's payloads, the text monitor's lines and the REST list read it back.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import time

import pytest
from support.browser_views import STALL_STACK as STACK
from support.browser_views import write_state
from support.server_rest import get_json, jp_server_config  # noqa: F401  (the server's configuration)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.spec import CodeSpec, LaunchSpec, RunSpec, WatchSpec
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.frontends.views.health import STACK_CHARS
from jupyter_trainer.frontends.views.text import TextMonitor
from jupyter_trainer.rankside.host import procs

pytest_plugins = ["pytest_jupyter.jupyter_server"]

WAITING_STACK = """Thread 4243 (active): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2501)
    train_step (cell.py:14)
"""


class Record:
    """A run's records: its spec (two restarts allowed, stalls after 30 s, NaN in loss
    fails it) and the state the test writes through the store, as the supervisor would."""

    def __init__(self, store) -> None:
        self.store = store
        spec = RunSpec(
            name="health",
            code=CodeSpec(entry="_jt/cell.py", hash="sha256:0"),
            launch=LaunchSpec(procs=2, max_restarts=2),
            watch=WatchSpec(stall_timeout=30, stop_on_nan=("loss",)),
        )
        snapshot = store.staging_dir()
        snapshot.mkdir()
        (snapshot / "cell.py").write_text("print(1)")
        self.run_id = store.create(spec, snapshot)
        self.run = api.Run(self.run_id, store)
        self.started = time.time() - 120
        me = os.getpid()
        self.write(
            status="running",
            stages={"running": {"start": self.started}},
            supervisor={
                "pid": me,
                "host": socket.gethostname(),
                "start_ticks": procs.start_ticks(me),
            },
        )

    @property
    def state(self) -> dict:
        return self.store.read_state(self.run_id)

    def write(self, **fields) -> None:
        write_state(self.run, **fields)

    def end(self, status: str = "completed", **fields) -> None:
        self.write(status=status, ended=time.time(), **fields)


@pytest.fixture
def record(store):
    rec = Record(store)
    yield rec
    if rec.state["status"] == "running":  # the supervisor named in it is this test
        rec.end()


def two_attempts(rec: Record) -> list[dict]:
    return [
        {
            "attempt": 0,
            "start": rec.started,
            "end": rec.started + 42,
            "failed_rank": 1,
            "error": "RuntimeError: CUDA error: an illegal memory access",
        },
        {"attempt": 1, "start": rec.started + 45, "end": None, "failed_rank": None, "error": None},
    ]


def stalled(since: float, **extra) -> list[dict]:
    return [
        {
            "rank": 0,
            "seconds": 5.0,
            "since": since + 1,
            "last_step": 4,
            "host": "node-a",
            "stack": WAITING_STACK,
            "waiting": True,
        },
        {
            "rank": 1,
            "seconds": 5.0,
            "since": since,
            "last_step": 4,
            "host": "node-b",
            "stack": STACK,
            "waiting": False,
            **extra,
        },
    ]


def payload(rec: Record) -> dict:
    feed = RunFeed(rec.run)
    feed.poll()
    out = feed.state_payload()
    json.dumps(out, allow_nan=False)
    return out


def test_the_state_payload_carries_attempts_stalls_and_non_finite_values(record):
    since = time.time() - 42
    record.write(
        attempts=two_attempts(record),
        stalled=stalled(since),
        non_finite={
            "loss": {"rank": 0, "step": 15, "value": "nan", "t": since + 10},
            "grad_norm": {"rank": 1, "step": 14, "value": "inf", "t": since},
        },
    )
    out = payload(record)
    assert (out["max_restarts"], out["stall_timeout"], out["on_stall"], out["stop_on_nan"]) == (
        2,
        30.0,
        "warn",
        ["loss"],
    )
    assert [(a["attempt"], a["failed_rank"]) for a in out["attempts"]] == [(0, 1), (1, None)]
    # the rank that hangs comes before the one that waits for it in a collective
    assert [(s["rank"], s["waiting"]) for s in out["stalled"]] == [(1, False), (0, True)]
    culprit = out["stalled"][0]
    assert 42 <= culprit["seconds"] < 60, "seconds are counted to now, not as written"
    assert culprit["stack"] == STACK and culprit["last_step"] == 4 and culprit["host"] == "node-b"
    assert [(f["metric"], f["step"], f["rank"], f["value"]) for f in out["non_finite"]] == [
        ("grad_norm", 14, 1, "inf"),
        ("loss", 15, 0, "nan"),
    ]
    assert "stacks" not in out

    time.sleep(1.1)
    assert payload(record)["stalled"][0]["seconds"] >= culprit["seconds"] + 1

    record.write(stalled=None)  # progress resumed: the supervisor takes the entry away
    assert payload(record)["stalled"] == []


def test_an_ended_run_keeps_its_stall_time_and_long_stacks_are_cut(record):
    since = time.time() - 300
    huge = STACK + "".join(f"    frame_{i} (deep.py:{i})\n" for i in range(5000))
    record.end(
        "canceled",
        reason="rank 1 stalled for 5:00 (--on-stall cancel)",
        stalled=stalled(since, stack=huge),
        stacks={"1": huge, "0": WAITING_STACK},
    )
    record.write(ended=since + 90)
    out = payload(record)
    assert out["stalled"][0]["seconds"] == pytest.approx(90)
    cut = out["stalled"][0]["stack"]
    assert len(cut) < STACK_CHARS + 200 and cut.startswith(STACK)
    assert re.search(r"… [\d,]+ more characters", cut)
    assert list(out["stacks"]) == ["0", "1"] and out["stacks"]["0"] == WAITING_STACK


def test_a_run_that_records_none_of_them_shows_none(store):
    run = api.Run(Record(store).run_id, store)
    run.store.write_state(
        run.id, {**run.store.read_state(run.id), "status": "completed", "ended": time.time()}
    )
    feed = RunFeed(run)
    feed.poll()
    out = feed.state_payload()
    assert (out["attempts"], out["stalled"], out["non_finite"]) == ([], [], [])
    assert "attempt" not in feed.text()


def follow_once(monitor: TextMonitor, out: io.StringIO) -> str:
    start = out.tell()
    monitor.follow(timeout=0)
    out.seek(start)
    text = out.read()
    out.seek(0, io.SEEK_END)
    return text


def test_the_text_monitor_says_each_restart_stall_and_nan_once(record):
    out = io.StringIO()
    record.write(attempts=two_attempts(record)[:1])
    monitor = TextMonitor(record.run, out=out, interval=0)
    assert re.search(r"running \d+:\d\d \| attempt 1/3\b", follow_once(monitor, out))

    record.write(attempts=two_attempts(record))
    text = follow_once(monitor, out)
    assert (
        "restarting every rank after rank 1 failed: RuntimeError: CUDA error: an illegal "
        "memory access (attempt 2/3)"
    ) in text
    assert "| attempt 2/3" in text
    assert "restarting" not in follow_once(monitor, out)

    since = time.time() - 42
    record.write(stalled=stalled(since))
    text = follow_once(monitor, out)
    lines = text.splitlines()
    warning = next(i for i, line in enumerate(lines) if "rank 1 stalled" in line)
    assert re.match(
        r"WARNING: rank 1 stalled for 4\d s after step 4 on node-b \(no progress "
        r"since \d\d:\d\d:\d\d\)$",
        lines[warning],
    ), lines[warning]
    assert lines[warning + 1 : warning + 3] == [
        '    Thread 4242 (active): "MainThread"',
        "        wait_for_batch (loader.py:88)",
    ]
    assert "Process 4242" not in text  # the dump's header is not where the rank is
    assert re.search(
        r"rank 0 stalled for 4\d s after step 4 on node-a .*: it waits in a "
        r"collective for a peer",
        text,
    )
    assert re.search(r"\| stalled: rank 1 4\d s, rank 0 4\d s", text), text
    record.write(stalled=stalled(since, seconds=60.0))  # rewritten, the same stall
    assert "WARNING" not in follow_once(monitor, out)

    record.write(non_finite={"loss": {"rank": 0, "step": 15, "value": "nan", "t": time.time()}})
    text = follow_once(monitor, out)
    assert "loss became nan at step 15 on rank 0 (--stop-on-nan fails the run)" in text
    assert "became" not in follow_once(monitor, out)

    record.write(stalled=None)
    text = follow_once(monitor, out)
    assert re.search(r"rank 1 makes progress again after 4\d s", text)
    assert re.search(r"rank 0 makes progress again", text)

    attempts = two_attempts(record)
    attempts[1].update(end=time.time(), failed_rank=0, error="loss became nan at step 15")
    record.end(
        "failed", failed_rank=0, error="loss became nan at step 15 on rank 0", attempts=attempts
    )
    follow_once(monitor, out)
    summary = monitor.summary()
    assert "attempts: 2 of 3 allowed" in summary
    assert re.search(
        r"  attempt 1: started \d\d:\d\d:\d\d, ran 0:42, rank 1 failed: "
        r"RuntimeError: CUDA error",
        summary,
    ), summary
    assert re.search(
        r"  attempt 2: started \d\d:\d\d:\d\d, ran 1:\d\d, rank 0 failed: loss "
        r"became nan",
        summary,
    ), summary
    assert "non-finite values: loss became nan at step 15 on rank 0" in summary


def test_the_summary_shows_the_stacks_of_a_run_ended_for_a_stall(record):
    record.end(
        "canceled",
        reason="rank 1 stalled for 0:31 (--on-stall cancel)",
        stacks={"1": STACK, "0": WAITING_STACK},
    )
    monitor = TextMonitor(record.run, out=io.StringIO())
    monitor.follow(timeout=0)
    summary = monitor.summary()
    assert "canceled: rank 1 stalled for 0:31" in summary
    first = summary.index("stack of rank 0 when the run was ended for a stall:")
    second = summary.index("stack of rank 1 when the run was ended for a stall:")
    assert first < second and "    wait_for_batch (loader.py:88)" in summary[second:]


async def test_the_runs_list_names_stalled_ranks_and_the_attempt(jp_fetch, record):
    since = time.time() - 42
    record.write(attempts=two_attempts(record), stalled=stalled(since))
    row = (await get_json(jp_fetch, "runs"))["runs"][0]
    assert row["id"] == record.run_id
    assert (row["attempt"], row["max_restarts"]) == (1, 2)
    assert [(s["rank"], s["last_step"], s["waiting"]) for s in row["stalled"]] == [
        (1, 4, False),
        (0, 4, True),
    ]
    assert 42 <= row["stalled"][0]["seconds"] < 60 and "stack" not in row["stalled"][0]
    record.end()
    row = (await get_json(jp_fetch, "runs"))["runs"][0]
    assert row["stalled"] == [] and row["attempt"] == 1


def test_a_rank_in_the_debugger_takes_the_rate_and_eta_away_at_once(record):
    """Progress came a moment ago, so the rate stands; once a rank waits in the debugger
    there is no rate and no ETA, only how long no progress came, in the feed and the line."""
    now = time.time()
    events = record.run.path / "events"
    events.mkdir(exist_ok=True)
    (events / "rank-0.jsonl").write_text(
        "".join(
            json.dumps({"kind": "progress", "t": now - 5 + i / 2, "done": i + 1, "total": 100})
            + "\n"
            for i in range(10)
        )
    )
    feed = RunFeed(record.run)
    feed.poll()
    before = feed.progress_payload()
    assert before["rate"] == pytest.approx(2.0, rel=0.1) and before["eta"] == pytest.approx(
        45, rel=0.1
    )
    assert before["stalled"] is None
    record.write(debugging=[{"rank": 0, "host": "node-a", "where": "cell.py:3", "since": now}])
    feed.poll()
    held = feed.progress_payload()
    assert (held["done"], held["rate"], held["eta"]) == (10, None, None)
    assert 0 <= held["stalled"] < 5
    assert re.search(r"step 10/100 \(10%\) stalled \d s", feed.text()), feed.text()
