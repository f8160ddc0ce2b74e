"""The run monitor widget in real kernels (jupyter_client), without a browser.

What a front end would receive is read from the kernel's IOPub messages (comm updates,
displays); what it would send (Cancel, Launch) is sent as comm messages. The browser tests
(test_browser.py) check the same widget drawn in JupyterLab.
"""

from __future__ import annotations

import os
import time

import nbformat
import papermill
from conftest import leftover, wait_for
from support.huge_run import huge_run
from support.kernel_client import (  # noqa: F401 (the fixture)
    MONITORS,
    Kernel,
    kernel,
    monitor_of,
    sent_dates,
    wait_final,
    wire_size,
)

from jupyter_trainer.api import runs as api
from jupyter_trainer.store import Store

STEPS_CELL = """%%train --no-wait --procs 2 --name {name}
import time
from jupyter_trainer import runtime as jt
for i in range({steps}):
    jt.log(step=i, {metric}=1.0 / (i + 1) + {offset}, other=i * {offset})
    jt.progress(i + 1, {steps})
    print("{name} says step", i, flush=True)
    time.sleep({sleep})
"""


def test_no_wait_returns_at_once_and_the_widget_keeps_updating(kernel, home):
    started = time.monotonic()
    kernel.execute(STEPS_CELL.format(name="bg", steps=30, metric="loss", offset=0.5, sleep=0.2))
    assert time.monotonic() - started < 10
    run = api.runs(home=home)[0]
    assert run.status in ("created", "preparing", "queued", "running")
    # another cell runs while the run goes on
    other = time.monotonic()
    kernel.execute("total = sum(range(10**6)); print('other cell ran', total)")
    assert time.monotonic() - other < 5
    assert not run.done
    comm_id = kernel.value(f"{monitor_of(kernel, run.id)}.comm.comm_id")
    wait_final(kernel, run.id)
    kernel.drain(1.0)
    assert run.status == "completed"

    updates = kernel.updates(comm_id)
    assert len(updates) >= 5, "the widget was not updated while the run went on"
    dates = sent_dates(updates)
    gaps = [b - a for a, b in zip(dates, dates[1:])]
    assert min(gaps) >= 0.2, f"more than 4 updates a second: gaps {gaps}"
    states = [u["content"]["data"]["state"] for u in updates]
    statuses = [s["state"]["status"] for s in states if "state" in s]
    assert "running" in statuses and statuses[-1] == "completed"
    progress = [s["progress"]["done"] for s in states if s.get("progress")]
    assert progress == sorted(progress) and progress[-1] == 30 and len(set(progress)) > 2
    summary = kernel.value(f"{monitor_of(kernel, run.id)}.metrics")
    loss = next(m for m in summary if m["name"] == "loss")
    assert loss["count"] == 30 and loss["last"]["hi"] == 1.0 / 30 + 0.5 and loss["max"] == 1.5
    lines = [line for s in states if s.get("log") for _, line in s["log"]["lines"]]
    assert sum("bg says step" in line for line in lines) == 60
    # the background thread never printed into a cell's output
    streams = [m for m in kernel.messages if m["msg_type"] == "stream"]
    assert all(
        "other cell ran" in m["content"]["text"] or "@@" in m["content"]["text"] for m in streams
    ), [m["content"]["text"] for m in streams]
    # text/plain shows the state now: the display was brought up to date at the end
    final = [m for m in kernel.messages if m["msg_type"] == "update_display_data"]
    assert final and f"run {run.id} completed" in final[-1]["content"]["data"]["text/plain"]
    assert "completed" in kernel.value(f"repr({monitor_of(kernel, run.id)})")
    assert not kernel.value(f"{monitor_of(kernel, run.id)}._feeder._thread.is_alive()")
    assert leftover(run.id) == []


