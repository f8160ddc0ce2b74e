"""Training code that several test modules submit, each a cell's or script's text, and
what the hot-pool tests check of the environment such code sees."""

from __future__ import annotations

# torchrun's ranks all-reduce once and log `steps` steps (from the namespace).
DIST_STEPS = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
for step in range(steps):
    jt.log(step=step, loss=1.0 / (step + 1), total=t.item())
    jt.progress(step + 1, steps)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", t.item())
dist.destroy_process_group()
"""

# Logs once, then sleeps until cancelled; no process group.
SLEEPER = (
    "import time\nfrom jupyter_trainer import runtime as jt\njt.log(step=0, up=1)\ntime.sleep(600)"
)

# Joins a Gloo process group, logs once, then sleeps until cancelled.
GLOO_SLEEPER = (
    "import time\nimport torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
    "dist.init_process_group('gloo')\njt.log(step=0, up=1)\ntime.sleep(600)\n"
)

# As GLOO_SLEEPER, but rank 3 raises a KeyError.
FAIL_RANK_3 = (
    "import time\nimport torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
    "dist.init_process_group('gloo')\njt.log(step=0, up=1)\n"
    "if jt.rank == 3:\n    raise KeyError('missing column on node 1')\ntime.sleep(600)\n"
)

# DDP on a linear model across nodes; needs `steps`, `pause` and `time` in the namespace
# and JT_TEST_VAR in the environment.
DDP_LINEAR = """
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from jupyter_trainer import runtime as jt

dist.init_process_group()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(jt.rank)
x = torch.randn(64, 4, generator=g)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
first = None
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    first = first or loss.item()
    jt.log(step=step, loss=loss.item())
    jt.progress(step + 1, steps)
    time.sleep(pause)
t = torch.tensor([float(jt.rank + 1)])
dist.all_reduce(t)
print("rank", jt.rank, "of", jt.world_size, "node", os.environ["JT_NODE"], "sum", t.item(),
      "learned", loss.item() < first / 10, "dir", os.environ["JT_RUN_DIR"],
      "var", os.environ["JT_TEST_VAR"], flush=True)
if jt.rank == 0:
    torch.save(model.module.state_dict(), jt.outputs_dir / "model.pt")
(jt.outputs_dir / f"from-rank-{jt.rank}.txt").write_text(os.environ["JT_NODE"])
del model, opt        # DDP's reducer before the process group: no C++ thread left at exit
dist.barrier()
dist.destroy_process_group()
"""

# Horovod's DistributedOptimizer on a linear model, 30 steps, every rank its own shard.
HOROVOD_LINEAR = """
import torch
import horovod.torch as hvd
from jupyter_trainer import runtime as jt

hvd.init()
torch.manual_seed(1234 + hvd.rank())           # different initial weights on every rank
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)

g = torch.Generator().manual_seed(hvd.rank())  # each rank its own shard of y = x . w
true_w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
x = torch.randn(64, 4, generator=g)
y = x @ true_w
losses = []
for step in range(30):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    jt.log(step=step, loss=loss.item())
    jt.progress(step + 1, 30)

total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
same = bool(torch.allclose(hvd.allreduce(flat, op=hvd.Average), flat))
print(f"hvd rank {hvd.rank()} size {hvd.size()} local {hvd.local_rank()} "
      f"jt {jt.rank}/{jt.world_size} sum {total} same_params {same} "
      f"learned {losses[-1] < losses[0] / 10}", flush=True)
hvd.shutdown()
"""

# Three steps from the last checkpoint on, then a checkpoint.
RESUMABLE = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
ckpt = jt.load_checkpoint()
first = ckpt.step + 1 if ckpt else 0
for step in range(first, first + 3):
    jt.log(step=step, first=first)
jt.save_checkpoint({"last": step}, step)
"""

# Two ranks print four lines each, in turn, a quarter second apart.
INTERLEAVED = """
import time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
dist.barrier()
start = time.time()
for i in range(4):
    time.sleep(max(0.0, start + (2 * i + jt.rank) * 0.25 - time.time()))
    print(f"rank {jt.rank} line {i}", flush=True)
dist.destroy_process_group()
"""

# Rank 1 raises a ValueError inside `step`, with locals to inspect.
RAISES = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
lr = 0.25

def step(batch):
    scale = batch.sum().item() * lr
    if jt.rank == 1:
        raise ValueError(f"bad batch {scale}")
    return scale

batch = torch.ones(3, 4)
step(batch)
dist.all_reduce(torch.ones(1))
"""

# A torchrun cell that logs every 50 ms until cancelled.
LONG_CELL = """
import time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
for step in range(10_000):
    jt.log(step=step, x=step)
    time.sleep(0.05)
"""

# A sweep's trial scoring the distance to (0.3, 0.7).
PEAK = """
from jupyter_trainer import runtime as jt
x, y = jt.params["x"], jt.params["y"]
jt.log(step=0, score=-((x - 0.3) ** 2 + (y - 0.7) ** 2))
"""

# What a hot pool sets anew for each run: no two runs may see the same value.
PER_RUN = {
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "JT_RUN_ID",
    "JT_RUN_DIR",
    "TORCHELASTIC_USE_AGENT_STORE",
}
