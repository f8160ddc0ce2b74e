"""``jt.checkpoint``: sharded checkpoints through torch.distributed.checkpoint, tested with real
torchrun ranks on Gloo (``rankside/rank/dcp_checkpoint.py``).

One run saves three steps at 2 ranks (a DDP model's and an Adam optimizer's state, a tensor
sharded over the ranks as a DTensor, a step and a plain value) and keeps what it saved; runs
at 1, 2 and 4 ranks load it (resharded), after checking that ``load`` finds nothing in a run
that saved nothing. Removing a rank's done file or the metadata makes a step incomplete: the
newest complete one is loaded instead.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import leftover

from jupyter_trainer.api import runs as api

COMMON = """
import copy, os, shutil, time
import torch, torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(6, 3))
opt = torch.optim.Adam(model.parameters(), lr=0.1)
"""

SAVE = (
    COMMON
    + """
table = distribute_tensor(torch.arange(24.0).reshape(8, 3), mesh, [Shard(0)])
kept = {}
for step in (1, 2, 3):
    torch.manual_seed(step + 10 * jt.rank)
    model(torch.randn(4, 6)).sum().backward()
    opt.step()
    opt.zero_grad()
    table = table + step
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "table": table, "step": step, "note": {"lr": 0.1 * step}}
    kept[step] = copy.deepcopy({"model": msd, "optim": osd["state"], "note": state["note"]})
    kept[step]["table"] = table.full_tensor()
    jt.checkpoint.save(state, step)
    with torch.no_grad():  # the saved copy was taken: changing the model now changes nothing
        model.module.weight.add_(100.0)
jt.checkpoint.wait()
if jt.rank == 0:
    torch.save(kept, jt.outputs_dir / "kept.pt")
dist.destroy_process_group()
"""
)

LOAD = (
    COMMON
    + """
table = distribute_tensor(torch.zeros(8, 3), mesh, [Shard(0)])
msd, osd = get_state_dict(model, opt)
state = {"model": msd, "optim": osd, "table": table, "step": 0, "note": {"lr": 0.0}}
assert jt.checkpoint.load(state) is None and state["step"] == 0, "a run without checkpoints"
if jt.rank == 0:
    shutil.copytree(jt.params["saved"], jt.checkpoint.root)
dist.barrier()
step = jt.checkpoint.load(state)


def check(step):
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    kept = torch.load(jt.params["kept"])[step]
    assert state["step"] == step and state["note"] == kept["note"], state
    for name, value in kept["model"].items():
        assert torch.equal(model.module.state_dict()[name], value), name
    now = get_state_dict(model, opt)[1]["state"]
    for name, moments in kept["optim"].items():
        for key, value in moments.items():
            assert torch.equal(now[name][key], value), (name, key)
    assert state["table"] is table and table.to_local().shape == (8 // world, 3)
    assert torch.equal(table.full_tensor(), kept["table"])


if step is not None:
    check(step)
print(f"loaded step {step} at {world} ranks", flush=True)
dist.destroy_process_group()
"""
)


@pytest.fixture
def saved(home):
    """A run that saved steps 1 to 3 at 2 ranks: its run (folders dcp/step-N/)."""
    run = api.submit(SAVE, procs=2, name="dcp-save", hot=False)
    run.wait(timeout=120)
    return run


def load_at(saved_run, procs: int):
    params = {
        "saved": str(saved_run.path / "checkpoints" / "dcp"),
        "kept": str(saved_run.path / "outputs" / "kept.pt"),
    }
    run = api.submit(LOAD, procs=procs, params=params, name=f"dcp-load-{procs}", hot=False)
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "completed", run.logs(0)[-3000:]
    assert leftover(run.id) == []
    return [run.logs(rank) for rank in range(procs)]


def test_every_rank_writes_its_part_and_marks_it_done(saved):
    folder = saved.path / "checkpoints" / "dcp"
    assert sorted(p.name for p in folder.iterdir()) == ["step-1", "step-2", "step-3"]
    names = sorted(p.name for p in (folder / "step-3").iterdir())
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp", "done.0", "done.1"]
    assert '"world_size": 2' in (folder / "step-3" / "done.1").read_text()


@pytest.mark.parametrize("procs", [1, 2, 4])
def test_the_newest_step_loads_at_any_world_size(saved, procs):
    logs = load_at(saved, procs)
    assert all(f"loaded step 3 at {procs} ranks" in log for log in logs), logs


def test_a_step_missing_a_rank_or_the_metadata_is_not_loaded(saved):
    folder = saved.path / "checkpoints" / "dcp"
    (folder / "step-3" / "done.1").unlink()  # rank 1 died before its part was written
    (folder / "step-2" / ".metadata").unlink()  # rank 0 died before the metadata was
    logs = load_at(saved, 2)
    assert all("loaded step 1 at 2 ranks" in log for log in logs), logs
    shutil.rmtree(folder / "step-1")
    (logs,) = load_at(saved, 1)  # nothing complete is left
    assert "loaded step None at 1 ranks" in logs, logs


STALL = """
import os, time
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2,))
big = distribute_tensor(torch.rand(2 * 2**22), mesh, [Shard(0)])  # 16 MiB a rank
start = time.perf_counter()
folder = jt.checkpoint.save({"big": big}, 7)
stall = time.perf_counter() - start
written = os.path.exists(os.path.join(folder, f"done.{jt.rank}"))
jt.checkpoint.wait()
total = time.perf_counter() - start
print(f"stall {stall:.4f} total {total:.4f} written-at-return {written}", flush=True)
dist.destroy_process_group()
"""


def test_save_returns_before_the_write_is_done(home):
    run = api.submit(STALL, procs=2, name="dcp-stall", hot=False)
    run.wait(timeout=120)
    for rank in (0, 1):
        line = next(x for x in run.logs(rank).splitlines() if x.startswith("stall "))
        _, stall, _, total, _, written = line.split()
        assert written == "False", line
        assert float(stall) < float(total), line
    assert (run.path / "checkpoints" / "dcp" / "step-7" / "done.1").exists()


RESUMES = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
state = {"w": torch.zeros(4), "step": 0}
step = jt.checkpoint.load(state)
if step is None:
    jt.checkpoint.save({"w": torch.full((4,), 2.0), "step": 5}, 5)
    jt.checkpoint.wait()
print(f"found {step} w {state['w'].tolist()} step {state['step']}", flush=True)
dist.destroy_process_group()
"""


def test_a_resumed_run_loads_the_sharded_checkpoint_of_the_run_it_resumes(home):
    old = api.submit(RESUMES, procs=2, name="dcp-resumed", hot=False)
    old.wait(timeout=120)
    assert "found None" in old.logs(1)
    new = api.resume(old.id, wait=True)  # its only checkpoints are sharded
    assert new.spec.lineage["checkpoint"] == "dcp/step-5"
    for rank in (0, 1):
        assert "found 5 w [2.0, 2.0, 2.0, 2.0] step 5" in new.logs(rank), new.logs(rank)
