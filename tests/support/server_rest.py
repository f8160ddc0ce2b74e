"""The REST API's test side: its base path, the in-process server's configuration (the
extension on, unauthenticated access refused), JSON and error requests, a finished run to ask
about, and ``Viewer``, one open run view on the WebSocket feed."""

from __future__ import annotations

import asyncio
import json

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_trainer.api import runs as api

BASE = "jupyter-trainer/api"


@pytest.fixture
def jp_server_config(home):
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_trainer": True},
            "allow_unauthenticated_access": False,
        }
    }


async def get_json(jp_fetch, *parts, **params):
    response = await jp_fetch(BASE, *parts, params=params)
    return json.loads(response.body)


async def expect_error(jp_fetch, code, *parts, method="GET", **kwargs):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, *parts, method=method, **kwargs)
    assert info.value.code == code
    return json.loads(info.value.response.body) if info.value.response.body else {}


def finished_run(
    name="srv",
    code="print('hi')\nfrom jupyter_trainer import runtime as jt\n"
    "for i in range(5): jt.log(step=i, x=i)",
):
    return api.submit(code, launcher="python", name=name, wait=True)


class Viewer:
    """One open view: every ``set`` merged into ``model``, as the front end does."""

    def __init__(self, ws):
        self.ws = ws
        self.model: dict = {}
        self.errors: list[str] = []
        self.logs: list = []

    async def read_until(self, ready, timeout=60.0):
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not ready(self.model):
            text = await asyncio.wait_for(self.ws.read_message(), max(0.1, end - loop.time()))
            assert text is not None, "the server closed the view"
            message = json.loads(text)
            if "error" in message:
                self.errors.append(message["error"])
                continue
            self.model.update(message["set"])
            if "log" in message["set"]:
                self.logs.append(message["set"]["log"])
        return self.model

    def send(self, message):
        self.ws.write_message(json.dumps(message))
