"""bench/gpu_ddp.py runs end to end on CPU (Gloo, tiny model): a smoke test of the script
that the GPU machine runs, not a timed test."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys

from conftest import REPO


def test_gpu_ddp_bench_runs_on_cpu(tmp_path):
    out = tmp_path / "gpu_ddp.json"
    scratch = tmp_path / "tmp"  # the bench's and every side's temporary files
    scratch.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "bench/gpu_ddp.py",
            "--device",
            "cpu",
            "--repeats",
            "1",
            "--steps",
            "3",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "NOT the GPU benchmark" in done.stdout
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["gpu_benchmark"] is False
    assert {"jt", "bare"} <= set(result["runs"])
    for side, runs in result["runs"].items():
        assert len(runs) == 1, side
        assert runs[0]["samples_per_s"] > 0, side
        assert runs[0]["backend"] == "gloo", side
        assert runs[0]["world_size"] == 2, side
    assert result["jt_backend"] == ["gloo"]
    assert result["ratios"]["jt/bare"] > 0
    # neither side leaves anything behind (a bare torchrun without --log-dir would leave
    # its torchelastic_* folder) but torch's compile cache, which is kept on purpose
    left = {p.name for p in scratch.iterdir()} - {f"torchinductor_{getpass.getuser()}"}
    assert sorted(left) == []
