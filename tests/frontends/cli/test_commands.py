"""The management commands give the same output and the same errors from ``jupyter-trainer``
(a real process) and from ``%train`` (a real IPython shell)."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from conftest import leftover, wait_for
from support.jt_cli import CLI

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import TrainerError

PREFIX = "jupyter-trainer: error: "


def both(ip, capsys, line: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit code, stdout, error) of ``jupyter-trainer LINE`` and of ``%train LINE``; the
    magic's code is 0 when it returned and 2 when it showed a TrainerError, in one line."""
    done = subprocess.run([*CLI, *shlex.split(line)], capture_output=True, text=True, timeout=120)
    error = done.stderr.strip()
    cli = (
        done.returncode,
        done.stdout,
        error.removeprefix(PREFIX) if done.returncode == 2 else error,
    )
    capsys.readouterr()
    result = ip.run_cell(f"%train {line}", store_history=True)
    out = capsys.readouterr().out
    if result.error_in_exec is None:
        return cli, (0, out, "")
    error = result.error_in_exec
    assert isinstance(error, TrainerError), error
    assert out == f"{type(error).__name__}: {error}\n"  # the kernel showed one line, no traceback
    return cli, (2, "", str(error))


@pytest.fixture
def two_ranks(home):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\n"
        "for i in range(5):\n"
        "    print('line', i, 'of rank', jt.rank)\n"
        "    jt.log(step=i, loss=1 / (i + 1))\n",
        launcher="torchrun",
        procs=2,
        name="same",
        wait=True,
    )
    assert leftover(run.id) == []
    return run


def test_every_command_prints_the_same_in_both_front_ends(two_ranks, ip, capsys):
    run = two_ranks
    for line in [
        "runs",
        "runs --json",
        "runs --name sam --limit 1",
        "runs --status failed",
        f"show {run.id}",
        f"show {run.id} --json",
        f"logs {run.id}",
        f"logs {run.id} --rank 1",
        f"logs {run.id} --tail 2",
        f"logs {run.id} -f",
        "doctor --no-hash",
        "doctor --json",
        "targets",
    ]:
        cli, magic = both(ip, capsys, line)
        assert cli == magic, line
        assert cli[0] == 0 and cli[1].strip(), line
    cli, _ = both(ip, capsys, f"logs {run.id} --tail 2")
    assert (
        cli[1] == "[rank 0] line 3 of rank 0\n[rank 0] line 4 of rank 0\n"
        "[rank 1] line 3 of rank 1\n[rank 1] line 4 of rank 1\n"
    )
    assert run.id in both(ip, capsys, "runs")[0][1]
    assert both(ip, capsys, "runs --status failed")[0][1].startswith(
        "no runs match --status failed (the store "
    )


@pytest.mark.parametrize(
    "line, message",
    [
        ("runs --limit -1", "limit must be a whole number of at least 1, not -1"),
        ("runs --limit ten", "runs: --limit takes a whole number, not 'ten'"),
        (
            "runs --statsu running",
            "unrecognized arguments: --statsu running; did you mean --status?",
        ),
        ("logs some-run --tail -2", "logs: argument --tail: must be at least 0, not -2"),
        ("runs --status bogus", "runs: argument --status: invalid choice: 'bogus'"),
        ("runs --bogus", "unrecognized arguments: --bogus"),
        ("show ../../etc", "invalid run id '../../etc'"),
        ("logs nope-20260101-000000-000000", "no run 'nope-20260101-000000-000000'"),
        ("logs", "logs: the following arguments are required: run"),
        ("cancel", "cancel: the following arguments are required: run"),
        ("target add pair", "target add: the following arguments are required: --kind"),
        ("target add pair --kind nope hosts=[a]", "unknown target kind 'nope'"),
    ],
)
def test_bad_input_gives_the_same_one_line_error(home, ip, capsys, line, message):
    cli, magic = both(ip, capsys, line)
    assert cli == magic
    code, out, error = cli
    assert code == 2 and out == "" and message in error and "\n" not in error
    assert api.runs() == []


def test_a_rank_the_run_lacks_and_a_finished_cancel(two_ranks, ip, capsys):
    run = two_ranks
    cli, magic = both(ip, capsys, f"logs {run.id} --rank 99")
    assert cli == magic and cli[2].startswith(f"run {run.id} has no rank 99")
    cli, magic = both(ip, capsys, f"cancel {run.id}")
    assert cli == magic and "already ended (completed)" in cli[2]


def test_cancel_and_target_add(home, ip, capsys):
    runs = [
        api.submit("import time\ntime.sleep(600)\n", launcher="python", name=f"long{i}")
        for i in range(2)
    ]
    for run in runs:
        wait_for(lambda: run.status == "running", what="running")
    done = subprocess.run([*CLI, "cancel", runs[0].id], capture_output=True, text=True, timeout=120)
    capsys.readouterr()
    assert ip.run_cell(f"%train cancel {runs[1].id}", store_history=True).success
    from_magic = capsys.readouterr().out
    assert done.returncode == 0 and done.stdout == f"run {runs[0].id} canceled\n"
    assert from_magic == f"run {runs[1].id} canceled\n"
    for run in runs:
        assert run.status == "canceled" and leftover(run.id) == []

    line = "target add pair --kind ssh hosts=[gpu1,gpu2] workdir=/scratch/jt"
    cli, magic = both(ip, capsys, line)  # the CLI saves it, so the magic finds it there
    assert cli[0] == 0 and cli[1].startswith("target 'pair' saved in")
    assert magic[0] == 2 and "already exists" in magic[2] and "--replace" in magic[2]
    cli, magic = both(ip, capsys, "target add pair --kind ssh --replace hosts=[gpu3]")
    assert cli == magic and cli[0] == 0
    cli, magic = both(ip, capsys, "targets")
    assert cli == magic and "hosts=['gpu3']" in cli[1]
