"""Which rank each figure of the run view is of: the feed behind the widget and the Lab view
(chips), and the text summary papermill keeps. The browser draws these payloads
(test_browser_view.py); here they are read from a real run folder."""

from __future__ import annotations

import json

import pytest

from jupyter_trainer import api
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.frontends.views.rankstats import RankStat, rank_summary, ranks_label
from jupyter_trainer.frontends.views.text import progress_line, summary_text


def metric(step, t, **values):
    return json.dumps({"kind": "metric", "t": t, "step": step, "values": values}) + "\n"


@pytest.fixture
def two_ranks(home):
    """A finished run whose two ranks logged acc: rank 0 down to 0.5 (last 0.9), rank 1 down
    to 0.406 (last 0.85); lr was logged by rank 0 only."""
    run = api.submit("print('hi')", launcher="python", name="figures", wait=True)
    t = run.state["created"]
    curves = {0: [0.5, 0.7, 0.9], 1: [0.6, 0.406, 0.85]}
    for rank, values in curves.items():
        with open(run.path / "events" / f"rank-{rank}.jsonl", "w") as fh:
            for step, value in enumerate(values):
                extra = {"lr": 0.1 / (step + 1)} if rank == 0 else {}
                fh.write(metric(step, t + step, acc=value, **extra))
    return run


def test_the_chips_figures_are_of_every_rank_each_with_its_rank(two_ranks):
    feed = RunFeed(two_ranks)
    feed.poll()
    metrics = {m["name"]: m for m in feed.metrics_payload()}
    acc = metrics["acc"]
    assert acc["ranks"] == [0, 1]
    assert (acc["min"], acc["min_rank"]) == (0.406, 1)  # rank 1's, not rank 0's 0.5
    assert (acc["max"], acc["max_rank"]) == (0.9, 0)
    assert acc["last"] == {"lo": 0.85, "lo_rank": 1, "hi": 0.9, "hi_rank": 0, "non_finite": []}
    assert acc["count"] == 3
    # the Mean mode's figures are those of the mean the Mean chart draws
    mean = acc["mean"]
    assert mean["ranks"] == [0, 1] and mean["count"] == 3
    assert mean["last"] == pytest.approx(0.875) and mean["min"] == pytest.approx(0.55)
    assert mean["max"] == pytest.approx(0.875)
    lr = metrics["lr"]
    assert lr["ranks"] == [0] and lr["mean"] is None and lr["min_rank"] == 0
    json.dumps(feed.metrics_payload(), allow_nan=False)  # JSON as the front end reads it


def test_the_saved_summary_says_which_rank_each_figure_is_of(two_ranks):
    follower = two_ranks.follower()
    follower.poll()
    text = summary_text(follower, two_ranks.spec)
    rows = {
        line.split()[0]: " ".join(line.split())
        for line in text.splitlines()
        if line.split() and line.split()[0] in ("metric", "acc", "lr")
    }
    assert rows["metric"] == "metric ranks final min max"
    assert rows["acc"] == "acc 0, 1 0.85 (rank 1) .. 0.9 (rank 0) 0.406 (rank 1) 0.9 (rank 0)"
    assert rows["lr"] == "lr 0 0.03333 0.03333 0.1"
    # a progress line shows one rank's values, and says whose
    assert progress_line(follower).endswith("rank 0: acc=0.9 lr=0.03333")


def test_rank_summaries_name_the_lowest_rank_on_a_tie_and_keep_nan():
    summary = rank_summary(
        [RankStat(1, float("nan"), 0.1, 3.0, 5, 1), RankStat(0, 2.0, 0.1, 3.0, 4, 0)]
    )
    assert (summary["min_rank"], summary["max_rank"]) == (0, 0)
    assert summary["last"] == {
        "lo": 2.0,
        "lo_rank": 0,
        "hi": 2.0,
        "hi_rank": 0,
        "non_finite": [[1, "nan"]],
    }
    assert summary["non_finite"] == 1 and summary["count"] == 5
    assert ranks_label([0]) == "rank 0" and ranks_label([2, 0, 1, 3]) == "ranks 0-3"
    assert (
        ranks_label([0, 1]) == "ranks 0, 1" and ranks_label(list(range(8)), 16) == "ranks 0-7 of 16"
    )
