"""The REST API on a real in-process jupyter_server, unauthenticated access disallowed."""

from __future__ import annotations

import json

import pytest
from conftest import leftover, wait_for
from support.server_rest import BASE, expect_error, finished_run, get_json, jp_server_config  # noqa: F401 (jp_server_config: the server's configuration)
from tornado.httpclient import HTTPClientError

from jupyter_trainer.api import runs as api

pytest_plugins = ["pytest_jupyter.jupyter_server"]

ENDPOINTS = [
    ("GET", ("version",)),
    ("GET", ("runs",)),
    ("GET", ("runs", "RUN")),
    ("GET", ("runs", "RUN", "events")),
    ("GET", ("runs", "RUN", "logs")),
    ("GET", ("runs", "RUN", "stream")),
    ("POST", ("runs", "RUN", "cancel")),
]


@pytest.mark.parametrize("method, parts", ENDPOINTS)
async def test_every_endpoint_requires_auth(jp_fetch, method, parts, home):
    run = finished_run()
    parts = tuple(run.id if p == "RUN" else p for p in parts)
    body = b"" if method == "POST" else None
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, *parts, method=method, body=body, headers={"Authorization": ""})
    assert info.value.code == 403
    if method == "GET" and parts[-1] != "stream":
        response = await jp_fetch(BASE, *parts, method=method)
        assert response.code == 200


async def test_list_filter_and_page(jp_fetch, home):
    ids = [finished_run(name=f"page-{i}").id for i in range(3)]
    page = await get_json(jp_fetch, "runs", limit="2")
    assert [r["id"] for r in page["runs"]] == ids[::-1][:2] and page["more"] is True
    assert page["runs"][0]["progress"] is None  # these runs report no progress
    rest = await get_json(jp_fetch, "runs", limit="2", offset="2")
    assert [r["id"] for r in rest["runs"]] == [ids[0]] and rest["more"] is False
    assert (await get_json(jp_fetch, "runs", name="page-1"))["runs"][0]["id"] == ids[1]
    assert (await get_json(jp_fetch, "runs", status="failed"))["runs"] == []
    error = await expect_error(jp_fetch, 400, "runs", params={"status": "nope"})
    assert "unknown status 'nope'" in error["error"]
    error = await expect_error(jp_fetch, 400, "runs", params={"limit": "lots"})
    assert "limit" in error["error"]


async def test_run_events_and_logs_incrementally(jp_fetch, home):
    run = finished_run()
    detail = await get_json(jp_fetch, "runs", run.id)
    assert detail["state"]["status"] == "completed" and detail["spec"]["name"] == "srv"
    first = await get_json(jp_fetch, "runs", run.id, "events", rank="0")
    assert [e["step"] for e in first["events"] if e["kind"] == "metric"] == [0, 1, 2, 3, 4]
    again = await get_json(
        jp_fetch, "runs", run.id, "events", rank="0", offset=str(first["offset"])
    )
    assert again["events"] == [] and again["offset"] == first["offset"]
    logs = await get_json(jp_fetch, "runs", run.id, "logs", rank="0")
    assert logs["text"] == "hi\n"


async def test_list_shows_the_slowest_ranks_progress(jp_fetch, home):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\n"
        "for i in range(1, 8):\n    jt.progress(i * (jt.rank + 1), 20)\n",
        procs=2,
        name="prog",
        wait=True,
    )
    row = (await get_json(jp_fetch, "runs"))["runs"][0]
    assert row["id"] == run.id
    assert row["progress"]["done"] == 7 and row["progress"]["total"] == 20


@pytest.mark.parametrize("bad", ["..", "..%2F..%2Fetc", "%2Fetc%2Fpasswd", "a%00b", ".hidden"])
async def test_traversal_in_a_run_id_is_refused(jp_fetch, home, bad):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, "runs", bad, "logs")
    assert info.value.code in (400, 404)


