"""System figures of every rank: CPU and memory of real processes with a known load, and GPU
figures from an ``nvidia-smi`` faked at the process boundary (there is no GPU here)."""

from __future__ import annotations

import os
import re
import sys

import pytest
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed, SpecError
from jupyter_trainer.rankside.observe import gpu_read

GIB = 1 << 30

# Rank 0 spins; rank 1 holds 1 GiB it has written to, and idles. Each goes on until its
# sampler has written enough samples (or a minute has passed), so that a loaded machine, which
# slows the sampler's thread, gives as many samples as an idle one.
LOAD = """
import os, time
from jupyter_trainer import runtime as jt
events = os.path.join(os.environ["JT_RUN_DIR"], "events", f"rank-{jt.rank}.jsonl")

def samples():
    try:
        with open(events) as fh:
            return sum('"kind": "system"' in line for line in fh)
    except OSError:
        return 0

def until(count, busy):
    end = time.time() + 60
    while samples() < count and time.time() < end:
        check = time.time() + 0.2
        while busy and time.time() < check:
            pass
        if not busy:
            time.sleep(0.1)

if jt.rank == 0:
    until(8, busy=True)
else:
    block = bytearray(1 << 30)
    for i in range(0, len(block), 4096):
        block[i] = 1
    start = samples()
    until(start + 5, busy=False)
    del block
"""


def test_a_busy_rank_and_a_big_rank_are_told_apart(home):
    run = api.submit(LOAD, procs=2, system_interval=0.5, wait=True)
    busy, big = run.system(rank=0), run.system(rank=1)
    for figures in (busy, big):
        assert {"cpu_percent", "rss_bytes", "rss_peak_bytes"} <= set(figures), figures.keys()
        assert not [name for name in figures if name.startswith("gpu_")]  # no GPU here
        times = [t for t, _ in figures["rss_bytes"]]
        assert times == sorted(times) and times[0] >= 0 and len(times) >= 4, times
    # A spinning process takes a core, or on a loaded machine its share of one; a sleeping
    # one (rank 1 once its GiB is written) next to nothing.
    spinning = [value for _, value in busy["cpu_percent"]]
    full = next(t for t, value in big["rss_bytes"] if value >= GIB)
    sleeping = [value for t, value in big["cpu_percent"] if t > full + 0.6]
    assert sleeping and min(spinning) >= 5, (spinning, big["cpu_percent"])
    assert sum(spinning) / len(spinning) > 5 * max(1.0, sum(sleeping) / len(sleeping)), (
        spinning,
        sleeping,
    )
    assert max(value for _, value in big["rss_bytes"]) >= GIB
    assert big["rss_peak_bytes"][-1][1] >= GIB
    assert max(value for _, value in busy["rss_bytes"]) < GIB // 2
    with open("/proc/meminfo") as meminfo:
        total = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
    assert {value for _, value in busy["node_mem_total_bytes"]} == {total * 1024}
    available = [value for _, value in busy["node_mem_available_bytes"]]
    assert all(0 < value <= total * 1024 for value in available)
    mean = run.system(rank=None)
    first = min(len(busy["rss_bytes"]), len(big["rss_bytes"]))
    assert len(mean["rss_bytes"]) == first
    assert mean["rss_bytes"][0][1] == (busy["rss_bytes"][0][1] + big["rss_bytes"][0][1]) / 2


def test_system_interval_zero_samples_nothing(home):
    run = api.submit(
        "import time; time.sleep(1.5)", launcher="python", system_interval=0, wait=True
    )
    assert run.spec.watch.system_interval == 0
    assert run.system() == {}


@pytest.mark.parametrize("bad", [0.1, -1, float("nan"), "5", True, 7200])
def test_a_bad_system_interval_is_refused_before_anything_starts(home, bad):
    with pytest.raises(SpecError, match="--system-interval must be a number of seconds"):
        api.submit("pass", launcher="python", system_interval=bad)
    assert api.runs(home=home) == []


