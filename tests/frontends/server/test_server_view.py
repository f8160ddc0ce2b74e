"""The run view's WebSocket feed on a real in-process jupyter_server: the same updates the
notebook widget gets as kernel messages, for the Lab view."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest
from conftest import leftover, wait_for
from support.server_rest import BASE, Viewer, jp_server_config  # noqa: F401 (jp_server_config: the server's configuration)
from tornado.httpclient import HTTPClientError

from jupyter_trainer.api import runs as api

pytest_plugins = ["pytest_jupyter.jupyter_server"]


def floats(text):
    return np.frombuffer(base64.b64decode(text), dtype="<f8").tolist()


async def test_the_view_socket_requires_auth_and_a_real_run(jp_ws_fetch, home):
    run = api.submit("print('x')", launcher="python", name="view-auth", wait=True)
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "runs", run.id, "view", headers={"Authorization": ""})
    assert info.value.code == 403
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "runs", "nope-20260101-000000-abcdef", "view")
    assert info.value.code == 404
    with pytest.raises(HTTPClientError) as info:
        await jp_ws_fetch(BASE, "runs", "..", "view")
    assert info.value.code in (400, 404)


async def test_a_finished_run_is_sent_as_the_widget_shows_it(jp_ws_fetch, home):
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "for i in range(20):\n    print('rank', jt.rank, 'line', i, flush=True)\n"
        "    jt.log(step=i, loss=1.0 / (i + 1), phase='train')\n"
        "    jt.progress(i + 1, 20)\n"
    )
    run = api.submit(code, procs=2, name="view-done", wait=True)
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    model = await viewer.read_until(
        lambda m: (
            m.get("state", {}).get("status") == "completed"
            and m.get("charts", {}).get("charts")
            and m.get("log")
            and not m.get("loading", True)
        )
    )
    assert model["run_id"] == run.id and model["info"]["name"] == "view-done"
    assert model["info"]["procs"] == 2 and model["progress"]["done"] == 20
    assert [m["name"] for m in model["metrics"]] == ["loss"]
    assert model["texts"] == {"phase": {"0": "train", "1": "train"}}
    chart = model["charts"]["charts"]["loss"]
    assert [s["label"] for s in chart["series"]] == ["rank 0", "rank 1"]
    assert floats(chart["series"][0]["x"]) == list(range(20))
    assert floats(chart["series"][0]["y"]) == [1.0 / (i + 1) for i in range(20)]
    lines = [tuple(pair) for payload in viewer.logs for pair in payload["lines"]]
    assert sorted(lines) == sorted((r, f"rank {r} line {i}") for r in (0, 1) for i in range(20))
    assert model["state"]["outputs"]["files"] == []

    # The viewer's choices: the mean of the ranks, then rank 1's log alone.
    viewer.send({"set": {"chart_options": {"x": "step", "agg": "mean", "selected": ["loss"]}}})
    model = await viewer.read_until(lambda m: m["charts"]["agg"] == "mean")
    assert [s["label"] for s in model["charts"]["charts"]["loss"]["series"]] == ["mean of 2 ranks"]
    viewer.send({"set": {"log_selection": "1"}})
    model = await viewer.read_until(lambda m: m["log"]["selection"] == "1")
    assert model["log"]["reset"] and {r for r, _ in model["log"]["lines"]} == {1}


@pytest.mark.parametrize(
    "message, says",
    [
        ({"set": {"state": {}}}, "only chart_options and log_selection"),
        ({"set": {"chart_options": {"x": "bogus"}}}, 'x is "step" or "time"'),
        ({"set": {"log_selection": "../etc"}}, 'log_selection is "all" or a rank'),
        ({"msg": {"type": "shutdown"}}, "unknown message type 'shutdown'"),
        ([1, 2], 'send {"set"'),
    ],
)
async def test_bad_messages_are_refused_and_change_nothing(jp_ws_fetch, home, message, says):
    run = api.submit("print('x')", launcher="python", name="view-bad", wait=True)
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "completed")
    viewer.send(message)
    await viewer.read_until(lambda m: viewer.errors, timeout=10)
    assert says in viewer.errors[0]
    viewer.send({"set": {"log_selection": "0"}})  # the socket still answers
    model = await viewer.read_until(lambda m: m.get("log", {}).get("selection") == "0")
    assert model["log"]["lines"] == [[0, "x"]]


async def test_cancel_through_the_view(jp_ws_fetch, home):
    run = api.submit(
        "import time\nfor i in range(600):\n    time.sleep(0.1)",
        launcher="python",
        name="view-cancel",
    )
    wait_for(lambda: run.status == "running", what="running")
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "running")
    viewer.send({"msg": {"type": "cancel"}})
    model = await viewer.read_until(lambda m: m.get("state", {}).get("status") == "canceled")
    assert model["cancel_state"] == "requested"
    assert leftover(run.id) == []
    viewer.send({"msg": {"type": "cancel"}})  # a run that ended says so
    model = await viewer.read_until(lambda m: "already ended" in m.get("cancel_state", ""))


async def test_a_deeply_nested_message_is_refused_and_the_socket_still_answers(jp_ws_fetch, home):
    run = api.submit("print('x')", launcher="python", name="view-deep", wait=True)
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "completed")
    # Past Python's recursion limit; brackets inside strings do not count.
    viewer.ws.write_message(
        '{"set": {"log_selection": "' + "[" * 100 + '"}, "x": ' + "[" * 50_000 + "]" * 50_000 + "}"
    )
    await viewer.read_until(lambda m: viewer.errors, timeout=10)
    assert viewer.errors == ["message nested deeper than 8 levels"]
    viewer.send({"set": {"log_selection": "0"}})
    model = await viewer.read_until(lambda m: m.get("log", {}).get("selection") == "0")
    assert model["log"]["lines"] == [[0, "x"]]
    viewer.send(
        {"set": {"chart_options": {"x": "step", "agg": "mean", "selected": ["[{" * 20] * 3}}}
    )  # strings, not depth
    model = await viewer.read_until(lambda m: m.get("charts", {}).get("agg") == "mean")
    assert len(viewer.errors) == 1


async def test_a_message_over_the_size_limit_closes_the_socket_with_1009(jp_ws_fetch, home):
    run = api.submit("print('x')", launcher="python", name="view-big", wait=True)
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "completed")
    viewer.send({"set": {"log_selection": "x" * (2 << 20)}})  # 2 MiB; the limit is 256 KiB
    while (text := await asyncio.wait_for(viewer.ws.read_message(), 10)) is not None:
        assert "error" not in json.loads(text)  # closed, not parsed and answered
    assert viewer.ws.close_code == 1009
    # Another viewer is served as before.
    again = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await again.read_until(lambda m: m.get("state", {}).get("status") == "completed")
