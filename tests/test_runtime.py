"""jupyter_trainer.runtime and the boot script, tested through real processes.

Every test starts real interpreters (and real ``mpirun`` for the rank mapping) and reads what
they left in a run directory: events, rank logs, rank records. The boot tests build the
snapshot layout the supervisor ships (``code/_jt/boot.py`` + ``code/_jt/jupyter_trainer/``)
and start it with ``python -S``, so the installed package is out of reach and the shim must
do.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_trainer.capture.snapshot import runtime_files
from jupyter_trainer.rankside import procs

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "jupyter_trainer"
PY = sys.executable
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun is not installed")

_LAUNCHER_VARS = ("JT_", "OMPI_", "PMI", "SLURM_", "HOROVOD_")
_RANK_VARS = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTHONPATH",
}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any run, launcher or rank variable, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_LAUNCHER_VARS) and k not in _RANK_VARS
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def read_events(run: Path, rank: int = 0) -> list[dict]:
    path = run / "events" / f"rank-{rank}.jsonl"
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a partial line was written"
    return [json.loads(line) for line in text.splitlines()]


def wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


free_port = procs.free_port


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory holding the snapshot layout the supervisor ships."""
    run = tmp_path / "run"
    for rel, data in runtime_files().items():  # what every snapshot carries
        path = run / "code" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (run / "spec.json").write_text(json.dumps({"params": {"lr": 0.1, "epochs": 3}}))
    return run


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def boot(
    run: Path, entry: str, *args: str, site: bool = False, wait: bool = True, **env: str
) -> subprocess.CompletedProcess | subprocess.Popen:
    """Start ``code/_jt/boot.py ENTRY ARGS`` the way a launcher does (cwd outside the repo)."""
    argv = [
        PY,
        *([] if site else ["-S"]),
        "-u",
        str(run / "code" / "_jt" / "boot.py"),
        entry,
        *args,
    ]
    env = clean_env(**{"JT_RUN_DIR": str(run), "JT_RUN_ID": "r-test", **env})
    if not wait:
        return subprocess.Popen(
            argv,
            cwd=run.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return subprocess.run(argv, cwd=run.parent, env=env, capture_output=True, text=True, timeout=60)


def python(script: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a script that imports the runtime from the repo (no boot)."""
    return subprocess.run(
        [PY, "-u", str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(PYTHONPATH=str(REPO), **env),
    )


def rank_record(run: Path, rank: int = 0) -> dict:
    return json.loads((run / "ranks" / f"rank-{rank}.json").read_text())


# --- events -----------------------------------------------------------------------------------


def test_thousand_events_written_in_order_on_normal_exit(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        import threading
        from jupyter_trainer import runtime as jt
        assert threading.active_count() == 1, "import must not start a thread"
        for i in range(1000):
            jt.log(step=i, loss=1.0 / (i + 1), acc=i)
        assert threading.active_count() == 2
        jt.progress(1000, 1000)
    """,
    )
    proc = python(script, tmp_path, JT_RUN_DIR=str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    events = read_events(tmp_path / "run")
    assert len(events) == 1001
    metrics = events[:1000]
    assert [e["step"] for e in metrics] == list(range(1000))
    assert all(e["kind"] == "metric" and isinstance(e["t"], float) for e in metrics)
    assert metrics[3]["values"] == {"loss": 0.25, "acc": 3}
    assert [e["t"] for e in metrics] == sorted(e["t"] for e in metrics)
    assert events[-1] == {"kind": "progress", "t": events[-1]["t"], "done": 1000, "total": 1000}
    line = (tmp_path / "run" / "events" / "rank-0.jsonl").read_text().splitlines()[1]
    assert line.startswith('{"kind": "metric", "t": ') and line.endswith(
        ', "step": 1, "values": {"loss": 0.5, "acc": 1}}'
    )


def test_explicit_flush_writes_before_exit(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        from jupyter_trainer import runtime as jt
        jt.log(step=7, loss=2.0)
        jt.flush()
        print(len(open(jt.run_dir / "events" / "rank-0.jsonl").readlines()))
    """,
    )
    proc = python(script, tmp_path, JT_RUN_DIR=str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1"]


def test_values_converted_to_json(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        import decimal, numpy as np
        from jupyter_trainer import runtime as jt
        jt.log(step=np.int64(4), a=np.float32(0.5), b=decimal.Decimal("1.5"), c=float("nan"),
               d=float("-inf"), e=object(), f=True, g=np.int64(9), h=[1, 2])
    """,
    )
    proc = python(script, tmp_path, JT_RUN_DIR=str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    raw = (tmp_path / "run" / "events" / "rank-0.jsonl").read_text()
    assert "NaN" not in raw and "Infinity" not in raw  # strict JSON
    (event,) = read_events(tmp_path / "run")
    values = event["values"]
    assert event["step"] == 4
    assert values["a"] == 0.5 and values["b"] == 1.5 and values["g"] == 9 and values["f"] == 1.0
    assert (values["c"], values["d"]) == ("nan", "-inf")
    assert values["e"].startswith("<object object") and values["h"] == "[1, 2]"


def test_crash_flushes_events_without_boot(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        from jupyter_trainer import runtime as jt
        for i in range(10):
            if i == 3:
                raise RuntimeError("diverged")
            jt.log(step=i, loss=1.0)
    """,
    )
    proc = python(script, tmp_path, JT_RUN_DIR=str(tmp_path / "run"))
    assert proc.returncode == 1 and "RuntimeError: diverged" in proc.stderr
    assert [e["step"] for e in read_events(tmp_path / "run")] == [0, 1, 2]


def test_crash_recorded_by_boot(run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        """
        from jupyter_trainer import runtime as jt
        for i in range(10):
            if i == 3:
                raise ValueError(f"boom at step {i}")
            jt.log(step=i, loss=0.5)
    """,
    )
    proc = boot(run, "_jt/cell.py")
    assert proc.returncode == 1
    assert [e["step"] for e in read_events(run)] == [0, 1, 2]
    record = rank_record(run)
    assert record["exit_code"] == 1 and record["ended"] >= record["started"]
    assert record["error"] == "ValueError: boom at step 3"
    assert "cell.py" in record["traceback"] and "boom at step 3" in record["traceback"]
    assert "runpy" not in record["traceback"] and "boot.py" not in record["traceback"]
    assert "ValueError: boom at step 3" in (run / "logs" / "rank-0.log").read_text()


def _loop_script(path: Path) -> Path:
    return write(
        path,
        """
        import hashlib, sys, time
        from jupyter_trainer import runtime as jt
        for i in range(10**9):
            jt.log(step=i, loss=0.5)
            print("step", i, flush=True)
            if "--stuck" in sys.argv and i == 20:
                hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)  # minutes in C, GIL released
            time.sleep(0.002)
    """,
    )


def _last_printed_step(text: str) -> int:
    return max(int(line.split()[1]) for line in text.splitlines() if line.startswith("step "))


def test_sigterm_flushes_events_and_records_exit_via_boot(run: Path) -> None:
    _loop_script(run / "code" / "_jt" / "cell.py")
    proc = boot(run, "_jt/cell.py", wait=False)
    wait_for(run / "events" / "rank-0.jsonl")
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    steps = [e["step"] for e in read_events(run)]
    assert steps == list(range(len(steps)))
    # Everything logged before the signal is there, not just what the 0.25 s flusher wrote.
    assert steps[-1] >= _last_printed_step((run / "logs" / "rank-0.log").read_text())
    record = rank_record(run)
    assert record["exit_code"] == 143 and "error" not in record


def test_sigterm_flushes_events_without_boot(tmp_path: Path) -> None:
    script = _loop_script(tmp_path / "train.py")
    proc = subprocess.Popen(
        [PY, "-u", str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(PYTHONPATH=str(REPO), JT_RUN_DIR=str(tmp_path / "run")),
    )
    wait_for(tmp_path / "run" / "events" / "rank-0.jsonl")
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGTERM  # died of the re-sent signal
    steps = [e["step"] for e in read_events(tmp_path / "run")]
    assert steps == list(range(len(steps)))
    assert steps[-1] >= _last_printed_step(out)


def test_sigterm_while_main_thread_is_stuck_in_c_code(run: Path) -> None:
    _loop_script(run / "code" / "_jt" / "cell.py")
    proc = boot(run, "_jt/cell.py", "--stuck", wait=False)
    log = run / "logs" / "rank-0.log"
    deadline = time.monotonic() + 10
    while "step 20" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 143  # without the flusher's help: minutes
    assert [e["step"] for e in read_events(run)] == list(range(21))
    assert rank_record(run)["exit_code"] == 143


def test_forked_child_terminated_leaves_rank_running(run: Path) -> None:
    write(
        run / "code" / "_jt" / "cell.py",
        """
        import multiprocessing as mp, time
        from jupyter_trainer import runtime as jt
        jt.log(step=0, loss=1.0)
        child = mp.get_context("fork").Process(target=time.sleep, args=(60,))
        child.start()
        time.sleep(0.2)
        child.terminate()
        child.join()
        print("child exit", child.exitcode)
        time.sleep(2.6)  # longer than the runtime's SIGTERM grace period
        jt.log(step=1, loss=0.5)
        print("parent alive")
    """,
    )
    proc = boot(run, "_jt/cell.py")
    log = (run / "logs" / "rank-0.log").read_text()
    assert proc.returncode == 0, log
    assert "child exit -15" in log and "parent alive" in log
    assert [e["step"] for e in read_events(run)] == [0, 1]
    assert rank_record(run)["exit_code"] == 0


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
    shim = run / "code" / "_jt" / "jupyter_trainer" / "rankside" / "runtime.py"
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
        f"runtime from {PKG / 'rankside' / 'runtime.py'}"
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
    assert record["exit_code"] == 3 and "error" not in record


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


def test_boot_destroys_a_process_group_the_entry_left_open(run: Path) -> None:
    # A Gloo group left open can abort the rank in C++ teardown after its work is done.
    write(
        run / "code" / "_jt" / "cell.py",
        f"""
        import atexit, os
        import torch.distributed as dist
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="{free_port()}")
        dist.init_process_group("gloo")
        atexit.register(lambda: print("open at exit", dist.is_initialized(), flush=True))
    """,
    )
    proc = boot(run, "_jt/cell.py", site=True, PYTHONPATH=str(REPO))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "open at exit False" in (run / "logs" / "rank-0.log").read_text()


def test_boot_leaves_a_failed_entry_s_process_group_alone(run: Path) -> None:
    # Destroying it after a failure could block on peers that are still in a collective.
    write(
        run / "code" / "_jt" / "cell.py",
        f"""
        import atexit, os
        import torch.distributed as dist
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="{free_port()}")
        dist.init_process_group("gloo")
        atexit.register(lambda: print("open at exit", dist.is_initialized(), flush=True))
        raise SystemExit(3)
    """,
    )
    proc = boot(run, "_jt/cell.py", site=True, PYTHONPATH=str(REPO))
    assert proc.returncode == 3
    assert "open at exit True" in (run / "logs" / "rank-0.log").read_text()


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


# --- outside a run ----------------------------------------------------------------------------


def test_outside_a_run_everything_is_harmless(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        import threading
        from jupyter_trainer import runtime as jt
        assert (jt.in_run, jt.rank, jt.world_size, jt.run_id, jt.params) == (False, 0, 1, None, {})
        for i in range(1000):
            jt.log(step=i, loss=0.125)
            jt.progress(i, 1000)
        jt.log(acc=1)
        jt.flush()
        print("outputs", jt.outputs_dir, jt.outputs_dir.is_dir())
        print("threads", threading.active_count())
    """,
    )
    proc = python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[jt] step 0 loss=0.125",
        f"outputs {tmp_path / 'outputs'} True",
        "threads 1",
    ]
    assert (tmp_path / "outputs").is_dir()
    assert not list(tmp_path.rglob("*.jsonl")) and not (tmp_path / "events").exists()