async def test_unknown_run_is_404(jp_fetch, home):
    error = await expect_error(jp_fetch, 404, "runs", "nope-20260101-000000-abcdef")
    assert "no run 'nope-20260101-000000-abcdef'" in error["error"]


async def test_cancel_a_live_run(jp_fetch, home):
    run = api.submit(
        "import time\nfor i in range(600):\n    time.sleep(0.1)",
        launcher="python",
        name="srv-cancel",
    )
    wait_for(lambda: run.status == "running", what="running")
    response = await jp_fetch(BASE, "runs", run.id, "cancel", method="POST", body=b"")
    assert response.code == 202
    run.wait(timeout=15, raise_on_failure=False)
    assert run.status == "canceled" and leftover(run.id) == []
    error = await expect_error(jp_fetch, 409, "runs", run.id, "cancel", method="POST", body=b"")
    assert "already ended (canceled)" in error["error"]


def stream_messages(body: bytes) -> list[tuple[str, dict]]:
    """(event kind, payload) of each server-sent event in ``body``."""
    blocks = [block for block in body.decode().split("\n\n") if block]
    return [
        (
            b.split("\n")[0].removeprefix("event: "),
            json.loads(b.split("\n", 1)[1].removeprefix("data: ")),
        )
        for b in blocks
    ]


async def test_stream_sends_state_events_logs_and_end(jp_fetch, home):
    run = api.submit(
        "import time\nfrom jupyter_trainer import runtime as jt\n"
        "for i in range(10):\n    print('line', i, flush=True)\n"
        "    jt.log(step=i, x=i)\n    time.sleep(0.05)",
        launcher="python",
    )
    response = await jp_fetch(BASE, "runs", run.id, "stream", request_timeout=60)
    kinds, payloads = zip(*stream_messages(response.body))
    assert kinds[0] == "state" and kinds[-1] == "end"
    steps = [
        e["step"]
        for k, p in zip(kinds, payloads)
        if k == "events"
        for e in p["events"]
        if e["kind"] == "metric"
    ]
    logs = "".join(p["text"] for k, p in zip(kinds, payloads) if k == "log")
    assert steps == list(range(10)) and logs == "".join(f"line {i}\n" for i in range(10))
    assert payloads[-1]["status"] == "completed"


async def test_stream_resumes_each_rank_from_the_offsets_given(jp_fetch, home):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\nfor i in range(6):\n"
        "    print('rank', jt.rank, 'line', i, flush=True)\n    jt.log(step=i, x=i)",
        procs=2,
        name="srv-resume",
        wait=True,
    )
    whole = stream_messages((await jp_fetch(BASE, "runs", run.id, "stream")).body)
    last = {(kind, p["rank"]): p["offset"] for kind, p in whole if kind in ("events", "log")}
    assert set(last) == {("events", 0), ("events", 1), ("log", 0), ("log", 1)}

    # rank 0 resumed at its end, rank 1 from its middle (after its first three events)
    events_1 = run.store.existing(run.id).events_file(1).read_bytes()
    cut = len(b"".join(events_1.splitlines(keepends=True)[:3]))
    resumed = stream_messages(
        (
            await jp_fetch(
                BASE,
                "runs",
                run.id,
                "stream",
                params={"events": f"0:{last['events', 0]},1:{cut}", "logs": f"0:{last['log', 0]}"},
            )
        ).body
    )
    kinds = [kind for kind, _ in resumed]
    assert kinds[0] == "state" and kinds[-1] == "end"
    sent = {(kind, p["rank"]) for kind, p in resumed if kind in ("events", "log")}
    assert sent == {("events", 1), ("log", 1)}
    resent = [e for kind, p in resumed if kind == "events" for e in p["events"]]
    assert resent == [json.loads(line) for line in events_1.splitlines()[3:]]
    log_1 = "".join(p["text"] for kind, p in resumed if kind == "log")
    assert log_1 == "".join(f"rank 1 line {i}\n" for i in range(6))