def test_attach_after_kernel_restart_shows_the_whole_history(kernel, home):
    kernel.execute(STEPS_CELL.format(name="restart", steps=60, metric="loss", offset=1, sleep=0.1))
    run = api.runs(home=home)[0]
    store = Store(home)
    wait_for(lambda: len(store.read_events(run.id, 0)[0]) > 15, 60, what="events before restart")
    kernel.km.restart_kernel(now=True)
    kernel.kc.wait_for_ready(timeout=60)
    assert not run.done, "the run should outlive the kernel"
    kernel.execute("%load_ext jupyter_trainer")
    kernel.execute(f"%train attach {run.id}")
    comm_id = kernel.value(f"{monitor_of(kernel, run.id)}.comm.comm_id")
    wait_final(kernel, run.id)
    kernel.drain(0.5)
    assert run.status == "completed"
    states = [u["content"]["data"]["state"] for u in kernel.updates(comm_id)]
    assert [s["state"]["status"] for s in states if "state" in s][-1] == "completed"
    summary = {m["name"]: m for m in kernel.value(f"{monitor_of(kernel, run.id)}.metrics")}
    assert summary["loss"]["count"] == 60 and summary["loss"]["max"] == 2.0
    charts = kernel.value(
        f"{{k: [(s['count'], s['points'], s['rank']) for s in v['series']]"
        f" for k, v in {monitor_of(kernel, run.id)}.charts['charts'].items()}}"
    )
    assert charts["loss"] == [[60, 60, 0], [60, 60, 1]]
    first_x = kernel.value(
        f"__import__('struct').unpack_from('<d', "
        f"{monitor_of(kernel, run.id)}.charts['charts']['loss']['series'][0]['x'])[0]"
    )
    assert first_x == 0.0  # the history from the first step, not from the restart on
    # the same widget from the Python API, for a finished run
    kernel.execute(f"import jupyter_trainer as jt\nm2 = jt.get_run({run.id!r}).monitor()\nm2")
    assert kernel.value("type(m2).__name__") == "RunMonitor"
    assert kernel.value("m2.wait_final(30) and m2.state['status']") == "completed"
    assert kernel.value("[m['count'] for m in m2.metrics if m['name'] == 'loss']") == [60]


def test_two_background_runs_keep_their_own_data(kernel, home):
    kernel.execute(STEPS_CELL.format(name="first", steps=25, metric="alpha", offset=10, sleep=0.1))
    kernel.execute(STEPS_CELL.format(name="second", steps=25, metric="beta", offset=20, sleep=0.1))
    runs = {r.name: r for r in api.runs(home=home)}
    assert set(runs) == {"first", "second"}
    comms = {
        name: kernel.value(f"{monitor_of(kernel, run.id)}.comm.comm_id")
        for name, run in runs.items()
    }
    assert comms["first"] != comms["second"]
    for run in runs.values():
        wait_final(kernel, run.id)
    kernel.drain(0.5)
    for name, metric, offset in (("first", "alpha", 10), ("second", "beta", 20)):
        run = runs[name]
        assert run.status == "completed"
        states = [u["content"]["data"]["state"] for u in kernel.updates(comms[name])]
        infos = [s["info"] for s in states if "info" in s]
        assert infos and all(i["run_id"] == run.id for i in infos)
        names = {m["name"] for s in states for m in s.get("metrics", [])}
        assert names == {metric, "other"}
        lasts = [
            m["last"]["hi"] for s in states for m in s.get("metrics", []) if m["name"] == metric
        ]
        assert lasts[-1] == 1.0 / 25 + offset
        lines = [line for s in states if s.get("log") for _, line in s["log"]["lines"]]
        assert lines and all(line.startswith(f"{name} says step") for line in lines)
        charts = [set(s["charts"]["charts"]) for s in states if "charts" in s]
        assert all(c <= {metric, "other"} for c in charts) and charts[-1] == {metric, "other"}
        assert leftover(run.id) == []


def test_a_failed_run_names_the_rank_and_its_traceback(kernel, home):
    reply = kernel.execute(
        """%%train --procs 2 --name widget-fail
import time
from jupyter_trainer import runtime as jt
for step in range(50):
    jt.log(step=step, x=step)
    if step == 3 and jt.rank == 1:
        raise ValueError("bad batch at step 3")
    time.sleep(0.05)
""",
        check=False,
    )
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "RunFailed"
    run = api.runs(home=home)[0]
    state = kernel.value(f"{monitor_of(kernel, run.id)}.state")
    assert state["status"] == "failed" and state["failed_rank"] == 1
    assert "ValueError: bad batch at step 3" in state["traceback"]
    assert state["error"] == "ValueError: bad batch at step 3"
    assert leftover(run.id) == []


def test_text_metrics_reach_the_widget_as_last_values(kernel, home):
    kernel.execute("""%%train --procs 2 --name widget-text
from jupyter_trainer import runtime as jt
for step, phase in enumerate(["warmup", "train"]):
    jt.log(step=step, phase=phase if jt.rank == 0 else "eval", loss=1.0 / (step + 1))
""")
    run = api.runs(home=home)[0]
    wait_final(kernel, run.id)
    monitor = monitor_of(kernel, run.id)
    assert kernel.value(f"{monitor}.texts") == {"phase": {"0": "train", "1": "eval"}}
    assert [m["name"] for m in kernel.value(f"{monitor}.metrics")] == ["loss"]
    assert leftover(run.id) == []


