"""Backend choice: NCCL where CUDA GPUs are, Gloo on CPU, --backend overrides.

There is no GPU here, so GPUs are faked at the process boundary: an ``nvidia-smi`` on PATH
that lists two devices, which is what the local target asks.
"""

from __future__ import annotations

import os

import pytest

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import TargetError

SHOW = "import os\nprint(os.environ['JT_BACKEND'], os.environ.get('JT_BACKEND_OVERRIDE', '-'))"


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 2\n'
        "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-fake)'\n"
        "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-fake)'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cpu_machine_gets_gloo(home):
    run = api.submit(SHOW, launcher="python", wait=True)
    assert run.state["backend"] == "gloo" and run.logs(0).split() == ["gloo", "-"]


def test_gpu_machine_gets_nccl(home, fake_gpus):
    run = api.submit(SHOW, launcher="python", wait=True)
    assert run.state["backend"] == "nccl" and run.logs(0).split() == ["nccl", "-"]


def test_backend_flag_overrides_the_choice(home, fake_gpus):
    run = api.submit(SHOW, launcher="python", backend="gloo", wait=True)
    assert run.state["backend"] == "gloo" and run.logs(0).split() == ["gloo", "1"]


def test_cuda_visible_devices_hides_gpus(home, fake_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(TargetError, match="--backend nccl needs CUDA GPUs"):
        api.submit(SHOW, launcher="python", backend="nccl")
    assert api.runs(home=home) == []


@pytest.mark.parametrize("backend", [None, "nccl"])
def test_more_nccl_ranks_than_gpus_is_refused_before_launch(home, fake_gpus, backend):
    with pytest.raises(TargetError) as caught:
        api.submit(SHOW, launcher="torchrun", procs=3, backend=backend)
    message = str(caught.value)
    assert "one GPU per rank" in message and "--procs 3" in message and "the 2 GPU(s)" in message
    assert "use --procs 2, or --backend gloo" in message
    assert api.runs(home=home) == []


def test_ranks_may_share_gpus_under_gloo(home, fake_gpus):
    run = api.submit(SHOW, launcher="torchrun", procs=3, backend="gloo", wait=True)
    assert run.state["backend"] == "gloo" and run.logs(2).split() == ["gloo", "1"]


def test_more_nccl_ranks_per_node_than_a_targets_gpus_is_refused_before_launch(home, tmp_path):
    from jupyter_trainer.targets.registry import add_target

    add_target(
        "gpu-hosts",
        "ssh",
        home=home,
        hosts=["gpu1.invalid", "gpu2.invalid"],
        gpus_per_node=4,
        workdir=str(tmp_path / "remote"),
    )
    with pytest.raises(TargetError) as caught:
        api.submit(SHOW, target="gpu-hosts", nodes=2, procs=8)
    assert str(caught.value) == (
        "NCCL (chosen on GPUs) needs one GPU per rank, and --procs 8 asks for more ranks than "
        "the 4 GPU(s) each node has (gpus_per_node) (NCCL refuses two ranks on one GPU); use "
        "--procs 4, or --backend gloo to let ranks share a GPU"
    )
    assert api.runs(home=home) == []
