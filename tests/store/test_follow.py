"""Reading a run's events and logs incrementally, and reducing long series for display."""

from __future__ import annotations

import json
import math
import os
import random
import re
import time

import numpy as np
import pytest
from support.workloads import INTERLEAVED

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.diff import compare_runs
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.store.follow import (
    decode_lines,
    downsample,
    mean_across_ranks,
    minmax_indices,
)
from jupyter_trainer.store.log_tail import LogTail


@pytest.fixture
def finished_run(home):
    """A real (tiny) run, so the store layout is the real one; tests add files to it."""
    return api.submit("print('hi')", launcher="python", name="follow", wait=True)


def metric(step, t, **values):
    return json.dumps({"kind": "metric", "t": t, "step": step, "values": values}) + "\n"


def test_decode_lines_skips_what_does_not_parse():
    good = metric(1, 1.0, x=1) + metric(2, 2.0, x=2)
    assert [e["step"] for e in decode_lines(good.encode())] == [1, 2]
    torn = (metric(1, 1.0, x=1) + '{"kind": "met\n' + "\n" + metric(3, 3.0, x=3)).encode()
    assert [e["step"] for e in decode_lines(torn)] == [1, 3]
    assert decode_lines(b"") == []


def test_follower_reads_in_bounded_steps_and_matches_a_full_read(finished_run):
    run = finished_run
    events = run.path / "events"
    with open(events / "rank-7.jsonl", "w") as fh:
        for i in range(20_000):
            fh.write(metric(i, 100.0 + i, loss=1.0 / (i + 1), flag=True, name="x", big=i))
            if i % 100 == 0:
                fh.write(
                    json.dumps({"kind": "progress", "t": 100.0 + i, "done": i, "total": 20_000})
                    + "\n"
                )
        fh.write(
            json.dumps({"kind": "metric", "t": 1.0, "step": None, "values": {"loss": 5}}) + "\n"
        )
        fh.write('{"kind": "metric", "t": 2.0, "st')  # a line still being written
    full = run.follower()
    full.poll()
    stepped = run.follower()
    rounds = 0
    while True:
        stepped.poll(max_bytes=100_000)
        rounds += 1
        if not stepped.behind:
            break
    assert rounds > 5
    for follower in (full, stepped):
        loss = follower.series["loss"][7]
        assert len(loss) == 20_001 and loss.values[0] == 1.0 and loss.last == 5.0
        assert math.isnan(loss.steps[-1]) and loss.steps[-2] == 19_999.0
        assert "flag" not in follower.series and "name" not in follower.series  # bools, text
        assert follower.series["big"][7].values[-1] == 19_999.0  # ints become floats
        assert follower.progress[7].done == 19_900
    assert stepped.events_read == full.events_read == 20_000 + 200 + 1
    with open(events / "rank-7.jsonl", "a") as fh:
        fh.write('ep": 3, "values": {"loss": 6}}\n')
    assert full.poll() and full.series["loss"][7].last == 6.0


def test_log_tail_reads_only_the_end_of_a_huge_log(tmp_path):
    path = tmp_path / "rank-0.log"
    line = "x" * 99 + "\n"
    with open(path, "w") as fh:
        for _ in range(1_000_000):  # 100 MB
            fh.write(line)
        fh.write("\x1b[31mlast red line\x1b[0m\n")
    tail = LogTail(path, max_lines=500, max_bytes=64 << 10)
    started = time.perf_counter()
    new = tail.poll()
    assert time.perf_counter() - started < 0.5
    assert len(tail.lines) == 500 and new[-1] == "\x1b[31mlast red line\x1b[0m"
    assert tail.skipped > 99_000_000 and tail.offset == path.stat().st_size
    with open(path, "a") as fh:
        fh.write("progress 10%\rprogress 50%\rprogress 100%\n")
        fh.write("y" * 50_000 + "\n")
        fh.write("partial")
    new = tail.poll()
    assert new[0] == "progress 100%" and new[1].endswith("…[cut]") and len(new[1]) < 5000
    assert tail.poll() == []
    with open(path, "a") as fh:
        fh.write(" line\n")
    assert tail.poll() == ["partial line"]
    os.truncate(path, 0)
    with open(path, "a") as fh:
        fh.write("after rotation\n")
    assert tail.poll() == ["after rotation"]
    assert LogTail(tmp_path / "missing.log").poll() == []


