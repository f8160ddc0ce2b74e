"""A small training loop that checkpoints every other step with ``jt.checkpoint.save``,
stops at the same step on every rank once ``jt.preempted()``, and resumes with
``jt.checkpoint.load``: the workload of the preemption tests (this machine and Slurm)."""

from __future__ import annotations

import torch

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.rank.dcp_complete import complete

TRAIN = """
import os, signal, time
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"model": model.state_dict(), "step": 0}
start = jt.checkpoint.load(state) or 0
print(f"attempt {jt.attempt} starts after step {start}", flush=True)
stop = False
for step in range(start + 1, 31):
    torch.manual_seed(1000 * step + jt.rank)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    jt.progress(step, 30)
    stop = torch.tensor(int(jt.preempted()))
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
    if stop and jt.params.get("die") and jt.attempt == 0:  # the newest step, never whole:
        jt.checkpoint.save({"model": model.state_dict(), "step": step}, 1000)
        if jt.rank == 1:  # the node dies while this rank writes its part
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    if step % 2 == 0 or stop:
        jt.checkpoint.save({"model": model.state_dict(), "step": step}, step)
    if stop:
        break
    time.sleep(jt.params.get("pause", 0))
jt.checkpoint.wait()
if jt.rank == 0 and not stop:
    torch.save(model.module.state_dict(), jt.outputs_dir / "final.pt")
dist.destroy_process_group()
"""


def submit(name: str, target: str = "local", **params):
    return api.submit(TRAIN, procs=2, name=name, params=params, target=target, hot=False)


def saved_steps(run) -> list[int]:
    return [step for step, _ in complete(str(run.path / "checkpoints" / "dcp"))]


def final_weights(run) -> dict[str, torch.Tensor]:
    return torch.load(run.path / "outputs" / "final.pt")


def uninterrupted() -> dict[str, torch.Tensor]:
    """The weights TRAIN ends with at 2 ranks when nothing stops it, computed here: DDP's
    gradient is the mean of the two ranks' (each scaled by 1/2, then summed: exact)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 31):
        grads = []
        for rank in (0, 1):
            torch.manual_seed(1000 * step + rank)
            model(torch.randn(8, 4)).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            opt.zero_grad()
        for param, *each in zip(model.parameters(), *grads):
            param.grad = each[0] / 2 + each[1] / 2
        opt.step()
        opt.zero_grad()
    return model.state_dict()


def same_weights(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    """The same weights, bit for bit."""
    return found.keys() == expected.keys() and all(
        torch.equal(found[k], expected[k]) for k in found
    )


def ended(run, timeout: float = 120):
    """The state of ``run`` once it completed."""
    run.wait(timeout=timeout, raise_on_failure=False)
    launcher = run.path / "logs" / "launcher.log"
    said = launcher.read_text()[-3000:] if launcher.exists() else ""
    assert run.status == "completed", (run.state.get("error"), run.logs(0)[-3000:], said)
    return run.state