def test_a_finished_widget_lists_the_outputs_and_the_cell_echoes_nothing(kernel, home):
    reply = kernel.execute("""%%train --name widget-outputs
from jupyter_trainer import runtime as jt
(jt.outputs_dir / "model.pt").write_bytes(b"x" * 2048)
(jt.outputs_dir / "plots").mkdir()
(jt.outputs_dir / "plots" / "loss.png").write_bytes(b"png")
""")
    run = api.runs(home=home)[0]
    wait_final(kernel, run.id)
    outputs = kernel.value(f"{monitor_of(kernel, run.id)}.state")["outputs"]
    assert outputs == {
        "folder": str(run.outputs),
        "files": [{"path": "model.pt", "bytes": 2048}, {"path": "plots/loss.png", "bytes": 3}],
    }
    parent = reply["parent_header"]["msg_id"]
    echoed = [
        m
        for m in kernel.messages
        if m["parent_header"].get("msg_id") == parent and m["msg_type"] == "execute_result"
    ]
    assert echoed == [], echoed  # no <Run ... completed> under the widget
    # yet the cell's value is the run, as in papermill: the next cell's `run = _` finds it
    assert kernel.value("(type(_).__name__, _.id, Out[max(Out)] is _)") == ["Run", run.id, True]
    assert leftover(run.id) == []


def test_cancel_from_the_widget_ends_a_background_run(kernel, home):
    kernel.execute(
        STEPS_CELL.format(name="cancel-me", steps=2000, metric="loss", offset=0, sleep=0.05)
    )
    run = api.runs(home=home)[0]
    wait_for(
        lambda: run.status == "running" and Store(home).read_events(run.id, 1)[0],
        60,
        what="the run to start",
    )
    comm_id = kernel.value(f"{monitor_of(kernel, run.id)}.comm.comm_id")
    kernel.send_to_widget(comm_id, {"type": "cancel"})
    wait_for(lambda: run.status == "canceled", 15, what="the run to be canceled")
    wait_for(lambda: leftover(run.id) == [], 10, what="no process left")
    wait_final(kernel, run.id)
    assert kernel.value(f"{monitor_of(kernel, run.id)}.cancel_state") == "requested"
    assert kernel.value(f"{monitor_of(kernel, run.id)}.state['status']") == "canceled"


FORM_CELL = (
    "%%train --form --launcher python --name formed --stop-on-nan loss_seen --stall-timeout 90"
    " --on-stall cancel --system-interval 2\n"
    """from jupyter_trainer import runtime as jt
jt.log(step=0, lr_seen=lr, epochs_seen=epochs)
print("params", repr(lr), repr(epochs), repr(label), repr(layers), repr(amp), repr(extra))
"""
)


def test_form_launch_records_the_values_entered(kernel, home):
    kernel.execute(
        "lr = 0.1\nepochs = 3\nlabel = 'base'\nlayers = [64, 32]\namp = False\nextra = None"
    )
    kernel.execute(FORM_CELL)
    assert api.runs(home=home) == [], "--form must not start anything by itself"
    form = kernel.value(f"[m for m in {MONITORS} if m.mode == 'form'][-1].form")
    kinds = {p["name"]: [p["type"], p["value"]] for p in form["params"]}
    assert kinds == {
        "lr": ["float", 0.1],
        "epochs": ["int", 3],
        "label": ["str", "base"],
        "layers": ["list", [64, 32]],
        "amp": ["bool", False],
        "extra": ["json", None],
    }
    assert form["targets"][0] == "local" and form["environments"][0]["label"] == "(kernel)"
    comm_id = kernel.value(f"[m for m in {MONITORS} if m.mode == 'form'][-1].comm.comm_id")
    options = {
        "name": "from-form",
        "target": "local",
        "nodes": "1",
        "procs": "1",
        "launcher": "python",
        "env": "",
    }
    # a value of the wrong type is refused, and nothing starts
    kernel.send_to_widget(
        comm_id,
        {
            "type": "launch",
            "options": options,
            "values": {
                "lr": "0.2",
                "epochs": "three",
                "label": "x",
                "layers": "[1]",
                "amp": True,
                "extra": "1",
            },
        },
    )
    errors = wait_for(
        lambda: kernel.value(
            f"[m for m in {MONITORS} if m.comm.comm_id == {comm_id!r}][0].form_errors"
        ),
        20,
        what="form errors",
    )
    assert errors == {"epochs": "epochs must be a whole number"}
    assert api.runs(home=home) == []
    kernel.send_to_widget(
        comm_id,
        {
            "type": "launch",
            "options": options,
            "values": {
                "lr": "2e-3",
                "epochs": "5",
                "label": "tuned",
                "layers": "[128, 64, 10]",
                "amp": True,
                "extra": '{"seed": 7}',
            },
        },
    )
    run = wait_for(lambda: api.runs(home=home), 30, what="the launched run")[0]
    run.wait(timeout=60)
    assert run.name == "from-form"
    # every option of the %%train line reaches the run, not only those the form shows
    assert run.spec.watch.stop_on_nan == ("loss_seen",)
    assert (run.spec.watch.stall_timeout, run.spec.watch.on_stall) == (90.0, "cancel")
    assert run.spec.watch.system_interval == 2.0
    assert run.spec.params == {
        "lr": 0.002,
        "epochs": 5,
        "label": "tuned",
        "layers": [128, 64, 10],
        "amp": True,
        "extra": {"seed": 7},
    }
    assert run.logs(0).strip() == "params 0.002 5 'tuned' [128, 64, 10] True {'seed': 7}"
    # the form became the run's monitor
    widget = f"[m for m in {MONITORS} if m.comm.comm_id == {comm_id!r}][0]"
    assert kernel.value(f"{widget}.wait_final(30) and ({widget}.mode, {widget}.run_id)") == [
        "monitor",
        run.id,
    ]
    assert kernel.value(f"{widget}.state['status']") == "completed"


