"""What a ``%%train`` cell shows in a real kernel when its run fails or waits in a debugger:
the rank's traceback once, above a short error; and under ``--debug`` pdb in the waiting
cell itself, through the kernel's input box, where a person can answer it."""

from __future__ import annotations

import os

import pytest
from conftest import leftover

from jupyter_trainer.api import runs as api

FAILING = "%%train --launcher python\nx = 1\nraise ValueError('bad batch 3')\n"
RAISED = "raise ValueError('bad batch 3')"


@pytest.fixture
def kernel(home):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        kc.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def shown(messages: list[dict]) -> tuple[str, list[str]]:
    """Everything the cell's outputs say as text, and its error's traceback lines."""
    text, error = [], []
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            text.append(content["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            text.append(str(content["data"].get("text/plain", "")))
        elif msg["msg_type"] == "error":
            error = content["traceback"]
    return "\n".join(text), error


@pytest.mark.parametrize("person", [True, False], ids=["widget", "papermill-like"])
def test_a_failed_cell_shows_the_ranks_traceback_once_and_raises_a_short_error(kernel, person):
    out: list[dict] = []
    reply = kernel.execute_interactive(
        FAILING, allow_stdin=person, output_hook=out.append, timeout=120
    )
    assert reply["content"]["status"] == "error"
    text, error = shown(out)
    assert error[0].startswith("RunFailed: run ") and "ValueError: bad batch 3" in error[0]
    if person:  # the widget's banner shows it: the error does not repeat it
        assert not any(RAISED in line for line in error), error
        assert len(error) <= 2, error
    else:  # headless, the error is what a CI log shows: it has it, and the summary not
        assert sum(RAISED in line for line in error) == 1, error
        assert RAISED not in text, text
    [run] = api.runs()
    assert RAISED in run.state["traceback"] and leftover(run.id) == []


DEBUGGED = """%%train --launcher python --debug
lr = 0.25
raise ValueError(f"bad batch {lr}")
"""


def test_a_debug_cell_offers_pdb_in_its_own_input_box_while_it_waits(kernel):
    """The banner's `%train debug RUN` would queue behind this busy cell: the cell itself
    asks, and pdb runs in it."""
    answers, prompts, out = iter(["", "p lr * 2", "q"]), [], []

    def answer(msg):
        prompts.append(msg["content"]["prompt"])
        kernel.input(next(answers))

    reply = kernel.execute_interactive(
        DEBUGGED, allow_stdin=True, stdin_hook=answer, output_hook=out.append, timeout=180
    )
    text, error = shown(out)
    assert prompts[0].startswith("Debug rank 0 here?"), prompts
    assert "jupyter-trainer debug " in prompts[0]
    assert prompts[1:] == ["(Pdb) ", "(Pdb) "], prompts
    assert "DEBUGGING: rank 0: ValueError: bad batch 0.25 at Cell In [2], line 3" in text, text
    assert "post-mortem of rank 0" in text and "0.5" in text
    assert reply["content"]["status"] == "error" and error[0].startswith("RunFailed: ")
    [run] = api.runs()
    assert run.store.rank_records(run.id)[0]["debugged"] == "quit"
    assert leftover(run.id) == []


def test_a_cell_nobody_can_answer_asks_nothing_and_a_breakpoint_goes_on(kernel):
    asked: list[dict] = []
    reply = kernel.execute_interactive(
        "%%train --launcher python\nfrom jupyter_trainer import runtime as jt\n"
        "jt.breakpoint(timeout=2)\nprint('went on')\n",
        allow_stdin=False,
        stdin_hook=asked.append,
        timeout=120,
    )
    assert reply["content"]["status"] == "ok" and asked == []
    [run] = api.runs()
    assert "went on" in run.logs(0) and leftover(run.id) == []
