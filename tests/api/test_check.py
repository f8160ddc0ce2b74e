"""``jupyter-trainer check`` and ``--check``: a real launcher and real Gloo collectives on
the local target, the figures nccl-tests defines, a wrong socket interface named within
seconds, and a run that is not started when its check fails."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import leftover
from support.kernel_client import kernel  # noqa: F401 (the fixture)

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.check import check
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.rankside.programs import collective_check


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


def outputs_of(kernel, msg_id: str) -> list[tuple[str, str, str]]:
    """(message type, text/plain, text/html) of each output a cell published, in order."""
    shown = []
    for m in kernel.messages:
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            shown.append(("stream", m["content"]["text"], ""))
        elif m["msg_type"] in ("display_data", "update_display_data"):
            data = m["content"]["data"]
            shown.append((m["msg_type"], data.get("text/plain", ""), data.get("text/html", "")))
    return shown


def test_check_in_a_notebook_cell_says_what_it_checks_at_once_and_folds_the_table(kernel, home):
    """It used to show nothing while it ran, then its whole table (some 70 lines) above the
    run's view. A front end gets one output: what is being checked, at once, then the summary
    line with the table folded under it; papermill's text gets the brief lines only."""
    cell = (
        "%%train --procs 2 --check\nfrom jupyter_trainer import runtime as jt\njt.log(step=0, x=1)"
    )
    msg_id = kernel.kc.execute(cell, allow_stdin=True)
    kernel._collect_until_idle(msg_id, 240)
    shown = outputs_of(kernel, msg_id)
    first = shown[0]
    assert first[0] == "display_data", shown[:3]
    assert first[1].startswith("checking local (1 node × 2 processes) before the run"), first
    ended = [s for s in shown if s[0] == "update_display_data" and "<details>" in s[2]]
    assert len(ended) == 1, shown
    summary = ended[0][2].split("<summary>", 1)[1].split("</summary>", 1)[0]
    assert ": passed · 2 of 2 ranks joined in" in summary and "all_reduce 16 MiB in" in summary
    assert "algbw (GB/s)" in ended[0][2].split("</summary>", 1)[1]  # the table, folded
    before_run = "".join(s[1] for s in shown if s[0] == "stream")
    assert "algbw (GB/s)" not in before_run and "rank 0" not in before_run, before_run

    text_id = kernel.kc.execute(cell, allow_stdin=False)  # as papermill runs it
    kernel._collect_until_idle(text_id, 240)
    text = "".join(s[1] for s in outputs_of(kernel, text_id) if s[0] == "stream")
    head = text.split("\n")
    assert head[0].startswith("checking local (1 node × 2 processes) before the run"), head
    assert ": passed · 2 of 2 ranks joined in" in head[1], head
    assert head[2] == f"  (every figure: jupyter-trainer show {head[1].split()[1][:-1]})", head
    assert "algbw (GB/s)" not in text
    names = sorted(r.name for r in api.runs(home=home))
    assert names == ["cell", "cell", "check", "check"], names


def test_bad_check_values_start_nothing(home):
    with pytest.raises(SpecError, match="--time-limit 0: give seconds between 1 and 3600"):
        check(time_limit=0)
    with pytest.raises(SpecError, match="--min-bytes 64 and --max-bytes 8"):
        check(min_bytes=64, max_bytes=8)
    with pytest.raises(SpecError, match="step 1: give a factor between message sizes"):
        check(step=1)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_bus_bandwidth_factors_are_nccl_tests():
    assert collective_check.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert collective_check.bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert collective_check.bus_factor("broadcast", 8) == 1.0
    assert collective_check.sizes(8, 64) == [8, 16, 32, 64]
    assert collective_check.sizes(8, 16 << 20, 4)[-2:] == [8 << 20, 16 << 20]  # --check's
    assert len(collective_check.sizes(8, 16 << 20, 4)) == 12  # not 22: half the timing
