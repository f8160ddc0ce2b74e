"""Real IPython kernels through jupyter_client, for the tests of what runs in a kernel: each
IOPub message a kernel publishes is kept, a cell's value is read back as JSON, and messages
are sent to a widget as a front end would send them."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

import pytest
from jupyter_client.manager import start_new_kernel


class Kernel:
    """A real IPython kernel; records every IOPub message it publishes."""

    def __init__(self, **env: str) -> None:
        self.km, self.kc = start_new_kernel(kernel_name="python3", env={**os.environ, **env})
        self.messages: list[dict] = []

    def execute(
        self, code: str, timeout: float = 120, allow_stdin: bool = True, check: bool = True
    ) -> dict:
        """Run ``code``; returns the execute reply. Collects IOPub until the kernel is idle."""
        msg_id = self.kc.execute(code, allow_stdin=allow_stdin)
        self._collect_until_idle(msg_id, timeout)
        reply = self.kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=timeout)
        if check and reply["content"]["status"] != "ok":
            raise AssertionError(
                f"cell failed: {reply['content'].get('ename')}: "
                f"{reply['content'].get('evalue')}\n{self.text_of(msg_id)}"
            )
        return reply

    def _collect_until_idle(self, msg_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            msg["received"] = time.monotonic()
            self.messages.append(msg)
            if (
                msg["msg_type"] == "status"
                and msg["parent_header"].get("msg_id") == msg_id
                and msg["content"]["execution_state"] == "idle"
            ):
                return
        raise AssertionError(f"the kernel stayed busy for {timeout} s")

    def drain(self, seconds: float = 0.5) -> None:
        """Collect what background threads publish for a while."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except Exception:
                return
            msg["received"] = time.monotonic()
            self.messages.append(msg)

    def text_of(self, msg_id: str) -> str:
        return "".join(
            m["content"].get("text", "")
            for m in self.messages
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream"
        )

    def value(self, expr: str, timeout: float = 60):
        """``expr`` evaluated in the kernel, as JSON."""
        msg_id = self.kc.execute(f"import json as _j; print('@@' + _j.dumps({expr}))")
        self._collect_until_idle(msg_id, timeout)
        for line in self.text_of(msg_id).splitlines():
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise AssertionError(
            f"no value for {expr}: {[m['content'] for m in self.messages if m['parent_header'].get('msg_id') == msg_id][-3:]}"
        )

    def send_to_widget(self, comm_id: str, content: dict) -> None:
        msg = self.kc.session.msg(
            "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": content}}
        )
        self.kc.shell_channel.send(msg)

    def updates(self, comm_id: str) -> list[dict]:
        """The state updates the kernel sent to widget ``comm_id``, in order."""
        return [
            m
            for m in self.messages
            if m["msg_type"] == "comm_msg"
            and m["content"]["comm_id"] == comm_id
            and m["content"]["data"].get("method") == "update"
        ]

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def loaded_kernel(monitor: str, setup: str = ""):
    """A Kernel with ``JUPYTER_TRAINER_MONITOR=monitor``, the extension loaded and ``setup``
    run; yielded once, then closed."""
    k = Kernel(JUPYTER_TRAINER_MONITOR=monitor)
    try:
        k.execute("%load_ext jupyter_trainer\n" + setup)
        yield k
    finally:
        k.close()


@pytest.fixture
def kernel(home):
    """A kernel whose %%train cells show the widget."""
    yield from loaded_kernel("auto")


MONITORS = "__import__('jupyter_trainer.frontends.widgets.widget', fromlist=['x']).live_monitors()"


def monitor_of(kernel: Kernel, run_id: str) -> str:
    """An expression for the live monitor widget of ``run_id`` in the kernel."""
    return f"[m for m in {MONITORS} if m.run_id == {run_id!r}][-1]"


def wait_final(kernel: Kernel, run_id: str, timeout: float = 90) -> None:
    assert kernel.value(f"{monitor_of(kernel, run_id)}.wait_final({timeout})", timeout + 10)


def sent_dates(updates: list[dict]) -> list[float]:
    return [datetime.fromisoformat(str(u["header"]["date"])).timestamp() for u in updates]


def wire_size(msg: dict) -> int:
    return len(json.dumps(msg["content"]).encode()) + sum(len(b) for b in msg.get("buffers", []))
