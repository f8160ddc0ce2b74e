"""GPU figures read through NVML (nvidia-ml-py), against a ``libnvidia-ml.so.1`` faked at the
process boundary: tests/support/fake_nvml.c, built here and put on the ranks' loader path. There is no
GPU here; bench/gpu_checks.py checks the same reader against a real driver."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_for
from support import SUPPORT

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.views.health_text import stall_lines

MIB = 1 << 20
GPUS = (
    # uuid, util %, used MiB, total MiB, reserved MiB, power mW, limit mW, temp C, SM MHz
    "gpu GPU-0000-fake 4 1024 81559 563 71250 700000 35 345\n"
    "gpu GPU-1111-fake 88 20000 81559 563 312450 700000 61 1980\n"
)


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "a C compiler builds the fake NVML library: apt-get install gcc"
    folder = tmp_path_factory.mktemp("fake-nvml")
    source = SUPPORT / "fake_nvml.c"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", "libnvidia-ml.so.1", source],
        cwd=folder,
        check=True,
    )
    return folder


@pytest.fixture
def fake_nvml(fake_nvml_lib, tmp_path, monkeypatch):
    """The fake driver for the ranks; ``write(procs)`` sets which GPU each local rank holds
    memory on and its share of the SM time."""
    figures = tmp_path / "nvml.txt"

    def write(procs: str) -> None:
        figures.write_text(GPUS + procs)

    write("")
    monkeypatch.setenv("FAKE_NVML_FIGURES", str(figures))
    monkeypatch.setenv(
        "LD_LIBRARY_PATH",
        os.pathsep.join(p for p in (str(fake_nvml_lib), os.environ.get("LD_LIBRARY_PATH")) if p),
    )
    return write


def test_the_reader_is_nvml_and_reads_every_figure(fake_nvml):
    """In a child process: the loader reads LD_LIBRARY_PATH when a process starts."""
    fake_nvml("proc 0 1 1500 93\n")
    code = (
        "import json, os\n"
        "from jupyter_trainer.rankside.observe import gpu_read\n"
        "r = gpu_read.open_reader()\n"
        "rows = r.rows()\n"
        "print(json.dumps({'name': r.name, 'rows': rows, 'held': r.held({os.getpid()}),"
        " 'sm': r.process_sm(rows[1][0], rows[1][1], {os.getpid()}),"
        " 'other': r.process_sm(rows[0][0], rows[0][1], {os.getpid()})}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "LOCAL_RANK": "0"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = json.loads(out)
    assert found["name"] == "nvml"
    assert found["rows"][1] == [
        "1",
        "GPU-1111-fake",
        {
            "gpu_index": 1,
            "gpu_util_percent": 88,
            "gpu_mem_used_bytes": 20000 * MIB,  # the second version: reserved is not used
            "gpu_mem_total_bytes": 81559 * MIB,
            "gpu_power_watts": 312.45,
            "gpu_power_limit_watts": 700,
            "gpu_temp_c": 61,
            "gpu_sm_clock_mhz": 1980,
        },
    ]
    assert found["held"] == {"GPU-1111-fake": 1500 * MIB}
    assert found["sm"] == 93 and found["other"] is None


def test_each_rank_reports_its_own_gpu_and_sm_share(home, fake_nvml, monkeypatch):
    # local rank 0 holds 1.5 GiB on GPU 1 and has 93% of its SM time; local rank 1 holds
    # nothing yet, so its GPU is the one CUDA_VISIBLE_DEVICES=1,0 gives it: GPU 0
    fake_nvml("proc 0 1 1500 93\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    run = api.submit(
        "import time; time.sleep(2.5)", procs=2, backend="gloo", system_interval=0.5, wait=True
    )
    last = {rank: {k: v[-1][1] for k, v in run.system(rank=rank).items()} for rank in (0, 1)}
    assert {k: v for k, v in last[0].items() if k.startswith("gpu_")} == {
        "gpu_index": 1,
        "gpu_util_percent": 88,
        "gpu_mem_used_bytes": 20000 * MIB,
        "gpu_mem_total_bytes": 81559 * MIB,
        "gpu_power_watts": 312.45,
        "gpu_power_limit_watts": 700,
        "gpu_temp_c": 61,
        "gpu_sm_clock_mhz": 1980,
        "gpu_process_mem_bytes": 1500 * MIB,
        "gpu_process_sm_percent": 93,
    }
    assert {k: v for k, v in last[1].items() if k.startswith("gpu_")} == {
        "gpu_index": 0,
        "gpu_util_percent": 4,
        "gpu_mem_used_bytes": 1024 * MIB,
        "gpu_mem_total_bytes": 81559 * MIB,
        "gpu_power_watts": 71.25,
        "gpu_power_limit_watts": 700,
        "gpu_temp_c": 35,
        "gpu_sm_clock_mhz": 345,
        "gpu_process_mem_bytes": 0,
    }


LOGGING = """
import time
from jupyter_trainer import runtime as jt
for step in range(60):
    jt.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.2)
"""


def test_ranks_sharing_a_gpu_are_told_apart_by_their_sm_share(home, fake_nvml):
    """Both ranks on GPU 1 (88%, 312 W of 700 W): rank 0 has 97% of the SM time, rank 1 none.
    The GPU's own figures cannot tell them apart; their shares do."""
    fake_nvml("proc 0 1 1500 97\nproc 1 1 900 0\n")
    run = api.submit(LOGGING, procs=2, backend="gloo", system_interval=0.5, stall_timeout=2)
    try:
        stalled = wait_for(lambda: run.state.get("stalled"), timeout=60, what="a stalled rank")
        assert [entry["rank"] for entry in stalled] == [1], stalled
        idle = stalled[0]["gpu_idle"]
        assert {k: v for k, v in idle.items() if k != "since"} == {"util": 0, "own": True}
        line = stall_lines(stalled[0])[0]
        assert line.endswith(
            "; its GPU work has stopped (its processes had 0% of the SM time) while the others work"
        ), line
        from jupyter_trainer.frontends.views import system_view

        follower = run.follower()

        def marked() -> bool:
            follower.poll()
            return system_view.idle_ranks(follower) == [1]

        wait_for(
            marked,
            timeout=30,
            what="the run view to mark rank 1",
        )
    finally:
        run.cancel(timeout=60)


def test_dcgm_sm_activity_is_added_where_dcgmi_answers(home, fake_nvml, tmp_path, monkeypatch):
    """A ``dcgmi`` faked at the process boundary, answering as ``dcgmi dmon`` does: the
    fraction of time warps were resident on each GPU it is asked about."""
    fake_nvml("proc 0 1 1500 93\n")
    bin_dir = tmp_path / "dcgm-bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked.txt"
    dcgmi = bin_dir / "dcgmi"
    dcgmi.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {asked}\n'
        "echo '#Entity   SMACT'\n"
        "echo 'ID'\n"
        'echo "GPU $9     0.412"\n'
    )
    dcgmi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = api.submit("import time; time.sleep(1.5)", system_interval=0.5, wait=True)
    figures = run.system()
    assert {value for _, value in figures["gpu_sm_active_percent"]} == {41.2}, figures
    assert set(asked.read_text().splitlines()) == {"dmon -e 1002 -c 1 -d 100 -i 1"}
