"""The cost meter: a target's price per GPU-hour or node-hour, recorded with each run, gives
what the run has cost and, while it runs, what it will have cost when its progress is done."""

from __future__ import annotations

import re
import time

import pytest
from conftest import wait_for
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.frontends.views.cost import cost_words, money, run_cost
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.targets.registry import add_target, configured_targets

STEPS = """
import time
from jupyter_trainer import runtime as jt
for step in range(20):
    jt.progress(step + 1, 20)
    time.sleep(0.15)
"""


@pytest.mark.parametrize(
    "price, says",
    [
        ({"price_per_gpu_hour": -1}, "price_per_gpu_hour must be a number of 0 or more"),
        ({"price_per_node_hour": "2"}, "price_per_node_hour must be a number of 0 or more"),
        ({"price_per_gpu_hour": float("inf")}, "price_per_gpu_hour must be a number"),
        (
            {"price_per_gpu_hour": 1, "price_per_node_hour": 8},
            "give price_per_gpu_hour or price_per_node_hour, not both",
        ),
        ({"currency": "EUR"}, "currency needs price_per_gpu_hour or price_per_node_hour"),
        ({"price_per_gpu_hour": 1, "currency": ""}, "currency must be a short text"),
    ],
)
def test_a_bad_price_is_refused_and_nothing_is_written(home, price, says):
    with pytest.raises(TargetError, match=re.escape(says)):
        add_target("priced", "local", home=home, **price)
    assert "priced" not in configured_targets(home)


def test_a_priced_run_says_what_it_cost_and_what_it_will(home):
    add_target("priced", "local", home=home, price_per_gpu_hour=3.6, currency="$")
    run = api.submit(STEPS, procs=2, target="priced")
    assert dict(run.spec.target.price) == {"price_per_gpu_hour": 3.6, "currency": "$"}
    feed = RunFeed(run)

    def projected():
        feed.poll()
        cost = feed.cost(time.time())
        return cost if cost and cost["projected"] is not None else None

    live = wait_for(projected, timeout=60, what="a projected cost")
    assert live["projected"] > live["so_far"] >= 0 and (live["units"], live["unit"]) == (2, "GPU")
    run.wait(timeout=120)
    state = run.state
    running = state["stages"]["running"]
    seconds = (running.get("end") or state["ended"]) - running["start"]
    cost = run_cost(run.spec, state, time.time())
    assert cost["so_far"] == pytest.approx(3.6 * 2 * seconds / 3600)
    assert cost["projected"] is None  # it has ended
    shown = cli("show", run.id, timeout=60)
    assert f"\n{cost_words(cost)}\n" in shown.stdout, shown.stdout
    assert cost_words(cost).startswith("cost $0.0") and "(2 GPUs at $3.60 an hour)" in cost_words(
        cost
    )


def test_an_unpriced_run_has_no_cost(home):
    run = api.submit("pass", launcher="python", wait=True)
    assert run_cost(run.spec, run.state, time.time()) is None


def test_money_reads_as_people_write_it():
    assert money(1234.5, "$") == "$1,234.50"
    assert money(0.004, "$") == "$0.0040"
    assert money(2, "EUR") == "2.00 EUR"
    assert money(0, "€") == "€0.00"


def test_a_sweep_says_what_its_trials_cost_together(home):
    import jupyter_trainer as jt
    from jupyter_trainer.frontends.views.sweep_text import sweep_text

    add_target("priced", "local", home=home, price_per_node_hour=36.0, currency="EUR")
    code = "import time\nfrom jupyter_trainer import runtime as jt\ntime.sleep(0.5)\njt.log(step=0, score=x)\n"
    sweep = jt.sweep(
        code,
        space={"x": "choice(1, 2)"},
        metric="score",
        trials=2,
        sampler="grid",
        launcher="python",
        target="priced",
    )
    sweep.wait(timeout=120)
    runs = sweep.trials()
    total = sum(run_cost(run.spec, run.state, time.time())["so_far"] for run in runs)
    assert len(runs) == 2 and total > 0
    assert sweep_text(sweep).endswith(f"\ncost {money(total, 'EUR')} over 2 trials")
    # the sweep's view (the widget's and the Lab's) has it in its state
    from jupyter_trainer.frontends.views.sweep_feeder import SweepFeeder

    first = SweepFeeder(sweep, lambda changes: None).first()
    assert first["state"]["cost"] == f"cost {money(total, 'EUR')} over 2 trials"
