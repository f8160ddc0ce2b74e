"""jupyter_trainer.runtime and the boot script, tested through real processes.

Every test starts real interpreters (and real ``mpirun`` for the rank mapping) and reads what
they left in a run directory: events, rank logs, rank records. The boot tests build the
snapshot layout the supervisor ships (``code/_jt/boot.py`` + ``code/_jt/jupyter_trainer/``)
and start it with ``python -S``, so the installed package is out of reach and the shim must
do.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.runtime_procs import (
    PY,
    REPO,
    boot,
    clean_env,
    python,
    rank_record,
    read_events,
    run,  # noqa: F401 (the fixture)
    wait_for,
    write,
)

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