def test_minmax_downsampling_keeps_extremes_and_the_final_value():
    rng = random.Random(1)
    n = 1_000_000
    ys = np.cumsum(np.array([rng.gauss(0, 1) for _ in range(n)]))
    ys[123_457] = 1e6  # a spike
    ys[654_321] = -1e6  # a dip
    xs = np.arange(n, dtype=np.float64)
    idx = minmax_indices(ys, 1000)
    assert len(idx) <= 1000 and idx[0] == 0 and idx[-1] == n - 1
    assert {123_457, 654_321} <= set(idx.tolist())
    dx, dy = downsample(xs, ys, 1000)
    assert dy.max() == ys.max() and dy.min() == ys.min() and dy[-1] == ys[-1]
    assert np.all(np.diff(dx) > 0)
    short = np.arange(10.0)
    assert minmax_indices(short, 1000).tolist() == list(range(10))


def test_mean_across_ranks_aligns_by_index(finished_run):
    run = finished_run
    for rank, scale in ((0, 1.0), (1, 3.0)):
        with open(run.path / "events" / f"rank-{rank}.jsonl", "w") as fh:
            for i in range(5 + rank):  # rank 1 is one step ahead
                fh.write(metric(i, float(i), loss=scale * i))
    follower = run.follower()
    follower.poll()
    mean = mean_across_ranks(follower.series["loss"])
    assert list(mean.values) == [0.0, 2.0, 4.0, 6.0, 8.0] and list(mean.steps) == [0, 1, 2, 3, 4]


def test_feed_payloads_stay_small_for_long_series(finished_run):
    run = finished_run
    with open(run.path / "events" / "rank-0.jsonl", "w") as fh:
        fh.writelines(
            metric(i, 1000.0 + i / 100, loss=1.0 / (i + 1), acc=i / 200_000) for i in range(200_000)
        )
    feed = RunFeed(run)
    while True:
        feed.poll()
        if not feed.behind:
            break
    charts = feed.chart_payload({"x": "step", "agg": "ranks", "selected": None})
    loss = charts["charts"]["loss"]["series"][0]
    assert loss["count"] == 200_000 and loss["points"] <= 1000
    assert loss["last"] == 1.0 / 200_000 and loss["max"] == 1.0 and loss["min"] == 1.0 / 200_000
    y = np.frombuffer(loss["y"], dtype="<f8")
    assert y.max() == 1.0 and y[-1] == 1.0 / 200_000
    timed = feed.chart_payload({"x": "time", "agg": "mean", "selected": ["acc"]})
    assert list(timed["charts"]) == ["acc"]
    x = np.frombuffer(timed["charts"]["acc"]["series"][0]["x"], dtype="<f8")
    created = run.state["created"]
    assert x[0] == pytest.approx(1000.0 - created) and x[-1] == pytest.approx(
        1000.0 + 1999.99 - created
    )
    summary = {m["name"]: m for m in feed.metrics_payload()}
    assert summary["acc"]["count"] == 200_000 and summary["acc"]["max"] == 199_999 / 200_000


def test_text_metrics_are_kept_as_the_last_value_per_rank_and_shown(finished_run):
    """``jt.log(phase="train")`` is not charted, but it is not dropped without a word either:
    the follower keeps each rank's last text value, the widget gets them, the text summary
    lists them."""
    from jupyter_trainer.frontends.views.text import summary_text

    run = finished_run
    for rank, phases in ((0, ["warmup", "train"]), (1, ["warmup", "eval"])):
        with open(run.path / "events" / f"rank-{rank}.jsonl", "w") as fh:
            for step, phase in enumerate(phases):
                fh.write(metric(step, 10.0 + step, phase=phase, loss=1.0 / (step + 1)))
    follower = run.follower()
    follower.poll()
    assert follower.texts == {"phase": {0: "train", 1: "eval"}}
    assert sorted(follower.series) == ["loss"]
    feed = RunFeed(run)
    feed.poll()
    assert feed.texts_payload() == {"phase": {"0": "train", "1": "eval"}}
    assert "phase (text, not charted): rank 0 'train', rank 1 'eval'" in summary_text(follower)


def test_the_all_ranks_log_history_comes_in_the_order_it_was_written(home):
    run = api.submit(INTERLEAVED, procs=2, name="interleave", wait=True)
    times = run.store.paths(run.id).logs / "rank-1.times"
    assert times.exists() and times.read_text().strip()
    feed = RunFeed(run)  # attached after the end: the whole history in one read
    feed.poll()
    lines = [text for _, text in feed.all_logs if text.startswith("rank ")]
    assert lines == [f"rank {i % 2} line {i // 2}" for i in range(8)], lines
    assert [text for text in feed.rank_logs[1] if text.startswith("rank ")] == [
        f"rank 1 line {i}" for i in range(4)
    ]


