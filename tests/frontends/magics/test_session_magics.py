"""Live sessions driven from real kernels: the shipped notebook under papermill, the cells
``%%train --session`` refuses, a failing session cell's traceback, and what the kernel's
interrupt and restart leave of a session (it goes on; a new kernel reattaches by name)."""

from __future__ import annotations

import time

import nbformat
import papermill
import pytest
from conftest import REPO, leftover, wait_for
from support.kernel_client import Kernel

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.frontends.commands.options import cell_parser
from jupyter_trainer.frontends.magics.session import run_session_cell

SLEEPING = "%%train --session s1\nimport time\nprint('asleep', flush=True)\ntime.sleep(60)\n"


@pytest.fixture
def stopped_after(home):
    """Every session this test started is stopped at its end, and none leaves a process."""
    yield home
    for live in jt.sessions(home=home):
        live.stop()
    for run in api.runs(home=home):
        assert run.status in ("completed", "failed", "canceled"), (run.id, run.status)
        assert leftover(run.id) == [], run.id


@pytest.fixture
def kernel(stopped_after):
    k = Kernel(JUPYTER_TRAINER_MONITOR="text")
    try:
        k.execute("%load_ext jupyter_trainer")
        yield k
    finally:
        if k.km.has_kernel:
            k.close()


def outputs(kernel: Kernel, reply: dict) -> tuple[str, dict]:
    """What a cell printed, and its error's content (empty when it ended well)."""
    msg_id = reply["parent_header"]["msg_id"]
    errors = [
        m["content"]
        for m in kernel.messages
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "error"
    ]
    return kernel.text_of(msg_id), errors[-1] if errors else {}


def cell(kernel: Kernel, code: str, timeout: float = 120) -> tuple[str, dict]:
    return outputs(kernel, kernel.execute(code, timeout=timeout, check=False))


def printed_since(kernel: Kernel, msg_id: str, text: str, timeout: float) -> None:
    """Read the kernel's IOPub until the running cell ``msg_id`` has printed ``text``."""
    deadline = time.monotonic() + timeout
    while text not in kernel.text_of(msg_id):
        if time.monotonic() > deadline:
            raise AssertionError(f"the cell did not print {text!r} in {timeout} s")
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.5)
        except Exception:
            continue
        msg["received"] = time.monotonic()
        kernel.messages.append(msg)


def test_the_shipped_notebook_trains_pulls_saves_and_reruns_under_papermill(
    stopped_after, tmp_path
):
    out = tmp_path / "sessions.out.ipynb"
    papermill.execute_notebook(
        str(REPO / "notebooks" / "sessions.ipynb"),
        str(out),
        kernel_name="python3",
        cwd=str(REPO / "notebooks"),
        progress_bar=False,
    )
    text = "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "")
        for c in nbformat.read(out, as_version=4).cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    for line in ("[rank 0] rank 0: step 5", "[rank 1] rank 1: step 5", "lr 0.01"):
        assert line in text, text
    assert "torch.Size([10, 64])" in text and "session demo stopped" in text, text
    assert jt.sessions(home=stopped_after) == []
    runs = api.runs(home=stopped_after)
    assert sorted(r.name for r in runs) == ["demo", "demo-saved", "demo-saved"]
    [session] = [r for r in runs if r.name == "demo"]
    [saved] = [r for r in runs if r.name == "demo-saved" and not r.spec.lineage]
    [again] = [r for r in runs if r.spec.lineage]
    assert saved.spec.origin["session"] == session.id
    assert again.spec.lineage["rerun_of"] == saved.id