# Two GPUs. The rank with LOCAL_RANK 0 (the caller's parent) holds 1500 MiB on GPU 1; the
# other rank holds none, so its GPU is the one its local rank picks among CUDA_VISIBLE_DEVICES.
FAKE_SMI = """#!{python}
import os, sys
query = sys.argv[1] if len(sys.argv) > 1 else ""
if query.startswith("--query-gpu="):
    assert query.split("=", 1)[1].split(",") == {fields!r}, query
    assert sys.argv[2:] == ["--format=csv,noheader,nounits"], sys.argv
    print("0, GPU-00000000-fake, 3, 1024, 81559, 71.25, 700.00, 35, 345")
    print("1, GPU-11111111-fake, 87, 20000, 81559, 312.45, [N/A], 61, 1980")
elif query == "--query-compute-apps=pid,gpu_uuid,used_memory":
    if os.environ.get("LOCAL_RANK") == "0":
        print(f"{{os.getppid()}}, GPU-11111111-fake, 1500")
    print("999999, GPU-00000000-fake, 700")
else:
    sys.exit(2)
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    fields = [query for query, _, _ in gpu_read.SMI_FIELDS]
    smi.write_text(FAKE_SMI.format(python=sys.executable, fields=fields))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")


def test_each_rank_reports_its_own_gpu(home, fake_smi):
    code = "import time; time.sleep(2.5)"
    run = api.submit(code, procs=2, backend="gloo", system_interval=0.5, wait=True)
    last = {rank: {k: v[-1][1] for k, v in run.system(rank=rank).items()} for rank in (0, 1)}
    # rank 0 holds memory on GPU 1: that is its GPU, whatever its local rank says
    assert {k: v for k, v in last[0].items() if k.startswith("gpu_")} == {
        "gpu_index": 1,
        "gpu_util_percent": 87,
        "gpu_mem_used_bytes": 20000 * (1 << 20),
        "gpu_mem_total_bytes": 81559 * (1 << 20),
        "gpu_power_watts": 312.45,
        "gpu_temp_c": 61,
        "gpu_sm_clock_mhz": 1980,
        "gpu_process_mem_bytes": 1500 * (1 << 20),
    }
    # rank 1 holds none: local rank 1 of CUDA_VISIBLE_DEVICES=1,0 is GPU 0
    assert {k: v for k, v in last[1].items() if k.startswith("gpu_")} == {
        "gpu_index": 0,
        "gpu_util_percent": 3,
        "gpu_mem_used_bytes": 1024 * (1 << 20),
        "gpu_mem_total_bytes": 81559 * (1 << 20),
        "gpu_power_watts": 71.25,
        "gpu_power_limit_watts": 700,
        "gpu_temp_c": 35,
        "gpu_sm_clock_mhz": 345,
        "gpu_process_mem_bytes": 0,
    }
    # show: a row per rank, GPU columns included
    shown = cli("show", run.id, timeout=120)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout[shown.stdout.index("rank  cpu mean / peak") :].splitlines()
    assert [cell.strip() for cell in table[0].split("  ") if cell.strip()][-4:] == [
        "gpu",
        "gpu util mean / peak",
        "gpu memory peak",
        "power mean",
    ], table[0]
    assert re.fullmatch(
        r"0 +\d+% / \d+% +[\d.]+ MiB +1 +87% / 87% +19\.5 GiB of 79\.6 GiB +312 W", table[1]
    ), table[1]
    assert re.fullmatch(
        r"1 +\d+% / \d+% +[\d.]+ MiB +0 +3% / 3% +1\.0 GiB of 79\.6 GiB +71 W", table[2]
    ), table[2]


def test_the_cli_refuses_a_bad_system_interval(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    done = cli(
        "submit", str(script), "--launcher", "python", "--system-interval", "0.2", timeout=120
    )
    assert done.returncode != 0
    assert "--system-interval must be a number of seconds from 0.5 to 3600" in done.stderr
    assert api.runs(home=home) == []


GPU_OOM = """
import time
import torch
from jupyter_trainer import runtime as jt
time.sleep(2.0)  # a few samples of the GPU first
if jt.rank == 0:
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
time.sleep(30)
"""


def test_a_rank_out_of_gpu_memory_is_named_with_its_gpu_and_peak(home, fake_smi):
    run = api.submit(GPU_OOM, procs=2, backend="gloo", system_interval=0.5)
    with pytest.raises(RunFailed):
        run.wait(timeout=120)
    state = run.state
    assert state["failed_rank"] == 0, state
    assert state["error"] == (
        "rank 0 ran out of memory on GPU 1 (the rank held up to 1.5 GiB of its 79.6 GiB): "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    ), state["error"]
    record = run.store.rank_records(run.id)[0]
    assert record["gpu_oom"] == {
        "device": 1,
        "total_bytes": 81559 << 20,
        "peak_bytes": 1500 << 20,
    }


LOGGING = """
import time
from jupyter_trainer import runtime as jt
for step in range(60):
    jt.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.2)
