"""Sweeps from a real kernel: the sweep outlives a kernel restart and is attached again;
the notebook's Stop button cancels a sweep that the cell waits for."""

from __future__ import annotations

import json
import time

import pytest
from conftest import leftover, wait_for
from support.kernel_client import Kernel, loaded_kernel

import jupyter_trainer as jt
from jupyter_trainer.rankside.host import procs

CELL = """%%train --launcher python --sweep x=uniform(-1,1) --sweep word=choice('a b','c;d') --trials {trials} --parallel 2 --metric score --seed 4 {extra}
import time
from jupyter_trainer import runtime as jt
for step in range({steps}):
    jt.log(step=step, score=x * (step + 1), word=word)
    time.sleep(0.2)
"""


@pytest.fixture
def kernel(home):
    """A kernel with the text monitor and the sweep's variables defined."""
    yield from loaded_kernel("text", "x = 0.0\nword = ''")


def output_of(kernel: Kernel, reply: dict) -> str:
    msg_id = reply["parent_header"]["msg_id"]
    parts = []
    for m in kernel.messages:
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        content = m["content"]
        parts.append(content.get("text", "") + content.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_a_sweep_outlives_a_kernel_restart_and_is_attached_again(kernel, home):
    reply = kernel.execute(CELL.format(trials=6, steps=10, extra="--no-wait"))
    sweep = jt.sweeps(home=home)[0]
    assert f"sweep {sweep.id} started; follow it with %train attach {sweep.id}" in output_of(
        kernel, reply
    )
    wait_for(lambda: len(sweep.state["trials"]) >= 2, 60, what="two trials")
    kernel.km.restart_kernel(now=True)
    kernel.kc.wait_for_ready(timeout=60)
    assert sweep.status == "running", "the sweep should outlive the kernel"
    kernel.execute("%load_ext jupyter_trainer")
    text = output_of(kernel, kernel.execute(f"%train attach {sweep.id}", timeout=240))
    state = sweep.state
    assert state["status"] == "completed" and len(state["trials"]) == 6
    assert f"sweep {sweep.id}: completed, 6 of 6 trials (6 completed)" in text
    best = state["best"]
    assert f"best #{best['number']} score=" in text
    for trial in state["trials"]:
        assert trial["run"] in text and trial["params"]["word"] in ("a b", "c;d")
    listed = output_of(kernel, kernel.execute("%train sweeps"))
    assert sweep.id in listed and "6/6" in listed
    shown = output_of(kernel, kernel.execute(f"%train sweep show {sweep.id} --json"))
    data = json.loads(shown[shown.index("{") :])
    assert data["best"] == best and [t["number"] for t in data["trials"]] == list(range(6))


def test_the_stop_button_cancels_the_sweep_the_cell_waits_for(kernel, home):
    msg_id = kernel.kc.execute(CELL.format(trials=4, steps=300, extra=""))
    wait_for(
        lambda: (
            jt.sweeps(home=home)
            and jt.sweeps(home=home)[0].state.get("counts", {}).get("running", 0) == 2
        ),
        90,
        what="two trials running",
    )
    sweep = jt.sweeps(home=home)[0]
    runs = sweep.trials()
    wait_for(lambda: all(r.status == "running" for r in runs), 60, what="the trials' ranks")
    kernel.km.interrupt_kernel()
    kernel._collect_until_idle(msg_id, 90)
    reply = kernel.kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "RunCanceled"
    assert f"sweep {sweep.id} canceled" in reply["content"]["evalue"]
    assert sweep.status == "canceled"
    assert sweep.state["reason"] == "stopped from the notebook (Stop button)"
    assert f"Stop button: canceling sweep {sweep.id} and its trials" in kernel.text_of(msg_id)
    for run in runs:
        assert run.status == "canceled" and leftover(run.id) == []
        assert run.state["reason"] == f"sweep {sweep.id}: stopped from the notebook (Stop button)"
    driver = sweep.sweeps.read_state(sweep.id)["driver"]
    wait_for(
        lambda: not procs.is_alive(driver["pid"], driver["start_ticks"]),
        10,
        what="the driver to exit",
    )
    time.sleep(0.5)
    assert len(jt.sweeps(home=home)[0].trials()) == 2  # no trial started after the cancel


@pytest.mark.parametrize("mode", ["widget", "text"])
def test_a_sweep_canceled_elsewhere_fails_the_cell_that_waits_for_it(home, mode):
    """Canceled from the panel, the CLI or its widget's Cancel, a sweep ends its waiting cell
    as a canceled run does: with RunCanceled and the recorded reason, in one line."""
    from support.kernel_client import Kernel

    k = Kernel(JUPYTER_TRAINER_MONITOR=mode)
    try:
        k.execute("%load_ext jupyter_trainer\nx = 0.0\nword = ''")
        msg_id = k.kc.execute(CELL.format(trials=4, steps=300, extra=""))
        sweep = wait_for(lambda: jt.sweeps(home=home), 90, what="the sweep")[0]
        wait_for(
            lambda: sweep.state.get("counts", {}).get("running", 0) >= 1, 90, what="a trial running"
        )
        sweep.cancel(reason="canceled from JupyterLab")
        k._collect_until_idle(msg_id, 120)
        reply = k.kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.kc.get_shell_msg(timeout=30)
        content = reply["content"]
        assert content["status"] == "error" and content["ename"] == "RunCanceled", content
        assert content["traceback"] == [
            f"RunCanceled: sweep {sweep.id} was canceled: canceled from JupyterLab"
        ]
        attached = k.execute(f"%train attach {sweep.id}", timeout=60)  # attaching is no error
        assert attached["content"]["status"] == "ok"
    finally:
        k.close()