def test_a_failing_session_cell_fails_the_notebook_with_the_ranks_traceback(
    stopped_after, tmp_path
):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell("%train session start s2 --procs 2"),
        nbformat.v4.new_code_cell(
            "%%train --session s2\nbatch = 3\n\nraise ValueError(f'bad batch {batch}')"
        ),
        nbformat.v4.new_code_cell("print('must not run')"),
    ]
    src, out = tmp_path / "fail.ipynb", tmp_path / "fail.out.ipynb"
    nbformat.write(nb, src)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False)
    error = info.value
    assert error.ename == "CellFailed", error.ename
    assert "the cell raised in session 's2' (the session goes on)" in error.evalue
    assert "ranks 0, 1:" in error.evalue, error.evalue
    assert "Cell In [3], line 4" in error.evalue, error.evalue
    assert "ValueError: bad batch 3" in error.evalue
    assert nbformat.read(out, as_version=4).cells[-1].outputs == []
    [live] = jt.sessions(home=stopped_after)
    assert live.pull("batch") == 3  # the session went on, with what the cell bound


def test_debug_in_a_session_cell_is_refused_naming_what_to_do_instead():
    opts = cell_parser().parse_args(["--session", "s1", "--debug"])
    with pytest.raises(SpecError) as info:  # refused before any session is looked up
        run_session_cell(None, opts, "print('never')", {})
    message = str(info.value)
    assert "--session s1 --debug: a session offers no debugger" in message, message
    assert "%train session pull s1 EXPR" in message and "%%train --debug" in message, message


def test_refused_cells_send_nothing_and_interrupt_and_restart_leave_the_session(kernel):
    _, error = cell(kernel, "%train session start s1 --procs 2")
    assert not error, error
    [live] = jt.sessions()
    text, error = cell(kernel, "%%train --session s1\na = 41\nprint('bound', a)")
    assert not error and "[rank 0] bound 41" in text and "[rank 1] bound 41" in text, text
    sent = sorted(live.files.requests.iterdir())

    _, error = cell(kernel, "%%train --session s1 --procs 4\nprint('never')")
    assert error.get("ename") == "SpecError" and "--procs" in error["evalue"], error
    _, error = cell(kernel, "%%train --session nosuch\nprint('never')")
    assert error.get("ename") == "SpecError", error
    assert "no session named 'nosuch'" in error["evalue"], error
    # Where nobody can answer input (papermill), --debug is refused in a session's own words.
    reply = kernel.execute("%%train --session s1 --debug\nprint('never')", 120, False, False)
    _, error = outputs(kernel, reply)
    assert "a session offers no debugger" in error.get("evalue", ""), error
    assert sorted(live.files.requests.iterdir()) == sent

    # The kernel's interrupt (the Stop button) ends the cell on every rank, not the session.
    msg_id = kernel.kc.execute(SLEEPING)
    printed_since(kernel, msg_id, "[rank 1] asleep", timeout=60)
    printed_since(kernel, msg_id, "[rank 0] asleep", timeout=10)
    interrupted = time.monotonic()
    kernel.km.interrupt_kernel()
    kernel._collect_until_idle(msg_id, timeout=30)
    took = time.monotonic() - interrupted
    reply = kernel.kc.get_shell_msg(timeout=10)
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    assert took < 15, f"the interrupted cell took {took:.1f} s to end"
    text, error = cell(kernel, "%%train --session s1\na += 1\nprint('after', a)")
    assert not error and "[rank 0] after 42" in text and "[rank 1] after 42" in text, text

    # A restarted kernel reattaches by name: the names the session bound are still the ranks'.
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=60)
    assert live.status == "running"
    text, error = cell(
        kernel,
        "%load_ext jupyter_trainer\na = 0\nprint(sorted(s.name for s in __import__('jupyter_trainer').sessions()))",
    )
    assert not error and "['s1']" in text, (text, error)
    text, error = cell(kernel, "%%train --session s1\nprint('still', a)")
    assert not error and "[rank 0] still 42" in text and "[rank 1] still 42" in text, text
    run_id = live.id
    _, error = cell(kernel, "%train session stop s1")
    assert not error, error
    assert jt.get_run(run_id).status == "completed"
    wait_for(lambda: leftover(run_id) == [], timeout=15, what="the session's ranks to exit")