"""


def test_a_rank_whose_gpu_idles_while_the_others_work_is_named_stalled(home, fake_smi):
    from conftest import wait_for

    from jupyter_trainer.frontends.views.health_text import stall_lines

    # rank 0's GPU (GPU 1) works at 87%; rank 1's (GPU 0) idles at 3% and 71 W of 700 W,
    # though rank 1 logs as often as rank 0
    run = api.submit(LOGGING, procs=2, backend="gloo", system_interval=0.5, stall_timeout=2)
    try:
        stalled = wait_for(lambda: run.state.get("stalled"), timeout=60, what="a stalled rank")
        assert [entry["rank"] for entry in stalled] == [1], stalled
        entry = stalled[0]
        assert {k: v for k, v in entry["gpu_idle"].items() if k != "since"} == {
            "util": 3,
            "watts": 71.25,
            "limit": 700,
        }, entry
        assert entry["seconds"] >= 2 and entry["waiting"] is False
        assert entry["stack"], entry  # its live stack, as for any stalled rank
        line = stall_lines(entry)[0]
        assert line.startswith("WARNING: rank 1 stalled for "), line
        assert line.endswith(
            "; its GPU is idle (3% utilisation, 71 W of 700 W) while the others work"
        ), line
    finally:
        run.cancel(timeout=60)


def figures(**by_name: dict[int, list[float]]) -> dict:
    from jupyter_trainer.store.follow import Series

    out: dict = {}
    for name, by_rank in by_name.items():
        for rank, values in by_rank.items():
            series = out.setdefault(name, {}).setdefault(rank, Series())
            for i, value in enumerate(values):
                series.append(None, value, float(i))
    return out


def test_a_rank_with_an_idle_gpu_and_a_saturated_cpu_is_called_input_bound():
    from jupyter_trainer.frontends.views.system_view import input_bound

    system = figures(
        gpu_util_percent={0: [95, 97, 96, 98], 1: [20, 12, 8, 15], 2: [20, 12, 8, 15]},
        cpu_percent={0: [100, 98, 99, 100], 1: [180, 195, 190, 199], 2: [40, 35, 30, 38]},
    )
    assert input_bound(system) == [
        "rank 1 looks input-bound: its GPU is busy 14% of the time while its processes keep "
        "1.9 cores busy; more data-loader workers (num_workers), or less work per sample on "
        "the CPU, may help"
    ]
    # too few samples to say
    assert input_bound(figures(gpu_util_percent={0: [5, 5]}, cpu_percent={0: [100, 100]})) == []


WRITER = """
import os, time
from jupyter_trainer import runtime as jt
time.sleep(2.2)  # two samples first: the rates start at the second
with open(os.path.join(jt.outputs_dir, "block.bin"), "wb") as fh:
    for _ in range(64):
        fh.write(os.urandom(1 << 20))
    fh.flush()
    os.fsync(fh.fileno())
time.sleep(1.5)
"""


def test_what_a_rank_writes_to_disk_shows_as_its_write_rate(home):
    run = api.submit(WRITER, system_interval=0.5, wait=True)
    rates = run.system()["disk_write_bytes_per_s"]
    # the rate times the time since the sample before, summed: the bytes written
    written = sum(rate * (t - t0) for (t0, _), (t, rate) in zip(rates, rates[1:]))
    assert 60 << 20 <= written <= 80 << 20, rates
    assert rates[-1][1] < 1 << 20, rates  # after the fsync it writes nothing
    assert {"disk_read_bytes_per_s", "node_net_rx_bytes_per_s", "node_net_tx_bytes_per_s"} <= set(
        run.system()
    )


# Spins for 2.5 s, under the default interval of 5 s, and prints when it started and ended.
SHORT = """
import time
start = time.time()
print("start", start, flush=True)
while time.time() < start + 2.5:
    pass
print("end", time.time(), flush=True)
"""


def test_a_run_shorter_than_the_interval_has_samples_at_start_after_a_second_and_at_exit(home):
    run = api.submit(SHORT, launcher="python", wait=True)
    assert run.spec.watch.system_interval == 5  # the default
    said = dict(line.split() for line in run.logs().splitlines() if line[:3] in ("sta", "end"))
    follower = run.follower()
    follower.poll()
    created = float(follower.state["created"])
    start, end = float(said["start"]) - created, float(said["end"]) - created
    figures = run.system()
    times = [t for t, _ in figures["rss_bytes"]]
    assert len(times) >= 3, figures  # at once, about a second in (CPU's first), at exit
    assert times[0] <= start + 0.5 and times[-1] >= end, (times, start, end)
    cpu = figures["cpu_percent"]
    assert cpu[0][0] <= start + 2.0 and cpu[-1][0] >= end, (cpu, start, end)
    assert max(value for _, value in cpu) >= 20, cpu  # it spins
