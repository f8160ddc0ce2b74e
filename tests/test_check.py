"""``jupyter-trainer check`` and ``--check``: a real launcher and real Gloo collectives on
the local target, the figures nccl-tests defines, a wrong socket interface named within
seconds, and a run that is not started when its check fails."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import leftover

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.check import check
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.rankside import collective_check


def cli(*words: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", *words],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_check_times_every_collective_and_is_kept_as_a_run(home):
    result = check(procs=2, max_bytes=64 << 10, time_limit=30)
    assert result.ok, result.problems
    assert result.world_size == 2 and sorted(result.joined) == [0, 1]
    assert all(0 <= seconds < 30 for seconds in result.joined.values())
    sizes = [8 << i for i in range(14)]  # 8 B to 64 KiB, doubling
    for op, factor in (("all_reduce", 1.0), ("all_gather", 0.5), ("broadcast", 1.0)):
        rows = result.collectives[op]
        assert [row["bytes"] for row in rows] == sizes, op
        for row in rows:
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * factor)
            assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_us"] / 1e3)
    assert result.links == []  # one node
    for rank in (0, 1):
        info = result.ranks[rank]
        assert info["interface"] == "lo" and info["torch"].startswith("2.")
    run = result.run
    assert run.status == "completed" and run.tags["kind"] == "check"
    assert [s for s, _ in run.metrics(1)["all_reduce/busbw_GBps"]] == sizes
    assert leftover(run.id) == []

    again = cli("check", "--procs", "2", "--max-bytes", "1024", "--json")
    assert again.returncode == 0, again.stderr
    found = json.loads(again.stdout)
    assert found["ok"] and found["problems"] == [] and found["slowest_link"] is None
    compared = cli("diff", run.id, found["run"])
    assert compared.returncode == 0 and "all_reduce/busbw_GBps" in compared.stdout


def test_a_wrong_socket_interface_is_named_within_seconds(home, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    shown = cli("check", "--procs", "2", "--max-bytes", "64", "--time-limit", "20")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "FAILED · 0 of 2 ranks joined" in shown.stdout
    assert "GLOO_SOCKET_IFNAME=eth9 names no interface of this host (lo" in shown.stdout
    (run,) = api.runs(home=home)
    assert run.status == "failed" and leftover(run.id) == []


def test_check_before_a_run_starts_it_only_when_it_passes(home, monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("from jupyter_trainer import runtime as jt\njt.log(step=0, x=1)\n")
    passed = cli("submit", str(script), "--procs", "2", "--check", "--wait")
    assert passed.returncode == 0, passed.stderr
    assert "check check-" in passed.stdout and ": passed · 2 of 2 ranks joined" in passed.stdout
    assert sorted(r.name for r in api.runs(home=home)) == ["check", "train"]
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    failed = cli("submit", str(script), "--procs", "2", "--check", "--wait")
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert "failed, so the run was not started: rank 0 on" in failed.stderr
    assert sorted(r.name for r in api.runs(home=home)) == ["check", "check", "train"]


def test_check_in_a_notebook_cell(ip, home):
    ip.run_cell_magic(
        "train",
        "--procs 2 --check",
        "from jupyter_trainer import runtime as jt\njt.log(step=0, x=1)",
    )
    names = sorted(r.name for r in api.runs(home=home))
    assert names == ["cell", "check"], names


def test_bad_check_values_start_nothing(home):
    with pytest.raises(SpecError, match="--time-limit 0: give seconds between 1 and 3600"):
        check(time_limit=0)
    with pytest.raises(SpecError, match="--min-bytes 64 and --max-bytes 8"):
        check(min_bytes=64, max_bytes=8)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_bus_bandwidth_factors_are_nccl_tests():
    assert collective_check.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert collective_check.bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert collective_check.bus_factor("broadcast", 8) == 1.0
    assert collective_check.sizes(8, 64) == [8, 16, 32, 64]