def test_log_prints_again_after_a_second(tmp_path: Path) -> None:
    script = write(
        tmp_path / "train.py",
        """
        import time
        from jupyter_trainer import runtime as jt
        jt.log(step=1, loss=0.5)
        time.sleep(1.05)
        jt.log(step=2, loss=0.25)
        jt.log(step=3, loss=0.125)
    """,
    )
    proc = python(script, tmp_path)
    assert proc.stdout.splitlines() == ["[jt] step 1 loss=0.5", "[jt] step 2 loss=0.25"]


# --- carried variables --------------------------------------------------------------------------


def test_load_carried(tmp_path: Path) -> None:
    cloudpickle = pytest.importorskip("cloudpickle")
    cell = tmp_path / "_jt" / "cell.py"
    write(cell, "")
    blobs = {
        "lr": pickle.dumps(0.01),
        "layers": pickle.dumps([64, 32]),
        "scale": cloudpickle.dumps(lambda x: 2 * x),
    }
    (cell.parent / "carried.pkl").write_bytes(pickle.dumps(blobs))
    script = write(
        tmp_path / "load.py",
        f"""
        from jupyter_trainer import runtime as jt
        got = jt.load_carried({str(cell)!r})
        print(sorted(got), got["lr"], got["layers"], got["scale"](21))
        print(jt.load_carried({str(tmp_path / "elsewhere" / "cell.py")!r}))
    """,
    )
    proc = python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['layers', 'lr', 'scale'] 0.01 [64, 32] 42", "{}"]
