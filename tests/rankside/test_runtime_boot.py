"""The boot script and the rank mapping, tested through real processes.

The boot tests build the snapshot layout the supervisor ships (``code/_jt/boot.py`` +
``code/_jt/jupyter_trainer/``) and start it with ``python -S``, so the installed package is out
of reach and the shim must do. The rank mapping is read from each launcher's variables, and
from a real ``mpirun``.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from support.runtime_procs import (
    MPIRUN,
    PKG,
    PY,
    REPO,
    boot,
    clean_env,
    free_port,
    needs_mpirun,
    rank_record,
    read_events,
    run,  # noqa: F401 (the fixture)
    write,
)

# --- boot -------------------------------------------------------------------------------------


def test_boot_uses_shim_and_captures_output(run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        """
        import sys
        from jupyter_trainer import runtime as jt
        print("runtime from", jt.__file__)
        print("argv", sys.argv[1:], "path0", sys.path[0])
        print("params", jt.params, "outputs", jt.outputs_dir, "run", jt.run_id)
        print("this goes to stderr", file=sys.stderr)
    """,
    )
    proc = boot(run, "_jt/cell.py", "--epochs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr == ""  # all of it went to the rank log
    log = (run / "logs" / "rank-0.log").read_text()
    # The snapshot's own copy, not the installed package: jupyter_trainer.runtime there is
    # the rank side's runtime by its public name.
    shim = run / "code" / "_jt" / "jupyter_trainer" / "rankside" / "rank" / "runtime.py"
    assert f"runtime from {shim}" in log
    assert f"argv ['--epochs', '2'] path0 {run / 'work' / 'node-0'}" in log
    assert not list((run / "code").rglob("__pycache__"))  # the shim compiled nothing there
    assert f"params {{'lr': 0.1, 'epochs': 3}} outputs {run / 'outputs'} run r-test" in log
    assert "this goes to stderr" in log
    assert (run / "outputs").is_dir()
    record = rank_record(run)
    assert record["exit_code"] == 0 and record["rank"] == 0 and record["world_size"] == 1
    assert record["host"] == socket.gethostname() and record["pid"] > 0
    assert not list((run / "ranks").glob("*.tmp"))


def test_boot_prefers_installed_runtime(run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        """
        from jupyter_trainer import runtime as jt
        print("runtime from", jt.__file__)
    """,
    )
    proc = boot(run, "_jt/cell.py", site=True, PYTHONPATH=str(REPO))
    assert proc.returncode == 0
    assert (
        f"runtime from {PKG / 'rankside' / 'rank' / 'runtime.py'}"
        in (run / "logs" / "rank-0.log").read_text()
    )


def test_boot_script_entry_dir_first_on_path_and_exit_code(run: Path) -> None:
    write(run / "code" / "train" / "helpers.py", "ANSWER = 42\n")
    write(
        run / "code" / "train" / "main.py",
        """
        import sys
        import helpers
        print("answer", helpers.ANSWER, sys.argv[1:])
        sys.exit(3)
    """,
    )
    proc = boot(run, "train/main.py", "a b", "--x=1")
    assert proc.returncode == 3
    assert "answer 42 ['a b', '--x=1']" in (run / "logs" / "rank-0.log").read_text()
    record = rank_record(run)
    assert record["exit_code"] == 3 and record["error"] == "rank 0 exited with code 3"
    assert "traceback" not in record  # it said nothing on stderr


def test_a_script_that_exits_on_a_usage_error_records_what_it_said(run: Path) -> None:
    """No exception, so no traceback: argparse's usage and error, the last lines the script
    wrote to stderr, are the rank's error and its tail, not only "exited with code 2"."""
    write(
        run / "code" / "train.py",
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--data-dir", required=True)
        parser.parse_args()
    """,
    )
    proc = boot(run, "train.py", "--epochs", "3")
    assert proc.returncode == 2
    record = rank_record(run)
    assert record["error"] == (
        "rank 0 exited with code 2: train.py: error: the following arguments are required: "
        "--data-dir"
    ), record
    assert record["traceback"].startswith("usage: train.py [-h] --data-dir DATA_DIR")


def test_boot_outside_a_run(tmp_path: Path, run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        """
        import sys
        print("hello", sys.argv[1:])
        raise SystemExit(0)
    """,
    )
    argv = [PY, "-S", "-u", str(run / "code" / "_jt" / "boot.py"), "_jt/cell.py", "x"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout == "hello ['x']\n"
    assert not (run / "logs").exists() and not (run / "ranks").exists()


def test_boot_forced_backend_applies_to_bare_init_process_group(run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        f"""
        import os
        import torch.distributed as dist
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="{free_port()}")
        dist.init_process_group()
        print("backend", dist.get_backend())
        dist.destroy_process_group()
    """,
    )
    proc = boot(
        run,
        "_jt/cell.py",
        site=True,
        PYTHONPATH=str(REPO),
        JT_BACKEND="gloo",
        JT_BACKEND_OVERRIDE="1",
    )
    log = (run / "logs" / "rank-0.log").read_text()
    assert proc.returncode == 0, log
    assert "backend gloo" in log  # torch alone answers "undefined" for a bare call


@pytest.mark.parametrize(
    "ending, code, open_at_exit",
    [("", 0, False), ("raise SystemExit(3)", 3, True)],
    ids=["ended-well", "failed"],
)
def test_boot_destroys_an_open_process_group_only_after_the_entry_ended_well(
    run: Path, ending: str, code: int, open_at_exit: bool
) -> None:
    # A Gloo group left open can abort the rank in C++ teardown after its work is done; after
    # a failure, destroying it could block on peers that are still in a collective.
    write(
        run / "code" / "_jt" / "cell.py",
        f"""
        import atexit, os
        import torch.distributed as dist
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="{free_port()}")
        dist.init_process_group("gloo")
        atexit.register(lambda: print("open at exit", dist.is_initialized(), flush=True))
        {ending}
    """,
    )
    proc = boot(run, "_jt/cell.py", site=True, PYTHONPATH=str(REPO))
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"open at exit {open_at_exit}" in (run / "logs" / "rank-0.log").read_text()


# --- rank mapping -----------------------------------------------------------------------------

_PRINT_RANKS = (
    "from jupyter_trainer import runtime as jt; import os; "
    "line = ' '.join(map(str, (jt.rank, jt.world_size, jt.local_rank,"
    " jt.local_world_size, jt.node_rank, os.environ['RANK'], os.environ['WORLD_SIZE'],"
    " os.environ['LOCAL_RANK']))); os.write(1, (line + '\\n').encode())"
)


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {
                "HOROVOD_RANK": "3",
                "HOROVOD_SIZE": "4",
                "HOROVOD_LOCAL_RANK": "1",
                "HOROVOD_LOCAL_SIZE": "2",
                "HOROVOD_CROSS_RANK": "1",
            },
            "3 4 1 2 1 3 4 1",
        ),
        (
            {
                "SLURM_PROCID": "5",
                "SLURM_NTASKS": "6",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "2",
                "SLURM_TASKS_PER_NODE": "2(x3)",
            },
            "5 6 1 2 2 5 6 1",
        ),
        (
            {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
            "1 2 1 2 0 1 2 1",
        ),
        (
            {
                "RANK": "7",
                "WORLD_SIZE": "8",
                "LOCAL_RANK": "3",
                "OMPI_COMM_WORLD_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },
            "7 8 3 8 0 7 8 3",
        ),
    ],
    ids=["horovod", "slurm", "pmi", "rank-already-set"],
)
def test_rank_mapping_from_launcher_env(tmp_path: Path, env: dict, expected: str) -> None:
    proc = subprocess.run(
        [PY, "-c", _PRINT_RANKS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(PYTHONPATH=str(REPO), **env),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


def _mpirun(*argv: str, **env: str) -> subprocess.CompletedProcess:
    cmd = [
        MPIRUN,
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        "-x",
        f"PYTHONPATH={REPO}",
        *argv,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(**env))


@needs_mpirun
def test_mpirun_maps_open_mpi_ranks(tmp_path: Path) -> None:
    proc = _mpirun(PY, "-c", _PRINT_RANKS)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["0 2 0 2 0 0 2 0", "1 2 1 2 0 1 2 1"]


@needs_mpirun
def test_mpirun_gloo_all_reduce_with_unchanged_init(tmp_path: Path) -> None:
    script = write(
        tmp_path / "allreduce.py",
        """
        import torch, torch.distributed as dist
        from jupyter_trainer import runtime as jt
        dist.init_process_group("gloo")
        t = torch.tensor([jt.rank + 1.0])
        dist.all_reduce(t)
        with open(jt.outputs_dir / f"rank-{jt.rank}.txt", "w") as f:  # stdout interleaves
            f.write(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()}")
        jt.log(step=torch.tensor(jt.rank), total=t, lr=torch.tensor([0.5]))
        dist.destroy_process_group()
    """,
    )
    run = tmp_path / "run"
    proc = _mpirun(
        "-x",
        "MASTER_ADDR=127.0.0.1",
        "-x",
        f"MASTER_PORT={free_port()}",
        "-x",
        f"JT_RUN_DIR={run}",
        PY,
        str(script),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in (0, 1):
        assert (run / "outputs" / f"rank-{r}.txt").read_text() == f"rank {r} of 2 sum 3.0"
        (event,) = read_events(run, r)
        assert event["step"] == r and event["values"] == {"total": 3.0, "lr": 0.5}
