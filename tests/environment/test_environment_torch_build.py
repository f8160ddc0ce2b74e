"""Packages built against torch (torchvision) on a kernel whose torch is a labelled build
(``2.13.0+cpu``), with the real uv and real wheels that lie on this machine's disk.

PyPI's ``torchvision 0.28.0`` is a CUDA 13.0 build (``+cu130`` in its ``version.py``) that
needs the CUDA torch; beside the kernel's ``2.13.0+cpu`` its ``import torchvision`` fails.
The PyTorch index of the CPU build cannot be reached from this machine, so a local simple
index stands in for it ($JUPYTER_TRAINER_TORCH_INDEX): it holds the kernel's own torch wheel
and that torchvision, the only one on disk, which is how the pre-flight check is shown to
catch a build that does not match.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import uv

from jupyter_trainer import api, environment
from jupyter_trainer.core.errors import EnvError
from jupyter_trainer.environment import lock, preflight, torchbuild
from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.rankside.programs import env_build as builder

TORCH = importlib.metadata.version("torch")
TORCH_WHEEL = next(Path("/opt/wheels").glob(f"torch-{TORCH}-*.whl"), None)
VISION_WHEEL = next(Path("/opt/pypi-more/files").glob("torchvision-0.28.0-*.whl"), None)
pytestmark = pytest.mark.skipif(
    "+cpu" not in TORCH or TORCH_WHEEL is None or VISION_WHEEL is None,
    reason="needs the kernel's +cpu torch wheel and PyPI's torchvision 0.28.0 on disk",
)
KERNEL_SITE = Path(importlib.util.find_spec("six").origin).parent


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory) -> str:
    """A simple index (PEP 503) of the wheels on disk, as a file:// URL."""
    root = tmp_path_factory.mktemp("torch-index") / "simple"
    for wheel in (TORCH_WHEEL, VISION_WHEEL):
        assert wheel is not None
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        name = wheel.name.split("-", 1)[0]
        (root / name).mkdir(parents=True)
        (root / name / "index.html").write_text(
            f'<html><body><a href="{wheel.as_uri()}#sha256={digest}">{wheel.name}</a>'
            "</body></html>\n"
        )
    return root.as_uri()


def layered_on_kernel(folder: Path) -> str:
    """A virtual environment that sees the kernel's packages after its own (as
    ``inherit: true`` builds them), with PyPI's torchvision installed in it, as
    ``%pip install torchvision`` does on a +cpu kernel."""
    uv_bin = uv.find_uv_bin()
    subprocess.run([uv_bin, "venv", "-q", "--python", sys.executable, str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    (site / "kernel.pth").write_text(f"import site; site.addsitedir({str(KERNEL_SITE)!r})\n")
    subprocess.run(
        [uv_bin, "pip", "install", "-q", "--offline", "--no-deps", "--python",
         str(folder / "bin" / "python"), str(VISION_WHEEL)],
        check=True,
    )  # fmt: skip
    return str(folder / "bin" / "python")


def imports(python: str, module: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )


def test_a_torchvision_built_for_cuda_beside_a_cpu_torch_stops_the_run_before_launch(tmp_path):
    """The pre-flight used to find the module and pass; the rank then failed at import."""
    python = layered_on_kernel(tmp_path / "venv")
    assert imports(python, "torchvision").returncode != 0  # the defect is real
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import torch\nimport torchvision\nprint('ok')\n")
    record = preflight.check(python, code, "train.py", launcher="python")
    assert not record["ok"]
    message = preflight.failure_message(record, env_name=None, version=None)
    assert "torchvision 0.28.0+cu130" in message and f"its own ({TORCH})" in message
    assert "built for torch 2.13.0 with CUDA 13.0 (cu130)" in message
    assert "imported by train.py, line 2: `import torchvision`" in message
    assert "Nothing was started" in message
    url = torchbuild.index_url("cpu")
    assert f"`%pip install 'torchvision==0.28.*' --index-url {url}`" in message
    # The same torchvision, not imported by the run, is named but stops nothing.
    (code / "train.py").write_text("import torch\nprint('ok')\n")
    quiet = preflight.check(python, code, "train.py", launcher="python")
    assert quiet["ok"] and any("torchvision 0.28.0+cu130" in d for d in quiet["differences"])


def test_a_layered_environment_resolves_torchvision_against_the_kernels_torch_build(
    home, tmp_path, monkeypatch, torch_index
):
    """Before, the lock pinned PyPI's torch 2.13.0 (a CUDA build, with GBs of nvidia-*
    libraries) and the build skipped it as if it were the kernel's 2.13.0+cpu."""
    monkeypatch.setenv(torchbuild.INDEX_ENV, torch_index)
    definition = EnvDefinition.from_yaml("vision", "inherit: true\npip: [torchvision==0.28.0]")
    environment.define(definition, home=home)
    spec = environment.resolve("vision", home=home)
    found = lock.find(home, spec.lock)
    assert found is not None
    pins = {e["name"]: e["version"] for e in builder.parse_lock(found.text)}
    assert pins["torch"] == TORCH and pins["torchvision"] == "0.28.0"
    cuda = sorted(n for n in pins if n.startswith(("nvidia", "cuda", "triton")))
    assert cuda == [], cuda
    assert found.meta["torch"] == {"torch": TORCH, "index": torch_index, "label": "cpu"}
    built = environment.build_environment("vision", home=home)
    assert f"torch=={TORCH}" in built["skipped"]  # the kernel's own build, not installed
    assert built["installed"] == ["torchvision==0.28.0"]
    # This index has only the CUDA build of torchvision: the pre-flight says so, and the
    # fix, before anything starts.
    script = tmp_path / "train.py"
    script.write_text("import torchvision\n")
    with pytest.raises(EnvError) as info:
        api.submit(script=str(script), env="vision", home=home)
    message = str(info.value)
    assert "environment 'vision'" in message and "torchvision 0.28.0+cu130" in message
    assert "define environment 'vision' again" in message and torchbuild.INDEX_ENV in message
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_an_environment_that_names_another_torch_does_not_keep_the_kernels():
    packages = {"torch": TORCH}
    assert torchbuild.kept_torch(["torchvision"], packages) == TORCH
    assert torchbuild.kept_torch(["torch>=2.1", "torchvision"], packages) == TORCH
    assert torchbuild.kept_torch(["torch==2.14.1"], packages) is None
    assert torchbuild.kept_torch(["torchvision"], {"torch": "2.13.0"}) is None  # PyPI's own


def test_a_build_the_torch_index_does_not_have_is_refused_naming_that_index(
    home, monkeypatch, torch_index
):
    monkeypatch.setenv(torchbuild.INDEX_ENV, torch_index)
    definition = EnvDefinition.from_yaml("cpu", "inherit: true\npip: ['torchvision==0.28.0+cpu']")
    with pytest.raises(EnvError) as info:
        environment.define(definition, home=home)
        environment.resolve("cpu", home=home)
    message = str(info.value)
    assert f"against the kernel's torch {TORCH}" in message and torch_index in message
    assert f"set {torchbuild.INDEX_ENV} to a mirror of it" in message
    assert not lock.locks_dir(home).exists() or not any(
        p for p in lock.locks_dir(home).iterdir() if not p.name.startswith(".")
    )
