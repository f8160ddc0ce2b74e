"""The live sweep monitor in a real kernel (jupyter_client), without a browser.

What a front end would receive is read from the kernel's IOPub messages (comm opens and
updates, displays); what it would send (a click on a trial, Cancel) is sent as comm
messages. test_browser_sweep.py checks the same widget drawn in JupyterLab.
"""

from __future__ import annotations

from conftest import leftover, wait_for
from support.kernel_client import Kernel, kernel  # noqa: F401 (the fixture)

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.host import procs

SWEEP_CELL = """%%train --no-wait --launcher python --name {name} --sweep lr=loguniform(1e-3,1e-1) --sweep hidden=choice(32,64,128) --trials {trials} --parallel 2 --metric val_acc
import time
from jupyter_trainer import runtime as jt
for step in range({steps}):
    jt.log(step=step, val_acc=min(0.99, (step + 1) / {steps} * (0.4 + 4 * lr) + hidden / 1000))
    time.sleep({sleep})
"""

MONITORS = "__import__('jupyter_trainer.frontends.widgets.sweep_widget', fromlist=['x']).live_sweep_monitors()"
MONITOR = f"{MONITORS}[-1]"


def start_sweep(
    kernel: Kernel, name: str, trials: int = 4, steps: int = 8, sleep: float = 0.05
) -> jt.Sweep:
    kernel.execute("lr = 0.01\nhidden = 64")
    kernel.execute(SWEEP_CELL.format(name=name, trials=trials, steps=steps, sleep=sleep))
    assert kernel.value(f"len({MONITORS})") == 1
    return jt.get_sweep(kernel.value(f"{MONITOR}.view.sweep_id"))


def comm_opens(kernel: Kernel, model_name: str) -> list[dict]:
    return [
        m["content"]
        for m in kernel.messages
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_model_name") == model_name
    ]


def view_updates(kernel: Kernel, comm_id: str) -> list[dict]:
    return [u["content"]["data"]["state"] for u in kernel.updates(comm_id)]


def test_the_widget_follows_a_sweep_to_its_end(kernel, home):
    sweep = start_sweep(kernel, "follow")
    view_id = kernel.value(f"{MONITOR}.view.comm.comm_id")
    assert kernel.value(f"{MONITOR}.wait_final(90)", 100)
    kernel.drain(0.5)
    final = sweep.state
    assert final["status"] == "completed" and final["counts"] == {"completed": 4}

    # the first message (the comm's open) carries the spec and whatever state there was
    opened = next(
        c
        for c in kernel.messages
        if c["msg_type"] == "comm_open" and c["content"]["comm_id"] == view_id
    )["content"]["data"]["state"]
    assert opened["sweep_id"] == sweep.id
    assert opened["spec"]["metric"] == "val_acc" and opened["spec"]["goal"] == "max"
    assert opened["spec"]["space"] == {
        "lr": "loguniform(0.001, 0.1)",
        "hidden": "choice(32, 64, 128)",
    }
    # updates followed the sweep: trials appeared, ran and completed, one at a time or two
    updates = view_updates(kernel, view_id)
    states = [u["state"] for u in updates if "state" in u]
    assert len(states) >= 3, "the widget was not updated while the sweep went on"
    done = [sum(t["status"] == "completed" for t in s["trials"]) for s in states]
    assert done == sorted(done) and done[0] < 4 and done[-1] == 4, done
    started = [len(s["trials"]) for s in states]
    assert started == sorted(started) and started[0] < 4 and started[-1] == 4, started
    assert any(t["status"] == "running" for s in states for t in s["trials"])
    assert states[-1]["status"] == "completed" and "now" in states[-1]
    assert all("values" not in t for s in states for t in s["trials"])  # no metric history
    # only changes are sent: no two consecutive updates carry the same state
    same = [{k: v for k, v in s.items() if k != "now"} for s in states]
    assert all(a != b for a, b in zip(same, same[1:]))

    # the traits hold the sweep's final state, its best and both charts' data
    view = kernel.value(f"{{'state': {MONITOR}.view.state, 'charts': {MONITOR}.view.charts}}")
    assert view["state"]["best"] == final["best"]
    assert [t["objective"] for t in view["state"]["trials"]] == [
        t["objective"] for t in final["trials"]
    ]
    charts = view["charts"]
    assert len(charts["best"]) == 4 and charts["best"][-1]["best"] == final["best"]["objective"]
    axes = {a["name"]: a for a in charts["axes"]}
    assert list(axes) == [*opened["spec"]["space"], "objective"]
    assert axes["lr"]["kind"] == "log" and axes["hidden"]["kind"] == "category"
    assert [ln["number"] for ln in charts["lines"]] == [0, 1, 2, 3]

    # the saved text/plain became the trials table at the end
    final_text = [m for m in kernel.messages if m["msg_type"] == "update_display_data"]
    text = final_text[-1]["content"]["data"]["text/plain"]
    assert text.startswith(f"sweep {sweep.id}: completed, 4 of 4 trials (4 completed)")
    assert all(t["run"] in text for t in final["trials"])
    assert "completed" in kernel.value(f"repr({MONITOR})")
    # the feeder's thread has stopped
    assert kernel.value(f"{MONITOR}.feeder.thread.is_alive()") is False
    names = kernel.value("[t.name for t in __import__('threading').enumerate()]")
    assert not [n for n in names if n.startswith("jt-sweep")], names
    for trial in final["trials"]:
        assert leftover(trial["run"]) == []


