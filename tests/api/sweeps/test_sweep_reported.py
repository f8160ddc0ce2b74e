"""What a sweep's views say of trials that stopped before the end: the value each reported,
marked as no objective, and best so far among completed trials only, in the widget's state,
the charts' data and the text table. The browser draws them (test_browser_sweep.py,
test_lab_panel_sweeps.py); here they come from a sweep's state as its driver writes it."""

from __future__ import annotations

from jupyter_trainer.frontends.views.sweep_charts import best_so_far, reported, sweep_chart_data
from jupyter_trainer.frontends.views.sweep_feeder import view_state
from jupyter_trainer.frontends.views.sweep_text import trials_table

# A sweep canceled with two trials running: both logged val_acc before the cancel.
SPEC = {
    "name": "s",
    "space": {"lr": "loguniform(0.001, 0.1)"},
    "metric": "val_acc",
    "goal": "max",
    "trials": 4,
    "objective": "last",
}


def trial(number, status, **fields):
    return {
        "number": number,
        "run": f"r{number}",
        "params": {"lr": 0.01 * (number + 1)},
        "status": status,
        "objective": None,
        "step": None,
        "start": 10.0 + number,
        "end": None,
        **fields,
    }


def canceled_state(**extra):
    return {
        "id": "sw",
        "status": "canceled",
        "created": 1.0,
        "reason": "canceled by user",
        "counts": {"canceled": 2},
        "best": None,
        "trials_total": 4,
        "trials": [
            trial(0, "canceled", step=11, last=0.42, best=0.45, error="canceled by user"),
            trial(1, "canceled", step=3, last=0.31, best=0.31, error="canceled by user"),
        ],
        **extra,
    }


def test_a_canceled_trial_shows_the_value_it_reported_and_never_counts_as_best():
    state = canceled_state()
    assert reported(state["trials"][0]) == {"value": 0.42, "step": 11, "kind": "last"}
    assert reported(state["trials"][0], "best") == {"value": 0.45, "step": 11, "kind": "best"}
    assert reported(trial(2, "running", step=1, last=0.2)) == {
        "value": 0.2,
        "step": 1,
        "kind": "so far",
    }
    assert reported(trial(3, "completed", objective=0.9, last=0.9)) is None
    assert reported(trial(3, "canceled")) is None  # it logged nothing
    # best so far: completed trials only
    assert best_so_far(state, "max") == []
    done = dict(
        state, trials=[*state["trials"], trial(2, "completed", objective=0.3, last=0.3, end=20.0)]
    )
    assert [p["number"] for p in best_so_far(done, "max")] == [2]
    # the widget's state carries it with each trial
    assert [t["reported"]["value"] for t in view_state(state, SPEC)["trials"]] == [0.42, 0.31]


def test_canceled_trials_are_drawn_in_parallel_coordinates_at_what_they_reported():
    data = sweep_chart_data(canceled_state(), SPEC)
    objective = data["axes"][-1]
    assert (objective["lo"], objective["hi"]) == (0.31, 0.42)
    lines = {ln["number"]: ln for ln in data["lines"]}
    assert lines[0]["objective"] is None and lines[0]["reported"]["value"] == 0.42
    assert [ln["ys"][-1] for ln in data["lines"]] == [1.0, 0.0]
    assert all(y is not None for ln in data["lines"] for y in ln["ys"])


def test_the_trials_table_stars_a_reported_value_and_says_what_it_is():
    rows = [
        {
            "number": t["number"],
            "run": t["run"],
            "params": t["params"],
            "status": t["status"],
            "objective": None,
            "step": t["step"],
            "duration": 2.0,
            "reason": t["error"],
            "reported": reported(t),
        }
        for t in canceled_state()["trials"]
    ]
    table = trials_table(rows, "val_acc")
    assert " 0.42* " in table and " 0.31* " in table
    assert table.endswith(
        "* the last val_acc a trial reported without completing: not an "
        "objective, so not in the running for the best trial"
    )
