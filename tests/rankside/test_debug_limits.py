"""What a rank waiting in pdb bounds: the time it waits for each answer (``--debug-timeout``,
on a clock that does not move with the wall clock), and what it holds of one command line
however long the line a client sends."""

from __future__ import annotations

import socket
import time

import psutil
import pytest
from conftest import leftover, wait_for

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.debug.debugger import MAX_COMMAND_BYTES

FAILS = """
lr = 0.25
def step(scale):
    raise ValueError(f"bad batch {scale}")
step(3.0)
"""


def waiting_rank(run):
    """The rank's own record once it waits (the supervisor may not look in time)."""
    return wait_for(
        lambda: (r := run.store.rank_records(run.id).get(0, {})).get("debugging") and r,
        timeout=120,
        what="rank 0 waiting in a debugger",
    )


def peak_rss(pid: int) -> int:
    """The most memory the process has held, in bytes (the kernel's high-water mark)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    raise AssertionError(f"no VmHWM for {pid}")


def test_the_time_limit_is_for_each_answer_not_the_whole_session(home):
    limit = 4.0
    run = api.submit(FAILS, launcher="python", debug=limit, name="dbg-answer")
    waiting_rank(run)
    with run.debug() as session:
        assert "post-mortem" in session.read()
        started = time.monotonic()
        for _ in range(4):  # 3 s apart, 12 s in all: three times the limit
            time.sleep(3)
            assert session.command("p lr").startswith("0.25")
        assert time.monotonic() - started > 2 * limit
        quiet = time.monotonic()
        text = session.read(timeout=3 * limit)  # nobody answers: pdb ends after the limit
        assert session.ended and time.monotonic() - quiet < 2.5 * limit, text
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "failed"
    assert run.store.rank_records(run.id)[0]["debugged"] == "time limit"
    assert leftover(run.id) == []


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_a_huge_command_line_is_refused_and_the_rank_stays_small(home, ending):
    run = api.submit(FAILS, launcher="python", debug=True, name="dbg-huge")
    record = waiting_rank(run)
    rank = psutil.Process(record["pid"])
    with run.debug() as session:
        assert session.read().endswith("(Pdb) ")
        before = peak_rss(rank.pid)
        chunk = b"x" * (1 << 20)
        for _ in range(256):  # 256 MiB on one line
            session.conn.sendall(chunk)
        grown = peak_rss(rank.pid) - before
        assert grown < 4 * MAX_COMMAND_BYTES + (16 << 20), f"the rank grew by {grown >> 20} MiB"
        if ending:
            session.conn.sendall(ending)
            said = session.read()
            assert f"longer than {MAX_COMMAND_BYTES} bytes" in said and said.endswith("(Pdb) ")
            assert session.command("p lr").startswith("0.25")  # and answers the next one
            session.command("q")
        else:  # the line never ends: the client gives up and closes
            session.conn.shutdown(socket.SHUT_RDWR)
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "failed"
    assert leftover(run.id) == []
