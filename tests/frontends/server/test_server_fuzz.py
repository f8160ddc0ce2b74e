"""Property-based test of the REST API: every route, every parameter, hostile values.

A real ``jupyter server`` (a subprocess, token auth) serves a store with a finished run, a
live run and a run whose events hold values that do not decode from the middle (a
5,000-digit number, deeply nested brackets). Hypothesis sends numbers in every spelling
(other scripts' digits, signs, spaces, underscores, 2**44 and far past 2**62), rank:offset
lists, random run ids and paths, and checks that no answer is a 5xx, that every error is
JSON with a message, that out-of-range numbers answer 400 naming the argument, and that a
stream ends with an ``end`` event.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.parse
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.lab_server import JupyterLab

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.server.base import API_PREFIX, MAX_OFFSET, MAX_RANK
from jupyter_trainer.store import HOME_ENV

SETTINGS = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
BIG = [
    str(1 << 44),
    str(MAX_OFFSET),
    str(MAX_OFFSET + 1),
    str(1 << 63),
    str(1 << 64),
    "9" * 19,
    "9" * 40,
    "0" * 30 + "7",
    str(MAX_RANK),
    str(MAX_RANK + 1),
]
ODD = [
    "-1",
    "+5",
    " 5",
    "5 ",
    "1_000",
    "\u0663",
    "\u0661\u0662",
    "\uff15",
    "0x10",
    "1e3",
    "1.0",
    "",
    " ",
    "NaN",
    "inf",
    "5\x00",
    "%",
    "-0",
    "\u00b2",
]
NUMBERS = st.one_of(
    st.integers(0, 1 << 66).map(str), st.sampled_from(BIG + ODD), st.text(max_size=12)
)


class Api:
    """Requests to the server with its token; answers (status, content type, body)."""

    def __init__(self, server: JupyterLab) -> None:
        self.server = server

    def call(
        self, method: str, path: str, query: dict[str, str] | None = None, timeout: float = 30
    ) -> tuple[int, str, bytes]:
        url = f"/{API_PREFIX}/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=timeout)
        try:
            conn.request(
                method,
                url,
                body=b"" if method in ("POST", "PUT") else None,
                headers={"Authorization": f"token {self.server.token}"},
            )
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type") or "", response.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz")
    home = base / "jt-home"
    finished = api.submit(
        "print('hi')\nfrom jupyter_trainer import runtime as jt\n"
        "for i in range(5):\n    jt.log(step=i, x=i)\n"
        "jt.log(step=5, digits='n' + '1' * 5000, nested='[' * 5000)\n",
        launcher="python",
        name="fuzz",
        wait=True,
        home=home,
    )
    live = api.submit(
        "import time\ntime.sleep(600)\n", launcher="python", name="fuzz-live", home=home
    )
    server = JupyterLab(base / "server", {**os.environ, HOME_ENV: str(home)}, app="jupyter_server")
    try:
        wait_for(lambda: live.status == "running", what="the live run to be running")
        yield {
            "api": Api(server),
            "finished": finished,
            "live": live,
            "events_size": (finished.path / "events" / "rank-0.jsonl").stat().st_size,
        }
    finally:
        server.stop()
        if not live.done:
            live.cancel(wait=True, timeout=30)
        for run in (finished, live):
            wait_for(
                lambda run=run: leftover(run.id) == [],
                timeout=15,
                what=f"no process of {run.id} left",
            )


def check_answer(status: int, content_type: str, body: bytes) -> dict | None:
    """No 5xx; an error is JSON with a message. Returns the JSON body, if any."""
    assert status < 500, (status, body[:500])
    if status >= 400:
        assert content_type.startswith("application/json"), (status, content_type, body[:200])
        data = json.loads(body)
        message = data.get("error") or data.get("message")
        assert isinstance(message, str) and message.strip(), data
        return data
    if content_type.startswith("application/json"):
        return json.loads(body)
    return None


def in_range(raw: str, high: int, low: int = 0) -> bool:
    return bool(re.fullmatch(r"[0-9]+", raw)) and low <= int(raw) <= high


def run_id_of(rest, which: str) -> str:
    return {
        "finished": rest["finished"].id,
        "live": rest["live"].id,
        "missing": "nope-20260101-000000-abcdef",
    }[which]


RUN_IDS = st.one_of(
    st.sampled_from(["finished", "live", "missing"]),
    st.text(min_size=1, max_size=40).map(lambda t: "raw:" + t),
)


def path_id(rest, which: str) -> str:
    if which.startswith("raw:"):
        return urllib.parse.quote(which[4:], safe="")
    return run_id_of(rest, which)


@SETTINGS
@given(
    limit=st.one_of(st.none(), NUMBERS),
    offset=st.one_of(st.none(), NUMBERS),
    status=st.one_of(
        st.none(), st.sampled_from(["completed", "running", "lost", "nope"]), st.text(max_size=10)
    ),
    name=st.one_of(st.none(), st.text(max_size=120)),
)
@example(limit="1000", offset=str(1 << 62), status=None, name=None)
@example(limit="\u0663", offset=None, status=None, name=None)
def test_runs_list(rest, limit, offset, status, name):
    query = {
        k: v
        for k, v in {"limit": limit, "offset": offset, "status": status, "name": name}.items()
        if v is not None
    }
    status_code, kind, body = rest["api"].call("GET", "runs", query)
    data = check_answer(status_code, kind, body)
    for arg, value, low, high in (("limit", limit, 1, 1000), ("offset", offset, 0, MAX_OFFSET)):
        if value is not None and not in_range(value, high, low):
            assert status_code == 400 and f"query argument {arg}=" in data["error"], data
            assert f"from {low} to {high}" in data["error"]
            break
    if status_code == 200:
        assert isinstance(data["runs"], list)


@SETTINGS
@given(
    field=st.sampled_from(["events", "logs"]),
    which=RUN_IDS,
    rank=st.one_of(st.none(), NUMBERS, st.sampled_from(["0", "1"])),
    offset=st.one_of(st.none(), NUMBERS, st.integers(0, 40000).map(str)),
)
@example(field="logs", which="finished", rank=None, offset=str(1 << 44))
@example(field="events", which="finished", rank=None, offset=str(1 << 44))
@example(field="events", which="finished", rank="0", offset=str(MAX_OFFSET))
@example(field="logs", which="finished", rank="0", offset=str(MAX_OFFSET + 1))
def test_rank_reads(rest, field, which, rank, offset):
    query = {k: v for k, v in {"rank": rank, "offset": offset}.items() if v is not None}
    status, kind, body = rest["api"].call("GET", f"runs/{path_id(rest, which)}/{field}", query)
    data = check_answer(status, kind, body)
    bad = [
        arg
        for arg, value, high in (("rank", rank, MAX_RANK), ("offset", offset, MAX_OFFSET))
        if value is not None and not in_range(value, high)
    ]
    if which in ("finished", "live"):
        if bad:
            assert status == 400 and f"query argument {bad[0]}=" in data["error"]
        else:
            assert status == 200, data
            start = int(offset or 0)
            assert data["offset"] >= start
            if start >= 1 << 40:  # past the end of any file here
                assert (
                    data["offset"] == start and not data["events" if field == "events" else "text"]
                )
    elif which == "missing":
        assert status in (400, 404)


def offsets_text(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f"{rank}:{offset}" for rank, offset in pairs)


OFFSETS = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.lists(
        st.tuples(
            st.one_of(NUMBERS, st.sampled_from(["0", "1"])),
            st.one_of(NUMBERS, st.integers(0, 40000).map(str)),
        ),
        max_size=4,
    ).map(offsets_text),
)


@SETTINGS
@given(which=RUN_IDS.filter(lambda w: w != "live"), events=OFFSETS, logs=OFFSETS)
@example(which="finished", events=None, logs=f"0:{1 << 44}")
@example(which="finished", events=f"0:{1 << 44}", logs=f"0:{MAX_OFFSET}")
@example(which="finished", events="0:1,0:2", logs=None)
def test_stream(rest, which, events, logs):
    query = {k: v for k, v in {"events": events, "logs": logs}.items() if v is not None}
    status, kind, body = rest["api"].call("GET", f"runs/{path_id(rest, which)}/stream", query)
    check_answer(status, kind, body)
    if status == 200:
        blocks = [b for b in body.decode().split("\n\n") if b]
        kinds = [b.split("\n")[0].removeprefix("event: ") for b in blocks]
        for block in blocks:
            json.loads(block.split("\n", 1)[1].removeprefix("data: "))
        assert kinds[0] == "state" and kinds[-1] == "end", kinds
    elif which == "finished":
        assert status == 400


@SETTINGS
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.one_of(
        st.sampled_from(
            [
                "version",
                "runs",
                "runs/",
                "runs/RUN",
                "runs/RUN/events",
                "runs/RUN/logs",
                "runs/RUN/cancel",
                "runs/RUN/nope",
                "nope",
                "runs/RUN/events/extra",
                "",
            ]
        ),
        st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4).map(
            lambda parts: "/".join(urllib.parse.quote(p, safe="") for p in parts)
        ),
    ),
    which=RUN_IDS.filter(lambda w: w != "live"),
)
def test_every_route_and_method(rest, method, path, which):
    path = path.replace("RUN", path_id(rest, which))
    status, kind, body = rest["api"].call(method, path)
    check_answer(status, kind, body)


@pytest.mark.parametrize(
    "path",
    [
        "runs/%FF/logs",
        "runs/RUN/logs?offset=%FF",
        "runs/RUN/stream?logs=0:%C0%AF",
        "runs?name=%FF%FE",
        "runs/RUN/events?rank=%00",
        "runs/%2e%2e/logs",
        "runs/RUN/",
    ],
)
def test_bytes_that_are_not_utf8_or_not_a_route(rest, path):
    status, kind, body = rest["api"].call("GET", path.replace("RUN", rest["finished"].id))
    check_answer(status, kind, body)
    assert 400 <= status < 500


def test_cancel_answers_202_then_409(rest):
    api_ = rest["api"]
    status, kind, body = api_.call("POST", f"runs/{rest['finished'].id}/cancel")
    assert status == 409 and "already ended" in check_answer(status, kind, body)["error"]
    status, kind, body = api_.call("POST", f"runs/{rest['live'].id}/cancel")
    assert status == 202, body
    rest["live"].wait(timeout=30, raise_on_failure=False)
    assert rest["live"].status == "canceled" and leftover(rest["live"].id) == []
    status, kind, body = api_.call("POST", f"runs/{rest['live'].id}/cancel")
    assert status == 409


def test_unauthenticated_is_refused_everywhere(rest):
    server = rest["api"].server
    for path in ("version", "runs", f"runs/{rest['finished'].id}/stream", "nope"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("GET", f"/{API_PREFIX}/{path}")
            assert conn.getresponse().status == 403
        finally:
            conn.close()


def test_the_events_file_is_big_enough_to_aim_into(rest):
    """The offsets drawn above (0 to 40000) land inside the long lines of the events file."""
    assert 10000 < rest["events_size"] < 40000
    assert Path(rest["finished"].path / "events" / "rank-0.jsonl").is_file()