def test_a_log_tail_cut_mid_file_still_knows_where_each_line_starts(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"".join(b"line %03d\n" % i for i in range(100)))
    tail = LogTail(path, max_lines=10, max_bytes=95)
    lines = tail.poll()
    assert lines[-1] == "line 099" and tail.starts[-1] == 99 * 9
    assert all(path.read_bytes()[s : s + 8].decode() == line for s, line in zip(tail.starts, lines))


def test_nan_and_inf_are_kept_as_numbers_and_shown_as_such(home):
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "for step in range(20):\n"
        "    loss = float('nan') if step == 15 else float('inf') if step == 16 else 1 / (step + 1)\n"
        "    jt.log(step=step, loss=loss)\n"
    )
    run = api.submit(code, launcher="python", name="nan", wait=True)
    feed = RunFeed(run)
    feed.poll()
    values = list(feed.follower.series["loss"][0].values)
    assert math.isnan(values[15]) and values[16] == math.inf and len(values) == 20
    assert feed.follower.texts == {}  # not mistaken for text
    (metric,) = feed.metrics_payload()
    assert metric["non_finite"] == 2 and metric["min"] == 1 / 20 and metric["max"] == 1.0
    json.dumps(metric, allow_nan=False)  # what the widget and the socket send is valid JSON
    chart = feed.chart_payload({"selected": ["loss"]})["charts"]["loss"]["series"][0]
    ys = np.frombuffer(chart["y"], dtype="<f8")
    assert np.isnan(ys).sum() == 1 and np.isinf(ys).sum() == 1 and chart["non_finite"] == 2
    json.dumps({k: v for k, v in chart.items() if k not in ("x", "y")}, allow_nan=False)
    summary = feed.text()
    assert re.search(r"loss\s+0\s+0\.05\s+0\.05\s+1\b", summary), summary  # ranks: 0
    points = run.metrics()["loss"]
    assert math.isnan(points[15][1]) and points[16][1] == math.inf


def attempt(t, number):
    return json.dumps({"kind": "attempt", "t": t, "attempt": number}) + "\n"


def progress(t, done, total):
    return json.dumps({"kind": "progress", "t": t, "done": done, "total": total}) + "\n"


def test_a_later_attempt_supersedes_what_it_logs_again_live_and_at_once(finished_run):
    """Attempt 0 logs steps 0-12, attempt 1 goes back to 10 and fails at 11, attempt 2 goes
    back to 11: each step once, of the attempt that stands; a step-less value stays."""
    run = finished_run
    events = run.path / "events" / "rank-0.jsonl"
    first = [metric(s, float(s), loss=float(s)) for s in range(13)] + [metric(None, 13.0, note=1)]
    first += [progress(float(s), s + 1, 20) for s in range(13)]
    second = [attempt(50.0, 1), *(metric(s, 50.0 + s, loss=100.0 + s) for s in (10, 11))]
    third = [attempt(90.0, 2), *(metric(s, 90.0 + s, loss=200.0 + s) for s in (11, 12, 13))]
    third += [progress(100.0 + s / 2, s + 1, 20) for s in (11, 12, 13)]
    events.write_text("".join(first + second))
    feed = RunFeed(run)
    feed.poll(None)
    series = lambda: feed.chart_payload({"selected": ["loss"]})["charts"]["loss"]["series"][0]
    assert series()["attempts"] == [[0, 0], [10, 1]] and series()["count"] == 12
    with open(events, "a") as fh:
        fh.write("".join(third))
    feed.poll(None)
    shown = series()
    xs = np.frombuffer(shown["x"], dtype="<f8").tolist()
    assert xs == list(range(14)) and shown["attempts"] == [[0, 0], [10, 1], [11, 2]]
    [chip] = [m for m in feed.metrics_payload() if m["name"] == "loss"]
    assert (chip["step"], chip["last"]["lo"], chip["max"], chip["count"]) == (13, 213, 213, 14)
    expected = [(float(s), float(s)) for s in range(10)] + [(10.0, 110.0)]
    expected += [(float(s), 200.0 + s) for s in (11, 12, 13)]
    assert run.metrics()["loss"] == expected and run.metrics()["note"] == [(None, 1.0)]
    every = run.metrics(all_attempts=True)["loss"]
    assert len(every) == 13 + 2 + 3 and every[13:15] == [(10.0, 110.0, 1), (11.0, 111.0, 1)]
    # a diff draws and measures the same points
    found = compare_runs(run.store, run.id, run.id)
    assert list(found.curves["loss"][run.id].values) == [v for _, v in expected]
    assert found.metrics["loss"]["a"] == {"final": 213.0, "min": 0.0, "max": 213.0}
    # the rate is attempt 2's, not over the time since attempt 0's first report
    progress_now = feed.progress_payload()
    assert (progress_now["done"], progress_now["attempt"], progress_now["rate"]) == (14, 2, 2.0)