def test_a_click_on_a_trial_opens_its_run_monitor_below(kernel, home):
    sweep = start_sweep(kernel, "click")
    assert kernel.value(f"{MONITOR}.wait_final(90)", 100)
    box_id = kernel.value(f"{MONITOR}.comm.comm_id")
    view_id = kernel.value(f"{MONITOR}.view.comm.comm_id")
    trials = {t["number"]: t["run"] for t in sweep.state["trials"]}

    kernel.send_to_widget(view_id, {"type": "open", "number": 2})
    wait_for(lambda: kernel.value(f"{MONITOR}.view.selected") == 2, 20, what="trial 2 to open")
    assert kernel.value(f"{MONITOR}.trial_monitor.run_id") == trials[2]
    assert kernel.value(f"{MONITOR}.trial_monitor.wait_final(20)")
    assert kernel.value(f"{MONITOR}.trial_monitor.state['status']") == "completed"
    kernel.drain(0.5)
    # the front end was told: the box's children are the view and a run monitor of that run
    first = kernel.value(f"{MONITOR}.trial_monitor.comm.comm_id")
    assert first in {c["comm_id"] for c in comm_opens(kernel, "AnyModel")}
    assert any(u.get("run_id") == trials[2] for u in view_updates(kernel, first))
    children = [u["children"] for u in view_updates(kernel, box_id) if "children" in u]
    assert children[-1] == [f"IPY_MODEL_{view_id}", f"IPY_MODEL_{first}"]

    # another trial replaces it; the one before is closed
    kernel.send_to_widget(view_id, {"type": "open", "number": 0})
    wait_for(lambda: kernel.value(f"{MONITOR}.view.selected") == 0, 20, what="trial 0 to open")
    assert kernel.value(f"{MONITOR}.trial_monitor.run_id") == trials[0]
    kernel.drain(0.5)
    assert any(
        m["msg_type"] == "comm_close" and m["content"]["comm_id"] == first for m in kernel.messages
    )
    assert kernel.value(f"len({MONITOR}.children)") == 2
    # a trial that does not exist opens nothing and says so
    kernel.send_to_widget(view_id, {"type": "open", "number": 99})
    wait_for(
        lambda: kernel.value(f"{MONITOR}.view.notice") == "trial 99 has no run yet",
        20,
        what="the notice",
    )
    assert kernel.value(f"{MONITOR}.trial_monitor.run_id") == trials[0]
    # close_trial takes it away
    kernel.send_to_widget(view_id, {"type": "close_trial"})
    wait_for(lambda: kernel.value(f"len({MONITOR}.children)") == 1, 20, what="the trial to close")
    assert kernel.value(f"{MONITOR}.view.selected") is None
    assert kernel.value(f"{MONITOR}.trial_monitor") is None


def test_cancel_from_the_widget_ends_the_sweep_and_every_process(kernel, home):
    sweep = start_sweep(kernel, "cancel", trials=12, steps=400, sleep=0.05)
    wait_for(
        lambda: sum(t["status"] == "running" for t in sweep.state["trials"]) == 2,
        60,
        what="two running trials",
    )
    driver = sweep.state["driver"]
    view_id = kernel.value(f"{MONITOR}.view.comm.comm_id")
    kernel.send_to_widget(view_id, {"type": "cancel"})
    wait_for(lambda: sweep.status == "canceled", 60, what="the sweep to be canceled")
    assert kernel.value(f"{MONITOR}.wait_final(30)", 40)
    assert kernel.value(f"{MONITOR}.view.cancel_state") == "requested"
    state = kernel.value(f"{MONITOR}.view.state")
    assert (
        state["status"] == "canceled"
        and state["reason"] == "canceled from the notebook (Cancel button)"
    )
    assert len(state["trials"]) == 2
    assert {t["status"] for t in state["trials"]} == {"canceled"}
    for trial in sweep.state["trials"]:
        wait_for(lambda: leftover(trial["run"]) == [], 15, what=f"run {trial['run']} to end")
        assert api.get_run(trial["run"]).status == "canceled"
    wait_for(
        lambda: not procs.is_alive(driver["pid"], driver.get("start_ticks")),
        15,
        what="the sweep's driver to exit",
    )
    assert kernel.value(f"{MONITOR}.feeder.thread.is_alive()") is False
    # a second Cancel on the ended sweep says why nothing happens
    kernel.send_to_widget(view_id, {"type": "cancel"})
    wait_for(
        lambda: "already ended" in kernel.value(f"{MONITOR}.view.cancel_state"),
        20,
        what="the second cancel's answer",
    )


def test_closing_the_widget_stops_its_threads(kernel, home):
    sweep = start_sweep(kernel, "close", trials=2, steps=200, sleep=0.05)
    wait_for(lambda: any(t.get("run") for t in sweep.state["trials"]), 60, what="a trial's run")
    view_id = kernel.value(f"{MONITOR}.view.comm.comm_id")
    kernel.send_to_widget(view_id, {"type": "open", "number": 0})
    wait_for(lambda: kernel.value(f"{MONITOR}.trial_monitor is not None"), 20, what="trial 0")
    kernel.execute(f"_m = {MONITOR}; _m.close(); _m.feeder.join(5)")
    assert kernel.value("_m.feeder.thread.is_alive()") is False
    wait_for(
        lambda: (
            not [
                n
                for n in kernel.value("[t.name for t in __import__('threading').enumerate()]")
                if n.startswith("jt-")
            ]
        ),
        10,
        what="the monitors' threads to stop",
    )
    assert kernel.value(f"len({MONITORS})") == 0
    assert not sweep.done  # closing the view does not touch the sweep
    sweep.cancel()
    for trial in sweep.state["trials"]:
        wait_for(lambda: leftover(trial["run"]) == [], 15, what=f"run {trial['run']} to end")