def test_form_under_papermill_starts_at_once_with_the_notebook_values(home, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell(
            "lr = 0.1\nepochs = 3\nlabel = 'base'\nlayers = [1]\namp = False\nextra = None",
            metadata={"tags": ["parameters"]},
        ),
        nbformat.v4.new_code_cell(FORM_CELL),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, tmp_path / "form.ipynb")
    papermill.execute_notebook(
        str(tmp_path / "form.ipynb"),
        str(tmp_path / "out.ipynb"),
        parameters={"lr": 0.5},
        kernel_name="python3",
        progress_bar=False,
    )
    run = api.runs(home=home)[0]
    assert run.status == "completed" and run.spec.params["lr"] == 0.5
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    outputs = out.cells[-1].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert any(
        f"run {run.id} completed" in o.get("data", {}).get("text/plain", "") for o in outputs
    )


def test_the_monitor_switches_between_widget_and_text(home):
    probe = "from jupyter_trainer.frontends.widgets import monitor_mode; print('@@' + repr(monitor_mode()))"
    for env, stdin, expected in (
        (None, True, "widget"),
        (None, False, "text"),
        ("text", True, "text"),
        ("widget", False, "widget"),
    ):
        k = Kernel(JUPYTER_TRAINER_MONITOR=env or "")  # empty: auto, the default
        try:
            msg_id = k.kc.execute(probe, allow_stdin=stdin)
            k._collect_until_idle(msg_id, 60)
            assert f"@@'{expected}'" in k.text_of(msg_id), (env, stdin)
        finally:
            k.close()
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "JUPYTER_TRAINER_MONITOR": "widget"},
    )
    assert "@@'text'" in out.stdout  # no kernel, no widget


def test_a_huge_run_keeps_the_kernel_responsive_and_updates_small(kernel, home):
    """1,000,000 points per metric and 100 MB of logs: the widget reads it all in the
    background, each update stays under 200 KB, and cells still run at once meanwhile."""
    n = 1_000_000
    run = huge_run(n)
    kernel.execute(f"%train attach {run.id}")
    comm_id = kernel.value(f"{monitor_of(kernel, run.id)}.comm.comm_id")
    delays = []
    while not kernel.value(f"{monitor_of(kernel, run.id)}.finished.is_set()"):
        started = time.monotonic()
        kernel.execute("1 + 1")
        delays.append(time.monotonic() - started)
    # Cells ran while the history was read: a read that held the kernel's main thread would
    # let the first cell run only once it ended. How late cells run is measured in
    # bench/widget_update.py (worst and 99th-percentile delay), not bounded here.
    assert len(delays) >= 3, delays
    kernel.drain(0.5)
    updates = kernel.updates(comm_id)
    sizes = [wire_size(u) for u in updates]
    assert max(sizes) <= 200 * 1024, sizes
    metrics = {m["name"]: m for m in kernel.value(f"{monitor_of(kernel, run.id)}.metrics")}
    assert metrics["loss"]["count"] == n and metrics["loss"]["last"]["hi"] == 1.0 / n
    # over both ranks: rank 1's spike of 1.02, named as rank 1's
    assert (metrics["loss"]["max"], metrics["loss"]["max_rank"]) == (1.02, 1)
    assert metrics["acc"]["max"] == (n - 1) / n
    points = kernel.value(
        f"[s['points'] for c in {monitor_of(kernel, run.id)}.charts['charts'].values()"
        f" for s in c['series']]"
    )
    assert len(points) == 4 and max(points) <= 1000
    log = kernel.value(f"{monitor_of(kernel, run.id)}.log")
    tail = [line for _, line in log["lines"]]
    assert len(tail) <= 2000 and tail[-1] in (
        "\x1b[32mrank 0 done\x1b[0m",
        "\x1b[32mrank 1 done\x1b[0m",
    )
