"""The sweeps' REST API on a real in-process jupyter_server, unauthenticated access disallowed:
the list, one sweep with its trials, cancel, and the runs list without the trials."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support.server_rest import BASE, Viewer, expect_error, finished_run, get_json, jp_server_config  # noqa: F401
from tornado.httpclient import HTTPClientError

import jupyter_trainer as jt
from jupyter_trainer.frontends.views.sweep_text import sweep_json
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store.owners import Identity
from jupyter_trainer.store.sweeps import SweepStore

pytest_plugins = ["pytest_jupyter.jupyter_server"]

TRAIN = """
import time
from jupyter_trainer import runtime as jt
lr, hidden = jt.params["lr"], jt.params["hidden"]
for step in range(int(jt.params.get("steps", 4))):
    jt.log(step=step, val_acc=min(0.99, lr * 4 * (step + 1) + hidden / 1000))
    time.sleep(float(jt.params.get("pause", 0)))
"""
SPACE = {"lr": "loguniform(1e-3,1e-1)", "hidden": "choice(32,64,128)"}
UNKNOWN = "nope-sweep-20260101-000000-abcdef"


def start_sweep(tmp_path: Path, trials: int = 4, **space) -> jt.Sweep:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return jt.sweep(
        script=str(script),
        space={**SPACE, **space},
        metric="val_acc",
        trials=trials,
        parallel=min(2, trials),
        launcher="python",
    )


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def sweep(home, tmp_path) -> jt.Sweep:
    """A sweep of four trials that has completed."""
    return start_sweep(tmp_path).wait(timeout=120)


ENDPOINTS = [
    ("GET", ("sweeps",)),
    ("GET", ("sweeps", "SWEEP")),
    ("POST", ("sweeps", "SWEEP", "cancel")),
]


@pytest.mark.parametrize("method, parts", ENDPOINTS)
async def test_every_sweep_endpoint_requires_auth(jp_fetch, sweep, method, parts):
    parts = tuple(sweep.id if p == "SWEEP" else p for p in parts)
    body = b"" if method == "POST" else None
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, *parts, method=method, body=body, headers={"Authorization": ""})
    assert info.value.code in (401, 403)
    if method == "GET":
        assert (await jp_fetch(BASE, *parts)).code == 200
    else:  # refused before it reached the sweep: the sweep ended as it would have
        assert sweep.sweeps.cancel_request(sweep.id) is None


async def test_list_and_show_a_sweep(jp_fetch, sweep, home):
    plain = finished_run(name="plain")
    state = sweep.state
    page = await get_json(jp_fetch, "sweeps")
    assert page["more"] is False and len(page["sweeps"]) == 1
    row = page["sweeps"][0]
    assert row == {
        "id": sweep.id,
        "name": "train",
        "status": "completed",
        "metric": "val_acc",
        "goal": "max",
        "trials_started": 4,
        "trials_done": 4,
        "trials_total": 4,
        "parallel": 2,
        "counts": {"completed": 4},
        "best": state["best"],
        "created": state["created"],
        "owner": Identity.current().user,
        "hub_user": None,
        "started": state["started"],
        "ended": state["ended"],
        "error": None,
    }
    assert row["best"]["objective"] == max(t["objective"] for t in state["trials"])

    shown = await get_json(jp_fetch, "sweeps", sweep.id)
    # what `sweep show --json` prints, each trial with what it reported without an objective
    assert [t["reported"] for t in shown["trials"]] == [None] * 4  # all completed
    assert shown == json.loads(json.dumps(sweep_json(sweep)))
    assert [
        (t["number"], t["run"], t["params"], t["status"], t["objective"]) for t in shown["trials"]
    ] == [
        (t["number"], t["run"], t["params"], t["status"], t["objective"]) for t in state["trials"]
    ]
    assert set(shown["spec"]["space"]) == set(SPACE) and shown["storage"] == sweep.storage

    # filters
    assert (await get_json(jp_fetch, "sweeps", status="completed"))["sweeps"] == [row]
    assert (await get_json(jp_fetch, "sweeps", status="running"))["sweeps"] == []
    assert (await get_json(jp_fetch, "sweeps", name="TRA"))["sweeps"] == [row]
    assert (await get_json(jp_fetch, "sweeps", name="other"))["sweeps"] == []
    error = await expect_error(jp_fetch, 400, "sweeps", params={"status": "done"})
    assert "unknown sweep status 'done'" in error["error"] and "interrupted" in error["error"]
    error = await expect_error(jp_fetch, 400, "sweeps", params={"limit": "0"})
    assert "limit" in error["error"]

    # the runs list names each trial's sweep, and leaves the trials out with trials=0
    trial_ids = {t["run"] for t in state["trials"]}
    runs = (await get_json(jp_fetch, "runs"))["runs"]
    assert {r["id"] for r in runs} == trial_ids | {plain.id}
    marks = {r["id"]: (r["sweep"], r["trial"]) for r in runs}
    assert marks[plain.id] == (None, None)
    assert {marks[t["run"]] for t in state["trials"]} == {(sweep.id, n) for n in range(4)}
    alone = await get_json(jp_fetch, "runs", trials="0", limit="1")
    assert [r["id"] for r in alone["runs"]] == [plain.id] and alone["more"] is False
    error = await expect_error(jp_fetch, 400, "runs", params={"trials": "no"})
    assert "trials" in error["error"]


async def test_paging_of_sweeps(jp_fetch, home, tmp_path):
    first = start_sweep(tmp_path, trials=1).wait(timeout=120)
    time.sleep(0.05)  # newest first, by the spec's time
    second = start_sweep(tmp_path, trials=1).wait(timeout=120)
    page = await get_json(jp_fetch, "sweeps", limit="1")
    assert [s["id"] for s in page["sweeps"]] == [second.id] and page["more"] is True
    rest = await get_json(jp_fetch, "sweeps", limit="1", offset="1")
    assert [s["id"] for s in rest["sweeps"]] == [first.id] and rest["more"] is False


async def test_a_trial_not_yet_written_down_is_still_left_to_its_sweep(jp_fetch, sweep, home):
    """The driver writes a trial's run id just after the run is made; meanwhile the runs
    list knows the trial from its spec."""
    store = SweepStore(home)
    state = store.read_state(sweep.id)
    hidden = state["trials"][-1]["run"]
    state["trials"][-1]["run"] = None
    # a driver on another host counts as alive; no process of this host is named
    state.update(status="running", driver={"host": "elsewhere.invalid", "pid": dead_pid()})
    store.write_state(sweep.id, state)
    runs = (await get_json(jp_fetch, "runs", trials="0"))["runs"]
    assert runs == []
    row = next(r for r in (await get_json(jp_fetch, "runs"))["runs"] if r["id"] == hidden)
    assert (row["sweep"], row["trial"]) == (sweep.id, state["trials"][-1]["number"])


async def test_cancel_a_running_sweep(jp_fetch, home, tmp_path):
    sweep = start_sweep(tmp_path, trials=6, steps=200, pause=0.1)
    wait_for(
        lambda: sweep.state.get("counts", {}).get("running", 0) == 2, 120, what="two trials running"
    )
    runs = sweep.trials()
    wait_for(lambda: all(r.status == "running" for r in runs), 60, what="their runs running")
    row = (await get_json(jp_fetch, "sweeps"))["sweeps"][0]
    assert (row["status"], row["trials_started"], row["trials_done"]) == ("running", 2, 0)
    driver = sweep.state["driver"]["pid"]

    response = await jp_fetch(BASE, "sweeps", sweep.id, "cancel", method="POST", body=b"")
    assert response.code == 202
    assert json.loads(response.body) == {
        "id": sweep.id,
        "status": "running",
        "cancel_requested": True,
    }
    wait_for(lambda: sweep.done, 60, what="the sweep to end")
    shown = await get_json(jp_fetch, "sweeps", sweep.id)
    assert shown["status"] == "canceled"
    assert [t["status"] for t in shown["trials"]] == ["canceled", "canceled"]
    for run in runs:
        assert run.status == "canceled" and leftover(run.id) == []
    wait_for(lambda: not procs.is_alive(driver), 10, what="the driver to exit")
    error = await expect_error(jp_fetch, 409, "sweeps", sweep.id, "cancel", method="POST", body=b"")
    assert "already ended (canceled)" in error["error"]


async def test_cancel_a_sweep_whose_driver_is_gone(jp_fetch, sweep, home):
    driver = sweep.state["driver"]["pid"]
    wait_for(lambda: not procs.is_alive(driver), 10, what="the driver to exit")
    store = SweepStore(home)
    state = store.read_state(sweep.id)
    state.update(status="running", ended=None)
    state["trials"][-1].update(status="running", end=None)  # its run has ended meanwhile
    store.write_state(sweep.id, state)
    assert sweep.status == "interrupted"
    response = await jp_fetch(BASE, "sweeps", sweep.id, "cancel", method="POST", body=b"")
    assert response.code == 202 and json.loads(response.body)["status"] == "interrupted"
    shown = await get_json(jp_fetch, "sweeps", sweep.id)
    assert shown["status"] == "canceled"
    assert [t["status"] for t in shown["trials"]] == ["completed"] * 3 + ["canceled"]


@pytest.mark.parametrize("bad", [".hidden", "a%20b", "x" * 200, "-dash", "a..b"])
@pytest.mark.parametrize("method, tail", [("GET", ()), ("POST", ("cancel",))])
async def test_a_malformed_sweep_id_is_400(jp_fetch, home, bad, method, tail):
    body = b"" if method == "POST" else None
    error = await expect_error(jp_fetch, 400, "sweeps", bad, *tail, method=method, body=body)
    assert (
        error["error"].startswith("invalid sweep id ")
        and "jupyter-trainer sweeps" in error["error"]
        and error["type"] == "InvalidRunId"
    )


@pytest.mark.parametrize("bad", ["..", "..%2F..%2Fetc", "%2Fetc%2Fpasswd", "a%00b"])
async def test_traversal_in_a_sweep_id_is_refused(jp_fetch, home, bad):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, "sweeps", bad)
    assert info.value.code in (400, 404)


@pytest.mark.parametrize("method, tail", [("GET", ()), ("POST", ("cancel",))])
async def test_an_unknown_sweep_is_404(jp_fetch, home, method, tail):
    body = b"" if method == "POST" else None
    error = await expect_error(jp_fetch, 404, "sweeps", UNKNOWN, *tail, method=method, body=body)
    assert f"no sweep '{UNKNOWN}'" in error["error"] and error["type"] == "SweepNotFound"
    assert (await get_json(jp_fetch, "sweeps")) == {
        "sweeps": [],
        "limit": 50,
        "offset": 0,
        "more": False,
    }


async def test_unknown_routes_list_the_sweep_routes(jp_fetch, home):
    error = await expect_error(jp_fetch, 404, "sweeps", "x", "y")
    assert "sweeps/SWEEP/cancel" in error["error"]


async def test_the_sweep_view_socket_requires_auth_and_a_real_sweep(jp_ws_fetch, sweep):
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "sweeps", sweep.id, "view", headers={"Authorization": ""})
    assert info.value.code == 403
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "sweeps", UNKNOWN, "view")
    assert info.value.code == 404
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "sweeps", "..", "view")
    assert info.value.code in (400, 404)


async def test_the_sweep_view_socket_feeds_what_the_sweep_widget_shows(jp_ws_fetch, sweep):
    state = sweep.state
    viewer = Viewer(await jp_ws_fetch(BASE, "sweeps", sweep.id, "view"))
    model = await viewer.read_until(lambda m: m.get("state", {}).get("status") == "completed")
    assert model["sweep_id"] == sweep.id and model["spec"]["metric"] == "val_acc"
    assert [t["objective"] for t in model["state"]["trials"]] == [
        t["objective"] for t in state["trials"]
    ]
    assert model["state"]["best"] == state["best"] and "driver" not in model["state"]
    assert len(model["charts"]["best"]) == 4 and len(model["charts"]["lines"]) == 4
    # a sweep that ended cannot be canceled: the view says why; other messages are refused
    viewer.send({"msg": {"type": "cancel"}})
    model = await viewer.read_until(lambda m: "already ended" in m.get("cancel_state", ""))
    viewer.send({"msg": {"type": "open", "number": 0}})
    await viewer.read_until(lambda m: viewer.errors, timeout=10)
    assert "a sweep's view sends only" in viewer.errors[0]
    assert sweep.status == "completed"


async def test_cancel_through_the_sweep_view(jp_ws_fetch, home, tmp_path):
    sweep = start_sweep(tmp_path, steps=400, pause=0.1)
    wait_for(
        lambda: (
            sweep.state.get("counts", {}).get("running", 0) == 2
            and all(t.get("last") is not None for t in sweep.state["trials"])
        ),
        120,
        what="two trials running, each with a value logged",
    )
    viewer = Viewer(await jp_ws_fetch(BASE, "sweeps", sweep.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "running")
    viewer.send({"msg": {"type": "cancel"}})
    model = await viewer.read_until(
        lambda m: m.get("state", {}).get("status") == "canceled", timeout=120
    )
    assert model["cancel_state"] == "requested"
    trials = model["state"]["trials"]
    assert [t["status"] for t in trials] == ["canceled", "canceled"]
    # what each logged before the cancel, marked as no objective
    assert [t["reported"]["kind"] for t in trials] == ["last", "last"]
    assert [t["reported"]["value"] for t in trials] == [t["last"] for t in sweep.state["trials"]]
    for trial in sweep.state["trials"]:
        wait_for(lambda: leftover(trial["run"]) == [], 15, what=f"run {trial['run']} to end")


def test_an_empty_cancel_request_of_a_sweep_is_a_cancel_as_a_runs_is(sweep):
    """A request written on a full disk has no data (``write_cancel_request``); the driver
    reads it as a cancel without a reason, as a supervisor does a run's."""
    paths = sweep.sweeps.paths(sweep.id)
    paths.cancel_request.write_bytes(b"")
    try:
        assert sweep.sweeps.cancel_request(sweep.id) == {"reason": "canceled"}
    finally:
        paths.cancel_request.unlink()
