"""jt.export_onnx: the quickstart's model exported from a real 2-rank torchrun run and checked
against onnxruntime there and here; outside a run; without onnxscript or onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import REPO
from torch import nn

from jupyter_trainer.api import runs as api

# notebooks/quickstart.ipynb's model and data, trained briefly on each rank's shard.
TRAIN = """\
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from sklearn.datasets import load_digits
from jupyter_trainer import runtime as jt


def make_model(hidden):
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y, dtype=torch.long)
model = DDP(make_model(32))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(20):
    idx = torch.arange(rank, len(X), world)[step * 32 % 800:][:32]
    loss = nn.functional.cross_entropy(model(X[idx]), y[idx])
    opt.zero_grad(); loss.backward(); opt.step()
    jt.log(step=step, loss=loss.item())
record = jt.export_onnx(model, X[:4])
print("record", record is not None, "training", model.training, model.module.training)
if rank == 0:
    torch.save(model.module.state_dict(), jt.outputs_dir / "model.pt")
dist.destroy_process_group()
"""


def test_quickstart_model_exported_on_rank_0_and_checked_against_onnxruntime(home):
    run = api.submit(TRAIN, procs=2, name="onnx", wait=True)
    assert run.status == "completed", run.logs(0)
    outputs = run.outputs
    assert sorted(p.name for p in outputs.iterdir()) == [
        "model.onnx",
        "model.onnx.json",
        "model.pt",
    ]
    record = json.loads((outputs / "model.onnx.json").read_text())
    assert record["checked"] is True and record["within_tolerance"] is True, record
    assert 0 <= record["max_abs_diff"] <= 1e-5
    assert (record["rtol"], record["atol"]) == (1e-3, 1e-5)
    assert record["onnxruntime"] == ort.__version__ and record["opset"] >= 18
    assert (
        record["file"] == "model.onnx"
        and record["bytes"] == (outputs / "model.onnx").stat().st_size
    )
    assert [i["shape"][1] for i in record["inputs"]] == [64]
    assert [o["shape"][1] for o in record["outputs"]] == [10]
    assert "record True training True True" in run.logs(0)  # eval for the export only
    assert "record False training True True" in run.logs(1)  # other ranks write nothing
    assert "onnxruntime" in run.logs(0) and "matches torch" in run.logs(0)

    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    model.load_state_dict(torch.load(outputs / "model.pt"))
    model.eval()
    session = ort.InferenceSession(str(outputs / "model.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for batch in (1, 4, 37):  # other inputs than the example, other batch sizes
        x = torch.rand(batch, 64, generator=torch.Generator().manual_seed(batch))
        (got,) = session.run(None, {name: x.numpy()})
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def python(tmp_path: Path, *parts: str) -> subprocess.CompletedProcess:
    """Run the parts of a script, each dedented, outside a run with ``tmp_path`` as cwd."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JT_", "RANK", "WORLD_SIZE"))}
    code = "".join(textwrap.dedent(part) for part in parts)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(REPO)},
    )


MODEL = """
    import sys, torch
    from torch import nn
    from jupyter_trainer import runtime as jt
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    model[1].eval()  # a submodule in eval mode stays so
"""


def test_outside_a_run_writes_to_outputs_and_restores_each_mode(tmp_path):
    done = python(
        tmp_path,
        MODEL,
        """
    record = jt.export_onnx(model, (torch.randn(3, 8),), name="tiny.onnx")
    print(model.training, model[0].training, model[1].training)
    print(record["path"], record["checked"], record["within_tolerance"])
    for bad in ("../x", "", "a/b", ".hidden"):
        try:
            jt.export_onnx(model, torch.randn(3, 8), name=bad)
        except ValueError:
            continue
        sys.exit(f"{bad!r} accepted")
    """,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "True True False" in lines
    assert f"{tmp_path / 'outputs' / 'tiny.onnx'} True True" in lines
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == [
        "tiny.onnx",
        "tiny.onnx.json",
    ]


def test_without_onnxruntime_the_model_is_exported_unchecked(tmp_path):
    done = python(
        tmp_path,
        """
    import sys
    sys.modules["onnxruntime"] = None  # as if it were not installed
    """,
        MODEL,
        """
    record = jt.export_onnx(model, torch.randn(3, 8))
    print(record["checked"], record["not_checked"])
    """,
    )
    assert done.returncode == 0, done.stderr
    assert "False onnxruntime is not installed (pip install jupyter_trainer[onnx])" in done.stdout
    record = json.loads((tmp_path / "outputs" / "model.onnx.json").read_text())
    assert record["checked"] is False and record["onnxruntime"] is None
    assert "not checked against onnxruntime" in done.stdout


@pytest.mark.parametrize("missing", ["onnx", "onnxscript"])
def test_without_the_extra_the_error_names_it(tmp_path, missing):
    done = python(
        tmp_path,
        f"""
    import sys
    sys.modules[{missing!r}] = None
    """,
        MODEL,
        """
    try:
        jt.export_onnx(model, torch.randn(3, 8))
    except ImportError as exc:
        print("error:", exc)
    """,
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"error: jt.export_onnx needs {missing}, which is not installed here: "
        "pip install jupyter_trainer[onnx]"
    ) in done.stdout
    assert not (tmp_path / "outputs" / "model.onnx").exists()
