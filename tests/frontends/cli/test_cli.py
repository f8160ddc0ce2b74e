"""The jupyter-trainer command line, run as real processes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import leftover, wait_for
from support.jt_cli import CLI, cli

from jupyter_trainer.api import runs as api


def write_script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time\n"
        "from jupyter_trainer import runtime as jt\n"
        "n = int(sys.argv[sys.argv.index('--steps') + 1])\n"
        "for i in range(n):\n"
        "    print(f'rank {jt.rank} line {i} args {sys.argv[1:]}', flush=True)\n"
        "    jt.log(step=i, loss=1.0 / (i + 1))\n"
        "    time.sleep(0.1)\n"
    )
    return script


def test_submit_wait_show_runs(home, tmp_path):
    script = write_script(tmp_path)
    done = cli(
        "submit",
        str(script),
        "--procs",
        "2",
        "--name",
        "cli run",
        "--wait",
        "--",
        "--steps",
        "5",
        "'; rm -rf ~'",
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert "completed" in done.stderr
    run = api.get_run(run_id)
    assert run.status == "completed" and run.spec.code.args == ("--steps", "5", "'; rm -rf ~'")
    assert "args ['--steps', '5', \"'; rm -rf ~'\"]" in run.logs(1)
    listed = cli("runs", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [run_id]
    shown = cli("show", run_id, "--json")
    assert json.loads(shown.stdout)["state"]["status"] == "completed"
    assert "loss" in cli("show", run_id).stdout


def test_logs_follow_from_a_second_process(home, tmp_path):
    script = write_script(tmp_path)
    run_id = cli("submit", str(script), "--procs", "2", "--", "--steps", "30").stdout.strip()
    follower = subprocess.Popen([*CLI, "logs", "-f", run_id], stdout=subprocess.PIPE, text=True)
    first = follower.stdout.readline()
    assert first.startswith("[rank ") and api.get_run(run_id).status == "running"
    rest = follower.stdout.read()  # not communicate(): it would skip readline's buffer
    assert follower.wait(timeout=60) == 0
    lines = [first, *rest.splitlines(True)]
    for rank in (0, 1):
        assert sum(f"[rank {rank}] rank {rank} line" in line for line in lines) == 30
    after = cli("logs", run_id, "--rank", "1").stdout.splitlines()
    assert after[0].startswith("rank 1 line 0") and len(after) == 30


def test_cancel_from_the_cli(home, tmp_path):
    script = write_script(tmp_path)
    run_id = cli("submit", str(script), "--procs", "2", "--", "--steps", "1000").stdout.strip()
    wait_for(lambda: api.get_run(run_id).status == "running", what="running")
    done = cli("cancel", run_id)
    assert done.returncode == 0 and "canceled" in done.stdout
    assert leftover(run_id) == []
    again = cli("cancel", run_id)
    assert again.returncode == 2 and "already ended (canceled)" in again.stderr


def test_bad_input_exits_nonzero_with_a_clear_message(home, tmp_path):
    bad_id = cli("show", "../../etc/passwd")
    assert bad_id.returncode == 2 and "invalid run id" in bad_id.stderr
    missing = cli("logs", "nope-20260101-000000-000000")
    assert missing.returncode == 2 and "no run 'nope-20260101-000000-000000'" in missing.stderr
    launcher = cli("submit", str(write_script(tmp_path)), "--launcher", "ssh")
    assert launcher.returncode == 2 and "unknown launcher 'ssh'" in launcher.stderr
    no_script = cli("submit", str(tmp_path / "absent.py"))
    assert no_script.returncode == 2 and "absent.py" in no_script.stderr
    assert cli("runs").stdout.strip() == "no runs yet"


def test_jupyter_subcommand_is_available(home):
    jupyter = Path(sys.executable).with_name("jupyter")
    done = subprocess.run(
        [str(jupyter), "trainer", "targets"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{jupyter.parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0 and done.stdout.startswith("local")


def test_target_add_and_targets(home):
    added = cli(
        "target", "add", "pair", "--kind", "ssh", "hosts=[gpu1,gpu2]", "workdir=/scratch/jt"
    )
    assert added.returncode == 0, added.stderr
    assert "target 'pair' saved in" in added.stdout
    listed = cli("targets").stdout
    assert "pair             ssh      hosts=['gpu1', 'gpu2'], workdir=/scratch/jt" in listed
    again = cli("target", "add", "pair", "--kind", "ssh", "hosts=[gpu3]")
    assert (
        again.returncode == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    )
    bad = cli("target", "add", "other", "--kind", "nope", "hosts=[a]")
    assert bad.returncode == 2 and "unknown target kind 'nope'" in bad.stderr
    assert "other" not in cli("targets").stdout


def test_runs_that_match_no_filter_say_which_filter(home, tmp_path):
    """A store with runs, none of them running: not "no runs yet"."""
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    for _ in range(2):
        assert cli("submit", str(script), "--launcher", "python", "--wait").returncode == 0
    none = cli("runs", "--status", "running")
    assert none.returncode == 0 and none.stderr == ""
    assert none.stdout == (
        f"no runs match --status running (the store {home} holds 2 runs; "
        "leave out that filter to list them)\n"
    )
    both = cli("runs", "--status", "completed", "--name", "other model")
    assert both.stdout == (
        f"no runs match --status completed --name 'other model' (the store "
        f"{home} holds 2 runs; leave out those filters to list them)\n"
    )
    assert "match --offset 5" in cli("runs", "--offset", "5").stdout
    assert len(cli("runs", "--status", "completed").stdout.splitlines()) == 3


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(home, tmp_path):
    # `jupyter-trainer files RUN | head -1`: the reader closes the pipe after one line, while
    # hundreds of kilobytes are still to be written
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "for i in range(6000):\n    (jt.outputs_dir / f'file-{i:05d}.txt').write_text('x')\n"
    )
    run = api.submit(code, launcher="python", name="chatty", wait=True)
    shell = subprocess.run(
        f'{shlex.join(CLI)} files {run.id} | head -1; echo "rc=${{PIPESTATUS[0]}}"',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    first, rc = shell.stdout.splitlines()
    assert first.split() == ["SIZE", "PATH"] and rc == "rc=141", shell.stdout[-300:]
    assert shell.stderr == "", shell.stderr