@pytest.mark.parametrize(
    "query",
    [
        {"events": "0"},
        {"events": "0:-5"},
        {"logs": "a:1"},
        {"events": "0:1,0:2"},
        {"logs": "0:\u0661"},
        {"events": "0:" + "9" * 40},
    ],
)
async def test_stream_refuses_bad_offsets(jp_fetch, home, query):
    run = finished_run()
    error = await expect_error(jp_fetch, 400, "runs", run.id, "stream", params=query)
    assert "rank:offset" in error["error"] or "twice" in error["error"]


async def test_a_damaged_record_is_409_with_the_fix_and_the_run_can_be_canceled(jp_fetch, home):
    """A run whose spec is truncated answers 409 naming the file and `doctor --fix`, never
    500; a running run whose state.json is gone is still canceled (its supervisor, stopped
    meanwhile so that it cannot write the state again, is found by its pid record)."""
    import os
    import signal

    ended = finished_run(name="srv-spec")
    spec = ended.store.paths(ended.id).spec
    os.chmod(spec, 0o644)
    spec.write_text(spec.read_text()[:40])
    error = await expect_error(jp_fetch, 409, "runs", ended.id)
    assert error["type"] == "RecordDamaged" and f"spec {spec} is not valid JSON" in error["error"]
    assert "`jupyter-trainer doctor --fix`" in error["error"]
    assert [r["id"] for r in (await get_json(jp_fetch, "runs"))["runs"]] == [ended.id]

    run = api.submit(
        "import time\nfor i in range(600):\n    time.sleep(0.1)",
        launcher="python",
        name="srv-no-state",
    )
    wait_for(lambda: run.store.index.row(run.id)["status"] == "running", what="running")
    state = run.store.paths(run.id).state
    supervisor = run.state["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    try:
        state.unlink()
        error = await expect_error(jp_fetch, 409, "runs", run.id)
        assert f"state {state} is missing" in error["error"] and "doctor --fix" in error["error"]
        rows = (await get_json(jp_fetch, "runs"))["runs"]
        assert rows[0]["id"] == run.id and f"state {state} is missing" in rows[0]["damaged"]
        response = await jp_fetch(BASE, "runs", run.id, "cancel", method="POST", body=b"")
        assert response.code == 202 and json.loads(response.body)["status"] == "running"
    finally:
        os.kill(supervisor, signal.SIGCONT)
    run.wait(timeout=30, raise_on_failure=False)
    assert run.status == "canceled" and run.state["reason"] == "canceled from JupyterLab"
    wait_for(lambda: leftover(run.id) == [], timeout=10, what="every process of the run to end")


class _Routes:
    def __init__(self):
        self.settings = {"base_url": "/"}
        self.routes = []

    def add_handlers(self, host, routes):
        self.routes.extend(routes)


def test_every_route_of_the_extension_is_decorated_for_auth():
    """jupyter_server's own check, on every route the extension adds: each verb a handler
    implements carries ``@web.authenticated`` (or ``@ws_authenticated``)."""
    from jupyter_server.base.handlers import JupyterHandler
    from jupyter_server.serverapp import ServerWebApplication
    from tornado import web

    from jupyter_trainer.frontends.server.routes import setup_handlers

    check = ServerWebApplication._check_handler_auth

    class Undecorated(JupyterHandler):
        def get(self):
            pass

        @web.authenticated
        def post(self):
            pass

    assert check(None, "/x", Undecorated) == ["- GET of Undecorated registered for /x"]
    app = _Routes()
    setup_handlers(app)
    handlers = {route[1].__name__ for route in app.routes}
    assert {"RunsHandler", "ViewSocket", "NotFoundHandler"} <= handlers and len(app.routes) > 15
    missing = [
        line for pattern, handler, *_ in app.routes for line in check(None, pattern, handler)
    ]
    assert missing == []
