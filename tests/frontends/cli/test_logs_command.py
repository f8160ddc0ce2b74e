"""``jupyter-trainer logs`` on a log of any size: all of it without -f, the last lines with
--tail read from the end, and a last line that never got its newline."""

from __future__ import annotations

from support.jt_cli import cli
from support.made_runs import finish, new_run

from jupyter_trainer.store import Store

LINE = "x" * 99 + "\n"  # 100 bytes


def test_logs_print_a_log_past_16_mib_whole_and_its_unended_last_line(home):
    store = Store(home)
    run_id = new_run(store)
    log = store.paths(run_id).log_file(0)
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = 200_000  # 20 MB
    with open(log, "w") as fh:
        for i in range(lines):
            fh.write(f"{i:>8} " + LINE[9:])
        fh.write("the end, without a newline")
    finish(store, run_id)

    shown = cli("logs", run_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("\n") == lines
    assert shown.stdout.endswith("the end, without a newline")
    assert f"{lines - 1:>8} " in shown.stdout

    tail = cli("logs", run_id, "--tail", "2")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout == f"{lines - 1:>8} {LINE[9:]}the end, without a newline"
